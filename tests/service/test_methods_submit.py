"""Every method through submit: the service's config, preflight and the templates agree end to end."""

from __future__ import annotations

import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from support.jobs import job_spec, write_jsonl
from support.waiting import wait_until_terminal

FAST = {
    "max_steps": 2,
    "save_steps": 1,
    "logging_steps": 1,
    "learning_rate": 1e-3,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "lora_r": 4,
    "lora_alpha": 8,
}
REWARD = """import re

def short_and_numeric(prompts, completions, **kwargs):
    return [1.0 if re.search(r"[0-9]", str(c)) else 0.0 for c in completions]
"""


@pytest.fixture
def service(tmp_path, two_local_slots):
    return build_service(tmp_path / "home")


def _submit(service, spec: JobSpec) -> str:
    submitted = service.submit(spec)
    assert submitted.job_id, [f.model_dump() for f in submitted.findings if f.severity == "error"]
    return submitted.job_id


def _succeeded(service, job_id: str) -> None:
    done = wait_until_terminal(lambda: service.inspect(job_id), 240, f"the job {job_id}")
    assert done.status == "succeeded", (done.termination_message, service.logs(job_id, tail=30).lines)
    assert any(c.state == "committed" for c in done.checkpoints)


def test_dpo_and_grpo_with_a_user_reward_file_train_through_submit(service, tiny_model, tmp_path):
    pairs = write_jsonl(
        tmp_path / "pairs.jsonl",
        [{"prompt": f"Count to {i}.", "chosen": f" {i}", "rejected": " no"} for i in range(1, 9)],
    )
    dpo_id = _submit(service, job_spec("dpo", tiny_model, pairs, hyperparameters={**FAST, "max_length": 48}))
    prompts = write_jsonl(
        tmp_path / "prompts.jsonl", [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]
    )
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    job_id = _submit(
        service,
        job_spec(
            "grpo",
            tiny_model,
            prompts,
            hyperparameters={**FAST, "num_generations": 2, "max_completion_length": 8, "reward_funcs": ["exact_match"]},
            reward_file=str(reward),
            reward_function="short_and_numeric",
        ),
    )
    for submitted in (dpo_id, job_id):  # side by side
        _succeeded(service, submitted)
    config = service.ledger.attempts(job_id)[0].config
    assert (
        config["rewards"]["builtin"] == ["exact_match"]
        and "def short_and_numeric" in config["rewards"]["user"]["source"]
    )
    assert "reward_funcs" not in config["training_args"]


def test_grpo_preflight_refuses_a_bad_reward_file_and_an_indivisible_batch(service, tiny_model, tmp_path):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "2+2?", "answer": "4"}] * 4)
    bad = tmp_path / "bad.py"
    bad.write_text("def score(x):\n    return [0.0]\n")
    refused = service.submit(
        job_spec(
            "grpo",
            tiny_model,
            prompts,
            hyperparameters={**FAST, "num_generations": 3},
            reward_file=str(bad),
            reward_function="score",
        )
    )
    codes = {f.code for f in refused.findings if f.severity == "error"}
    assert refused.status == "rejected" and len(codes) >= 2
    assert any("num_generations" in f.message for f in refused.findings)
    missing = service.submit(
        job_spec(
            "grpo",
            tiny_model,
            prompts,
            hyperparameters=FAST,
            reward_file=str(tmp_path / "nope.py"),
            reward_function="f",
        )
    )
    assert missing.status == "rejected"
    assert service.ps().jobs == []
