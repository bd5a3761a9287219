"""The embedded local runner: every attempt runs under a detached supervisor process.

The server never waits on a job. `launch` starts the supervisor (supervisor.py) and returns;
`probe`, `read_log` and `cancel` work only from the files the supervisor keeps in the
attempt's workdir and from the process table, so a restarted server (a new process with a
new LocalBackend) picks every attempt up where it was.

Pids outlive the processes they named, so before this module signals or trusts a pid it
checks that the process still points at the attempt's workdir (its argv or its cwd).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from jobtrail.backends import job_env, joblog, logpump, process_tree, supervisor as sv
from jobtrail.backends.job_env import OUTPUT_DIR_ENV as OUTPUT_DIR_ENV  # where tests have found it
from jobtrail.backends.joblog import MAX_LOG_CHUNK as MAX_LOG_CHUNK  # where tests and callers have found it
from jobtrail.backends.registry import LOCAL
from jobtrail.errors import BackendError, InvalidRequestError
from jobtrail.models import ExitRecord, LaunchRequest, LogChunk, Placement, Probe
from jobtrail.util.files import private_dir, private_open, write_private

# A supervisor normally writes its state file within a fraction of a second; this only
# bounds how long launch waits on a machine that is badly overloaded.
STATE_WAIT_S = 15.0
SUPERVISOR_LOG = "supervisor.log"
_PROC = Path("/proc")


class LocalBackend:
    """Runs attempts as processes on this machine; see the module docstring."""

    traits = LOCAL
    name = LOCAL.name

    def __init__(
        self,
        python: str = sys.executable,
        max_concurrent: int = 1,
        grace_s: float = 10.0,
        host: str | None = None,
        log_max_bytes: int = logpump.DEFAULT_MAX_BYTES,
        job_env_pass: tuple[str, ...] = (),
    ) -> None:
        self.python = python
        # Names of the server's variables a job gets beyond job_env.RULES (JOBTRAIL_JOB_ENV_PASS).
        self.job_env_pass = job_env_pass
        # job.log's cap (JOBTRAIL_LOG_MAX_BYTES): head and rolling tail; events are kept apart, uncapped.
        self.log_max_bytes = log_max_bytes
        # Enforced by the service's queue, on this host, not here.
        self.max_concurrent: int | None = max_concurrent
        self.grace_s = grace_s
        # This machine as the ledger names it (JOBTRAIL_HOST_ID, else its hostname): servers on several machines
        # share a ledger, and the pids and files of an attempt mean something on its own host only.
        self.host = host or socket.gethostname()

    def launch(self, request: LaunchRequest) -> Placement:
        python = self._resolve_python()
        workdir = _prepare_workdir(request.workdir, request.script)
        # Secrets travel only here: the environment is the one channel that touches no file (job_env.py).
        env = job_env.local_env(request, os.environ, self.job_env_pass)
        argv = [sys.executable, "-I", sv.__file__, "--workdir", str(workdir), "--python", python]
        argv += ["--grace", str(self.grace_s), "--log-max-bytes", str(self.log_max_bytes)]
        if request.secrets:  # names only: the supervisor redacts their values from job.log
            argv += ["--redact-env", ",".join(sorted(request.secrets))]
        if request.timeout_s:
            argv += ["--timeout", str(request.timeout_s)]
        try:
            with private_open(workdir / SUPERVISOR_LOG, "ab") as log:
                proc = subprocess.Popen(
                    argv,
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            raise BackendError(
                f"Could not start the local supervisor: {exc}", fix="Check that the server's Python can run."
            ) from exc
        try:
            state = _await_state(workdir, proc)
        finally:
            # Reaps the supervisor when it ends, so finished attempts leave no zombies here.
            threading.Thread(target=proc.wait, name=f"jobtrail-reap-{proc.pid}", daemon=True).start()
        return Placement(
            backend=self.name,
            host=self.host,
            pid=proc.pid,
            pgid=state.get("child_pgid"),
            workdir=str(workdir),
            started_at=state.get("started_at", time.time()),
        )

    def probe(self, placement: Placement) -> Probe:
        workdir = Path(placement.workdir)
        record = _read_exit(workdir)
        if record is not None:
            return Probe(phase="exited", exit=record)
        if placement.host != self.host:
            # Its pids mean nothing on this machine, and it left no exit record we can see.
            return Probe(phase="lost")
        if placement.pid is not None and _supervisor_alive(placement.pid, workdir):
            return Probe(phase="running")
        # The supervisor may have written exit.json and ended between the two looks.
        record = _read_exit(workdir)
        if record is not None:
            return Probe(phase="exited", exit=record)
        # Nobody supervises what is left of the job: stop it, so nothing runs untracked.
        # Killing mid-write is safe, because resuming reads only committed checkpoints.
        _stop_leftovers(placement, signal.SIGKILL)
        return Probe(phase="lost")

    def read_log(self, placement: Placement, offset: int = 0, max_lines: int | None = None) -> LogChunk:
        """Cursors are positions in all the job printed; past the cap, one in the dropped middle reads the marker."""
        if offset < 0:
            raise InvalidRequestError(
                f"Log offset {offset} is negative.", fix="Pass 0, or the offset a previous read returned."
            )
        return joblog.read(Path(placement.workdir), offset, max_lines, _finished(placement))

    def read_events(self, placement: Placement, offset: int = 0) -> LogChunk:
        """The event lines from job.events, never capped (offsets are its bytes)."""
        return joblog.read_events(Path(placement.workdir), offset, _finished(placement))

    def read_tail(self, placement: Placement, count: int) -> LogChunk:
        return joblog.tail(Path(placement.workdir), count, _finished(placement))

    def cancel(self, placement: Placement) -> None:
        workdir = Path(placement.workdir)
        if (workdir / sv.EXIT).exists():
            return
        if placement.host != self.host:
            raise BackendError(
                f"This attempt runs on host {placement.host!r}, not here.",
                fix=f"Cancel it from a jobtrail server on {placement.host}.",
            )
        _mark_cancel(workdir)
        if placement.pid is not None and _supervisor_alive(placement.pid, workdir):
            try:
                os.kill(placement.pid, signal.SIGTERM)  # the supervisor escalates to SIGKILL itself
                return
            except ProcessLookupError:
                pass
        # No supervisor to escalate for us; the next probe (which reports it lost) kills
        # what is left too, should this process end before the timer fires.
        _stop_leftovers(placement, signal.SIGTERM)
        timer = threading.Timer(self.grace_s, _stop_leftovers, (placement, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def find(self, labels: dict[str, str], workdir: str, secret_sources: list[str]) -> Placement | None:
        """A launch whose record was lost (its server died between `launch` and the ledger write), found by what
        its supervisor left in the attempt's own workdir: supervisor.json names the supervisor and the job's
        group, exit.json says how it ended. The workdir is the attempt's alone (runs/<job_id>/attempt-<n>/, and
        _prepare_workdir refuses a second launch into one that holds these files), so they are this attempt's.
        None: nothing was started there (the claimant died before launching). Labels play no part locally."""
        path = Path(workdir).expanduser().resolve()
        try:
            state: dict[str, Any] = json.loads((path / sv.STATE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            state = {}  # no job started; an exit.json alone says why it could not
        except (OSError, ValueError) as exc:  # written atomically: unreadable means damaged, not half-written
            raise BackendError(f"Cannot read {path / sv.STATE}: {exc}", fix="Treat the attempt as lost.") from exc
        record = _read_exit(path)
        if not state and record is None:
            return None
        started = state.get("started_at") or (record.ended_at if record else time.time())
        return Placement(
            backend=self.name,
            host=self.host,
            pid=state.get("supervisor_pid"),
            pgid=state.get("child_pgid"),
            workdir=str(path),
            started_at=started,
        )

    def _resolve_python(self) -> str:
        found = shutil.which(self.python)
        if found is None:
            raise BackendError(
                f"The job interpreter {self.python!r} does not exist or is not executable.",
                fix="Point the local backend at an existing Python (JOBTRAIL_PYTHON), "
                "e.g. the output of `command -v python3`, or unset it to use the server's own.",
            )
        # Absolute, but not resolved: a venv's python is a symlink, and resolving it would
        # run the job outside the venv.
        return os.path.abspath(found)


# --- workdir files ----------------------------------------------------------------------


def _prepare_workdir(raw: str, script: str) -> Path:
    """Create the workdir (private, like everything under jobtrail's home) and write the job's script into it."""
    workdir = Path(raw).expanduser().resolve()
    try:
        private_dir(workdir)
        leftovers = [name for name in (sv.STATE, sv.EXIT, sv.LOG, logpump.EVENTS) if (workdir / name).exists()]
        if not leftovers:
            write_private(workdir / sv.SCRIPT, script)
    except OSError as exc:
        raise BackendError(
            f"Cannot prepare the attempt's workdir {workdir}: {exc.strerror or exc}",
            fix="Point JOBTRAIL_HOME at a writable directory with free space.",
            reason="disk_full" if exc.errno in logpump.FULL_ERRNOS else "config_error",  # a full disk is retried
        ) from exc
    if leftovers:
        # Another attempt's records would be read as this one's.
        raise BackendError(
            f"The workdir {workdir} already holds an attempt ({', '.join(leftovers)}).",
            fix="Give every attempt a fresh, empty workdir.",
        )
    return workdir


def _await_state(workdir: Path, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The supervisor's state file (empty if the job could not even start)."""
    deadline = time.monotonic() + STATE_WAIT_S
    while time.monotonic() < deadline:
        if (workdir / sv.STATE).exists():
            state: dict[str, Any] = json.loads((workdir / sv.STATE).read_text(encoding="utf-8"))
            return state
        if (workdir / sv.EXIT).exists():
            return {}  # it could not start the job; exit.json and job.log say why
        if proc.poll() is not None:
            raise BackendError(
                f"The local supervisor ended before starting the job: {_tail(workdir / SUPERVISOR_LOG)}",
                fix=f"Read {workdir / SUPERVISOR_LOG}; report it as a jobtrail bug if it is not your setup.",
            )
        time.sleep(0.01)
    proc.terminate()  # it stops the job too, should the job have started after all
    raise BackendError(
        f"The local supervisor did not start the job within {STATE_WAIT_S:.0f} s.",
        fix="The machine may be overloaded; retry when it is less busy.",
    )


def _read_exit(workdir: Path) -> ExitRecord | None:
    path = workdir / sv.EXIT
    try:
        return ExitRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        raise BackendError(
            f"The exit record {path} is damaged: {exc}", fix="Treat the attempt as lost and retry it."
        ) from exc


def _mark_cancel(workdir: Path) -> None:
    # The marker only tells a cancel from a preemption; failing to write it must not stop
    # the cancel itself.
    with contextlib.suppress(OSError):
        write_private(workdir / sv.CANCEL_MARKER, f"{time.time()}\n")


def _finished(placement: Placement) -> bool:
    # Looked at before reading: once exit.json exists nothing writes to the log any more (the supervisor
    # writes it after the pump is done), so a trailing line without a newline is final, not half-written.
    return (Path(placement.workdir) / sv.EXIT).exists()


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:].strip() or "(no output)"
    except OSError:
        return "(no output)"


