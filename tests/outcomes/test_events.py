"""The digest of a job's events: last_metrics keeps every metric a step carries; warnings are read back."""

from __future__ import annotations

import json
from typing import Any

from jobtrail.outcomes import events


def _line(event: str, **fields: Any) -> str:
    return events.PREFIX + json.dumps({"event": event, "time": 1.0, **fields})


def test_last_metrics_keeps_every_metric_of_the_step_event() -> None:
    dpo = {"rewards/accuracies": 0.75, "rewards/margins": 0.31, "rewards/chosen": -0.1, "rewards/rejected": -0.4}
    grpo = {"reward": 0.0, "reward_std": 0.0, "rewards/format/mean": 0.0, "completions/clipped_ratio": 1.0}
    digest = events.digest(
        [
            _line("step", step=1, loss=0.69, learning_rate=1e-3, grad_norm=2.0, epoch=0.1, metrics=dpo),
            _line("step", step=2, loss=0.0, learning_rate=1e-3, tokens=None, metrics=grpo),
        ]
    )
    assert digest.fields["last_metrics"] == {"step": 2, "loss": 0.0, "learning_rate": 1e-3, **grpo}
    first = events.digest([_line("step", step=1, loss=0.69, grad_norm=2.0, epoch=0.1, metrics=dpo)])
    assert first.fields["last_metrics"] == {"step": 1, "loss": 0.69, "grad_norm": 2.0, "epoch": 0.1, **dpo}


def test_a_method_metric_never_overwrites_a_step_field() -> None:
    digest = events.digest([_line("step", step=3, loss=1.5, metrics={"loss": 9.0, "kl": 0.2})])
    assert digest.fields["last_metrics"] == {"step": 3, "loss": 1.5, "kl": 0.2}


def test_warning_events_are_read_back_with_code_step_message_and_fix() -> None:
    warning = {"code": "grpo_reward_std_zero", "step": 2, "message": "reward_std was 0", "fix": "Vary the rewards."}
    digest = events.digest([_line("step", step=2, loss=0.0), _line("warning", **warning), "plain output"])
    assert events.warnings(digest.events) == [warning]
    assert events.warnings([{"event": "step", "step": 1}]) == []


def test_the_latest_phase_alerts_and_eval_points_are_read_back() -> None:
    alert = {"code": "nan_loss", "step": 3, "message": "loss is nan at step 3", "fix": "Lower learning_rate."}
    digest = events.digest(
        [
            _line("phase", phase="loading_model"),
            _line("phase", phase="training", max_steps=6, step=0),
            _line("step", step=2, loss=1.5),
            _line("eval", step=2, epoch=0.5, metrics={"eval_loss": 1.7, "eval_runtime": 0.2}),
            _line("eval", state="finished", metrics={"loss": 1.0}),  # an evaluation job's: not a point
            _line("alert", **alert),
        ]
    )
    assert events.latest_phase(digest.events) == "training"
    assert events.latest_phase([]) is None
    assert events.alerts(digest.events) == [alert]
    assert events.eval_metrics(digest.events) == [{"step": 2, "epoch": 0.5, "eval_loss": 1.7, "eval_runtime": 0.2}]
    assert digest.fields["last_metrics"] == {"step": 2, "loss": 1.5}  # evaluations leave the step's metrics alone
