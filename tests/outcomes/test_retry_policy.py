"""Retry budgets and the storm guard, for every termination reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.retry import BUDGETS, NEVER, AttemptFacts, JobFacts, decide, propose_memory_change


def attempt(
    n: int, reason: R | None, sha: str = "A", last_step: int | None = 10, start: int | None = None
) -> AttemptFacts:
    return AttemptFacts(number=n, reason=reason, config_sha256=sha, last_step=last_step, start_step=start)


HYPER = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}


def test_every_reason_has_a_rule():
    covered = set(BUDGETS) | set(NEVER) | {R.SUCCEEDED, R.CANCELLED, R.UNKNOWN, R.DIVERGED, R.BUDGET}
    assert covered == set(R)


def test_a_job_stopped_by_its_cap_is_never_retried_automatically_and_by_hand_only_under_a_larger_cap():
    job = JobFacts(job_id="jt-x", max_cost_usd=5.0, spent_usd=5.01)
    assert R.BUDGET not in BUDGETS  # a budget of 0 automatic retries: decide's own branch says why
    automatic = decide([attempt(1, R.BUDGET)], HYPER, None, automatic=True, job=job)
    assert not automatic.retry and "automatic retries never spend past one" in automatic.message
    by_hand = decide([attempt(1, R.BUDGET)], HYPER, None, job=job)
    assert not by_hand.retry and "$5.01 of its max_cost_usd $5.00" in by_hand.message
    assert by_hand.fix and by_hand.fix.startswith("retry(job_id=\"jt-x\", changes={'max_cost_usd': 10.0})")
    assert by_hand.changes == {"max_cost_usd": 10.0}  # the fix as data: inspect's next step calls it
    assert not decide([attempt(1, R.BUDGET)], HYPER, {"max_cost_usd": 5.005}, job=job).retry  # still under spend
    raised = decide([attempt(1, R.BUDGET)], HYPER, {"max_cost_usd": 10.0}, job=job)
    assert raised.retry and raised.changes == {"max_cost_usd": 10.0} and "$10.00" in raised.message
    # Stopped by the daily budget, under its own cap: retried as it is (dispatch checks the daily budget again).
    assert decide([attempt(1, R.BUDGET)], HYPER, None, job=replace(job, spent_usd=1.0)).retry
    assert R.BUDGET.status.value == "cancelled"


def test_a_diverged_run_is_retried_only_with_a_change_and_the_refusal_names_one():
    job = JobFacts(job_id="jt-x", learning_rate=0.002)
    refused = decide([attempt(1, R.DIVERGED)], HYPER, None, job=job)
    assert not refused.retry and "NaN or infinite" in refused.message
    assert refused.fix and refused.fix.startswith("retry(job_id=\"jt-x\", changes={'learning_rate': 0.0002})")
    assert not decide([attempt(1, R.DIVERGED)], HYPER, None, automatic=True, job=job).retry
    same = decide([attempt(1, R.DIVERGED)], {**HYPER, "learning_rate": 0.002}, {"learning_rate": 0.002}, job=job)
    assert not same.retry and same.fix == refused.fix  # a change that changes nothing gets the real fix
    # The user's own learning rate is the one lowered; any real change is retried, twice in a row too.
    assert "1e-05" in (decide([attempt(1, R.DIVERGED)], {"learning_rate": 1e-4}, None, job=job).fix or "")
    absurd = decide([attempt(1, R.DIVERGED)], {"learning_rate": 1e20}, None, job=replace(job, method="dpo")).fix
    assert absurd and "{'learning_rate': 5e-06}" in absurd and "dpo's default" in absurd
    storm = [attempt(1, R.DIVERGED, "A"), attempt(2, R.DIVERGED, "A")]
    for changes in ({"learning_rate": 2e-4}, {"max_grad_norm": 0.5}):
        decision = decide(storm, HYPER, changes, job=job)
        assert decision.retry and decision.changes == changes


@pytest.mark.parametrize("reason", sorted(NEVER, key=str))
def test_never_retried_reasons_answer_with_the_fix(reason):
    decision = decide([attempt(1, reason)], HYPER, None)
    assert not decision.retry and decision.fix
    assert not decide([attempt(1, reason)], HYPER, {"learning_rate": 1e-5}).retry


@pytest.mark.parametrize("reason", [R.PREEMPTED, R.LOST, R.INFRA_TRANSIENT, R.TIMEOUT, R.EVAL_FAILED, R.HUB_ERROR])
def test_budgeted_reasons_retry_until_the_budget_is_spent(reason):
    budget = BUDGETS[reason]
    history = [attempt(1, reason, sha="A")]
    first = decide(history, HYPER, None)
    assert first.retry
    # Spend the budget with distinct configs so only the budget (not the storm guard) stops it.
    history = [
        attempt(i + 1, reason, sha=f"C{i}", last_step=10 * (i + 1), start=10 * i) for i in range(budget.retries + 1)
    ]
    spent = decide(history, HYPER, None)
    assert not spent.retry and "budget" in spent.message


def test_backoff_doubles_for_transient_failures():
    delays = [decide([attempt(i + 1, R.INFRA_TRANSIENT) for i in range(n)], HYPER, None).delay_s for n in (1, 2, 3)]
    assert delays == [30.0, 60.0, 120.0]


def test_storm_guard_stops_the_same_config_failing_twice_for_the_same_reason():
    storm = decide([attempt(1, R.TIMEOUT, "A", 10, 0), attempt(2, R.TIMEOUT, "A", 20, 10)], HYPER, None)
    assert not storm.retry and "storm" in storm.message
    changed = decide([attempt(1, R.TIMEOUT, "A", 10, 0), attempt(2, R.TIMEOUT, "B", 20, 10)], HYPER, None)
    assert changed.retry


def test_preemption_is_not_charged_to_the_storm_guard():
    history = [attempt(1, R.PREEMPTED), attempt(2, R.PREEMPTED), attempt(3, R.PREEMPTED)]
    assert decide(history, HYPER, None).retry


def test_timeout_resumes_only_if_the_attempt_advanced():
    assert decide([attempt(1, R.TIMEOUT, last_step=5, start=None)], HYPER, None).retry
    stuck = decide([attempt(2, R.TIMEOUT, last_step=40, start=40)], HYPER, None)
    assert not stuck.retry and "timeout" in stuck.fix
    never_started = decide([attempt(1, R.TIMEOUT, last_step=None)], HYPER, None)
    assert not never_started.retry


def test_oom_needs_a_changed_memory_shape():
    refused = decide([attempt(1, R.OOM)], HYPER, None)
    assert not refused.retry and "per_device_train_batch_size" in refused.fix
    same = decide([attempt(1, R.OOM)], HYPER, {"learning_rate": 1e-5})
    assert not same.retry
    smaller = decide([attempt(1, R.OOM)], HYPER, {"per_device_train_batch_size": 2})
    assert smaller.retry and smaller.changes == {"per_device_train_batch_size": 2}
    assert decide([attempt(1, R.OOM)], HYPER, {"flavor": "a100-large"}).retry
    automatic = decide([attempt(1, R.OOM)], HYPER, None, automatic=True)
    assert automatic.retry and automatic.changes == {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4}


def test_memory_proposals_keep_the_effective_batch_then_shrink_activations():
    assert propose_memory_change({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}) == {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
    }
    assert propose_memory_change({"per_device_train_batch_size": 1, "gradient_checkpointing": False}) == {
        "gradient_checkpointing": True
    }
    assert propose_memory_change({"per_device_train_batch_size": 1, "max_length": 2048}) == {"max_length": 1024}


def test_an_oom_halves_the_split_the_job_ran_with_not_the_defaults():
    """Preflight chose 8 rows at once without checkpointing (speedups): the proposal halves that, not SFT's 2."""
    chosen = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "gradient_checkpointing": False}
    halved = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    assert propose_memory_change({}, chosen) == halved
    automatic = decide([attempt(1, R.OOM)], {}, None, automatic=True, job=JobFacts(ran_with=chosen))
    assert automatic.retry and automatic.changes == halved