# --- processes --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    pid: int
    pgid: int
    zombie: bool
    argv: tuple[str, ...]
    cwd: str | None  # None where the platform does not tell


def _supervisor_alive(pid: int, workdir: Path) -> bool:
    proc = _process(pid)
    return proc is not None and not proc.zombie and str(workdir) in proc.argv


def _stop_leftovers(placement: Placement, signum: int) -> None:
    """What a supervisor that is gone left running: the job's group, and every process it last recorded
    (process_tree.py), those in a session of their own included; each only if it is still the one recorded."""
    _signal_group(placement, signum)
    process_tree.send(process_tree.recorded(Path(placement.workdir)), signum)


def _signal_group(placement: Placement, signum: int) -> None:
    """Signal the job's process group, if a live member still shows it belongs to the attempt."""
    if placement.pgid is None:
        return
    workdir = Path(placement.workdir)
    script = str(workdir / sv.SCRIPT)
    members = [p for p in _processes() if p.pgid == placement.pgid and not p.zombie]
    if any(script in p.argv or p.cwd == str(workdir) for p in members):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(placement.pgid, signum)


def _process(pid: int) -> _Proc | None:
    if _PROC.is_dir():
        return _proc_entry(_PROC / str(pid))
    return next((p for p in _ps() if p.pid == pid), None)


