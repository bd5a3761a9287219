"""Dollars as people read them, and the names of the settings that cap what jobs spend: the composition root reads
those settings, the spending rules enforce them (outcomes/budget.py), and results and findings name them."""

from __future__ import annotations

CAP_ENV = "JOBTRAIL_MAX_COST_USD"  # a job's cap unless submit passes max_cost_usd
DAILY_ENV = "JOBTRAIL_DAILY_BUDGET_USD"  # every job's spend in the last 24 hours


def usd(amount: float | None) -> str:
    """Dollars as a person reads them: $0.0042 for fractions of a cent, $12.40 otherwise."""
    if amount is None:
        return "$?"
    return f"${amount:.4f}" if 0 < abs(amount) < 0.01 else f"${amount:,.2f}"
