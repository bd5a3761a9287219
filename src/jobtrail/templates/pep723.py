"""PEP 723 inline script metadata: read a script's header, and check an interpreter against it.

`read_metadata` is pure. `check_interpreter` looks at installed distributions: in this
process when `python` is this interpreter, otherwise through a short subprocess of `python`
that reports facts only (installed versions, marker environment) using the standard library,
because the job's interpreter need not have `packaging`. The judging happens here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from jobtrail.errors import BackendError, InvalidRequestError
from jobtrail.templates.runtime import runtime_module

# The reference regular expression from PEP 723.
_BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
_SCRIPT_OPENING = re.compile(r"(?m)^# /// script$")
_HEADER_FIX = (
    "Write the header as PEP 723 shows it: a line `# /// script`, TOML lines each starting "
    "with `# ` (or a bare `#`), and a closing line `# ///`."
)
PROBE_TIMEOUT_S = 30.0

# Runs under the job's interpreter: standard library only, any Python 3.8+. It mirrors
# packaging.markers.default_environment so markers are judged for that interpreter.
_PROBE = r"""
import json, os, platform, sys
from importlib import metadata

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

info = sys.implementation.version
implementation_version = "{0.major}.{0.minor}.{0.micro}".format(info)
if info.releaselevel != "final":
    implementation_version += info.releaselevel[0] + str(info.serial)
environment = {
    "implementation_name": sys.implementation.name,
    "implementation_version": implementation_version,
    "os_name": os.name,
    "platform_machine": platform.machine(),
    "platform_release": platform.release(),
    "platform_system": platform.system(),
    "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "platform_python_implementation": platform.python_implementation(),
    "python_version": ".".join(platform.python_version_tuple()[:2]),
    "sys_platform": sys.platform,
}
names = json.loads(sys.argv[1])
print(json.dumps({"environment": environment, "versions": {n: version(n) for n in names}}))
"""


def read_metadata(script_text: str) -> dict[str, Any]:
    """The script's `# /// script` table; {} when it has none. Raises InvalidRequestError."""
    text = script_text.replace("\r\n", "\n")
    blocks = [m for m in _BLOCK.finditer(text) if m.group("type") == "script"]
    if len(blocks) > 1:
        raise InvalidRequestError("The script has more than one `# /// script` block.", fix=_HEADER_FIX)
    if not blocks:
        if _SCRIPT_OPENING.search(text):
            raise InvalidRequestError("The script's `# /// script` block is never closed.", fix=_HEADER_FIX)
        return {}
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:] for line in blocks[0].group("content").splitlines(keepends=True)
    )
    try:
        metadata = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequestError(f"The script's PEP 723 header is not valid TOML: {exc}", fix=_HEADER_FIX) from exc
    _validate(metadata)
    return metadata


@dataclass(frozen=True)
class InterpreterCheck:
    """An interpreter judged against a job's requirements."""

    missing: list[str]  # e.g. "trl>=1.16 (installed: 1.15.0)", "peft>=0.21 (not installed)"
    installed: dict[str, str]  # canonical name → version, for each requirement that applies and is installed


def check_interpreter(requirements: list[str], python: str) -> InterpreterCheck:
    """What the environment of interpreter `python` lacks of `requirements`, and what it has of them.

    Requirements whose marker excludes that interpreter are skipped; extras are not checked
    (only the distribution itself). Raises InvalidRequestError for an unparseable
    requirement, BackendError when `python` cannot be run.
    """
    parsed = [_parse_requirement(r) for r in requirements]
    if not parsed:
        return InterpreterCheck(missing=[], installed={})
    names: list[str] = sorted({canonicalize_name(r.name) for r in parsed})
    if _is_current_interpreter(python):
        environment = {key: str(value) for key, value in default_environment().items()}
        installed_version = runtime_module("_runtime").package_version  # the job's own way of asking
        versions = {name: installed_version(name) for name in names}
    else:
        environment, versions = _probe_interpreter(python, names)
    missing: list[str] = []
    installed: dict[str, str] = {}
    for req in parsed:
        if req.marker is not None and not req.marker.evaluate(environment):
            continue
        version = versions.get(canonicalize_name(req.name))
        if version is None:
            missing.append(f"{_describe(req)} (not installed)")
            continue
        installed[canonicalize_name(req.name)] = version
        if not _satisfies(req.specifier, version):
            missing.append(f"{_describe(req)} (installed: {version})")
    return InterpreterCheck(missing=missing, installed=installed)


def _validate(metadata: dict[str, Any]) -> None:
    dependencies = metadata.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise InvalidRequestError(
            "The PEP 723 `dependencies` must be a list of strings.",
            fix='Write it like: dependencies = ["trl>=1.16", "peft>=0.21"]',
        )
    for dependency in dependencies:
        _parse_requirement(dependency)
    requires_python = metadata.get("requires-python")
    if requires_python is not None:
        try:
            SpecifierSet(str(requires_python))
        except InvalidSpecifier as exc:
            raise InvalidRequestError(
                f"The PEP 723 `requires-python` {requires_python!r} is not a version specifier.",
                fix='Write it like: requires-python = ">=3.11"',
            ) from exc


def _parse_requirement(text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise InvalidRequestError(
            f"{text!r} is not a valid requirement: {exc}", fix='Write it as PEP 508 says, e.g. "trl>=1.16".'
        ) from exc


def _describe(req: Requirement) -> str:
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{req.name}{extras}{req.specifier}"


def _satisfies(specifier: SpecifierSet, installed: str) -> bool:
    try:
        # What is installed is what the job gets, pre-release or not.
        return specifier.contains(Version(installed), prereleases=True)
    except InvalidVersion:
        return False


def _is_current_interpreter(python: str) -> bool:
    path = os.path.abspath(shutil.which(python) or python)
    if path == os.path.abspath(sys.executable):
        return True
    # A venv's python is a symlink to its base interpreter, so the real path alone cannot
    # tell environments apart: a venv's python is ours only when the venv is ours.
    venv = _venv_root(path)
    if venv is not None:
        return os.path.realpath(venv) == os.path.realpath(sys.prefix)
    in_venv = sys.prefix != sys.base_prefix
    return not in_venv and os.path.realpath(path) == os.path.realpath(sys.executable)


def _venv_root(path: str) -> Path | None:
    # PEP 405: pyvenv.cfg sits next to the executable or one directory above it.
    here = Path(path).parent
    return next((d for d in (here, here.parent) if (d / "pyvenv.cfg").exists()), None)


def _probe_interpreter(python: str, names: list[str]) -> tuple[dict[str, str], dict[str, str | None]]:
    fix = "Point the local backend at an existing, working Python (JOBTRAIL_PYTHON)."
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, json.dumps(names)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"Could not run the job interpreter {python!r}: {exc}", fix=fix) from exc
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        detail = (done.stderr or done.stdout).strip()[-500:]
        raise BackendError(
            f"The job interpreter {python!r} could not list its packages (exit {done.returncode}): {detail}", fix=fix
        ) from exc
    return report["environment"], report["versions"]