def _processes() -> Iterable[_Proc]:
    if not _PROC.is_dir():
        return _ps()
    entries = (_proc_entry(d) for d in _PROC.iterdir() if d.name.isdigit())
    return [p for p in entries if p is not None]


def _proc_entry(base: Path) -> _Proc | None:
    try:
        stat = (base / "stat").read_text()
        raw_argv = (base / "cmdline").read_bytes()
    except OSError:
        return None
    try:
        cwd: str | None = os.readlink(base / "cwd")
    except OSError:
        cwd = None
    # The command name in parentheses may itself hold spaces and parentheses.
    state, _ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
    argv = tuple(a.decode(errors="replace") for a in raw_argv.split(b"\0")[:-1])
    return _Proc(pid=int(base.name), pgid=int(pgrp), zombie=state == "Z", argv=argv, cwd=cwd)


def _ps() -> list[_Proc]:
    """Fallback without /proc (macOS): argv is split on spaces, so paths with spaces won't match."""
    try:
        out = subprocess.run(
            ["ps", "-A", "-o", "pid=,pgid=,stat=,command="], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    procs = []
    for line in out.splitlines():
        fields = line.split(None, 3)
        if len(fields) == 4:
            pid, pgid, stat, command = fields
            procs.append(_Proc(int(pid), int(pgid), stat.startswith("Z"), tuple(command.split()), None))
    return procs
