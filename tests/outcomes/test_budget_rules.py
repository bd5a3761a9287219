"""Spending caps' pure rules: what a cap may be, the worst case preflight counts, the rolling 24-hour window."""

from __future__ import annotations

import math

import pytest

from jobtrail.errors import InvalidRequestError
from jobtrail.outcomes import budget


@pytest.mark.parametrize("given, amount", [(20, 20.0), ("20", 20.0), (" $12.5 ", 12.5), (0.003, 0.003)])
def test_a_cap_is_a_positive_amount_of_dollars(given, amount):
    assert budget.parse_cap(given, "max_cost_usd") == amount


@pytest.mark.parametrize("given", ["twenty", "", "-5", 0, -1, math.inf, math.nan, "1e9", True, None, [20]])
def test_anything_else_is_refused_with_what_to_write(given):
    with pytest.raises(InvalidRequestError) as refused:
        budget.parse_cap(given, "JOBTRAIL_MAX_COST_USD")
    assert "JOBTRAIL_MAX_COST_USD" in refused.value.message
    assert refused.value.fix and "e.g. 20" in refused.value.fix


def test_the_worst_case_pays_once_per_attempt_submit_may_start():
    assert budget.worst_case_attempts(0) == 1
    assert budget.worst_case_attempts(3) == 4


def test_the_daily_window_counts_the_part_of_an_attempt_inside_it():
    now, since = 100_000.0, 100_000.0 - budget.DAILY_WINDOW_S
    assert budget.window_share(since - 100, since + 100, now, since) == 0.5  # half inside
    assert budget.window_share(since - 200, since - 100, now, since) == 0.0  # ended before it
    assert budget.window_share(now - 50, None, now, since) == 1.0  # running, wholly inside
    assert budget.window_share(None, None, now, since) == 0.0  # never started


def test_amounts_read_as_people_write_them():
    assert budget.usd(0.0042) == "$0.0042" and budget.usd(12.4) == "$12.40" and budget.usd(None) == "$?"
    assert budget.raise_cap_to(spent=5.01, cap=5.0) == 10.0 and budget.raise_cap_to(spent=9.0, cap=1.0) == 13.5
    assert budget.reached(4.9999995, 5.0) and not budget.reached(4.99, 5.0)
