"""Where a job may write: a local job's chosen directory is confined, and a remote job's Hub repo must be
one its token may create or write.

A local job writes checkpoints, a model card (TRL's README.md) and its final model into `output`,
and deletes its older checkpoints there. So `output` must be a new or empty directory, or one that
jobtrail claimed for an earlier attempt of the same run (its MARKER file names the run); never a
home, system or hidden directory, nor jobtrail's own state. `~`, `..` and symlinks are resolved
before anything is judged, so `../../etc` or a link into ~/.ssh is seen for what it is.

A remote training job pushes to its Hub repo, which its launch creates (private) before the job starts, so
the job itself needs only push rights. Preflight asks the Hub whether the token may write an existing repo
(auth_check) and judges a new one by the namespaces whoami lists, so a dry run refuses what the launch would.

    probe_output(requested, run_id, jobtrail_home)   the I/O, called by facts.py  → OutputFacts
    check_output(spec, facts)                        the pure rule (preflight findings)
    output_moved(planned, jobtrail_home)             at launch: is `planned` still the place preflight judged?
    claim_output(path, run_id)                       the dispatcher marks the directory as the run's at launch
    probe_output_repo(repo_id, token)                the I/O, called by facts.py  → OutputRepoFacts
    check_output_repo(repo, identity)                the pure rule: output.permission, output.repo_unreachable
    create_output_repo(api, repo_id)                 the dispatcher creates a training job's repo at launch
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jobtrail.errors import BackendError
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight.probes import HubIdentity
from jobtrail.util.hub import hub_unreachable

MARKER = ".jobtrail-output"  # {"run_id": ..., "claimed_at": ...}: this run may write here
_SHOWN_ENTRIES = 3
# Trees of the operating system: nothing under them is a job's output (/var/tmp/<dir> excepted).
SYSTEM_TREES = tuple(
    Path(p) for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run")
) + tuple(Path(p) for p in ("/sbin", "/sys", "/usr", "/var"))
# Shared top-level folders: a directory inside one is fine, the folder itself never.
SHARED_ROOTS = tuple(Path(p) for p in ("/", "/tmp", "/var/tmp", "/home", "/opt", "/mnt", "/media", "/srv", "/snap"))
# What a fine-grained token needs in a namespace to create a repo there.
CREATE_PERMISSION = "repo.write"


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


def output_moved(planned: Path, jobtrail_home: Path | None) -> str | None:
    """What changed since preflight judged `planned` (a local job's output, resolved then), or None when nothing did.

    Preflight judges a path once, at submission; a queued job starts later, and by then a directory along the path
    may have been swapped for a symlink into a place preflight would have refused (a hidden folder, the home). So
    the launch resolves the path again: any difference is a refusal, never a write, and the place it now leads to
    is described by the same rule preflight applies (_forbidden)."""
    now = planned.resolve()
    if now == planned:
        return None
    link = next((p for p in (*reversed(planned.parents), planned) if p.is_symlink()), None)
    what = f"{link} is now a symbolic link" if link else "a folder along it was replaced"
    rule = _forbidden(now, jobtrail_home)
    return f"output={planned} changed since it was checked: {what}, to {now}" + (f" ({rule})" if rule else "")


def claim_output(path: Path, run_id: str) -> str | None:
    """Make `path` this run's output (creating it, with the marker); why not, or None when it is.

    Run once more when the job is launched: between submission and launch the directory may have
    been filled, or claimed by another run that passed preflight at the same moment (the marker is
    created exclusively, so only one run wins). `path` is resolved (preflight's), so it is created and
    opened one folder at a time without following a symlink: one put in its way after output_moved looked
    refuses the claim instead of leading the marker, and the job after it, somewhere else."""
    try:
        fd = _open_directory(path)
    except _NotADirectory as exc:
        return str(exc)
    except OSError as exc:
        return f"{path} cannot be written ({exc.strerror})"
    try:
        return _claim_at(fd, path, run_id)
    finally:
        os.close(fd)


class _NotADirectory(Exception):
    """A folder along an output's path is a symlink or a file now."""


def _open_directory(path: Path) -> int:
    """A descriptor of directory `path`, each missing folder created (private), none reached through a symlink."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    done = Path("/")
    try:
        for part in path.parts[1:]:
            done = done / part
            with contextlib.suppress(FileExistsError):  # mkdir never follows a symlink in its last component
                os.mkdir(part, 0o700, dir_fd=fd)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                # Linux answers ENOTDIR for a symlink opened with O_DIRECTORY: look at what is there.
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise _NotADirectory(f"{done} is a symbolic link now, not the directory that was checked") from exc
                raise _NotADirectory(f"{done} is not a directory") from exc
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _claim_at(fd: int, path: Path, run_id: str) -> str | None:
    """claim_output's marker and listing, in the directory open as `fd`."""
    try:
        marker = os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
    except FileExistsError:
        owner = _owner_at(fd)
        return None if owner == run_id else f"{path} was claimed by job {owner} first"
    except OSError as exc:
        return f"{path} cannot be written ({exc.strerror})"
    with os.fdopen(marker, "w") as f:
        json.dump({"run_id": run_id, "claimed_at": time.time()}, f)
    others = [name for name in os.listdir(fd) if name != MARKER]
    if others:
        os.unlink(MARKER, dir_fd=fd)  # not ours to write into: leave the directory as it was
        return f"{path} holds {len(others)} entries jobtrail did not write ({', '.join(sorted(others)[:3])})"
    return None


def _owner_at(fd: int) -> str | None:
    try:
        with os.fdopen(os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)) as f:
            owner: Any = json.load(f).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def read_owner(path: Path) -> str | None:
    """The run id in a directory's marker, or None (no marker, or not one jobtrail wrote)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        return _owner_at(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class OutputRepoFacts:
    """The Hub repo a remote training job pushes to, as its token sees it before the job is submitted."""

    repo_id: str
    exists: bool | None = None  # False: the launch creates it; None: the Hub could not be asked (`error` says why)
    writable: bool | None = None  # an existing repo this token may write to
    error: str | None = None


# Alike in shape with probes.space_facts (ask the Hub, else say why it could not be asked): another call and
# other facts, so the two stay apart.
def probe_output_repo(repo_id: str, token: str | None) -> OutputRepoFacts:
    """Whether `repo_id` exists and this token may write to it (the Hub's auth_check for write access)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    unreachable = hub_unreachable()
    if unreachable:
        return OutputRepoFacts(repo_id=repo_id, error=unreachable)
    try:
        HfApi(token=token).auth_check(repo_id, write=True)
    except RepositoryNotFoundError:  # or private to another namespace: either way not one this token writes
        return OutputRepoFacts(repo_id=repo_id, exists=False)
    except Exception as exc:  # noqa: BLE001 - reported as a finding, never raised
        if _status(exc) == 403:
            return OutputRepoFacts(repo_id=repo_id, exists=True, writable=False)
        text = str(exc).strip().splitlines()
        return OutputRepoFacts(repo_id=repo_id, error=f"{type(exc).__name__}: {text[0] if text else ''}"[:300])
    return OutputRepoFacts(repo_id=repo_id, exists=True, writable=True)


def check_output_repo(repo: OutputRepoFacts | None, identity: HubIdentity | None) -> list[Finding]:
    """A remote training job's Hub repo: an existing one must be writable by the token, a new one in a namespace
    where the token may create repos. A token that cannot be checked, or writes nowhere, is auth.*'s finding."""
    if repo is None or identity is None or identity.error or not identity.name:
        return []
    if repo.error:
        return [
            Finding(
                code="output.repo_unreachable",
                severity="warning",
                message=f"Could not check the output repo {repo.repo_id} ({repo.error}): the job's launch creates it, "
                "and the job fails (auth_error) if this token may not.",
                fix="Make sure the server can reach the Hub, then dry_run again.",
            )
        ]
    if repo.writable or identity.can_write_repos is False:
        return []
    namespace, user = repo.repo_id.split("/")[0], identity.name
    name = repo.repo_id.split("/")[-1]
    mine = f"Pass output='{user}/{name}' (or a repo of an organization of {user}'s where it may write)"
    if repo.exists:
        why = f"{repo.repo_id} exists, and the token of {user} may not write to it"
    elif namespace != user and namespace not in identity.orgs:
        others = ", ".join(sorted(identity.orgs)) or "none"
        why = f"{namespace} is neither {user} nor one of its organizations ({others}): it cannot be created there"
    elif identity.orgs.get(namespace) == "read":
        why = f"{user} is a read-only member of {namespace}: it cannot be created there"
    elif identity.scopes and CREATE_PERMISSION not in identity.scopes.get(namespace, []):
        why = f"the fine-grained token of {user} has no {CREATE_PERMISSION} permission in {namespace}"
        mine += f", or give the token {CREATE_PERMISSION} in {namespace} (https://huggingface.co/settings/tokens)"
    else:
        return []
    return [
        _error(
            "output.permission",
            f"output={repo.repo_id}: {why}. The job would push its checkpoints and model there.",
            f"{mine}; or set HF_TOKEN to a token that may write there.",
        )
    ]


def pushed_repo(config: dict[str, Any]) -> str | None:
    """The Hub repo a training job's config pushes to, which its launch creates; None for a job that pushes nothing
    (a local job, a smoke run) and for a conversion, whose script makes its own repo."""
    if "training_args" not in config or not config.get("push_to_hub"):
        return None
    repo = config.get("hub_model_id")
    return repo if isinstance(repo, str) else None


def create_output_repo(api: Any, repo_id: str) -> None:
    """Create a training job's repo, private, as its launch's first step (a retry's finds it there), so the job
    needs only push rights. Preflight judged whether this token may (output.permission); a refusal now (the
    token or the namespace changed since) ends the attempt auth_error, anything else infra_transient."""
    try:
        api.create_repo(repo_id, private=True, exist_ok=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()
        denied = _status(exc) in (401, 403)
        raise BackendError(
            f"Could not create the output repo {repo_id}: {type(exc).__name__}: {first[0] if first else ''}"[:400],
            fix="Use a token that can create repos in that namespace, or create the repo yourself and pass output=..."
            if denied
            else "Check the network and https://status.huggingface.co, then retry.",
            reason="auth_error" if denied else "infra_transient",
        ) from exc


def _status(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "response", None), "status_code", None)


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
