"""Launch re-checks what preflight judged (issue 28 item 4): a queued job's output directory swapped for a
symlink into a hidden directory of the user's home, after preflight passed it and before the job starts, is
refused at launch: the attempt ends config_error saying what changed, and nothing is written there.

The jobs are queued by a server with no local slot, then started by one with a slot whose job interpreter is a
stand-in (JOBTRAIL_PYTHON-style): it writes a file into the output it was given, as training would, in
milliseconds. A job whose directory was left alone shows the stand-in does write there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jobtrail.backends.local import LocalBackend
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec
from jobtrail.preflight.outputs import claim_output, read_owner
from jobtrail.service.facade import JobService
from support.jobs import TINY_SFT
from support.waiting import wait_for

ENDED = ("succeeded", "failed", "cancelled")


def _service(home: Path, python: str, slots: int) -> JobService:
    return JobService(
        ledger=Ledger(home / "ledger.sqlite"),
        backends={"local": LocalBackend(python=python, max_concurrent=slots, grace_s=0.5)},
        home=home,
        job_python=sys.executable,
    )


def test_an_output_swapped_for_a_symlink_before_launch_is_refused_and_never_written(
    tmp_path, tiny_model, chat_dataset, monkeypatch
):
    fake_home = tmp_path / "user"
    secrets = fake_home / ".config" / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "token.json").write_text('{"token": "hf_fake"}')
    monkeypatch.setenv("HOME", str(fake_home))
    home = tmp_path / "jobtrail"
    monkeypatch.setenv("JOBTRAIL_HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    outputs = {name: work / name / "out" for name in ("kept", "swapped", "parent_swapped")}

    queuer = _service(home, sys.executable, slots=0)
    jobs = {}
    for name, output in outputs.items():
        spec = JobSpec(
            method="sft", model=str(tiny_model), dataset=str(chat_dataset), output=str(output), hyperparameters=TINY_SFT
        )
        result = queuer.submit(spec)
        assert result.status == "queued", result
        jobs[name] = result.job_id
    assert not any(output.exists() for output in outputs.values())

    # After preflight, before launch: the directory itself, and a folder above another one, become symlinks.
    outputs["swapped"].parent.mkdir()
    outputs["swapped"].symlink_to(secrets)
    hidden_parent = fake_home / ".ssh"
    hidden_parent.mkdir()
    outputs["parent_swapped"].parent.symlink_to(hidden_parent)
    before = {p: sorted(os.listdir(p)) for p in (secrets, hidden_parent)}

    stand_in = tmp_path / "job-python"
    stand_in.write_text('#!/bin/sh\nprintf weights > "$JOBTRAIL_OUTPUT_DIR/model.bin"\n')
    stand_in.chmod(0o755)
    starter = _service(home, str(stand_in), slots=1)

    def all_ended() -> bool:
        starter.refresh()
        return all(starter.inspect(job).status in ENDED for job in jobs.values())

    wait_for(all_ended, 60, "every queued job to be launched or refused")

    kept = outputs["kept"]
    assert (kept / "model.bin").read_text() == "weights" and read_owner(kept) == jobs["kept"]
    for name, link in (("swapped", outputs["swapped"]), ("parent_swapped", outputs["parent_swapped"].parent)):
        attempt = starter.inspect(jobs[name]).attempts[-1]
        assert (attempt.status, attempt.termination_reason) == ("failed", "config_error"), attempt
        message = attempt.termination_message or ""
        assert f"{link} is now a symbolic link" in message and "inside the hidden directory" in message, message
        assert "nothing was written" in message and "Put a real directory back" in message, message
    assert {p: sorted(os.listdir(p)) for p in (secrets, hidden_parent)} == before  # no marker, no model, nothing


def test_the_claim_itself_never_follows_a_symlink_put_in_after_the_recheck(tmp_path):
    """The window between output_moved's look and the claim: claim_output opens each folder without following a
    symlink, so one swapped in there is refused too, and the place it points to stays untouched."""
    elsewhere = tmp_path / ".hidden"
    elsewhere.mkdir()
    planned = tmp_path / "a" / "b" / "out"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").symlink_to(elsewhere)
    problem = claim_output(planned, "jt-aaaaaaaa") or ""
    assert f"{tmp_path / 'a' / 'b'} is a symbolic link now" in problem, problem
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "out").symlink_to(elsewhere)
    assert "is a symbolic link now" in (claim_output(tmp_path / "c" / "out", "jt-aaaaaaaa") or "")
    assert os.listdir(elsewhere) == []
    fresh = tmp_path / "new" / "deep" / "out"
    assert claim_output(fresh, "jt-aaaaaaaa") is None and read_owner(fresh) == "jt-aaaaaaaa"
    assert (fresh.stat().st_mode & 0o777, (tmp_path / "new").stat().st_mode & 0o777) == (0o700, 0o700)
