"""No false `lost`, no double run (issue 25, item 6), with real server processes, real jobs and a real ledger
(SQLite and PostgreSQL):
- a server killed between launching a local job and recording it: the job trains to exit 0 with its checkpoints,
  and a restarted server adopts it from its workdir and records it succeeded, never `lost`;
- a second server whose clock runs 600 s ahead neither marks a fresh claim `lost` nor starts a second attempt of
  its run (claims are stamped and aged on the ledger's clock);
- a launch whose claim expired meanwhile is stopped by its launcher, so it never trains beside a retry;
- a job that reported its termination is never `lost`, even when its supervisor left no exit record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.backends.local import LocalBackend
from jobtrail.models import JobSpec, TerminationReason
from jobtrail.outcomes import classify
from jobtrail.requests import SubmitOptions
from jobtrail.service.facade import JobService
from jobtrail.service.tracker import STALE_CLAIM_S
from support.jobs import FOUR_STEP_SFT, TINY_SFT
from support.processes import kill_jobs_under
from support.waiting import wait_for, wait_until_terminal

ENDLESS = {**TINY_SFT, "max_steps": 100000, "save_steps": 100000}
# A server process that dies (os._exit, as SIGKILL would) right after the local backend started the job and
# before the tracker records where it runs.
KILLED_AFTER_LAUNCH = """
import os
from jobtrail.app import build_service
from jobtrail.backends.local import LocalBackend
launch = LocalBackend.launch
def launch_then_die(self, request):
    launch(self, request)
    os._exit(9)
LocalBackend.launch = launch_then_die
build_service().refresh()
"""
# A server whose launch is slow: it has claimed the attempt, says so, and launches once the go file appears.
SLOW_LAUNCH = """
import sys, time
from pathlib import Path
from jobtrail.app import build_service
from jobtrail.backends.local import LocalBackend
launching, go = Path(sys.argv[1]), Path(sys.argv[2])
launch = LocalBackend.launch
def slow_launch(self, request):
    launching.touch()
    deadline = time.monotonic() + 300
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return launch(self, request)
LocalBackend.launch = slow_launch
build_service().refresh()
"""


@pytest.fixture
def home(tmp_path, ledger_location, monkeypatch):
    """JOBTRAIL_HOME for every server of the test (this process's and its children), on the test's engine."""
    home = tmp_path / "home"
    monkeypatch.setenv("JOBTRAIL_HOME", str(home))
    monkeypatch.setenv("JOBTRAIL_MAX_CONCURRENT", "1")
    if isinstance(ledger_location, str):  # PostgreSQL: the servers share it as servers on several machines would
        monkeypatch.setenv("JOBTRAIL_LEDGER_URL", ledger_location)
    yield home
    kill_jobs_under(home)  # only where a test failed midway


def _queue(home: Path, spec: JobSpec, max_retries: int = 0) -> str:
    """Submit through a server that cannot start anything (no local slot): every start is another server's."""
    ledger = build_service(home).ledger  # the test's engine
    queuer = JobService(ledger, {"local": LocalBackend(max_concurrent=0)}, home, sys.executable)
    return queuer.submit(spec, SubmitOptions(max_retries=max_retries)).job_id


def _server(code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code, *args], env=dict(os.environ))


def test_a_job_whose_server_died_between_launch_and_record_is_adopted_with_its_checkpoints(
    home, tiny_model, chat_dataset
):
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=FOUR_STEP_SFT)
    job_id = _queue(home, spec)
    assert _server(KILLED_AFTER_LAUNCH).wait(timeout=120) == 9
    restarted = build_service(home)
    attempt = restarted.ledger.get_attempt(f"{job_id}/1")
    assert attempt.status.value == "starting" and attempt.placement is None  # claimed, never recorded
    exit_json = restarted.context.workdir(attempt) / "exit.json"
    wait_for(exit_json.exists, 300, "the unrecorded job to run to its end")
    assert json.loads(exit_json.read_text())["exit_code"] == 0
    # The claim ages past STALE_CLAIM_S (by the ledger's clock) before a server looks again.
    restarted.ledger.update_attempt(attempt.attempt_id, started_at=restarted.ledger.now() - STALE_CLAIM_S - 1)
    restarted.refresh()
    ended = restarted.inspect(job_id)
    assert ended.status == "succeeded" and ended.termination_reason == "succeeded", ended.termination_message
    adopted = restarted.ledger.get_attempt(attempt.attempt_id)
    assert adopted.exit_code == 0 and adopted.placement is not None
    assert adopted.placement.workdir == str(restarted.context.workdir(attempt))
    steps = sorted(c.step for c in restarted.ledger.committed_checkpoints(job_id))
    assert steps and steps[-1] == FOUR_STEP_SFT["max_steps"], steps
    assert len(restarted.ledger.attempts(job_id)) == 1


