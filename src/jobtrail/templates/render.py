"""Job config → one self-contained PEP 723 script. Pure and deterministic.

A template in scripts/ is an ordinary Python file that runs as it is (next to the job runtime
modules scripts/_*.py: _runtime.py, _training.py, _mapping.py, ...; templates/runtime.py loads them
into the server where it needs the same logic). Rendering touches two marked blocks and, for a
job that needs more packages (extra_requirements: QLoRA, Liger kernels) or fewer (unneeded_requirements:
trackio when its report_to leaves it out), the header's dependency list, and nothing else:

    # --- jobtrail:runtime ---      the `from _module import ...` lines become those modules'
                                   sources (and the modules they import, in the same way), each
                                   inlined once, dependencies first
    # --- jobtrail:config ---       the example CONFIG becomes the job's config as one JSON literal

so the rendered script never imports jobtrail and runs anywhere its header's dependencies exist. A
remote job's header also gets a `[tool.hf-jobs]` table (PEP 723 allows [tool] tables) saying how it
runs there: flavor, timeout and the NAMES of its secrets (never a value), so the script alone tells.

A template's header lists lower bounds: the oldest releases whose API it is written against. A rendered
job runs the versions jobtrail tested (dependency_versions="tested", the default): each dependency pinned
to the job lock's exact version and a `[tool.uv]` table whose exclude-newer is the lock's resolution
time, so uv resolves the packages the pins do not name as they resolved then (templates/versions.py).
Exact pins rather than a script lock file: the script stays one self-contained file, and the pins are
readable in the receipt's script. dependency_versions="newest" keeps the lower bounds: the job installs
whatever is newest when it starts (preflight warns: untested).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from jobtrail.errors import InvalidRequestError
from jobtrail.models import DEFAULT_DEPENDENCY_VERSIONS, DependencyVersions
from jobtrail.templates.trackio_target import TRACKIO, reports_to_trackio
from jobtrail.templates.versions import job_lock, pin
from jobtrail.util.data import shipped_dir
from jobtrail.util.digest import config_json

RUNTIME_MODULE = "_runtime.py"
_BLOCK = r"(?ms)^# --- jobtrail:{name} ---\n.*?^# --- end jobtrail:{name} ---\n"
_RUNTIME_IMPORT = re.compile(r"(?m)^from (_\w+) import\b")
# The header's dependencies array, on one line or spread over several.
_DEPENDENCIES = re.compile(r"(?ms)^# dependencies = \[(.*?)\]$")
_HEADER_END = re.compile(r"(?m)^# ///$")  # the first one closes the `# /// script` block at the top
HF_JOBS_TABLE = "tool.hf-jobs"
UV_TABLE = "tool.uv"
_QUOTED = re.compile(r'"([^"]+)"')
# QLoRA loads 4-bit weights through bitsandbytes, which only GPU jobs can use: the header asks for
# it only then, so CPU jobs never need it installed (transformers 5.23 wants at least 0.46.1).
QLORA_REQUIREMENT = "bitsandbytes>=0.46.1"
# use_liger_kernel=True (preflight/speedups.py turns it on for SFT on A100/H100/H200) patches the model
# with liger-kernel's Triton kernels: a job asks for it only then.
LIGER_REQUIREMENT = "liger-kernel>=0.8"


def scripts_dir() -> Path:
    """scripts/ inside an installed wheel, else the source checkout's top-level scripts/."""
    found = shipped_dir("scripts", RUNTIME_MODULE)
    if found is not None:
        return found
    raise InvalidRequestError(
        "The job templates (scripts/) are missing from this installation.",
        fix="Reinstall jobtrail: pip install --force-reinstall jobtrail",
    )


def template_names(templates: Path | None = None) -> list[str]:
    """The job templates in scripts/: every .py file but the runtime modules (named _*)."""
    root = templates or scripts_dir()
    return sorted(p.stem for p in root.glob("*.py") if not p.name.startswith("_"))


def render_script(
    template: str,
    config: dict[str, Any],
    *,
    templates: Path | None = None,
    hf_jobs: Mapping[str, str | list[str]] | None = None,
    dependency_versions: DependencyVersions = DEFAULT_DEPENDENCY_VERSIONS,
) -> str:
    """Return the script text for `template` (e.g. "sft") with `config` baked in; `hf_jobs`: the
    [tool.hf-jobs] table of a remote job's header (flavor, timeout, secrets: names only);
    `dependency_versions`: "tested" pins the header to the job lock, "newest" keeps the template's bounds."""
    root = templates or scripts_dir()
    path = root / f"{template}.py"
    if not path.is_file():
        raise InvalidRequestError(
            f"No job template named {template!r}.", fix=f"Use one of: {', '.join(template_names(root))}"
        )
    source = path.read_text()
    source = _replace_block(source, "runtime", runtime_block(source, root))
    training_args = config.get("training_args") or {}
    for name in unneeded_requirements(training_args):
        source = _drop_requirement(source, name)
    for requirement in extra_requirements((config.get("peft") or {}).get("method"), training_args):
        source = _add_requirement(source, requirement)
    if hf_jobs:
        source = _add_tool_table(source, HF_JOBS_TABLE, hf_jobs)
    if dependency_versions == "tested":
        source = _pin_requirements(source)
        source = _add_tool_table(source, UV_TABLE, {"exclude-newer": job_lock().exclude_newer})
    snapshot = config_json(config)
    return _replace_block(source, "config", f"CONFIG: dict = json.loads({snapshot!r})\n")


