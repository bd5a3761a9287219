"""Preflight's spending checks: a remote job's worst case against its cap and the daily budget.

The worst case is the estimate once per attempt submit's max_retries may start without being asked
(outcomes/budget.py says why). The job's own cap can be forced past (force=true): the tracker still
stops the job when its spend reaches it. The daily budget is the server's setting, a person's: force
never overrides it.
"""

from __future__ import annotations

import math

from jobtrail.backends.registry import traits_of
from jobtrail.estimate import EstimateResult
from jobtrail.estimate.hardware import LOCAL
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight.facts import BudgetFacts, Facts
from jobtrail.results.estimate import FlavorOption
from jobtrail.util.money import CAP_ENV, DAILY_ENV, usd
from jobtrail.util.timefmt import human_duration

DAILY_CODE = "budget.daily"
# Findings that block a submission even when it is forced.
UNFORCEABLE = frozenset({DAILY_CODE})


def unforceable(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error" and f.code in UNFORCEABLE]


def check_caps(spec: JobSpec, facts: Facts) -> list[Finding]:
    b = facts.budget
    backend = traits_of(spec.backend)
    if not backend.billed and b is not None and b.cap_given and b.max_cost_usd is not None:
        return [_not_billed(backend.place, b.max_cost_usd)]
    if not backend.billed or b is None or (b.max_cost_usd is None and b.daily_budget_usd is None):
        return []
    e = facts.estimate
    if e is None or e.cost_usd is None:
        return [
            Finding(
                code="budget.unchecked",
                severity="warning",
                message="The job's cost could not be estimated, so its spending caps were not checked before it "
                "starts; it is stopped (termination_reason 'budget') when its spend reaches one.",
                fix="Give estimate_cost the data's size to see the cost, or set a cap you can afford to reach.",
            )
        ]
    worst = e.cost_usd * b.attempts
    findings = []
    if b.max_cost_usd is not None and worst > b.max_cost_usd:
        findings.append(_over_cap(spec, e, b, worst, b.max_cost_usd))
    if b.daily_budget_usd is not None and b.spent_24h_usd + worst > b.daily_budget_usd:
        findings.append(_over_daily(b, worst, b.daily_budget_usd))
    if findings:
        return findings
    caps = [f"max_cost_usd {usd(b.max_cost_usd)}"] if b.max_cost_usd is not None else []
    if b.daily_budget_usd is not None:
        caps.append(f"{usd(b.spent_24h_usd)} of the daily {usd(b.daily_budget_usd)} spent in the last 24 h")
    return [
        Finding(
            code="budget",
            severity="info",
            message=f"Worst case {_worst(e, b, worst, spec.flavor)}, within {'; '.join(caps)}. A running job "
            "is stopped when its spend reaches a cap.",
        )
    ]


def _not_billed(place: str, cap: float) -> Finding:
    """A cap passed for a job that costs nothing: accepted, but said to have no effect."""
    return Finding(
        code="budget.not_billed",
        severity="warning",
        message=f"max_cost_usd {usd(cap)} has no effect: jobs on {place} are not billed, so no spend reaches a cap.",
        fix="Leave max_cost_usd out for this job; it caps the spend of jobs on a billed backend.",
    )


def _over_cap(spec: JobSpec, e: EstimateResult, b: BudgetFacts, worst: float, cap: float) -> Finding:
    options = []
    cheaper = _cheaper_flavor(e, spec.flavor, cap / b.attempts)
    if cheaper is not None:
        hours = f", ~{human_duration(cheaper.hours * 3600)}" if cheaper.hours else ""
        options.append(f"flavor={cheaper.flavor!r}, a cheaper flavor it fits (~{usd(cheaper.cost_usd)}{hours})")
    if b.attempts > 1 and e.cost_usd is not None and e.cost_usd <= cap:
        options.append(f"max_retries={math.floor(cap / e.cost_usd) - 1}, fewer automatic retries")
    options.append("a smaller config (fewer max_steps or num_train_epochs, a shorter max_length)")
    options.append(f"max_cost_usd={math.ceil(worst * 100) / 100}, a cap that covers the worst case")
    return Finding(
        code="budget.over_cap",
        severity="error",
        message=f"The job may cost {_worst(e, b, worst, spec.flavor)}, above max_cost_usd {usd(cap)}"
        f" (submit's argument, or {CAP_ENV}).",
        fix="Pass one of: " + "; ".join(options) + ".",
    )


def _over_daily(b: BudgetFacts, worst: float, daily: float) -> Finding:
    room = max(0.0, daily - b.spent_24h_usd)
    return Finding(
        code=DAILY_CODE,
        severity="error",
        message=f"{usd(b.spent_24h_usd)} spent on HF Jobs in the last 24 hours plus this job's worst case "
        f"{usd(worst)} is above the daily budget of {usd(daily)} ({DAILY_ENV}); force does not override it.",
        fix=f"Make the job fit the {usd(room)} left (a cheaper flavor, fewer max_steps, max_retries=0), or submit "
        f"it when older spend has left the 24-hour window; only a person can raise {DAILY_ENV}.",
    )


def _worst(e: EstimateResult, b: BudgetFacts, worst: float, flavor: str | None) -> str:
    each = f"~{usd(e.cost_usd)} on {flavor}"
    return f"{usd(worst)} ({each} × {b.attempts} attempts: 1 + max_retries)" if b.attempts > 1 else f"{each}"


def _cheaper_flavor(e: EstimateResult, current: str | None, per_attempt: float) -> FlavorOption | None:
    """The cheapest flavor the job fits whose estimate is within `per_attempt` (options are cheapest first)."""
    return next(
        (
            o
            for o in e.options
            if o.fits and o.flavor not in (current, LOCAL) and o.cost_usd is not None and o.cost_usd <= per_attempt
        ),
        None,
    )
