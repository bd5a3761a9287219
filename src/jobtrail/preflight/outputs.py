"""Where a local job may write: the directory given as `output` is confined.

A local job writes checkpoints, a model card (TRL's README.md) and its final model into `output`,
and deletes its older checkpoints there. So `output` must be a new or empty directory, or one that
jobtrail claimed for an earlier attempt of the same run (its MARKER file names the run); never a
home, system or hidden directory, nor jobtrail's own state. `~`, `..` and symlinks are resolved
before anything is judged, so `../../etc` or a link into ~/.ssh is seen for what it is.

    probe_output(requested, run_id, jobtrail_home)   the I/O, called by facts.py  → OutputFacts
    check_output(spec, facts)                        the pure rule (preflight findings)
    claim_output(path, run_id)                       the dispatcher marks the directory as the run's at launch
"""

from __future__ import annotations

import json
import os
import pwd
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jobtrail.models import Finding, JobSpec

MARKER = ".jobtrail-output"  # {"run_id": ..., "claimed_at": ...}: this run may write here
_SHOWN_ENTRIES = 3
# Trees of the operating system: nothing under them is a job's output (/var/tmp/<dir> excepted).
SYSTEM_TREES = tuple(
    Path(p) for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run")
) + tuple(Path(p) for p in ("/sbin", "/sys", "/usr", "/var"))
# Shared top-level folders: a directory inside one is fine, the folder itself never.
SHARED_ROOTS = tuple(Path(p) for p in ("/", "/tmp", "/var/tmp", "/home", "/opt", "/mnt", "/media", "/srv", "/snap"))


@dataclass(frozen=True)
class OutputFacts:
    """What is at the place a local job would write, seen before it is judged."""

    requested: str  # as the caller wrote it
    path: Path  # resolved: absolute, no `~`, `..` or symlinks
    run_id: str  # the run that would write there
    forbidden: str | None = None  # why this place is never an output, e.g. "your home directory"
    exists: bool = False
    is_dir: bool = False
    entries: tuple[str, ...] = ()  # a few of the names it holds (the marker left out)
    entry_count: int = 0
    owner_run: str | None = None  # the run its marker names
    suggestion: str = ""  # a new directory next to it, free now


def probe_output(requested: str, run_id: str, jobtrail_home: Path | None) -> OutputFacts:
    path = Path(requested).expanduser().resolve()
    facts = OutputFacts(
        requested=requested,
        path=path,
        run_id=run_id,
        forbidden=_forbidden(path, jobtrail_home),
        suggestion=str(_free_sibling(path)),
    )
    if not path.exists():
        return facts
    if not path.is_dir():
        return replace(facts, exists=True)
    names = sorted(name for name in _listing(path) if name != MARKER)
    return replace(
        facts,
        exists=True,
        is_dir=True,
        entries=tuple(names[:_SHOWN_ENTRIES]),
        entry_count=len(names),
        owner_run=read_owner(path),
    )


def check_output(spec: JobSpec, output: OutputFacts | None) -> list[Finding]:
    """A local job's chosen directory: refused when it is forbidden, a file, or holds someone else's files."""
    if output is None:
        return []
    where = str(output.path) if output.requested == str(output.path) else f"{output.requested} ({output.path})"
    fix = (
        f"Pass output={output.suggestion!r} (a new directory), or leave output out: the job then writes into "
        "its own run directory."
    )
    if output.forbidden:
        return [
            _error(
                "output.forbidden",
                f"output={where} is {output.forbidden}: a job writes checkpoints and a README there and deletes "
                "its old checkpoints.",
                fix,
            )
        ]
    if output.exists and not output.is_dir:
        return [_error("output.not_a_directory", f"output={where} is a file, not a directory.", fix)]
    if output.entry_count and output.owner_run != output.run_id:
        shown = ", ".join(output.entries) + (" ..." if output.entry_count > len(output.entries) else "")
        whose = f"job {output.owner_run}'s output" if output.owner_run else "files jobtrail did not write"
        return [
            _error(
                "output.not_empty",
                f"output={where} already holds {output.entry_count} entries ({shown}): {whose}. A job there would "
                "overwrite its README and checkpoint folders and delete old checkpoints.",
                fix,
            )
        ]
    return []


def claim_output(path: Path, run_id: str) -> str | None:
    """Make `path` this run's output (creating it, with the marker); why not, or None when it is.

    Run once more when the job is launched: between submission and launch the directory may have
    been filled, or claimed by another run that passed preflight at the same moment (the marker is
    created exclusively, so only one run wins)."""
    marker = path / MARKER
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        owner = read_owner(path)
        if owner == run_id:
            return None
        return f"{path} is not a directory" if not path.is_dir() else f"{path} was claimed by job {owner} first"
    except OSError as exc:
        return f"{path} cannot be written ({exc.strerror})"
    with os.fdopen(fd, "w") as f:
        json.dump({"run_id": run_id, "claimed_at": time.time()}, f)
    others = [name for name in _listing(path) if name != MARKER]
    if others:
        marker.unlink()  # not ours to write into: leave the directory as it was
        return f"{path} holds {len(others)} entries jobtrail did not write ({', '.join(sorted(others)[:3])})"
    return None


def read_owner(path: Path) -> str | None:
    """The run id in a directory's marker, or None (no marker, or not one jobtrail wrote)."""
    try:
        owner: Any = json.loads((path / MARKER).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def _forbidden(path: Path, jobtrail_home: Path | None) -> str | None:
    homes = _home_directories()
    if path in homes:
        return "a home directory"
    if any(path in home.parents for home in homes):
        return "a folder that holds home directories"
    if path in SHARED_ROOTS:
        return f"the shared folder {path} itself"
    system = next((tree for tree in SYSTEM_TREES if path == tree or tree in path.parents), None)
    if system is not None and Path("/var/tmp") not in path.parents:
        return f"inside the system directory {system}"
    hidden = next((part for part in path.parts if part.startswith(".")), None)
    if hidden is not None:
        return f"inside the hidden directory {hidden}"
    if jobtrail_home is not None:
        home = jobtrail_home.expanduser().resolve()
        if path == home or home in path.parents or path in home.parents:
            return f"jobtrail's own state ({home}) or a folder that holds it"
    return None


def _home_directories() -> set[Path]:
    """This user's home ($HOME and the password database's) and every account's, resolved."""
    found = {Path.home(), Path(os.environ.get("HOME") or Path.home())}
    found.update(Path(entry.pw_dir) for entry in pwd.getpwall() if entry.pw_dir not in ("", "/"))
    return {home.resolve() for home in found}


def _listing(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return ["(unreadable)"]


def _free_sibling(path: Path) -> Path:
    """A directory that does not exist yet: `path`-2, -3 ... or, for a place never allowed, ~/jobtrail-output."""
    base = Path.home() / "jobtrail-output" if _forbidden(path, None) else path
    if base != path and not base.exists():
        return base
    for n in range(2, 100):
        candidate = base.with_name(f"{base.name}-{n}")
        if not candidate.exists():
            return candidate
    return base.with_name(f"{base.name}-{int(time.time())}")


def _error(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="error", message=message, fix=fix)
