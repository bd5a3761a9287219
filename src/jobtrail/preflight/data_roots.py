"""Where a job's inputs may come from: the data roots (util/roots.py's setting), and never a hidden or system
directory or jobtrail's own state, whatever the roots say.

Everything jobtrail reads for a job, or hands a job to read, is an input: the data and eval data, a reward file
(a `.py` file), a local model directory, and each path-valued hyperparameter (deepspeed, fsdp_config and
accelerator_config when they are paths, chat_template_path, model_init_kwargs.cache_dir and every nested
*_dir/*_path/*_folder). Each is judged on the path it resolves to, `~`, `..` and symlinks followed first, before any
byte of it is read: validate_dataset would otherwise echo an MCP client's config (~/.cursor/mcp.json) or
~/.docker/config.json as "samples", and a reward file's text travels in the job's config.

What jobtrail itself made is an input wherever it is: a job's output directory (JOBTRAIL_HOME/runs/<id>/output,
or a directory a job claimed, outputs.MARKER) and the demo's model and data (JOBTRAIL_HOME/demo).

    refuse_unconfined(spec, home)        plan.py: raises InvalidRequestError for the first input outside
    confined(ref, what, home=, suffix=)  the resolved path of one input, or InvalidRequestError
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from jobtrail.backends.registry import traits_of
from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec
from jobtrail.preflight.credentials import dotted, walk
from jobtrail.preflight.outputs import MARKER, SYSTEM_TREES
from jobtrail.util.refs import looks_local
from jobtrail.util.roots import DATA_ROOTS_ENV, DataRoots, data_roots, jobtrail_home

# Hyperparameters that are a file's path when they are a string not holding a JSON object (transformers' reading).
PATH_FIELDS = ("deepspeed", "fsdp_config", "accelerator_config")
# Key endings that make a value a path (chat_template_path, cache_dir, offload_folder); *_path may be a Hub id too.
_PATH_ENDINGS = ("_dir", "_folder", "_path")
# Inside JOBTRAIL_HOME, what jobtrail made for jobs to read: the demo's model and data, and each run's output.
_DEMO = "demo"
_HYPERPARAMETERS = "hyperparameters"
_ROOT_HOME = Path("/root")
_OUTSIDE = "it lies outside the data roots"
_VAR_TMP = Path("/var/tmp")  # a system tree's one folder of ordinary files (outputs.py allows it too)


def refuse_unconfined(spec: JobSpec, home: Path | None) -> None:
    """Every local input of `spec`, confined (InvalidRequestError for the first that is not): its model, data, eval
    data, reward file and, for a job that runs on this machine, its path-valued hyperparameters."""
    for what, ref, suffix in inputs(spec):
        confined(ref, what, home=home, suffix=suffix, in_job=what.startswith(_HYPERPARAMETERS))


def inputs(spec: JobSpec) -> Iterator[tuple[str, str, str | None]]:
    """(argument, path as given, the suffix it must have) for each local path `spec` reads."""
    for what, ref in (("model", spec.model), ("dataset", spec.dataset), ("eval_dataset", spec.eval_dataset)):
        if ref and looks_local(ref.strip()):
            yield what, ref.strip(), None
    if spec.reward_file:
        yield "reward_file", spec.reward_file, ".py"
    if traits_of(spec.backend).runs_here:  # another machine's paths are its own, not this one's files
        for where, ref in path_hyperparameters(spec.hyperparameters):
            yield f"{_HYPERPARAMETERS} {where}", ref, None


def path_hyperparameters(hyperparameters: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, path) for each path-valued hyperparameter, at any depth."""
    for path, value in walk(dict(hyperparameters)):
        if not path or not isinstance(value, str) or not value.strip() or value.lstrip().startswith(("{", "[")):
            continue
        key = path[-1]
        named = key.endswith(_PATH_ENDINGS) and (not key.endswith("_path") or looks_local(value.strip()))
        if named or (len(path) == 1 and key in PATH_FIELDS):
            yield dotted(path), value


