"""Progress is the current attempt's, and a new attempt is announced, on real local jobs: a smoke run then the
full job (progress of the full job's own steps, "from scratch, after the smoke run's N steps", never the smoke
run's checkpoint as the job's last committed one), an automatic retry after a preemption announced in wait's
progress notifications with the checkpoint it resumes from, and a retry after a cancel announced in inspect."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from jobtrail.service.facade import JobService
from support.jobs import TINY_SFT
from support.waiting import wait_for, wait_until_terminal

SMOKE_STEPS = 2  # short: the wait that sees it end began while it ran
FULL_STEPS = 8
PRE_STEP_PHASES = ("queued", "starting", "installing", "loading_model", "tokenizing")


def _spec(model: Path, dataset: Path, **extra: Any) -> JobSpec:
    hyper = {**TINY_SFT, "save_steps": 2, **extra.pop("hyperparameters", {})}
    return JobSpec(method="sft", model=str(model), dataset=str(dataset), hyperparameters=hyper, **extra)


def _waits_until_ended(service: JobService, job_id: str, on_progress: Any, calls: int = 8) -> Any:
    """wait() again and again, as an agent does, until the job has ended (bounded: `calls` waits of 55 s)."""
    for _ in range(calls):
        result = service.wait(job_id, 55, on_progress=on_progress)
        if result.terminal:
            return result
    raise AssertionError(f"{job_id} did not end within {calls} waits")


def _committed_step(service: JobService, job_id: str) -> int:
    steps = [c.step or 0 for c in service.inspect(job_id).checkpoints if Path(c.path).name.startswith("checkpoint-")]
    return max(steps, default=0)


def test_the_full_job_after_a_smoke_run_shows_its_own_steps_and_never_the_smoke_runs_checkpoint(
    tmp_path, tiny_model, chat_dataset
):
    service = build_service(tmp_path / "home")
    spec = _spec(tiny_model, chat_dataset, hyperparameters={"max_steps": FULL_STEPS}, smoke_steps=SMOKE_STEPS)
    job_id = service.submit(spec).job_id
    notes: list[str] = []
    seen: list[Any] = []  # inspect as it read while the full job ran: (progress, note, last committed, summary)

    def on_progress(progress: float, total: float, message: str) -> None:
        notes.append(message)
        if message.startswith("Attempt 2"):
            result = service.inspect(job_id)
            seen.append((result.progress, result.attempt_note, result.last_committed_checkpoint, result.summary))

    done = _waits_until_ended(service, job_id, on_progress)
    announced = "Attempt 2 started from scratch, after the smoke run's 2 steps succeeded."
    assert done.status == "succeeded" and done.attempts == 2, done.summary
    assert done.attempt_note == announced and announced in done.summary
    assert done.progress.step == FULL_STEPS and done.progress.max_steps == FULL_STEPS

    # The smoke run's notifications announce nothing; from the full job's first on, each says which attempt it is,
    # and before the full job's first step none shows the smoke run's step 2 (or its max_steps).
    smoke_notes = [n for n in notes if not n.startswith("Attempt 2")]
    full_notes = [n for n in notes if n.startswith("Attempt 2")]
    assert smoke_notes and all("Attempt" not in n for n in smoke_notes), notes
    assert full_notes and all("from scratch, after the smoke run's 2 steps succeeded" in n for n in full_notes)
    early = [p for p, *_ in seen if p.phase in PRE_STEP_PHASES]
    assert early and all(p.step is None and p.fraction is None for p in early), seen
    assert all(p.max_steps in (None, FULL_STEPS) for p, *_ in seen), seen

    # The smoke run committed checkpoints of its own; the job's last committed one is never among them.
    smoke_dir = str(tmp_path / "home" / "runs" / job_id / "smoke")
    result = service.inspect(job_id)
    assert any(c.path.startswith(smoke_dir) and c.state == "committed" for c in result.checkpoints)
    assert all(last is None or not last.path.startswith(smoke_dir) for _, _, last, _ in seen), seen
    assert any(last is None and "Last committed checkpoint" not in summary for _, _, last, summary in seen), seen
    last = result.last_committed_checkpoint
    assert last and last.path.startswith(result.attempts[1].output_dir), last
    assert f"Last committed checkpoint: {last.path}" in result.summary and smoke_dir not in result.summary
    assert result.attempt_note == announced and result.summary.splitlines()[1] == announced


def test_an_automatic_retry_after_a_preemption_is_announced_with_its_checkpoint_and_shows_its_own_steps(
    tmp_path, tiny_model, chat_dataset
):
    service = build_service(tmp_path / "home")
    job_id = service.submit(
        _spec(tiny_model, chat_dataset, hyperparameters={"max_steps": 400}), SubmitOptions(max_retries=1)
    ).job_id
    notes: list[str] = []
    seen: list[Any] = []
    taken: dict[str, int] = {}

    def on_progress(progress: float, total: float, message: str) -> None:
        notes.append(message)
        result = service.inspect(job_id)
        if not taken and _committed_step(service, job_id) >= 4 and result.progress.step:
            # The machine takes the job away (a signal jobtrail did not send): an automatic retry follows.
            taken["step"] = result.progress.step
            os.killpg(result.attempts[0].placement.pgid, signal.SIGTERM)
        elif message.startswith("Attempt 2"):
            seen.append(result)
            if ", from checkpoint-" in message and "step" in message.split("running: ")[-1]:
                service.cancel(job_id)  # resumed and trained on: the point is made, do not train 400 steps

    done = _waits_until_ended(service, job_id, on_progress)
    first, second = service.inspect(job_id).attempts
    assert first.termination_reason == "preempted" and taken, (first, notes)
    resumed = Path(second.resumed_from or "").name
    assert resumed.startswith("checkpoint-"), resumed
    at = int(resumed.split("-")[1])

    # Each notification from the retry's first on announces it: queued or starting it will resume, then it did.
    later = [n for n in notes if n.startswith("Attempt 2")]
    why = "Attempt 2 started after preempted at step "
    assert later and all(n.startswith(("Attempt 2 is ", why)) and "preempted at step" in n for n in later), notes
    assert any(f", from {resumed}." in n for n in later), later
    assert all(f"it will resume from {resumed}" in n for n in later if "will" in n), later
    # Its progress is its own: no step before it resumed, then the checkpoint's step and on (never attempt 1's).
    for result in seen:
        step = result.progress.step
        assert step is None if "will" in (result.attempt_note or "") else step is not None and step >= at, result
    assert done.attempt_note and done.attempt_note.startswith(why) and done.attempt_note.endswith(f", from {resumed}.")
    assert done.attempt_note in done.summary


def test_a_retry_after_a_cancel_is_announced_in_inspect_with_the_checkpoint_it_resumes_from(
    tmp_path, tiny_model, chat_dataset
):
    service = build_service(tmp_path / "home")
    job_id = service.submit(_spec(tiny_model, chat_dataset, hyperparameters={"max_steps": 16})).job_id
    wait_for(lambda: _committed_step(service, job_id) >= 4, 120, "a committed checkpoint")
    assert service.cancel(job_id).status == "cancelled"
    cancelled = service.inspect(job_id)
    stopped_at = cancelled.progress.step
    assert cancelled.attempt_note is None and stopped_at, cancelled.summary
    answer = service.retry(job_id)
    checkpoint = Path(answer.resume_from or "").name
    assert answer.retried and checkpoint.startswith("checkpoint-"), answer

    began = time.monotonic()
    early = service.inspect(job_id)
    note = early.attempt_note or ""
    if early.attempts[1].resumed_from is None:  # not resumed yet: it will, and its step is not attempt 1's
        assert note.startswith("Attempt 2 ") and note.endswith(f"; it will resume from {checkpoint}."), note
        assert early.progress.step is None, early.progress
    assert f"after a cancel at step {stopped_at}" in note and note in early.summary, early.summary

    done = wait_until_terminal(lambda: service.inspect(job_id), 240 - (time.monotonic() - began), "attempt 2")
    assert done.status == "succeeded" and done.progress.step == 16, done.summary
    assert done.attempt_note == f"Attempt 2 started after a cancel at step {stopped_at}, from {checkpoint}."
    assert done.last_committed_checkpoint and done.last_committed_checkpoint.path.startswith(
        done.attempts[1].output_dir
    )
