"""Nothing a job started outlives it, through the service (issue 28 item 7): `cancel` ends a process the job
started in a new session, and a job that ends leaving one running has it stopped, which `inspect` shows as a
`stray_processes` warning. The job interpreter is a stand-in (the local backend's python) that starts such a
child and then ends, or runs until cancelled: real processes, no training.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from jobtrail.backends.local import LocalBackend
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec
from jobtrail.results.jobs import InspectResult
from jobtrail.service.facade import JobService
from support.jobs import TINY_SFT
from support.processes import alive
from support.waiting import wait_for, wait_until_terminal

# argv[1] is the job's script (ignored); the child's pid goes to the file named by CHILDREN, one line each.
JOB = """\
import os, subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", "import time; print(1, flush=True); time.sleep(600)"],
    start_new_session=True, stdout=subprocess.PIPE,
)
child.stdout.readline()
with open({children!r}, "a") as out:
    out.write(f"{{child.pid}}\\n")
if os.path.exists({linger!r}):
    time.sleep(600)
"""


def test_cancel_and_the_jobs_end_stop_what_it_started_in_a_new_session(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path, monkeypatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("JOBTRAIL_HOME", str(home))
    children, linger = tmp_path / "children.txt", tmp_path / "linger"
    code = tmp_path / "job.py"
    code.write_text(JOB.format(children=str(children), linger=str(linger)))
    stand_in = tmp_path / "job-python"
    stand_in.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{code}"\n')
    stand_in.chmod(0o755)
    service = JobService(
        ledger=Ledger(home / "ledger.sqlite"),
        backends={"local": LocalBackend(python=str(stand_in), max_concurrent=1, grace_s=0.5)},
        home=home,
        job_python=sys.executable,
    )
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=TINY_SFT)
    started: list[int] = []

    def child(n: int) -> int:
        lines = wait_for(lambda: len(children.read_text().split()) >= n if children.exists() else None, 30, "a child")
        assert lines
        started[:] = [int(pid) for pid in children.read_text().split()]
        return started[n - 1]

    try:
        ended = service.submit(spec).job_id
        straggler = child(1)
        done = wait_until_terminal(lambda: _refreshed(service, ended), 60, "the job that leaves a child behind")
        assert not alive(straggler)
        [warning] = [w for w in done.warnings if w["code"] == "stray_processes"]
        assert f"pid {straggler}:" in warning["message"] and "start_new_session" in warning["fix"], warning

        linger.touch()
        running = service.submit(spec).job_id
        lingering = child(2)
        wait_for(lambda: _refreshed(service, running).status == "running", 30, "the second job to run")
        assert os.getsid(lingering) == lingering  # a session of its own: the job's group signal misses it
        service.cancel(running)
        wait_for(lambda: not alive(lingering), 15, "the cancelled job's child in its own session to be gone")
        cancelled = wait_until_terminal(lambda: _refreshed(service, running), 30, "the cancel to be recorded")
        assert cancelled.status == "cancelled" and not cancelled.warnings, cancelled
    finally:
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _refreshed(service: JobService, job_id: str) -> InspectResult:
    service.refresh()
    return service.inspect(job_id)
