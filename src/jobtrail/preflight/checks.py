"""Preflight checks: each looks at one thing and returns Findings (code, severity, message, fix).

Checks that need a fact from outside (a file, the job's Python environment) take it from
`probes`, so the rules here stay readable and testable on their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from jobtrail import hyperparams
from jobtrail.errors import BackendError
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight import probes

DATA_EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def looks_local(ref: str) -> bool:
    """A path the user meant as a file or directory, as opposed to a Hub id like 'org/name'."""
    return (
        ref.startswith(("/", "./", "../", "~"))
        or ref.endswith(DATA_EXTENSIONS)
        or Path(ref).expanduser().exists()
        or not _HUB_ID.match(ref)
    )


def check_model(spec: JobSpec) -> list[Finding]:
    if not looks_local(spec.model):
        return [_unverified_hub("model", spec.model)]
    path = Path(spec.model).expanduser()
    if not path.exists():
        return [
            Finding(
                code="model.missing",
                severity="error",
                message=f"Model directory {spec.model} does not exist.",
                fix="Pass an existing directory holding config.json, or a Hub id like 'Qwen/Qwen2.5-0.5B'.",
            )
        ]
    if not (path / "config.json").is_file():
        return [
            Finding(
                code="model.no_config",
                severity="error",
                message=f"{spec.model} has no config.json, so it is not a transformers model directory.",
                fix="Point model= at the directory that holds config.json and the weights.",
            )
        ]
    return []


def check_dataset(spec: JobSpec) -> list[Finding]:
    if not looks_local(spec.dataset):
        return [_unverified_hub("dataset", spec.dataset)]
    path = Path(spec.dataset).expanduser()
    if not path.exists():
        return [
            Finding(
                code="dataset.missing",
                severity="error",
                message=f"Dataset file {spec.dataset} does not exist.",
                fix="Pass an existing .jsonl, .json, .csv or .parquet file, or a Hub dataset id.",
            )
        ]
    if not path.is_file() or path.suffix.lower() not in DATA_EXTENSIONS:
        return [
            Finding(
                code="dataset.format",
                severity="error",
                message=f"{spec.dataset} is not a .jsonl, .json, .csv or .parquet file.",
                fix="Convert the data to JSON Lines (one example per line) and pass that file.",
            )
        ]
    if path.stat().st_size == 0:
        return [
            Finding(
                code="dataset.empty",
                severity="error",
                message=f"{spec.dataset} is empty.",
                fix="Write at least one example to the file.",
            )
        ]
    return []


def check_hyperparameters(spec: JobSpec) -> list[Finding]:
    return hyperparams.check_names(spec.method, spec.hyperparameters)


def check_dependencies(script: str, python: str) -> list[Finding]:
    try:
        missing = probes.missing_job_requirements(script, python)
    except BackendError as exc:
        return [
            Finding(
                code="dependencies.python",
                severity="error",
                message=f"The job's Python could not be checked: {exc.message}",
                fix="Set JOBTRAIL_PYTHON to a working interpreter that has jobtrail[train] installed.",
            )
        ]
    if not missing:
        return []
    return [
        Finding(
            code="dependencies.missing",
            severity="error",
            message=f"The job's Python ({python}) lacks: {', '.join(missing)}.",
            fix="Install the training extra into that environment: pip install 'jobtrail[train]'",
        )
    ]


def _unverified_hub(kind: str, ref: str) -> Finding:
    return Finding(
        code=f"{kind}.unverified",
        severity="warning",
        message=f"{kind.capitalize()} {ref!r} is a Hub id; it was not checked here and the job downloads it.",
        fix="Make sure the job's machine can reach the Hub, or pass a local path.",
    )


SpecCheck = Callable[[JobSpec], list[Finding]]
SPEC_CHECKS: tuple[SpecCheck, ...] = (check_model, check_dataset, check_hyperparameters)


def run_all(spec: JobSpec, script: str | None, python: str | None) -> list[Finding]:
    findings = [f for check in SPEC_CHECKS for f in check(spec)]
    if script is not None and python is not None:
        findings += check_dependencies(script, python)
    return findings


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]
