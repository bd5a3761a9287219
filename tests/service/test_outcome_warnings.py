"""inspect shows what a job's events said beyond its status: every step metric, its alerts and warnings."""

from __future__ import annotations

import json
import time
from typing import Any

from jobtrail.app import build_service
from jobtrail.models import TerminationReason
from jobtrail.outcomes import events
from support.records import add_ended_run

CLIPPED = {
    "code": "grpo_completions_clipped",
    "step": 2,
    "message": "100% of the completions were cut at max_completion_length (8).",
    "fix": "Raise max_completion_length (now 8), or ask for shorter answers in the prompt.",
}


def _line(event: str, **fields: Any) -> str:
    return events.PREFIX + json.dumps({"event": event, "time": time.time(), **fields})


def test_inspect_of_a_succeeded_grpo_run_shows_its_rewards_and_alerts(tmp_path) -> None:
    service = build_service(tmp_path)
    add_ended_run(service.ledger, "jt-g", TerminationReason.SUCCEEDED, method="grpo", started_at=time.time() - 10)
    rewards = {"reward": 0.0, "reward_std": 0.0, "completions/clipped_ratio": 1.0}
    legacy = {**CLIPPED, "code": "grpo_reward_std_zero"}  # a job from before alerts printed `warning` events
    digest = events.digest(
        [_line("step", step=n, loss=0.0, metrics=rewards) for n in (1, 2)]
        + [_line("alert", **CLIPPED), _line("warning", **legacy)]
    )
    service.ledger.ingest(
        "jt-g/1", from_offset=0, to_offset=1, events=digest.events, fields=digest.fields, checkpoints=[]
    )

    shown = service.inspect("jt-g")
    assert shown.status == "succeeded" and shown.last_metrics == {"step": 2, "loss": 0.0, **rewards}
    assert shown.alerts == [CLIPPED] and shown.warnings == [legacy] and shown.evaluation is None
    assert "Alert (grpo_completions_clipped, step 2): 100% of the completions" in shown.to_markdown()
    assert shown.model_dump(mode="json")["alerts"][0]["fix"] == CLIPPED["fix"]  # in the structured content too
