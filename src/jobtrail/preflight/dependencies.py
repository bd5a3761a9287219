"""Preflight of the job's libraries: what the job's Python lacks (an error: the job is written against the API of
its template's lower bounds) and where the versions it will run are not the ones jobtrail tested (a warning: a
local interpreter with others, or a remote job that asked for the newest releases). Pure: the facts come from
facts.gather_requirements."""

from __future__ import annotations

from jobtrail.backends.registry import traits_of
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight.facts import Facts
from jobtrail.templates.versions import job_lock

# The libraries a remote job's "untested" warning names the tested versions of.
TESTED_LIBRARIES = ("torch", "transformers", "trl", "peft", "datasets")
# The extras a job's interpreter needs, by template (training templates need "train").
_JOB_EXTRAS = {"convert_gguf": "train,gguf"}


def check_dependencies(spec: JobSpec, facts: Facts) -> list[Finding]:
    extras = _JOB_EXTRAS.get(spec.method, "train")
    if facts.python_error:
        return [
            Finding(
                code="dependencies.python",
                severity="error",
                message=f"The job's Python could not be checked: {facts.python_error}",
                fix=f"Set JOBTRAIL_PYTHON to a working interpreter that has jobtrail[{extras}] installed.",
            )
        ]
    if not facts.missing_requirements:
        return _untested_versions(spec, facts)
    missing = Finding(
        code="dependencies.missing",
        severity="error",
        message=f"The job's Python lacks: {', '.join(facts.missing_requirements)} (the job is written against "
        "these releases' API).",
        fix=f"Install the job's extras into that environment: pip install 'jobtrail[{extras}]'",
    )
    return [missing, *_untested_versions(spec, facts)]


def _untested_versions(spec: JobSpec, facts: Facts) -> list[Finding]:
    """A warning where the job runs library versions jobtrail did not test: a local job's interpreter that has
    others, or a remote job that asked for the newest releases (dependency_versions="newest")."""
    risk = (
        "a release can rename or drop an argument the job passes, change a default (the same config trains "
        "differently) or the checkpoint format"
    )
    if not traits_of(spec.backend).runs_here and spec.dependency_versions == "newest":
        lock = job_lock()
        tested = ", ".join(f"{name} {lock.require(name)}" for name in TESTED_LIBRARIES if lock.version_of(name))
        return [
            Finding(
                code="dependencies.untested",
                severity="warning",
                message=f'dependency_versions="newest": the job installs the newest releases when it starts, '
                f"which jobtrail has not tested ({tested} were, as of {lock.exclude_newer}); {risk}.",
                fix='Leave dependency_versions out (it defaults to "tested") to run the tested versions.',
            )
        ]
    if not facts.untested_requirements:
        return []
    untested = facts.untested_requirements
    pins = " ".join(f'"{u.name}=={u.tested}"' for u in untested)
    return [
        Finding(
            code="dependencies.untested",
            severity="warning",
            message=f"The job's Python has versions jobtrail has not tested: {', '.join(map(str, untested))}. "
            f"The job runs with them, but {risk}.",
            fix=f"Install the tested versions into the job's Python: pip install {pins}",
        )
    ]
