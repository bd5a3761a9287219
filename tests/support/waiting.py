"""Wait on a condition with a bounded timeout: tests never sleep and hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 10.0, what: str = "a condition", interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


def _field(result: Any, name: str) -> Any:
    return result[name] if isinstance(result, dict) else getattr(result, name)


def wait_until_terminal(
    inspect: Callable[[], Any], timeout: float, what: str, *, attempts: int = 1, interval: float = 0.1
) -> Any:
    """Wait until `inspect()` (an inspect result, or its structured content) shows a terminal
    status with at least `attempts` attempts; return that result."""

    def ended() -> Any:
        result = inspect()
        done = _field(result, "status") in TERMINAL_STATUSES and len(_field(result, "attempts")) >= attempts
        return result if done else None

    return wait_for(ended, timeout, what, interval)
