"""The local runner's supervisor: one detached process per attempt, standard library only.

It runs `python <workdir>/script.py` in a process group of its own, appends the job's output
to job.log, enforces the timeout, turns its own SIGTERM (a cancel) into SIGTERM-then-SIGKILL
for the job's whole group, and always leaves exit.json behind. Every fact the server needs
lives in files in the workdir, so any later server process can pick the attempt up again.

It is started by path with `python -I`, so it runs even where jobtrail is not importable and
nothing in the job's environment or workdir can shadow a module it imports. Secrets reach the
job only through the environment this process inherits; argv carries no secret, only the
names of the variables holding them (--redact-env): when there are any, the job's output
goes through a pipe and every secret value, in every form it can be printed in, is replaced
before a byte reaches job.log (util/redaction.py, loaded by path).

Everything the supervisor and the job create is private to the user (umask 077): the workdir
and the job's outputs sit under $JOBTRAIL_HOME, which nobody else may read.

Files (all in the workdir):
    job.log           the job's stdout and stderr, appended
    supervisor.json   {supervisor_pid, child_pid, child_pgid, started_at}
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
from dataclasses import dataclass
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
_LINE_CAP = 1 << 20  # bytes of one line held back while waiting for its newline
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


def _become_subreaper() -> None:
    # Orphaned grandchildren then come to us, so we can reap them and know when the job's
    # group is really empty (PID 1 in a container often never reaps them). Linux only;
    # elsewhere the bounded wait after SIGKILL covers for it.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _load_redaction() -> ModuleType:
    # By path: this process runs isolated (-I), where jobtrail itself may not be importable.
    path = Path(__file__).resolve().parent.parent / "util" / "redaction.py"
    spec = importlib.util.spec_from_file_location("jobtrail_supervisor_redaction", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spawn(python: str, workdir: Path, secrets: list[str]) -> tuple[int, threading.Thread | None]:
    """Start the job; with secrets to hide, its output is piped through a redacting copier."""
    redact = _load_redaction().Redactor(secrets) if secrets else None
    log_fd = os.open(workdir / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
    read_fd, out_fd = os.pipe() if redact else (None, log_fd)
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
        os.close(log_fd)
        if read_fd is not None:
            os.close(read_fd)
            os.close(out_fd)
        raise
    if read_fd is None:
        os.close(log_fd)
        return child, None
    os.close(out_fd)  # the job holds the only write end: EOF arrives when its group is gone
    copier = threading.Thread(target=_copy_redacted, args=(read_fd, log_fd, redact), daemon=True)
    copier.start()
    return child, copier


def _copy_redacted(read_fd: int, log_fd: int, redact: Any) -> None:
    # Whole lines, so a secret split across two reads is still caught and an event line is
    # redacted inside its JSON. A line longer than the cap goes out in pieces, redacted as text,
    # each holding back what could be the start of a secret.
    hold = max(redact.longest() - 1, 0)
    pending = b""
    try:
        while chunk := os.read(read_fd, 65536):
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                os.write(log_fd, _redact(pending[:cut], redact))
                pending = pending[cut:]
            elif len(pending) >= _LINE_CAP:
                text = redact.text(_decode(pending))
                os.write(log_fd, _encode(text[: len(text) - hold]))
                pending = _encode(text[len(text) - hold :])
        if pending:
            os.write(log_fd, _redact(pending, redact))
    finally:
        os.close(read_fd)
        os.close(log_fd)


def _redact(data: bytes, redact: Any) -> bytes:
    return _encode("\n".join(redact(line) for line in _decode(data).split("\n")))


# Bytes that are not UTF-8 pass through unchanged.
def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


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


def _supervise(child: int, timeout_s: float | None, grace_s: float, stop: _StopRequest) -> _Outcome:
    """Wait for the job and its whole group to end, escalating signals on timeout or cancel."""
    outcome = _Outcome()
    started = time.monotonic()
    term_at: float | None = None
    kill_at: float | None = None
    while True:
        status = _reap(child)
        if status is not None:
            outcome.status = status
        ended = outcome.status is not None
        if ended and not _group_alive(child):
            return outcome
        now = time.monotonic()
        if stop.requested and not ended:
            outcome.stopped_by_request = True
        if term_at is None:
            # A job that ended but left processes behind gets them stopped too: nothing may
            # outlive the attempt.
            if ended or outcome.stopped_by_request:
                term_at = now
            elif timeout_s and now - started >= timeout_s:
                outcome.timed_out, term_at = True, now
            if term_at is not None:
                _signal_group(child, signal.SIGTERM)
        elif kill_at is None and now - term_at >= grace_s:
            _signal_group(child, signal.SIGKILL)
            kill_at = now
        elif kill_at is not None and ended and now - kill_at >= KILL_WAIT_S:
            return outcome
        time.sleep(POLL_S)


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
    args = parser.parse_args(argv)
    secrets = [os.environ.get(name, "") for name in args.redact_env.split(",") if name]
    workdir = Path(args.workdir)
    os.umask(PRIVATE_UMASK)  # inherited by the job: its checkpoints and outputs are private too

    # Installed before the job exists, so a cancel can never find us unprepared.
    stop = _StopRequest()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _become_subreaper()

    try:
        child, copier = _spawn(args.python, workdir, [s for s in secrets if s])
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

    outcome = _supervise(child, args.timeout, args.grace, stop)
    if copier is not None:
        copier.join(timeout=KILL_WAIT_S)  # the log is complete before exit.json says it ended
    # Only a SIGTERM the server announced is a cancel; any other is the machine taking the
    # job away (the service reads that as preemption).
    cancelled = outcome.stopped_by_request and (workdir / CANCEL_MARKER).exists()
    assert outcome.status is not None  # _supervise returns only once the job is reaped
    returncode = os.waitstatus_to_exitcode(outcome.status)
    write_json_atomic(workdir / EXIT, _exit_record(returncode, outcome.timed_out, cancelled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
