"""Durations in and out: "2h", "90m", "45s", "1h30m" or plain seconds; "2h 05m" for people."""

from __future__ import annotations

import re
import time

from jobtrail.errors import InvalidRequestError

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)", re.I)
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# The longest timeout a job may ask for: a week covers any run jobtrail estimates, and anything
# longer is a typo (10**30 seconds overflowed the ledger's integers and crashed the submit).
MAX_TIMEOUT_S = 7 * 86400


def parse_duration(value: str | int | float | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        elif text and _PART.sub("", text) == "":
            seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))
        else:
            raise InvalidRequestError(
                f"Cannot read the duration {value!r}.", fix='Write it like "45m", "2h", "1h30m" or a number of seconds.'
            )
    if not seconds > 0:  # NaN included
        raise InvalidRequestError(
            f"The duration {value!r} is not positive.", fix='Give a positive duration, e.g. "2h".'
        )
    if seconds > MAX_TIMEOUT_S:
        raise InvalidRequestError(
            f"The duration {value!r} is longer than the longest a job may run (7 days).",
            fix='Give at most "7d"; estimate_cost recommends a timeout for the job.',
        )
    return max(1, round(seconds))


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def ago(timestamp: float | None, now: float | None = None) -> str:
    if timestamp is None:
        return "-"
    return human_duration(max(0.0, (now or time.time()) - timestamp)) + " ago"
