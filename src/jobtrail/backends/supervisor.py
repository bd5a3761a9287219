"""The local runner's supervisor: one detached process per attempt, standard library only.

It runs `python <workdir>/script.py` in a process group of its own, pumps the job's output into
job.log (capped) and job.events (its event lines, never capped; see logpump.py), enforces the
timeout, turns its own SIGTERM (a cancel) into SIGTERM-then-SIGKILL for the job's whole group and
every process below it (process_tree.py: one started in a new session leaves the group, not the tree),
stops what a job that ended on its own left running (a `stray_processes` warning in job.events says
so), and always leaves exit.json behind. Every fact the server needs lives in files in the workdir,
so any later server process can pick the attempt up again.

It is started by path with `python -I`, so it runs even where jobtrail is not importable and
nothing in the job's environment or workdir can shadow a module it imports. Secrets reach the
job only through the environment this process inherits; argv carries no secret, only the
names of the variables holding them (--redact-env): when there are any, every secret value, in
every form it can be printed in, is replaced before a byte reaches job.log or job.events
(util/redaction.py, loaded by path).

Everything the supervisor and the job create is private to the user (umask 077): the workdir
and the job's outputs sit under $JOBTRAIL_HOME, which nobody else may read.

Files (all in the workdir):
    job.log           the job's stdout and stderr: head, marker, tail once over the cap (logpump.py)
    job.events        every line of it that carries a JOBTRAIL event, never capped
    job.log.layout    where job.log's head ends and its tail resumes, once it reached the cap
    job.log.part-N    the rolling tail while the job runs (joined into job.log at its end)
    supervisor.json   {supervisor_pid, child_pid, child_pgid, started_at}
    processes.json    the job's live processes with their start times (process_tree.py)
    exit.json         {exit_code, signal, timed_out, cancelled, ended_at}
    cancel-requested  written by the server before it sends SIGTERM; tells a cancel from a
                      SIGTERM somebody else sent (which the service reads as preemption)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

LOG = "job.log"
STATE = "supervisor.json"
EXIT = "exit.json"
CANCEL_MARKER = "cancel-requested"
SCRIPT = "script.py"

# How often the loop looks at the job: bounds the delay of a cancel, a timeout or an exit.
POLL_S = 0.1
# After SIGKILL, how long to wait for the group to vanish before writing exit.json anyway:
# a process stuck in the kernel, or a zombie nobody reaps, must not keep the attempt open.
KILL_WAIT_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36
PRIVATE_FILE = 0o600
PRIVATE_UMASK = 0o077  # files 0600, folders 0700, for this process and the job
# After the job ends on its own, how long what it started may take to end by itself before it is stopped (and the
# job's events say so): a worker pool shutting down as its parent exits is no straggler.
SETTLE_S = 1.0
# How long the pump may take, after the job's group is gone, to drain the pipe and join the log's tail into
# job.log (tens of MB at most): exit.json is written only after, so whoever sees it ended finds every event
# in job.events. Bounded, because a process that left the job's group may hold the pipe open for ever.
PUMP_WAIT_S = 60.0
# Signal dispositions the job must start with, whatever this process inherited or set.
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Readers see the old file or the whole new one, even across a crash or power loss."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE), "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class _StopRequest:
    """Set from the signal handler; acted on by the main loop."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True


@dataclass
class _Outcome:
    status: int | None = None  # the job's raw wait status, once reaped
    timed_out: bool = False
    stopped_by_request: bool = False
    # What a job that ended on its own left running, stopped then: pid → command line.
    stragglers: dict[int, str] = field(default_factory=dict)


def _become_subreaper() -> None:
    # Orphaned grandchildren then come to us, so we can reap them and know when the job's
    # group is really empty (PID 1 in a container often never reaps them). Linux only;
    # elsewhere the bounded wait after SIGKILL covers for it.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _load(name: str, *parts: str) -> ModuleType:
    # By path: this process runs isolated (-I), where jobtrail itself may not be importable.
    path = Path(__file__).resolve().parent.joinpath(*parts)
    spec = importlib.util.spec_from_file_location(f"jobtrail_supervisor_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spawn(
    python: str, workdir: Path, redact: Any, logpump: ModuleType, log_max_bytes: int
) -> tuple[int, threading.Thread]:
    """Start the job with its output on a pipe, and the pump (logpump.py) that copies it out.

    Always a pipe, never job.log itself as the job's stdout: the pump splits event lines onto their own uncapped
    channel and caps job.log, so a job that prints gigabytes neither fills the disk nor loses its receipt."""
    logpump.prepare(workdir)  # before the state file exists, so no reader ever finds a job without job.events
    read_fd, out_fd = os.pipe()
    logpump.widen_pipe(out_fd)
    try:
        child = os.posix_spawn(
            python,
            [python, str(workdir / SCRIPT)],
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, out_fd, 2),
            ],
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
        )
    except BaseException:
        os.close(read_fd)
        os.close(out_fd)
        raise
    os.close(out_fd)  # the job holds the only write end: EOF arrives when its group is gone
    copier = threading.Thread(
        target=logpump.pump, args=(read_fd, workdir, log_max_bytes, redact), name="jobtrail-pump", daemon=True
    )
    copier.start()
    return child, copier


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _stop_all(pgid: int, tree: Any, signum: int) -> None:
    """The job's group, and every process below this one: those that left the group in a new session too."""
    _signal_group(pgid, signum)
    tree.send(signum)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(child: int) -> int | None:
    """Reap every finished descendant; return the job's wait status once it is among them."""
    status = None
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = raw


