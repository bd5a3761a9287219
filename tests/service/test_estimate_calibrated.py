"""A local estimate after a real run uses what that run measured (issue 25 item 8): the tokens/s of its steady steps
(issue 29 item 5: its step events, warm-up left out) and its time outside them, on rows counted with the model's own
tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.estimate.steady import steady_rate
from jobtrail.models import JobSpec
from jobtrail.requests import EstimateRequest
from support.waiting import wait_until_terminal

SHAPE = {"max_length": 128, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}


def test_a_local_estimate_after_a_run_is_calibrated_from_it_on_the_tokenizers_count(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path
) -> None:
    service = build_service(tmp_path / "home")
    ask = dict(dataset=str(chat_dataset), num_train_epochs=1, **SHAPE)
    before = service.estimate_cost(EstimateRequest(str(tiny_model), **ask))
    assert not before.calibrated and before.speed_source.startswith("a guess")
    job = service.submit(
        JobSpec(
            method="sft",
            model=str(tiny_model),
            dataset=str(chat_dataset),
            hyperparameters={**SHAPE, "num_train_epochs": 1, "logging_steps": 4},
        )
    ).job_id
    done = wait_until_terminal(lambda: service.inspect(job), 300, "the calibrating run")
    assert done.status == "succeeded", done.to_markdown()
    summary = done.attempts[-1].summary or {}
    after = service.estimate_cost(EstimateRequest(str(tiny_model), **ask))
    speed = "calibrated from 1 run on this machine (steady-state steps)"
    assert after.calibrated and after.speed_source == speed, after.to_markdown()
    assert speed in after.to_markdown()
    assert after.tokens_counted == "tokenizer" and "counted with" in after.assumptions["data"]
    # The tokenizer's count is the trainer's: the run's own non-padding tokens, to within a few %.
    trained = summary["tokens_per_second"] * summary["train_runtime"]
    assert after.tokens == pytest.approx(trained, rel=0.05)
    # 16 steps logged every 4: the intervals after step 4 are its steady steps, the first one's warm-up is not.
    steady = steady_rate(service.ledger.events(done.attempts[-1].attempt_id))
    assert steady is not None and steady.steps == 12
    assert after.tokens_per_second == pytest.approx(steady.tokens_per_second, rel=1e-3)
    assert "measured" in after.assumptions["startup"]
