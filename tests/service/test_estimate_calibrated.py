"""A local estimate after a real run uses what that run measured (issue 25 item 8): its tokens/s and its
time outside train(), on rows counted with the model's own tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from support.waiting import wait_until_terminal

SHAPE = {"max_length": 128, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}


def test_a_local_estimate_after_a_run_is_calibrated_from_it_on_the_tokenizers_count(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path
) -> None:
    service = build_service(tmp_path / "home")
    ask = dict(dataset=str(chat_dataset), num_train_epochs=1, **SHAPE)
    before = service.estimate_cost(str(tiny_model), **ask)
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
    after = service.estimate_cost(str(tiny_model), **ask)
    assert after.calibrated and after.speed_source == "calibrated from 1 run on this machine", after.to_markdown()
    assert "calibrated from 1 run on this machine" in after.to_markdown()
    assert after.tokens_counted == "tokenizer" and "counted with" in after.assumptions["data"]
    # The tokenizer's count is the trainer's: the run's own non-padding tokens, to within a few %.
    trained = summary["tokens_per_second"] * summary["train_runtime"]
    assert after.tokens == pytest.approx(trained, rel=0.05)
    assert after.tokens_per_second == pytest.approx(summary["tokens_per_second"], rel=1e-3)
    assert "measured" in after.assumptions["startup"]