def test_a_server_whose_clock_runs_600_s_ahead_neither_loses_a_fresh_claim_nor_starts_a_second_attempt(
    home, tmp_path, tiny_model, chat_dataset, monkeypatch
):
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=ENDLESS)
    # max_retries: a claim wrongly called lost would be retried at once, and the retry started beside it.
    job_id = _queue(home, spec, max_retries=2)
    launching, go = tmp_path / "launching", tmp_path / "go"
    launcher = _server(SLOW_LAUNCH, str(launching), str(go))
    try:
        wait_for(launching.exists, 120, "the first server to claim the attempt and start launching it")
        real = time.time
        with monkeypatch.context() as clock:
            clock.setattr(time, "time", lambda: real() + 600.0)  # this process, the second server, only
            skewed = build_service(home)
            for _ in range(3):
                skewed.refresh()
            claim = skewed.ledger.get_attempt(f"{job_id}/1")
            assert claim.status.value == "starting" and claim.termination_reason is None, claim.termination_message
            assert len(skewed.ledger.attempts(job_id)) == 1
            go.touch()
            assert launcher.wait(timeout=120) == 0
            skewed.refresh()
            running = skewed.ledger.get_attempt(f"{job_id}/1")
            assert running.status.value in ("starting", "running") and running.placement is not None
            assert len(skewed.ledger.attempts(job_id)) == 1
    finally:
        go.touch()
        launcher.wait(timeout=120)
    server = build_service(home)
    server.cancel(job_id)
    ended = wait_until_terminal(lambda: _refreshed(server, job_id), 60, "the job to stop")
    assert ended.termination_reason == "cancelled" and len(ended.attempts) == 1


def test_a_launch_whose_claim_expired_meanwhile_is_stopped_by_its_launcher(home, tmp_path, tiny_model, chat_dataset):
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=ENDLESS)
    job_id = _queue(home, spec)
    launching, go = tmp_path / "launching", tmp_path / "go"
    launcher = _server(SLOW_LAUNCH, str(launching), str(go))
    try:
        wait_for(launching.exists, 120, "the first server to claim the attempt and start launching it")
        other = build_service(home)
        other.ledger.update_attempt(f"{job_id}/1", started_at=other.ledger.now() - STALE_CLAIM_S - 1)
        other.refresh()  # nothing in its workdir yet: the claim ends lost, and its slot is free for a retry
        assert other.inspect(job_id).termination_reason == "lost"
    finally:
        go.touch()
        assert launcher.wait(timeout=120) == 0
    lost = other.ledger.get_attempt(f"{job_id}/1")
    assert lost.termination_reason is TerminationReason.LOST and lost.placement is None  # never revived
    exit_json = other.context.workdir(lost) / "exit.json"
    wait_for(exit_json.exists, 60, "the launcher to stop the job it launched too late")
    assert json.loads(exit_json.read_text())["cancelled"] is True


def test_a_job_that_reported_its_termination_is_never_lost():
    succeeded = {"event": "termination", "reason": "succeeded"}
    assert classify.classify(None, succeeded, [], lost=True).reason is TerminationReason.SUCCEEDED
    oom = {"event": "termination", "reason": "oom", "message": "CUDA out of memory"}
    assert classify.classify(None, oom, [], lost=True).reason is TerminationReason.OOM
    assert classify.classify(None, None, [], lost=True).reason is TerminationReason.LOST


def _refreshed(service, job_id):
    service.refresh()
    return service.inspect(job_id)
