"""A full disk through the service: the job's receipt reads disk_full with the path, and a retry is taken once the
room is back, resuming from the last committed checkpoint.

The kernel's own ENOSPC without root: the file the job writes next is a symlink to /dev/full. The job is a real
TRL job on the tiny model, started by the local backend."""

from __future__ import annotations

from pathlib import Path

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from support.jobs import TINY_SFT
from support.waiting import wait_until_terminal


def test_a_full_output_disk_ends_disk_full_and_is_retried_once_space_is_back(tmp_path, tiny_model, chat_dataset):
    service = build_service(tmp_path / "home")
    hyper = {**TINY_SFT, "max_steps": 6, "save_steps": 2}
    job_id = service.submit(
        JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=hyper)
    ).job_id
    # Placed while the job imports (seconds before its first step); its ending below shows it was in time.
    blocked = tmp_path / "home" / "runs" / job_id / "output" / "checkpoint-4"
    blocked.mkdir(parents=True)
    (blocked / "trainer_state.json").symlink_to("/dev/full")

    ended = wait_until_terminal(lambda: service.inspect(job_id), 240, "the job to fail")
    assert ended.termination_reason == "disk_full", ended.termination_message
    assert ended.termination_message.startswith(f"No space left on device writing {blocked} (")
    assert "a checkpoint of this run takes" in (ended.termination_message or "")

    (blocked / "trainer_state.json").unlink()  # the space is back
    retried = service.retry(job_id)
    assert retried.retried and retried.message == "Retrying after disk_full (1 of 1).", retried
    assert retried.resume_from and Path(retried.resume_from).name == "checkpoint-2"
    done = wait_until_terminal(lambda: service.inspect(job_id), 240, "the retry to finish", attempts=2)
    assert done.status == "succeeded", done.termination_message