def extra_requirements(peft_method: str | None, training_args: dict[str, Any]) -> list[str]:
    """What a job needs beyond its template's header: bitsandbytes for QLoRA, liger-kernel for Liger's kernels."""
    return [
        *([QLORA_REQUIREMENT] if peft_method == "qlora" else []),
        *([LIGER_REQUIREMENT] if training_args.get("use_liger_kernel") else []),
    ]


def unneeded_requirements(training_args: Mapping[str, Any]) -> list[str]:
    """Names in a template's header a job does without: trackio when its report_to leaves trackio out (the
    header lists it for the template's own report_to, so the template runs as it is)."""
    return [] if reports_to_trackio(training_args) else [TRACKIO]


def job_requirements(header: list[str], peft_method: str | None, training_args: dict[str, Any]) -> list[str]:
    """A job's dependencies, as its rendered header lists them: its template's `header` less what it does
    without, and what it needs beyond (render_script writes the same into the script)."""
    unneeded = set(unneeded_requirements(training_args))
    kept = [r for r in header if canonicalize_name(Requirement(r).name) not in unneeded]
    return [*kept, *extra_requirements(peft_method, training_args)]


def runtime_block(template_source: str, root: Path) -> str:
    """The sources of the runtime modules the template imports, dependencies first, each once: what a rendered job
    inlines (tests build their own jobs of the runtime with it)."""
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in chain:
            cycle = " -> ".join((*chain, name))
            raise InvalidRequestError(f"Job runtime modules import each other in a cycle: {cycle}.")
        path = root / f"{name}.py"
        if not path.is_file():
            raise InvalidRequestError(
                f"The job runtime module scripts/{name}.py is missing.", fix="Reinstall jobtrail."
            )
        for dependency in runtime_imports(path.read_text()):
            visit(dependency, (*chain, name))
        order.append(name)

    for name in runtime_imports(template_source):
        visit(name, ())
    return "".join(_inlined(name, (root / f"{name}.py").read_text()) for name in order)


def _inlined(name: str, module_source: str) -> str:
    # A module's own `from _other import ...` block goes: _other is inlined before it.
    body = re.sub(_BLOCK.format(name="runtime"), "", module_source).rstrip() + "\n"
    return f"# Inlined from scripts/{name}.py (the job runtime).\n{body}"


def _add_requirement(source: str, requirement: str) -> str:
    found = _DEPENDENCIES.search(source)
    if found is None or '"' not in found.group(1):
        raise InvalidRequestError("Template header must list its dependencies in one '# dependencies = [...]' array.")
    after_last = found.start(1) + found.group(1).rindex('"') + 1  # the new one follows the last one listed
    return source[:after_last] + f", {json.dumps(requirement)}" + source[after_last:]


def _drop_requirement(source: str, name: str) -> str:
    """The header's dependencies without `name`'s entry; a line it leaves empty goes too."""
    found = _DEPENDENCIES.search(source)
    if found is None:
        raise InvalidRequestError("Template header must list its dependencies in one '# dependencies = [...]' array.")
    entry = re.compile(rf'"{re.escape(name)}(?![\w.-])[^"]*"[ \t]*,?[ \t]*', re.IGNORECASE)
    kept = re.sub(r"(?m)^#[ \t]*\n", "", entry.sub("", found.group(1)))
    return source[: found.start(1)] + kept + source[found.end(1) :]


def _pin_requirements(source: str) -> str:
    """The header's dependencies, each pinned to the job lock's version."""
    found = _DEPENDENCIES.search(source)
    if found is None:
        raise InvalidRequestError("Template header must list its dependencies in one '# dependencies = [...]' array.")
    lock = job_lock()
    pinned = _QUOTED.sub(lambda m: json.dumps(pin(m.group(1), lock)), found.group(1))
    return source[: found.start(1)] + pinned + source[found.end(1) :]


def _add_tool_table(source: str, name: str, values: Mapping[str, str | list[str]]) -> str:
    """A TOML table at the end of the header: strings and lists of strings as JSON writes them (valid TOML
    basic strings, escapes included), so no value can break out of its line or the header."""
    end = _HEADER_END.search(source)
    if end is None:
        raise InvalidRequestError("Template header must close its '# /// script' block with '# ///'.")
    lines = [f"# [{name}]\n"] + [f"# {key} = {json.dumps(value)}\n" for key, value in values.items()]
    return source[: end.start()] + "".join(lines) + source[end.start() :]


def runtime_imports(module_source: str) -> list[str]:
    """The runtime modules a module's `# --- jobtrail:runtime ---` block imports (inlined before it in a job)."""
    return list(_RUNTIME_IMPORT.findall(_block_text(module_source, "runtime")))


def _block_text(source: str, name: str) -> str:
    found = re.findall(_BLOCK.format(name=name), source)
    return found[0] if len(found) == 1 else ""


def _replace_block(source: str, name: str, body: str) -> str:
    pattern = re.compile(_BLOCK.format(name=name))
    if len(pattern.findall(source)) != 1:
        raise InvalidRequestError(f"Template is missing its '# --- jobtrail:{name} ---' block.")
    marker_open, marker_close = f"# --- jobtrail:{name} ---\n", f"# --- end jobtrail:{name} ---\n"
    return pattern.sub(lambda _: marker_open + body + marker_close, source)