def confined(ref: str, what: str, *, home: Path | None = None, suffix: str | None = None, in_job: bool = False) -> Path:
    """`ref` resolved (`~`, `..`, symlinks), when it may be read as `what`; else InvalidRequestError naming the
    setting. `in_job`: a path the job itself opens, which must be absolute (the job runs in a directory of its
    own). `home`: jobtrail's state, besides JOBTRAIL_HOME's."""
    given = Path(ref).expanduser()
    roots = data_roots()
    if in_job and not given.is_absolute():
        raise InvalidRequestError(
            f"{what}={ref!r} is a relative path: the job runs in a directory of its own under jobtrail's state, "
            "where it names nothing of yours.",
            fix=f"Pass an absolute path under one of the data roots ({roots.describe()}).",
        )
    absolute = given if given.is_absolute() else Path.cwd() / given
    resolved = absolute.resolve()
    why = _refused(absolute, resolved, roots, {jobtrail_home(), *([home.resolve()] if home else [])})
    if why is None and suffix and not (resolved.suffix == suffix and given.suffix == suffix):
        why = f"it is not a {suffix} file"
    if why is None:
        return resolved
    shown = ref if str(resolved) == ref else f"{ref} (resolves to {resolved})"
    raise InvalidRequestError(
        f"{what}={shown} cannot be read: {why}. jobtrail reads inputs only under the data roots "
        f"({roots.describe()}), never through a hidden file or folder, a system directory or jobtrail's own state.",
        fix=_fix(why, suffix),
    )


def _refused(absolute: Path, resolved: Path, roots: DataRoots, homes: set[Path]) -> str | None:
    """Why a path (as given, made absolute; and resolved) is no input, or None when it is one."""
    for home in homes:
        if resolved == home or home in resolved.parents:
            return (
                None
                if _made_by_jobtrail(resolved.relative_to(home).parts)
                else f"it is inside jobtrail's state ({home})"
            )
    # /root is a system directory unless it is this user's home.
    trees = (*SYSTEM_TREES, *(() if Path.home().resolve() == _ROOT_HOME else (_ROOT_HOME,)))
    system = next((tree for tree in trees if resolved == tree or tree in resolved.parents), None)
    if system is not None and _VAR_TMP not in resolved.parents:
        return f"it is inside the system directory {system}"
    base = next((r for r in roots.paths if resolved == r or r in resolved.parents), None) or _claimed_output(resolved)
    if base is None:
        return _OUTSIDE
    hidden = next(
        (part for part in (*resolved.relative_to(base).parts, *_unrooted(absolute, roots)) if _hidden(part)), None
    )
    return f"it goes through the hidden {hidden}" if hidden else None


def _made_by_jobtrail(parts: tuple[str, ...]) -> bool:
    """Inside JOBTRAIL_HOME: the demo's files, or a run's output directory and what it holds (no hidden part)."""
    if any(_hidden(part) for part in parts):
        return False
    return (len(parts) >= 1 and parts[0] == _DEMO) or (len(parts) >= 3 and parts[0] == "runs" and parts[2] == "output")


def _claimed_output(resolved: Path) -> Path | None:
    """The directory a job claimed as its output (its marker) that holds `resolved`, if any."""
    return next((d for d in (resolved, *resolved.parents) if (d / MARKER).is_file()), None)


def _unrooted(absolute: Path, roots: DataRoots) -> tuple[str, ...]:
    """The parts of the path as given below the root it names (all of them when it names none): a link through a
    hidden folder (~/.x → somewhere under a root) is still a path through a hidden folder."""
    for root in (*roots.given, *roots.paths):
        if absolute == root or root in absolute.parents:
            return absolute.relative_to(root).parts
    return absolute.parts


def _hidden(part: str) -> bool:
    return part.startswith(".") and part not in (".", "..")


def _fix(why: str, suffix: str | None) -> str:
    if why.startswith("it is not a"):
        return f"Pass a {suffix} file that defines the function (under a data root)."
    if why == _OUTSIDE:
        return (
            "Move or copy it under one of the data roots, or add its folder to "
            f"{DATA_ROOTS_ENV} in the server's environment (absolute folders separated by ':') and restart the server."
        )
    return (
        "Copy what the job needs into an ordinary folder under a data root: "
        f"{DATA_ROOTS_ENV} never opens hidden files or folders, system directories or jobtrail's own state."
    )
