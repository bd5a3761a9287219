"""Facts preflight needs from outside the process: kept apart so the rules stay pure."""

from __future__ import annotations

from jobtrail import pep723


def missing_job_requirements(script: str, python: str) -> list[str]:
    """The script's PEP 723 dependencies that the interpreter `python` does not satisfy.

    Raises BackendError when `python` cannot be run at all.
    """
    requirements = pep723.read_metadata(script).get("dependencies", [])
    return pep723.missing_requirements(list(requirements), python)
