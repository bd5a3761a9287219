"""Watching through the service on a real local job: a run that cannot reach max_steps before its timeout is
warned while it runs (inspect and wait), with the step it will stop near and the calls that fix it."""

from __future__ import annotations

import time

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.results.progress import WARNING_CODE
from support.jobs import TINY_SFT
from support.waiting import wait_for, wait_until_terminal

MAX_STEPS = 100_000  # far more than the timeout allows on this machine (it would need 170 steps/s)


def test_a_run_that_will_pass_its_timeout_is_warned_while_it_runs(tmp_path, tiny_model, chat_dataset):
    service = build_service(tmp_path / "home")
    spec = JobSpec(
        method="sft",
        model=str(tiny_model),
        dataset=str(chat_dataset),
        hyperparameters={**TINY_SFT, "max_steps": MAX_STEPS, "save_steps": 1000},
        timeout_s=600,
    )
    job_id = service.submit(spec).job_id

    def warned():
        result = service.inspect(job_id)
        assert result.status in ("queued", "starting", "running"), result.to_markdown()
        found = [w for w in result.warnings if w["code"] == WARNING_CODE]
        return (result, found[0]) if found else None

    result, warning = wait_for(warned, 240, "the timeout warning", interval=0.5)
    progress = result.progress
    assert progress.phase == "training" and progress.max_steps == MAX_STEPS and progress.eta_seconds > 600
    assert progress.steps_per_second > 0 and progress.tokens_per_second > 0
    assert progress.step < warning["step"] < MAX_STEPS
    assert f"it will stop near step {warning['step']}" in warning["message"]
    assert f'retry(job_id="{job_id}", changes={{"timeout": "' in warning["fix"]
    assert f"max_steps={warning['step']}" in warning["fix"]
    assert f"Warning ({WARNING_CODE}" in result.to_markdown()

    ticks: list[tuple[float, float, str]] = []
    began = time.monotonic()
    waited = service.wait(job_id, 2, on_progress=lambda done, total, message: ticks.append((done, total, message)))
    assert time.monotonic() - began < 10 and not waited.terminal and waited.timed_out
    assert [w["code"] for w in waited.warnings] == [WARNING_CODE]
    assert ticks and all(total == 2 for _, total, _ in ticks) and "running: step" in ticks[-1][2]

    service.cancel(job_id)
    ended = wait_until_terminal(lambda: service.inspect(job_id), 60, "the cancelled job")
    assert ended.status == "cancelled" and not [w for w in ended.warnings if w["code"] == WARNING_CODE]
