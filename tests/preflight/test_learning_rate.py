"""A learning rate that destroys the model is said before the job runs, by what is trained (issue 25 item 2)."""

from __future__ import annotations

import pytest

from jobtrail.models import JobSpec
from jobtrail.preflight import rules
from jobtrail.preflight.facts import Facts
from jobtrail.preflight.learning_rate import check_learning_rate
from jobtrail.preflight.plan import job_values


def spec(method: str = "sft", **hyperparameters: object) -> JobSpec:
    return JobSpec(method=method, model="/m", dataset="/d.jsonl", hyperparameters=hyperparameters)


def facts(job: JobSpec) -> Facts:
    """The facts a plan gives the rules: the job's effective hyperparameters (nothing gathered)."""
    return Facts(values=job_values(job))


def test_full_fine_tuning_at_0_9_is_warned_with_the_numbers_and_a_rate_to_use():
    job = spec(learning_rate=0.9, peft="none")
    [finding] = check_learning_rate(job, facts(job))
    assert finding.code == "hyperparameters.learning_rate_destroys" and finding.severity == "warning"
    assert "learning_rate 0.9 is 900x the ceiling for full fine-tuning with SFT (0.001" in finding.message
    assert finding.fix.startswith('hyperparameters={"learning_rate": 2e-05}')


@pytest.mark.parametrize(
    ("method", "hyperparameters", "warned"),
    [
        ("sft", {"learning_rate": 5e-3}, False),  # high for an adapter, but it trains
        ("sft", {"learning_rate": 0.5}, True),
        ("sft", {"learning_rate": 1e-3, "peft": "none"}, False),
        ("sft", {"learning_rate": 2e-3, "peft": "none"}, True),
        ("dpo", {"learning_rate": 1e-3, "peft": "none"}, True),  # a preference method moves a tuned model
        ("dpo", {"learning_rate": 5e-3}, False),
        ("grpo", {"learning_rate": 1e-2, "peft": "qlora"}, True),
        ("sft", {"learning_rate": "0.9", "peft": "none"}, True),  # a string is judged as the number the job gets
        ("sft", {}, False),
        ("sft", {"learning_rate": 1000, "peft": "none"}, False),  # out of range: the range check's error says it
    ],
)
def test_the_ceiling_depends_on_what_is_trained(method, hyperparameters, warned):
    job = spec(method, **hyperparameters)
    assert bool(check_learning_rate(job, facts(job))) is warned


def test_preflight_runs_it_and_a_rate_of_1000_stays_an_error_force_can_pass():
    warned = spec(learning_rate=0.9, peft="none")
    findings, _ = rules.judge(warned, facts(warned))
    assert "hyperparameters.learning_rate_destroys" in {f.code for f in findings}
    too_high = spec(learning_rate=1000, peft="none")
    refused, _ = rules.judge(too_high, facts(too_high))
    assert any(f.severity == "error" and "learning_rate" in f.message for f in refused)
