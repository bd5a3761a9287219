"""A run that succeeded without learning anything reads so everywhere (issue 25 item 3): a real SFT run at
learning_rate 0 (out of the field's range: preflight refuses it, force passes it) ends "succeeded, but
nothing_learned" in wait, ps and inspect; its follower is held and release starts it; the fix its alert names is
a submit jobtrail accepts as written, and with the same short hyperparameters at the default learning rate it
trains a healthy run that raises no such alert."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from support.waiting import wait_for, wait_until_terminal

SHORT = {"max_steps": 6, "logging_steps": 1, "save_steps": 100, "per_device_train_batch_size": 2, "max_length": 64}


def submit_arguments(fix: str) -> dict[str, Any]:
    """The keyword arguments of the submit(...) call a fix names, read as Python reads them."""
    start = fix.index("submit(")
    call = ast.parse(fix[start : fix.index(")", start) + 1], mode="eval").body
    assert isinstance(call, ast.Call) and not call.args
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}


@pytest.mark.usefixtures("two_local_slots")
def test_a_run_at_learning_rate_0_succeeds_but_learned_nothing(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path
) -> None:
    service = build_service(tmp_path / "home")
    still = JobSpec(
        method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters={**SHORT, "learning_rate": 0.0}
    )
    refused = service.submit(still)
    assert refused.status == "rejected" and refused.job_id is None
    assert [f for f in refused.findings if f.severity == "error" and "learning_rate" in f.message], refused.findings
    parent = service.submit(still, SubmitOptions(force=True)).job_id
    assert parent
    follower = service.submit(
        JobSpec(method="sft", model=parent, dataset=str(chat_dataset), hyperparameters={**SHORT, "max_steps": 2})
    ).job_id
    done = wait_until_terminal(lambda: service.inspect(parent), 180, "the job at learning rate 0")
    assert (done.status, done.termination_reason) == ("succeeded", "succeeded"), done.to_markdown()
    (alert,) = [a for a in done.alerts if a["code"] == "nothing_learned"]
    assert alert["step"] == 6 and "the learning rate was 0" in alert["message"]
    assert "But: succeeded, but nothing_learned at step 6: The run ended without learning" in done.to_markdown()

    waited = service.wait(parent, timeout_s=1)
    assert "But: nothing_learned at step 6, so its result is not usable as it is." in waited.summary
    assert "Alert (nothing_learned, step 6)" in waited.summary and alert["fix"] in waited.summary
    row = next(r for r in service.ps().jobs if r.job_id == parent)
    assert row.cells()[1] == "succeeded, but nothing_learned"

    held = wait_for(
        lambda: (f := service.inspect(follower)).waiting_for and f.waiting_for.startswith("held") and f,
        30,
        "the follower to be held",
    )
    assert held.status == "queued" and f"held: {parent} succeeded, but nothing_learned at step 6" in held.waiting_for
    assert f'release(job_id="{follower}")' in held.waiting_for and f'cancel(job_id="{follower}")' in held.waiting_for

    # The fix, sent as written: accepted (a dry run plans it without a blocking finding).
    call = submit_arguments(alert["fix"])
    assert call == {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset)}
    planned = service.submit(JobSpec(**call), SubmitOptions(dry_run=True))
    assert planned.status == "dry_run" and not [f for f in planned.findings if f.severity == "error"]
    # With the run's short hyperparameters added, at the method's default learning rate: a healthy run.
    healthy = service.submit(JobSpec(**call, hyperparameters=SHORT)).job_id
    released = service.release(follower)
    assert released.released, released.to_markdown()
    trained = wait_until_terminal(lambda: service.inspect(healthy), 180, "the healthy run")
    assert trained.status == "succeeded", trained.to_markdown()
    assert not [a for a in trained.alerts if a["code"] in ("nothing_learned", "loss_not_falling")], trained.alerts
    assert "But:" not in trained.to_markdown()
    assert wait_until_terminal(lambda: service.inspect(follower), 180, "the released follower").status == "succeeded"
