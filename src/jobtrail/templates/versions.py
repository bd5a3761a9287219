"""The versions jobtrail tested: the two lock files in data/, written by `make lock` (tools/lock.py).

- tested-versions.txt: jobtrail[train,gguf,dev] for this kind of machine's Python (3.11, Linux x86_64): what
  `make demo`, `make test` and CI install (pip's constraints file), so local jobs run in this set.
- job-versions.txt: every job template's dependencies (and the GPU-only extras: bitsandbytes, liger-kernel) for
  the HF Jobs image's Python (3.12), resolved against the first lock: a rendered job pins its header to these.

Both files are uv pip compile's output under a short header whose `# exclude-newer:` line is the moment they
were resolved: a rendered job's `[tool.uv] exclude-newer` says the same, so the packages its pins do not name
resolve as they did then (uv reads that setting in a script's header). Reading needs no network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from jobtrail.util.data import data_path

DEV_LOCK = "tested-versions.txt"  # the environment the suite passes in (and the server's, and local jobs')
JOB_LOCK = "job-versions.txt"  # what a rendered job installs
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)")
_CUTOFF = re.compile(r"^# exclude-newer: (?P<when>\S+)$", re.M)


@dataclass(frozen=True)
class Lock:
    name: str  # the file's name in data/
    exclude_newer: str  # ISO-8601 UTC: nothing released after it was considered
    versions: dict[str, str]  # canonical name → exact version

    def version_of(self, name: str) -> str | None:
        return self.versions.get(canonicalize_name(name))

    def require(self, name: str) -> str:
        """The version of a package the lock must name (a lock without it is broken: `make lock` writes it)."""
        version = self.version_of(name)
        if version is None:
            raise ValueError(f"{self.name} pins no {name}: regenerate it with `make lock`.")
        return version


def parse_lock(name: str, text: str) -> Lock:
    """A lock file's pins and cutoff. Raises ValueError for a file without its `# exclude-newer:` line."""
    cutoff = _CUTOFF.search(text)
    if cutoff is None:
        raise ValueError(f"{name} has no '# exclude-newer: <time>' line: regenerate it with `make lock`.")
    versions: dict[str, str] = {}
    for line in text.splitlines():
        pin = _PIN.match(line.strip())
        if pin:
            versions[canonicalize_name(pin["name"])] = pin["version"]
    return Lock(name=name, exclude_newer=cutoff["when"], versions=versions)


@cache
def environment_lock() -> Lock:
    return parse_lock(DEV_LOCK, data_path(DEV_LOCK).read_text())


@cache
def job_lock() -> Lock:
    return parse_lock(JOB_LOCK, data_path(JOB_LOCK).read_text())


def pin(requirement: str, lock: Lock) -> str:
    """`requirement` with its version specifier replaced by the lock's exact version (extras and markers kept).
    A requirement the lock does not name is returned as it is (the test of rendered headers catches one)."""
    req = Requirement(requirement)
    version = lock.version_of(req.name)
    if version is None:
        return requirement
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f"; {req.marker}" if req.marker else ""
    return f"{req.name}{extras}=={version}{marker}"


def same_release(installed: str, tested: str) -> bool:
    """Whether an installed version is the tested one; a local build label (torch's +cpu, +cu130) is the same
    release (PEP 440 compares public versions; the CPU and CUDA builds of one release run the same code)."""
    try:
        return Version(installed).public == Version(tested).public
    except InvalidVersion:
        return installed == tested
