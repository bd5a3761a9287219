"""Spending caps: what a job may cost, what counts as spent, and the words for a stop. Pure.

Two caps, both in US dollars of HF Jobs time (a local job costs nothing):
- a job's own cap, `max_cost_usd` (submit's argument, or JOBTRAIL_MAX_COST_USD by default): preflight
  refuses a job whose worst case (the estimate once per attempt that submit's max_retries may start:
  each one can, at worst, fail just before its first checkpoint and pay for the work again) is above
  it, and the tracker stops a job whose spend over all its attempts reaches it;
- a daily cap over every job, JOBTRAIL_DAILY_BUDGET_USD: spend in the last 24 hours, a rolling window
  (never a calendar day, so the cap means the same at any hour): each attempt counts for the part of
  its running time inside the window.

Spend is what the receipt says an attempt cost: its running time at its flavor's price per hour.
"""

from __future__ import annotations

import math
from typing import Any

from jobtrail.errors import InvalidRequestError
from jobtrail.requests import MAX_COST_USD
from jobtrail.util.money import DAILY_ENV, usd

DAILY_WINDOW_S = 24 * 3600.0


def parse_cap(value: Any, name: str) -> float:
    """A cap as given (a number, or text of one, from the environment or a retry's changes) → dollars;
    anything else is refused with what to write instead."""
    fix = f"Set {name} to a positive amount in US dollars, e.g. 20 (at most {MAX_COST_USD:,.0f})."
    if isinstance(value, bool):
        raise InvalidRequestError(f"{name}={value!r} is not an amount of money.", fix=fix)
    try:
        amount = float(str(value).strip().removeprefix("$")) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise InvalidRequestError(f"{name}={_excerpt(value)} is not an amount in US dollars.", fix=fix) from None
    if not math.isfinite(amount) or amount <= 0:
        raise InvalidRequestError(f"{name}={_excerpt(value)} is not a positive, finite amount.", fix=fix)
    if amount > MAX_COST_USD:
        raise InvalidRequestError(f"{name}={amount:,.2f} is above the largest cap jobtrail takes.", fix=fix)
    return amount


def reached(spent: float, cap: float) -> bool:
    """Has `spent` reached `cap`? Receipts round costs to a millionth of a dollar: that much is the same."""
    return spent >= cap - 1e-6


def worst_case_attempts(max_retries: int) -> int:
    """How many times, at worst, a job pays for its whole run: its first attempt and each automatic retry."""
    return 1 + max(0, max_retries)


def window_share(started_at: float | None, ended_at: float | None, now: float, since: float) -> float:
    """The share (0..1) of an attempt's running time that falls after `since` (the window's start)."""
    if started_at is None:
        return 0.0
    end = ended_at if ended_at is not None else now
    if end <= started_at:
        return 1.0 if end >= since else 0.0
    return max(0.0, end - max(started_at, since)) / (end - started_at)


def raise_cap_to(spent: float, cap: float) -> float:
    """A cap to propose after a stop: twice the old one, and above what was spent, rounded up to cents."""
    return math.ceil(max(2 * cap, spent * 1.5) * 100) / 100


def job_cap_message(spent: float, cap: float) -> str:
    return (
        f"Stopped by its spending cap: it spent {usd(spent)} over all its attempts, reaching max_cost_usd "
        f"{usd(cap)}. Its committed checkpoints are kept."
    )


def daily_cap_message(spent_24h: float, daily: float, *, started: bool) -> str:
    what = "Stopped" if started else "Not started"
    return (
        f"{what}: {usd(spent_24h)} spent on HF Jobs in the last 24 hours reaches the daily budget of {usd(daily)} "
        f"({DAILY_ENV}). Retry when older spend has left the 24-hour window; a person may raise {DAILY_ENV}."
    )


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
