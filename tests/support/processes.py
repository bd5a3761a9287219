"""What is left of a job's processes, read from /proc (Linux): the orphan checks of the process tests."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ..."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """Running or sleeping: a zombie (dead, not yet reaped) does not count."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _live() -> list[tuple[int, list[str]]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None and fields[0] != "Z":
            found.append((int(entry.name), fields))
    return found


def live_group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    return [pid for pid, fields in _live() if int(fields[2]) == pgid]


def live_children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    return [child for child, fields in _live() if int(fields[1]) == pid]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_jobs_under(folder: Path) -> None:
    """SIGKILL the process group of every live job whose command line names `folder` (its supervisor, its script):
    what a test that failed midway left running."""
    for pid, fields in _live():
        if str(folder) in command_line(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(fields[2]), signal.SIGKILL)