def test_succeeded_unknown_running_and_cancelled():
    assert not decide([attempt(1, R.SUCCEEDED)], HYPER, None).retry
    unknown = decide([attempt(1, R.UNKNOWN)], HYPER, None)
    assert not unknown.retry and "logs" in unknown.fix
    assert not decide([attempt(1, None)], HYPER, None).retry
    cancelled = decide([attempt(1, R.CANCELLED)], HYPER, None)
    assert cancelled.retry
    assert not decide([attempt(1, R.CANCELLED)], HYPER, None, automatic=True).retry


# --- changes are weighed before budgets and the storm guard ---------------------------------

PROGRESSED_TIMEOUTS = [attempt(1, R.TIMEOUT, "A", 10, None), attempt(2, R.TIMEOUT, "A", 20, 10)]


def test_a_longer_timeout_after_timeouts_is_not_a_storm():
    answer = decide(PROGRESSED_TIMEOUTS, HYPER, {"timeout": "5m"}, job=JobFacts(timeout=120))
    assert answer.retry and answer.changes == {"timeout": "5m"}


def test_a_longer_timeout_is_allowed_when_the_timeout_budget_is_spent():
    history = [attempt(i + 1, R.TIMEOUT, f"C{i}", 10 * (i + 1), 10 * i) for i in range(BUDGETS[R.TIMEOUT].retries + 1)]
    assert not decide(history, HYPER, None, job=JobFacts(timeout=120)).retry
    assert decide(history, HYPER, {"timeout": "1h"}, job=JobFacts(timeout=120)).retry


