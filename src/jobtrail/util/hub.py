"""Is the Hub reachable at all? One quick request, asked before any huggingface_hub call that retries.

huggingface_hub retries a refused or timed-out connection with backoff (about 25 s for a file
download) and its shared HTTP client has no timeout; a check that will only say "could not be
verified" must not wait that long. huggingface_hub is imported only when a Hub id is probed.
"""

from __future__ import annotations

import os
import time

HUB_PROBE_TIMEOUT_S = 5.0
# A Hub that accepts connections and never answers costs the full timeout per probe, and one tool
# call probes up to four times (model, data, token, prices): a failed probe is remembered for this
# long per endpoint, so such a call waits one timeout, not four. A success is not remembered.
UNREACHABLE_REMEMBERED_S = 20.0
_unreachable: dict[str, tuple[float, str]] = {}


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
    known = _unreachable.get(endpoint)
    if known is not None and time.monotonic() - known[0] < UNREACHABLE_REMEMBERED_S:
        return known[1]
    try:
        get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001  any transport failure means: not reachable from here
        reason = f"{endpoint} is unreachable ({one_line_error(exc)})"
        _unreachable[endpoint] = (time.monotonic(), reason)
        return reason
    _unreachable.pop(endpoint, None)
    return None


def forget_unreachable() -> None:
    """Probe every endpoint afresh next time (a Hub that came back on the same address)."""
    _unreachable.clear()


def one_line_error(exc: BaseException) -> str:
    """The exception on one line, at most 300 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:297] + "..."
