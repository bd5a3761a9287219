"""Is the Hub reachable at all? One quick request, asked before any huggingface_hub call that retries.

huggingface_hub retries a refused or timed-out connection with backoff (about 25 s for a file
download) and its shared HTTP client has no timeout; a check that will only say "could not be
verified" must not wait that long. huggingface_hub is imported only when a Hub id is probed.
"""

from __future__ import annotations

import os

HUB_PROBE_TIMEOUT_S = 5.0


def hub_endpoint() -> str:
    """The endpoint in use: HF_ENDPOINT as set now, else the one huggingface_hub read at import."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_offline_mode() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_unreachable(endpoint: str | None = None) -> str | None:
    """Why the Hub cannot be reached, in one line; None when it answers at all (any HTTP status)."""
    if hub_offline_mode():
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub import get_session

    endpoint = endpoint or hub_endpoint()
    try:
        get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001  any transport failure means: not reachable from here
        return f"{endpoint} is unreachable ({one_line_error(exc)})"
    return None


def one_line_error(exc: BaseException) -> str:
    """The exception on one line, at most 300 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:297] + "..."
