"""Nothing a local job started outlives it (issue 28 item 7): processes started in a new session leave the
job's process group, and the group's signal no longer reaches them; the supervisor tracks every descendant
instead (backends/process_tree.py). Real jobs, real processes; every wait is bounded and on a condition.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtrail.backends import process_tree
from jobtrail.backends.local import LocalBackend
from jobtrail.models import ExitRecord, LaunchRequest, Placement
from support.processes import alive
from support.waiting import wait_for

# A child in a session of its own that ignores SIGTERM: only a SIGKILL sent to it by pid ends it.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)"
# The job starts one such child directly and a second one through a middle process that exits at once (a
# daemon: its parent is gone, so it is nobody's child in the job's tree but the subreaper's), prints both
# pids, then runs until it is stopped or, given an argument, ends at once, leaving both behind.
JOB = textwrap.dedent(
    f"""\
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", {STUBBORN!r}], start_new_session=True, stdout=subprocess.PIPE)
    middle = subprocess.run(
        [sys.executable, "-c",
         "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {STUBBORN!r}], "
         "start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL); "
         "p.stdout.readline(); print(p.pid)"],
        capture_output=True, text=True, check=True,
    )
    child.stdout.readline()
    print("children", child.pid, middle.stdout.strip(), flush=True)
    if {{ended}}:
        sys.exit(0)
    time.sleep(600)
    """
)


class Runs:
    """Launches jobs under tmp_path; whatever a failed test left running is killed by pid at the end."""

    def __init__(self, backend: LocalBackend, root: Path) -> None:
        self.backend = backend
        self.root = root
        self.placements: list[Placement] = []

    def start(self, ended: bool) -> tuple[Placement, list[int]]:
        script = JOB.replace("{ended}", "True" if ended else "False")
        placement = self.backend.launch(LaunchRequest(attempt_id="job", script=script, workdir=str(self.root / "job")))
        self.placements.append(placement)
        line = wait_for(lambda: _line(self.backend, placement, "children "), 30, "the job's children")
        return placement, [int(pid) for pid in line.split()[1:]]

    def exit(self, placement: Placement, timeout: float = 15) -> ExitRecord:
        probe = wait_for(lambda: (p := self.backend.probe(placement)).phase != "running" and p, timeout, "its end")
        assert probe.phase == "exited" and probe.exit is not None, probe
        return probe.exit

    def cleanup(self) -> None:
        for placement in self.placements:
            below = process_tree.descendants(placement.pid or 0) if placement.pid else {}
            found = {**below, **process_tree.recorded(Path(placement.workdir))}
            if placement.pid and process_tree.start_time(placement.pid):
                found[placement.pid] = process_tree.start_time(placement.pid) or ""
            process_tree.send(found, signal.SIGKILL)


def _line(backend: LocalBackend, placement: Placement, prefix: str) -> str | None:
    return next((line for line in backend.read_log(placement).lines if line.startswith(prefix)), None)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    found = Runs(LocalBackend(grace_s=0.5), tmp_path)
    yield found
    found.cleanup()


def _gone(pids: list[int]) -> bool:
    return not any(alive(pid) for pid in pids)


def test_cancel_ends_the_children_a_job_started_in_new_sessions(runs: Runs) -> None:
    placement, children = runs.start(ended=False)
    assert all(alive(pid) for pid in children)
    # What makes them hard to stop: neither is in the job's session or process group any more.
    assert all(os.getsid(pid) != placement.pgid and os.getpgid(pid) != placement.pgid for pid in children)

    runs.backend.cancel(placement)
    wait_for(lambda: _gone(children), 15, "the children in their own sessions to be gone")
    record = runs.exit(placement)
    assert record.cancelled and record.signal == signal.SIGTERM
    assert not _events(placement, "warning")  # a cancel stops the job whole: nothing straggled


def test_a_job_that_ends_leaves_nothing_running_and_its_events_say_what_was_stopped(runs: Runs) -> None:
    placement, children = runs.start(ended=True)
    record = runs.exit(placement)
    assert record.exit_code == 0 and not record.cancelled
    assert _gone(children)  # exit.json is written only once they are
    [warning] = _events(placement, "warning")
    assert warning["code"] == "stray_processes"
    assert all(f"pid {pid}:" in warning["message"] for pid in children), warning
    assert "start_new_session" in warning["fix"]
    # The backend hands the event to the ledger like the job's own.
    assert any('"stray_processes"' in line for line in runs.backend.read_events(placement).lines)


def test_a_lost_attempts_children_in_new_sessions_are_stopped_from_the_record(runs: Runs) -> None:
    placement, children = runs.start(ended=False)
    workdir = Path(placement.workdir)
    wait_for(lambda: set(children) <= set(process_tree.recorded(workdir)), 10, "the supervisor to record them")
    state = json.loads((workdir / "supervisor.json").read_text())
    assert placement.pid is not None
    os.kill(placement.pid, signal.SIGKILL)  # the supervisor first, or it would stop the job itself
    wait_for(lambda: not alive(placement.pid or 0), 10, "the supervisor to die")
    os.kill(state["child_pid"], signal.SIGKILL)
    wait_for(lambda: not alive(state["child_pid"]), 10, "the job to die")
    assert all(alive(pid) for pid in children)

    assert runs.backend.probe(placement).phase == "lost"
    wait_for(lambda: _gone(children), 10, "the lost job's children to be killed")


def test_a_recorded_pid_that_now_names_another_process_is_not_signalled(tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        start = wait_for(lambda: process_tree.start_time(stranger.pid), 10, "the stranger's start time")
        # The record names its pid with another start time: the process it named is gone, the pid reused.
        assert process_tree.send({stranger.pid: str(int(start) + 1)}, signal.SIGKILL) == []
        assert stranger.poll() is None and alive(stranger.pid)
        assert process_tree.send({stranger.pid: start}, signal.SIGTERM) == [stranger.pid]
        assert stranger.wait(timeout=10) == -signal.SIGTERM
    finally:
        stranger.kill()
        stranger.wait(timeout=10)


def test_descendants_are_found_below_their_root_whatever_their_session(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        found = process_tree.descendants(parent.pid)
        assert child in found and found[child] == process_tree.start_time(child)
        assert os.getpid() not in found and parent.pid not in found
        assert set(process_tree.descendants(os.getpid())) >= {parent.pid, child}
    finally:
        with contextlib.suppress(NameError, ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait(timeout=10)


def _events(placement: Placement, kind: str) -> list[dict]:
    path = Path(placement.workdir) / "job.events"
    found = []
    for line in path.read_text().splitlines():
        event = json.loads(line[line.index("JOBTRAIL ") + len("JOBTRAIL ") :])
        if event.get("event") == kind:
            found.append(event)
    return found


def test_a_child_that_ends_by_itself_as_the_job_ends_is_no_straggler(runs: Runs) -> None:
    # It outlives the job by a moment: it ends once it sees its parent gone (the way a worker pool shuts down).
    follower = (
        "import os, time\nparent = os.getppid()\nprint(1, flush=True)\n"
        "while os.getppid() == parent:\n    time.sleep(0.02)\n"
    )
    script = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {follower!r}], start_new_session=True, stdout=subprocess.PIPE)\n"
        "p.stdout.readline()\n"  # it knows its parent: the job may end
    )
    placement = runs.backend.launch(LaunchRequest(attempt_id="job", script=script, workdir=str(runs.root / "job")))
    runs.placements.append(placement)
    record = runs.exit(placement)
    assert record.exit_code == 0
    assert _events(placement, "warning") == []
