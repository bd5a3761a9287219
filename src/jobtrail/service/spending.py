"""What jobs have spent, against their caps (outcomes/budget.py says what the caps mean).

An attempt's spend is what its receipt says it cost: its recorded cost once it has ended, and while it
runs, its running time so far at its flavor's price (the tracker's `cost`, the receipt's own formula).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from jobtrail.backends.registry import traits_of
from jobtrail.ledger.store import ACTIVE_STATUSES, Ledger
from jobtrail.models import AttemptRecord, RunRecord
from jobtrail.outcomes import budget

Cost = Callable[[AttemptRecord, float], float | None]


@dataclass(frozen=True)
class Caps:
    """The server's spending settings (read from the environment by the composition root)."""

    default_max_cost_usd: float | None = None  # JOBTRAIL_MAX_COST_USD: a job's cap unless submit gives one
    daily_budget_usd: float | None = None  # JOBTRAIL_DAILY_BUDGET_USD: every job, the last 24 hours


class Spending:
    def __init__(self, ledger: Ledger, cost: Cost, caps: Caps) -> None:
        self.ledger = ledger
        self.cost = cost
        self.caps = caps

    def spent(self, attempt: AttemptRecord, now: float) -> float:
        if attempt.ended_at is not None:
            return attempt.cost_usd or 0.0
        return self.cost(attempt, now) or 0.0

    def of_run(self, run_id: str, now: float | None = None) -> float:
        """A job's spend over all its attempts, the running one so far."""
        now = time.time() if now is None else now
        return sum(self.spent(a, now) for a in self.ledger.attempts(run_id))

    def last_24h(self, now: float | None = None) -> float:
        """Every job's spend in the rolling 24-hour window: each attempt for its running time inside it."""
        now = time.time() if now is None else now
        since = now - budget.DAILY_WINDOW_S
        ended = sum(
            cost * budget.window_share(started, ended, now, since)
            for started, ended, cost in self.ledger.ended_spend_since(since)
        )
        return ended + sum(
            self.spent(a, now) * budget.window_share(a.started_at, a.ended_at, now, since) for a in self._running()
        )

    def running_by_run(self, now: float) -> dict[str, float]:
        """What each job's running attempt has cost so far."""
        spent: dict[str, float] = {}
        for attempt in self._running():
            spent[attempt.run_id] = spent.get(attempt.run_id, 0.0) + self.spent(attempt, now)
        return spent

    def _running(self) -> list[AttemptRecord]:
        return [a for a in self.ledger.attempts_in(ACTIVE_STATUSES) if a.started_at is not None and a.ended_at is None]

    def cap_reached(self, run: RunRecord, now: float) -> str | None:
        """Why `run` must stop spending now (its own cap, or the daily budget), or None."""
        if not traits_of(run.backend).billed:
            return None  # it costs nothing
        if run.max_cost_usd is not None and budget.reached(spent := self.of_run(run.run_id, now), run.max_cost_usd):
            return budget.job_cap_message(spent, run.max_cost_usd)
        return self.daily_reached(now, started=True)

    def daily_reached(self, now: float, *, started: bool) -> str | None:
        daily = self.caps.daily_budget_usd
        if daily is not None and budget.reached(spent := self.last_24h(now), daily):
            return budget.daily_cap_message(spent, daily, started=started)
        return None
