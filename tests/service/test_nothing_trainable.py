"""A job whose setup trains nothing (issue 25): submitted as an agent would, with lora_dropout 1 forced past
preflight's refusal (issue 27 made preflight refuse it; force=true still submits it, as an agent that insists
would), its gradient norm is exactly 0 from the first step. It stops at step 3 of 20 and ends
failed (config_error), not diverged with a lower learning rate: wait, ps and inspect carry its nothing_learned alert,
its follower never starts, retry is refused, and the submit its alert names, sent as written, trains a healthy run."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from support.toolcalls import calls_in
from support.waiting import wait_until_terminal

SHORT = {"max_steps": 6, "logging_steps": 1, "save_steps": 100, "per_device_train_batch_size": 2, "max_length": 64}


def submit_arguments(fix: str) -> dict[str, Any]:
    """The keyword arguments of the submit(...) call a fix names, read as Python reads them."""
    (call,) = [c for c in calls_in(fix) if c.name == "submit"]
    parsed = ast.parse(call.text, mode="eval").body
    assert isinstance(parsed, ast.Call) and not parsed.args
    return {k.arg: ast.literal_eval(k.value) for k in parsed.keywords if k.arg}


def test_a_run_with_no_gradient_stops_as_config_error_and_its_fix_trains(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path
) -> None:
    service = build_service(tmp_path / "home")
    dropped = {**SHORT, "max_steps": 20, "lora_dropout": 1.0}
    still = service.submit(
        JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=dropped),
        SubmitOptions(force=True),
    )
    parent = still.job_id
    assert parent and still.status != "rejected", still.to_markdown()
    follower = service.submit(
        JobSpec(method="sft", model=parent, dataset=str(chat_dataset), hyperparameters={**SHORT, "max_steps": 2})
    ).job_id
    assert follower

    done = wait_until_terminal(lambda: service.inspect(parent), 180, "the job whose gradient is 0")
    assert (done.status, done.termination_reason) == ("failed", "config_error"), done.to_markdown()
    assert [a["code"] for a in done.alerts] == ["nothing_learned"], done.alerts
    (alert,) = done.alerts
    assert alert["step"] == 3 and "lora_dropout 1 zeroes every input" in alert["message"]
    assert done.termination_message == f"NothingTrainableError: {alert['message']}"
    assert "collapsed" not in done.to_markdown() and "diverged" not in (done.termination_message or "")

    waited = service.wait(parent, timeout_s=1)
    assert f"**{parent}**: failed (config_error) at step 3/20" in waited.summary, waited.summary
    assert f"Alert (nothing_learned, step 3): {alert['message']} Fix: {alert['fix']}" in waited.summary
    row = next(r for r in service.ps().jobs if r.job_id == parent)
    assert "nothing_learned" in row.alerts
    refused = service.retry(parent)
    assert not refused.retried and "config_error" in refused.to_markdown()
    never = wait_until_terminal(lambda: service.inspect(follower), 60, "the follower to be cancelled")
    assert never.status == "cancelled" and parent in (never.termination_message or ""), never.to_markdown()

    # The fix, sent as written with the run's short hyperparameters: accepted, and a run that learns.
    call = submit_arguments(alert["fix"])
    assert call == {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset)}
    healthy = service.submit(JobSpec(**call, hyperparameters=SHORT))
    assert healthy.job_id and not [f for f in healthy.findings if f.severity == "error"], healthy.to_markdown()
    trained = wait_until_terminal(lambda: service.inspect(healthy.job_id), 180, "the fixed run")
    assert trained.status == "succeeded" and not trained.alerts, trained.to_markdown()
    grads = service.metrics(healthy.job_id).series["grad_norm"]
    assert len(grads) == 6 and all(g and g > 0 for _, g in grads), grads
