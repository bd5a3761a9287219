"""Every process a local job started, found and stopped: its process group is not enough. Standard library only.

The supervisor (supervisor.py, run isolated with `python -I`) loads this file by path; local.py imports it.

A job's process group holds what it started the ordinary way, but a process started in a new session (`setsid`,
`subprocess.Popen(..., start_new_session=True)`, a daemonizing library) leaves the group, and a signal to the group
no longer reaches it. So the supervisor tracks descendants instead:

- it is the job's child subreaper (Linux), so an orphan of the job is re-parented to it rather than to init, and
  every process the job started, in whatever session, stays below it in the process tree;
- it walks that tree (each process's /proc/<pid>/task/<tid>/children, else the whole process table) at least
  every TRACK_S and whenever it is about to stop the job, and records each descendant with its start time: a
  pid names a process only together with it, so a pid the kernel reused is never signalled;
- it signals through a pidfd opened before the start time is checked, where the platform has them, so the
  process that was checked is the one that gets the signal;
- it keeps the live set in the workdir (processes.json), so a server that finds the supervisor gone (the
  attempt is `lost`) can still stop what it left running.

Not a cgroup per attempt: moving the job into a cgroup of its own needs a writable, delegated cgroup v2 subtree,
which the user running a jobtrail server rarely has (a login session, a container, a v1 or hybrid hierarchy),
and a fallback would be needed anyway. Tracking works for any user on Linux; without /proc (macOS) the table
comes from `ps`, and a process whose parent died before a walk saw it can escape.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path

RECORD = "processes.json"  # {"<pid>": "<start time>", ...}: the descendants alive at the last walk
# How often the supervisor walks the tree while the job runs: the lost-attempt record is at most this old.
TRACK_S = 1.0
_PROC = Path("/proc")
_STARTTIME = 19  # /proc/<pid>/stat's field 22 (starttime), counted from the state field after the command name
PRIVATE_FILE = 0o600


def start_time(pid: int) -> str | None:
    """The process's start time (with its pid, its identity); None when it is gone or a zombie."""
    return _starts([pid]).get(pid)


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root`, pid → start time."""
    if (_PROC / str(root) / "task" / str(root) / "children").exists():
        return _walk_children(root)
    table = _table()
    below: dict[int, list[int]] = {}
    for pid, (ppid, _start) in table.items():
        below.setdefault(ppid, []).append(pid)
    found: dict[int, str] = {}
    todo = list(below.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = table[pid][1]
            todo += below.get(pid, [])
    return found


def send(procs: dict[int, str], signum: int) -> list[int]:
    """Signal each process that is still the one recorded (same pid, same start time); the pids signalled."""
    return [pid for pid, start in procs.items() if _send(pid, start, signum)]


def command(pid: int) -> str:
    """The process's command line, for a person to read ("" once it is gone)."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


class Tracked:
    """The descendants of `root` ever seen, each with its start time, and the live ones kept in `workdir`."""

    interval = TRACK_S
    command = staticmethod(command)

    def __init__(self, root: int, workdir: Path) -> None:
        self.root = root
        self.record = workdir / RECORD
        self.seen: dict[int, str] = {}
        self._saved: dict[int, str] | None = None

    def walk(self) -> dict[int, str]:
        """Add what is below the root now; the live ones (seen now or before), recorded when they changed."""
        self.seen.update(descendants(self.root))
        now = _starts(list(self.seen))
        live = {pid: start for pid, start in self.seen.items() if now.get(pid) == start}
        self.seen = dict(live)  # a dead one's pid may come back as another process: forgotten, never signalled
        if live != self._saved:
            _write(self.record, live)
            self._saved = live
        return live

    def send(self, signum: int) -> list[int]:
        return send(self.walk(), signum)


def recorded(workdir: Path) -> dict[int, str]:
    """What a supervisor last recorded as its job's live processes (empty when it recorded none)."""
    try:
        data = json.loads((workdir / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {int(pid): str(start) for pid, start in data.items() if str(pid).isdigit()}


def _send(pid: int, start: str, signum: int) -> bool:
    pidfd = None
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(pid)
    try:
        # Checked after the pidfd pins the process: the start time proves it is the one recorded.
        if start_time(pid) != start:
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signum)
        else:
            os.kill(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _walk_children(root: int) -> dict[int, str]:
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in _children(todo.pop()):
            start = start_time(child)
            if start is not None and child not in found:
                found[child] = start
                todo.append(child)
    return found


def _children(pid: int) -> Iterable[int]:
    try:
        tasks = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return []
    kids: set[int] = set()
    for tid in tasks:
        with contextlib.suppress(OSError):
            kids.update(int(k) for k in (_PROC / str(pid) / "task" / tid / "children").read_text().split())
    return kids


def _starts(pids: list[int]) -> dict[int, str]:
    """The start time of each of `pids` that is alive (neither gone nor a zombie)."""
    if not _PROC.is_dir():
        table = _ps()
        return {pid: table[pid][1] for pid in pids if pid in table}
    found = {}
    for pid in pids:
        fields = _stat(pid)
        if fields is not None and fields[0] != "Z":
            found[pid] = fields[_STARTTIME]
    return found


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields from the state on (the command name may hold spaces and parentheses)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _table() -> dict[int, tuple[int, str]]:
    """Every live process: pid → (parent pid, start time)."""
    if not _PROC.is_dir():
        return _ps()
    table = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None and fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), fields[_STARTTIME])
    return table


def _ps() -> dict[int, tuple[int, str]]:
    """Without /proc (macOS): `ps`, whose lstart (the start to the second) stands for the start time."""
    try:
        out = subprocess.run(
            ["ps", "-A", "-o", "pid=,ppid=,stat=,lstart="], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    table = {}
    for line in out.splitlines():
        fields = line.split(None, 3)
        if len(fields) == 4 and not fields[2].startswith("Z"):
            table[int(fields[0])] = (int(fields[1]), fields[3].strip())
    return table


def _write(path: Path, procs: dict[int, str]) -> None:
    """Replaced whole: a reader sees the last set or the one before. Not synced: it matters only while the
    machine is up (after a reboot none of its processes exist)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE), "w", encoding="utf-8") as f:
            json.dump({str(pid): start for pid, start in procs.items()}, f)
        os.replace(tmp, path)
