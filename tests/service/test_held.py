"""The verdict is the run (issue 25 item 3): a job whose loss blew up says so in wait, ps and inspect, its
follower is held (not trained on destroyed weights, not cancelled either), release is refused while there is no
model, and the retry with a lower learning rate resumes from the checkpoint kept from before the blow-up, after
which the follower starts by itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.requests import EstimateRequest, SubmitOptions
from jobtrail.results.endings import verdict
from jobtrail.results.jobs import JobRow
from jobtrail.results.watch import WaitResult
from support.waiting import wait_for, wait_until_terminal

# Full fine-tuning at learning_rate 1000 after a warm-up whose first update runs at 0: step 3's loss blows up.
BLOWN = {
    "peft": "none",
    "learning_rate": 1000.0,
    "warmup_steps": 3,
    "max_steps": 8,
    "save_steps": 1,
    "logging_steps": 1,
    "per_device_train_batch_size": 2,
    "max_length": 64,
}


def test_a_blown_up_parent_holds_its_follower_until_a_retry_succeeds(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path
) -> None:
    service = build_service(tmp_path / "home")
    parent = service.submit(
        JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=BLOWN),
        SubmitOptions(force=True),
    ).job_id
    follower = service.submit(
        JobSpec(
            method="sft",
            model=parent,
            dataset=str(chat_dataset),
            hyperparameters={"max_steps": 2, "logging_steps": 1, "max_length": 64},
        )
    ).job_id
    done = wait_until_terminal(lambda: service.inspect(parent), 180, "the blown-up job to end")
    assert (done.status, done.termination_reason) == ("failed", "diverged"), done.to_markdown()
    assert "Kept checkpoint-1 (step 1)" in (done.termination_message or "")
    committed = [c.step for c in done.checkpoints if c.state == "committed"]
    assert committed == [1] and any(c.state == "withdrawn" and c.step == 2 for c in done.checkpoints)

    waited = service.wait(parent, timeout_s=1)
    assert [a["code"] for a in waited.alerts if a["code"] == "loss_diverged"] == ["loss_diverged"]
    assert "Alert (loss_diverged, step 3)" in waited.summary
    row = next(r for r in service.ps().jobs if r.job_id == parent)
    assert "loss_diverged" in row.alerts

    held = wait_for(
        lambda: (f := service.inspect(follower)).waiting_for and f.waiting_for.startswith("held") and f,
        30,
        "the follower to be held",
    )
    assert held.status == "queued" and f"held: {parent} ended diverged" in held.waiting_for
    assert f'cancel(job_id="{follower}")' in held.waiting_for and "learning_rate" in held.waiting_for
    refused = service.release(follower)
    assert not refused.released and refused.summary.startswith("Not released:") and parent in (refused.fix or "")

    # The fix the alert names, sent as written (the hold's text names it too).
    stop = next(a for a in done.alerts if a["code"] == "loss_diverged")
    call = re.search(r"retry\(job_id=\"(jt-\w+)\", changes=(\{[^}]*\})\)", stop["fix"])
    assert call and call[1] == parent and call[2] in held.waiting_for
    retried = service.retry(parent, json.loads(call[2]))
    assert retried.retried, retried.to_markdown()
    healed = wait_until_terminal(lambda: service.inspect(parent), 240, "the retry", attempts=2)
    assert healed.status == "succeeded", healed.to_markdown()
    assert healed.attempts[-1].resumed_from and healed.attempts[-1].resumed_from.endswith("checkpoint-1")
    trained = wait_until_terminal(lambda: service.inspect(follower), 240, "the follower after the retry")
    assert trained.status == "succeeded", trained.to_markdown()
    # What the local jobs measured is what the next local estimate uses (one key for writing and reading).
    estimate = service.estimate_cost(
        EstimateRequest(
            str(tiny_model), num_examples=12, avg_tokens=20, max_length=64, per_device_train_batch_size=2, peft="none"
        )
    )
    assert estimate.calibrated, estimate.to_markdown()


def test_a_succeeded_run_with_a_blocking_alert_reads_succeeded_but():
    flat = {
        "code": "grpo_reward_std_zero",
        "step": 4,
        "message": "reward_std was 0 in 4 of 4 logged steps.",
        "fix": "x",
    }
    assert verdict("succeeded", "succeeded", [flat]).startswith("succeeded, but grpo_reward_std_zero at step 4")
    assert verdict("failed", "oom", [flat]) == "failed (oom)"
    spike = {**flat, "code": "loss_spike"}
    assert verdict("succeeded", "succeeded", [spike]) == "succeeded"
    row = JobRow(
        job_id="jt-1",
        status="succeeded",
        method="grpo",
        model="m",
        dataset="d",
        backend="local",
        created_at=0.0,
        attempts=1,
        alerts=["grpo_reward_std_zero"],
    )
    assert row.cells()[1] == "succeeded, but grpo_reward_std_zero"
    waited = WaitResult.model_validate(
        {
            "job_id": "jt-1",
            "status": "succeeded",
            "terminal": True,
            "termination_reason": "succeeded",
            "attempts": 1,
            "progress": {"step": 4, "max_steps": 4, "first_loss": 0.0, "last_loss": 0.0},
            "waited_s": 0.0,
            "timed_out": False,
            "alerts": [flat],
        }
    )
    assert "But: grpo_reward_std_zero at step 4" in waited.summary and "plot(" not in waited.summary