def _supervise(child: int, timeout_s: float | None, grace_s: float, stop: _StopRequest, tree: Any) -> _Outcome:
    """Wait for the job and everything it started to end, escalating signals on timeout or cancel.

    `tree` (a process_tree.Tracked rooted here) knows every process below this one, in any session."""
    outcome = _Outcome()
    started = time.monotonic()
    ended_at: float | None = None
    term_at: float | None = None
    kill_at: float | None = None
    walked, live = 0.0, {}
    while True:
        status = _reap(child)
        if status is not None:
            outcome.status = status
        now = time.monotonic()
        ended = outcome.status is not None
        if ended and ended_at is None:
            ended_at = now
        # Every loop once the job is ending (whatever it starts meanwhile is stopped with it), else every TRACK_S.
        if ended or stop.requested or term_at is not None or now - walked >= tree.interval:
            live, walked = tree.walk(), now
        if ended and not live and not _group_alive(child):
            return outcome
        if stop.requested and not ended:
            outcome.stopped_by_request = True
        if term_at is None:
            # Nothing may outlive the attempt: what a job that ended left running is stopped too.
            if stop.requested or (ended_at is not None and now - ended_at >= SETTLE_S):
                term_at = now
            elif timeout_s and now - started >= timeout_s:
                outcome.timed_out, term_at = True, now
            if term_at is not None:
                if ended:
                    outcome.stragglers = {pid: tree.command(pid) for pid in live}
                _stop_all(child, tree, signal.SIGTERM)
        elif kill_at is None and now - term_at >= grace_s:
            _stop_all(child, tree, signal.SIGKILL)
            kill_at = now
        elif kill_at is not None:
            if ended and now - kill_at >= KILL_WAIT_S:
                return outcome
            _stop_all(child, tree, signal.SIGKILL)  # and whatever was started since the last one
        time.sleep(POLL_S)


def _note_stragglers(events: Path, stragglers: dict[int, str], grace_s: float, redact: Any) -> None:
    """A `warning` event in job.events (after the pump is done with it) saying what the ended job left running."""
    shown = "; ".join(f"pid {pid}: {cmd[:200] or '?'}" for pid, cmd in sorted(stragglers.items())[:5])
    more = f" and {len(stragglers) - 5} more" if len(stragglers) > 5 else ""
    event = {
        "event": "warning",
        "time": time.time(),
        "code": "stray_processes",
        "step": None,
        "message": f"The job ended and left {len(stragglers)} process(es) it started running ({shown}{more}): "
        f"jobtrail stopped them (SIGTERM, then SIGKILL after {grace_s:g} s).",
        "fix": "Have the job wait for (or stop) the processes it starts before it exits; one started in a new "
        "session (setsid, start_new_session=True) still belongs to the job and is stopped with it.",
    }
    line = f"JOBTRAIL {json.dumps(event)}\n"
    with contextlib.suppress(OSError), open(events, "a", encoding="utf-8") as out:
        out.write(redact(line) if redact else line)


def _exit_record(returncode: int, timed_out: bool = False, cancelled: bool = False) -> dict[str, Any]:
    """`returncode` as Popen gives it: negative when a signal ended the job."""
    return {
        "exit_code": returncode if returncode >= 0 else None,
        "signal": -returncode if returncode < 0 else None,
        "timed_out": timed_out,
        "cancelled": cancelled,
        "ended_at": time.time(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one jobtrail attempt and record how it ends.")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--python", required=True, help="absolute path of the job's interpreter")
    parser.add_argument("--timeout", type=float, default=None, help="seconds; none means no limit")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--redact-env", default="", help="comma-separated names of variables holding secrets")
    parser.add_argument("--log-max-bytes", type=int, default=64 << 20, help="job.log's cap (logpump.py)")
    args = parser.parse_args(argv)
    secrets = [value for name in args.redact_env.split(",") if name and (value := os.environ.get(name))]
    redact = _load("redaction", "..", "util", "redaction.py").Redactor(secrets) if secrets else None
    workdir = Path(args.workdir)
    os.umask(PRIVATE_UMASK)  # inherited by the job: its checkpoints and outputs are private too

    # Installed before the job exists, so a cancel can never find us unprepared.
    stop = _StopRequest()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _become_subreaper()
    tracked = _load("process_tree", "process_tree.py").Tracked(os.getpid(), workdir)
    logpump = _load("logpump", "logpump.py")

    try:
        child, copier = _spawn(args.python, workdir, redact, logpump, args.log_max_bytes)
    except OSError as exc:
        with open(workdir / LOG, "a", encoding="utf-8") as log:
            log.write(f"jobtrail supervisor: could not start {args.python}: {exc}\n")
        # 127 is what a shell reports for a command it cannot run.
        write_json_atomic(workdir / EXIT, _exit_record(127))
        return 1
    write_json_atomic(
        workdir / STATE,
        {"supervisor_pid": os.getpid(), "child_pid": child, "child_pgid": child, "started_at": time.time()},
    )

    outcome = _supervise(child, args.timeout, args.grace, stop, tracked)
    copier.join(timeout=PUMP_WAIT_S)  # the log and the events are complete before exit.json says it ended
    if outcome.stragglers:
        _note_stragglers(workdir / logpump.EVENTS, outcome.stragglers, args.grace, redact)
    # Only a SIGTERM the server announced is a cancel; any other is the machine taking the
    # job away (the service reads that as preemption).
    cancelled = outcome.stopped_by_request and (workdir / CANCEL_MARKER).exists()
    assert outcome.status is not None  # _supervise returns only once the job is reaped
    returncode = os.waitstatus_to_exitcode(outcome.status)
    write_json_atomic(workdir / EXIT, _exit_record(returncode, outcome.timed_out, cancelled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
