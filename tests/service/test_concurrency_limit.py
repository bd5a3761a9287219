"""The dispatcher's claim. JOBTRAIL_MAX_CONCURRENT holds across processes: six processes sharing one ledger
dispatch the same queue of twenty jobs at once, racing for every slot that frees up, and never more than the
limit run at the same time (the count and the claim are one ledger transaction).

The race is in the dispatcher, not in training, so the jobs are held by a stand-in interpreter
(JOBTRAIL_PYTHON: a shell script that keeps its slot for a moment): twenty real launches through the real
supervisor in seconds, where training would take minutes. With the earlier count-then-claim dispatcher
this test saw up to six jobs running at once under a limit of one. A claim whose dispatcher died before
launching frees its slot, and a job cancelled while it was being launched is stopped once it has a process.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from jobtrail.backends.local import LocalBackend
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec
from jobtrail.service.facade import JobService
from support.jobs import TINY_SFT
from support.waiting import wait_for

PROCESSES = 6
JOBS = 20
LIMIT = 1
HOLD_S = 0.3  # how long the stand-in keeps its slot
# Each dispatcher says it is ready, waits for the go file, then refreshes (dispatching) like a server's
# poller, only faster, until the stop file appears.
DISPATCHER = """
import sys, time
from pathlib import Path
go, stop, ready = (Path(arg) for arg in sys.argv[1:4])
from jobtrail.app import build_service
service = build_service()
ready.touch()
deadline = time.monotonic() + 600
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
while not stop.exists() and time.monotonic() < deadline:
    service.refresh()
    time.sleep(0.01)
"""


def _rows(ledger: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(ledger, timeout=30) as conn:
        return conn.execute(sql).fetchall()


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of [start, end) spans that overlap."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_six_processes_dispatching_at_once_never_exceed_the_limit(tmp_path, tiny_model, chat_dataset, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("JOBTRAIL_HOME", str(home))
    # This process only queues: its local backend has no slot, so every start is a dispatcher's.
    queuer = JobService(
        ledger=Ledger(home / "ledger.sqlite"),
        backends={"local": LocalBackend(python=sys.executable, max_concurrent=0)},
        home=home,
        job_python=sys.executable,
    )
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=TINY_SFT)
    jobs = [queuer.submit(spec).job_id for _ in range(JOBS)]
    assert {queuer.inspect(job).status for job in jobs} == {"queued"}

    stand_in = tmp_path / "hold-slot"
    stand_in.write_text(f"#!/bin/sh\nsleep {HOLD_S}\n")
    stand_in.chmod(0o755)
    env = {**os.environ, "JOBTRAIL_MAX_CONCURRENT": str(LIMIT), "JOBTRAIL_PYTHON": str(stand_in)}
    go, stop = tmp_path / "go", tmp_path / "stop"
    dispatchers = [
        subprocess.Popen([sys.executable, "-c", DISPATCHER, str(go), str(stop), str(tmp_path / f"ready-{n}")], env=env)
        for n in range(PROCESSES)
    ]
    ledger = home / "ledger.sqlite"
    seen_at_once = 0

    def all_ended() -> bool:
        nonlocal seen_at_once
        live = _rows(ledger, "SELECT COUNT(*) FROM attempts WHERE status IN ('starting', 'running')")[0][0]
        seen_at_once = max(seen_at_once, live)
        waiting = _rows(ledger, "SELECT COUNT(*) FROM attempts WHERE status = 'queued'")[0][0]
        return live == 0 and waiting == 0

    try:
        wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == PROCESSES, 120, "the dispatchers to start")
        go.touch()  # all six released together
        wait_for(all_ended, 240, "every job to be dispatched and to end", interval=0.02)
    finally:
        stop.touch()
        for proc in dispatchers:
            proc.wait(timeout=60)
    spans = _rows(ledger, "SELECT started_at, ended_at FROM attempts")
    assert len(spans) == JOBS and all(start and end for start, end in spans)  # every job was launched, and ended
    assert seen_at_once <= LIMIT
    assert _most_at_once(spans) == LIMIT, sorted(spans)
    ended = {queuer.inspect(job).status for job in jobs}
    assert ended == {"succeeded"}, ended


def test_a_claim_whose_dispatcher_died_frees_its_slot_and_a_cancel_during_launch_holds(
    tmp_path, tiny_model, chat_dataset, monkeypatch
):
    from jobtrail.app import build_service
    from jobtrail.service.tracker import STALE_CLAIM_S

    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    queuer = JobService(
        ledger=Ledger(tmp_path / "home" / "ledger.sqlite"),
        backends={"local": LocalBackend(python=sys.executable, max_concurrent=0)},
        home=tmp_path / "home",
        job_python=sys.executable,
    )
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=TINY_SFT)
    endless = spec.model_copy(update={"hyperparameters": {**TINY_SFT, "max_steps": 100000, "save_steps": 100000}})
    orphan, cancelled = queuer.submit(spec).job_id, queuer.submit(endless).job_id
    ledger = queuer.context.ledger
    # A dispatcher claimed the first attempt, then died before launching it: no placement, ever.
    assert ledger.claim_slot(f"{orphan}/1", "local", 1) == "claimed"
    ledger.update_attempt(f"{orphan}/1", started_at=time.time() - STALE_CLAIM_S - 1)
    # The second is cancelled while it is being launched: the flag is there when its placement is recorded.
    ledger.update_attempt(f"{cancelled}/1", cancel_requested_at=time.time())

    service = build_service()  # one slot (JOBTRAIL_MAX_CONCURRENT unset)
    service.refresh()
    lost = service.inspect(orphan)
    assert lost.status == "failed" and lost.termination_reason == "lost", lost
    try:
        ended = wait_for(lambda: _ended(service, cancelled), 60, "the job cancelled during its launch to stop")
    finally:
        service.cancel(cancelled)
    assert ended.termination_reason == "cancelled", ended


def _ended(service, job_id):
    service.refresh()
    result = service.inspect(job_id)
    return result if result.status in ("succeeded", "failed", "cancelled") else None
