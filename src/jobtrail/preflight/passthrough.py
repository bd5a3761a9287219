"""Bounds on values jobtrail hands the trainer as they are: where a tracker reports (report_to: what jobtrail
supports, trackio or none, never "all", which is every integration installed in the job's environment, each with its
own service, credentials and uploads) and how many worker processes it forks (dataloader_num_workers,
dataset_num_proc: at most the CPUs of the job's machine, this one's for a local job, the flavor's for HF Jobs).

    check_passthrough(spec)   errors that keep the config from being built (rules.check_hyperparameters')
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from jobtrail.backends.registry import traits_of
from jobtrail.estimate.hardware import BUNDLED
from jobtrail.methods.hyperparameters import judge_value
from jobtrail.models import Finding, JobSpec

SUPPORTED_REPORT_TO = ("trackio", "none")
WORKER_FIELDS = ("dataloader_num_workers", "dataset_num_proc")
_VCPUS = re.compile(r"(\d+)\s*vCPU")


def check_passthrough(spec: JobSpec) -> list[Finding]:
    h = spec.hyperparameters
    findings = _report_to(spec.method, h["report_to"]) if "report_to" in h else []
    cpus, machine = machine_cpus(spec)
    for name in WORKER_FIELDS:
        if name not in h or cpus is None:
            continue
        reading = judge_value(spec.method, name, h[name])
        count = reading.value
        if reading.problem or not isinstance(count, int) or isinstance(count, bool) or count <= cpus:
            continue  # a wrong value is check_names' to refuse
        findings.append(
            Finding(
                code="hyperparameters.workers",
                severity="error",
                message=f"{name}={count} is more processes than {machine} has CPUs ({cpus}): each is a process of "
                "its own, and more than the CPUs only wait for each other (or exhaust the machine).",
                fix=f"Set {name} to {cpus} or fewer (e.g. {min(cpus, 4)}), or leave it out.",
            )
        )
    return findings


def machine_cpus(spec: JobSpec) -> tuple[int | None, str]:
    """(the CPUs of the job's machine, how to name it): this machine's for a local job, the flavor's vCPUs from the
    bundled hardware table for HF Jobs (None where the flavor is not in it, or the backend has no flavors)."""
    backend = traits_of(spec.backend)
    if backend.runs_here:
        return os.cpu_count(), "this machine"
    flavor = next((f for f in BUNDLED if f.name == spec.flavor), None) if backend.flavors else None
    found = _VCPUS.search(flavor.cpu) if flavor and flavor.cpu else None
    return (int(found[1]), f"the {flavor.name} flavor") if found and flavor else (None, backend.place)


def _report_to(method: str, value: Any) -> list[Finding]:
    reading = judge_value(method, "report_to", value)
    if reading.problem:
        return []  # not a name the trainer knows: check_names refuses it with the choices
    names = [reading.value] if isinstance(reading.value, str) else list(reading.value or [])
    other = [name for name in names if name not in SUPPORTED_REPORT_TO]
    if not other:
        return []
    everything = " (every tracking integration installed in the job's environment)" if "all" in other else ""
    return [
        Finding(
            code="hyperparameters.report_to",
            severity="error",
            message=f"report_to={json.dumps(value)}: jobtrail tracks a job with trackio, or nothing; "
            f"{', '.join(other)}{everything} would send the run to services jobtrail neither configures nor shows.",
            fix='Pass "report_to": "trackio" (the default: the dashboard jobtrail shows), or "report_to": "none".',
        )
    ]
