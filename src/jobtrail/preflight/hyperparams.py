"""Hyperparameter names and values: the names TRL/transformers use, jobtrail's few extras
(methods/hyperparameters.py holds them with their defaults and types), the method's own inputs,
and the names jobtrail manages itself; each value against its field's type, choices and range.

An unknown name gets the field it most likely means, only among fields that take its value
(aliases.py), and the fix keeps the value: "Rename lr to learning_rate (0.001)".
"""

from __future__ import annotations

import json
from typing import Any

from jobtrail.methods.hyperparameters import JOB_DEFAULTS, PEFT_DEFAULTS, judge_value, takes_kind, trl_types
from jobtrail.methods.registry import method_spec
from jobtrail.models import Finding
from jobtrail.preflight.aliases import suggest

# Names jobtrail sets itself; passing them would fight the job runtime.
MANAGED: dict[str, str] = {
    "output_dir": "pass output=... to submit instead (a directory, or a Hub repo on remote backends)",
    "save_total_limit": "use checkpoint_retention (jobtrail never deletes the last committed checkpoint)",
    "push_to_hub": "remote backends always push to `output`; the local backend writes to disk",
    "hub_model_id": "pass output=... to submit instead",
    "resume_from_checkpoint": "jobtrail resumes from the newest committed checkpoint by itself",
}


def trl_fields(method: str) -> frozenset[str]:
    return frozenset(trl_types(method))


def known_names(method: str) -> set[str]:
    extras = set(method_spec(method).inputs)
    return (set(trl_fields(method)) | set(PEFT_DEFAULTS) | set(JOB_DEFAULTS) | extras) - set(MANAGED)


def check_names(method: str, hyperparameters: dict[str, Any]) -> list[Finding]:
    """Every name and value of `hyperparameters` for `method`: unknown and managed names, values
    the field cannot take, and strings read as the field's number or bool (info)."""
    known = known_names(method)
    findings: list[Finding] = []
    for name, value in hyperparameters.items():
        if name in MANAGED:
            findings.append(
                _error(
                    "hyperparameters.managed",
                    f"{name!r} is set by jobtrail, not through hyperparameters.",
                    MANAGED[name][0].upper() + MANAGED[name][1:] + ".",
                )
            )
        elif name not in known:
            findings.append(_unknown(method, name, value, known))
        else:
            findings += _value(method, name, value)
    return findings


def _unknown(method: str, name: str, value: Any, known: set[str]) -> Finding:
    found = suggest(name, value, known, lambda field, v: takes_kind(method, field, v))
    message = f"Unknown hyperparameter {name!r} for method {method!r}."
    if found is None:
        return _error(
            "hyperparameters.unknown",
            message,
            "Remove it; names follow TRL's config fields "
            f"(TRL's {method_spec(method).config_class}) and jobtrail's peft, lora_* and job options.",
        )
    field, keep = found
    return _error(
        "hyperparameters.unknown", f"{message} Did you mean {field!r}?", f"Rename {name} to {field} ({_show(keep)})."
    )


def _value(method: str, name: str, value: Any) -> list[Finding]:
    verdict = judge_value(method, name, value)
    if verdict.problem:
        return [_error("hyperparameters.value", verdict.problem, verdict.fix or f"Change {name}.")]
    if verdict.converted:
        return [
            Finding(
                code="hyperparameters.converted",
                severity="info",
                message=f"{name}={value!r} read as {_show(verdict.value)}, "
                f"the {type(verdict.value).__name__} the field takes.",
            )
        ]
    return []


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, float) else repr(value)


def _error(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="error", message=message, fix=fix)