@pytest.mark.parametrize(
    "faster",
    [
        {"max_steps": 5},
        {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1},
        {"max_length": 256},
        {"flavor": "a100-large"},
    ],
)
def test_a_faster_config_after_timeouts_is_allowed(faster):
    hyper = {**HYPER, "max_steps": 100, "max_length": 1024}
    assert decide(PROGRESSED_TIMEOUTS, hyper, faster, job=JobFacts(timeout=120, flavor="t4-small")).retry


def test_a_longer_timeout_resumes_an_attempt_that_did_not_advance():
    stuck = [attempt(2, R.TIMEOUT, last_step=40, start=40)]
    assert decide(stuck, HYPER, {"timeout": "4h"}, job=JobFacts(timeout=3600)).retry


def test_a_change_that_changes_nothing_is_still_refused():
    same = decide(PROGRESSED_TIMEOUTS, HYPER, {"timeout": "2m"}, job=JobFacts(timeout=120))
    assert not same.retry and "change nothing" in same.message
    unknown = decide([attempt(1, R.UNKNOWN)], HYPER, {"per_device_train_batch_size": 4})
    assert not unknown.retry and "change nothing" in unknown.message


def test_any_real_change_after_unknown_is_allowed():
    answer = decide([attempt(1, R.UNKNOWN)], HYPER, {"learning_rate": 1e-5})
    assert answer.retry and answer.changes == {"learning_rate": 1e-5}


def test_a_new_memory_shape_after_oom_is_allowed_when_the_budget_is_spent():
    history = [attempt(i + 1, R.OOM, f"C{i}") for i in range(BUDGETS[R.OOM].retries + 1)]
    assert not decide(history, HYPER, None, automatic=True).retry
    assert decide(history, HYPER, {"per_device_train_batch_size": 1}).retry


def test_a_succeeded_job_is_not_retried_and_the_fix_names_it_as_init_from():
    decision = decide([attempt(1, R.SUCCEEDED)], HYPER, None, job=JobFacts(job_id="jt-done"))
    assert not decision.retry and decision.fix and 'submit with init_from="jt-done"' in decision.fix
