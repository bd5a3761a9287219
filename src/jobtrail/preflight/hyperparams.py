"""Hyperparameter names and values: the names TRL/transformers use, jobtrail's few extras
(methods/hyperparameters.py holds them with their defaults and types), the method's own inputs,
and the names jobtrail manages itself; each value against its field's type, choices and range.

An unknown name gets the field it most likely means, only among fields that take its value
(aliases.py), and the fix keeps the value: "Rename lr to learning_rate (0.001)".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobtrail.methods import METHODS
from jobtrail.methods.hyperparameters import JOB_DEFAULTS, PEFT_DEFAULTS, judge_value, takes_kind, trl_types
from jobtrail.methods.registry import method_spec
from jobtrail.models import Finding
from jobtrail.preflight.aliases import suggest
from jobtrail.preflight.credentials import credential_name, credential_shape, walk
from jobtrail.preflight.remote_code import TRUST, check_trust_remote_code

# A name people write for a field (lr, batch, epochs, seq_len), read as that field with its value: said, not refused.
RENAMED = "hyperparameters.renamed"
# Two names given for one field with different values: which one was meant is not plain, so it is refused.
CONFLICT = "hyperparameters.conflict"
# A value of the right type beyond the range jobtrail judges sensible: refused, yet the job can be built
# with it, so force runs it (an absurd learning rate, to watch the job diverge and stop).
OUT_OF_RANGE = "hyperparameters.range"
# Names jobtrail sets itself; passing them would fight the job runtime.
MANAGED: dict[str, str] = {
    "output_dir": "pass output=... to submit instead (a directory, or a Hub repo on remote backends)",
    "save_total_limit": "use checkpoint_retention (jobtrail never deletes the last committed checkpoint)",
    "push_to_hub": "remote backends always push to `output`; the local backend writes to disk",
    "hub_model_id": "pass output=... to submit instead",
    "resume_from_checkpoint": "jobtrail resumes from the newest committed checkpoint by itself",
    "logging_nan_inf_filter": "leave it out: the job logs every loss as it is, so a NaN loss stops it (diverged) "
    "instead of being averaged away",
}


def meant_hyperparameter(method: str, name: str, value: Any) -> tuple[str, Any] | None:
    """(the hyperparameter, its value) that `name`, given to submit beside `hyperparameters` instead of inside it,
    is: its own name or a name people really write for it (lr), never a close spelling, which is more likely a
    misspelled argument of submit (datase). None when it is none. A credential is none: it is never echoed back,
    and it is refused as a hyperparameter anyway."""
    if credential_name(name) or _holds_credential(value) or name in MANAGED:
        return None
    known = known_names(method)
    if name in known:
        return name, value
    return suggest(name, value, known, lambda field, v: takes_kind(method, field, v), close=False)


@dataclass(frozen=True)
class NamedValues:
    """A job's hyperparameters under their fields' names, and what reading them so found."""

    values: dict[str, Any]
    findings: list[Finding]


def read_names(method: str, hyperparameters: Mapping[str, Any]) -> NamedValues:
    """Each name people really write for a field (aliases.py: lr, batch, epochs, seq_len; never a close spelling,
    which may be another field misspelled) read as that field, with the value given (a warmup percentage as the
    fraction it is), said by an info finding: the intent is plain, and refusing it would only send the agent back
    to rename it. Two names for one field with different values are refused, naming both; with the same value
    the field is read once. Every other name stays as given, for check_names to judge."""
    known = known_names(method)
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}  # field -> the name it was first given under
    findings: list[Finding] = []
    for name, value in hyperparameters.items():
        field, kept = field_of(method, name, value, known)
        if field in values:
            if judge_value(method, field, values[field]).value != judge_value(method, field, kept).value:
                findings.append(_conflict(field, (given_as[field], hyperparameters[given_as[field]]), (name, value)))
            continue
        values[field], given_as[field] = kept, name
        if field != name:
            findings.append(
                Finding(
                    code=RENAMED,
                    severity="info",
                    message=f"{name}={_show(value)} read as {field}={_show(kept)}"
                    + (" (a percentage, as the fraction of the run it is)" if kept != value else "")
                    + f": {field} is the field's own name.",
                )
            )
    return NamedValues(values, findings)


def with_changes(method: str, hyperparameters: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A retry's hyperparameters: the job's with `changes` applied, each change replacing its field's value under
    whichever name the job gave it (a change of learning_rate replaces the job's lr, and the reverse), so that a
    change never reads as a second, different value for the field it changes."""
    if method not in METHODS:
        return {**hyperparameters, **changes}
    known = known_names(method)
    changed = {field_of(method, name, value, known)[0] for name, value in changes.items()}
    kept = {n: v for n, v in hyperparameters.items() if field_of(method, n, v, known)[0] not in changed}
    return {**kept, **changes}


def changes_by_field(method: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """A retry's changes with each hyperparameter under its field's name (lr is learning_rate), so that the retry
    policy weighs the field changed (an OOM's retry needs per_device_train_batch_size, however it was written).
    As given for a job that is no training, or when two changes name one field: the plan refuses that, naming both."""
    if method not in METHODS:
        return dict(changes)
    read = read_names(method, changes)
    return dict(changes) if any(f.severity == "error" for f in read.findings) else read.values


def field_of(method: str, name: str, value: Any, known: set[str] | None = None) -> tuple[str, Any]:
    """(the field `name` stands for, its value): the alias's field for a name people really write for one that
    takes the value, else (name, value) as given."""
    known = known_names(method) if known is None else known
    if name in known or name in MANAGED or credential_name(name):
        return name, value
    found = suggest(name, value, known, lambda field, v: takes_kind(method, field, v), close=False)
    return found if found is not None else (name, value)


def _conflict(field: str, first: tuple[str, Any], second: tuple[str, Any]) -> Finding:
    names = " and ".join(f"{name}={_show(value)}" for name, value in (first, second))
    own = next((value for name, value in (first, second) if name == field), first[1])
    return _error(
        CONFLICT,
        f"{names} both set {field}, to different values: which one is meant is not plain.",
        f"Pass {field} once: hyperparameters={{{json.dumps(field)}: {_show(own)}}} with the other name left out.",
    )


def _holds_credential(value: Any) -> bool:
    return any(isinstance(item, str) and credential_shape(item) for _, item in walk(value))


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
        elif name != TRUST:  # judged wherever it appears, below: a JSON boolean, never a string read as one
            findings += _value(method, name, value)
    return findings + check_trust_remote_code(hyperparameters)


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
        code = OUT_OF_RANGE if verdict.out_of_range else "hyperparameters.value"
        return [_error(code, verdict.problem, verdict.fix or f"Change {name}.")]
    if verdict.converted:
        whole = _READ_WHOLE.get(name, "the library would read the string whole")
        why = f" ({whole})" if isinstance(verdict.value, list) else ""
        return [
            Finding(
                code="hyperparameters.converted",
                severity="info",
                message=f"{name}={value!r} read as {_show(verdict.value)}, "
                f"the {type(verdict.value).__name__} the field takes{why}.",
            )
        ]
    return []


# What one string would have meant to the library, for the list fields people write as "a,b".
_READ_WHOLE = {"lora_target_modules": "PEFT reads one string as one regex, which no module name matches"}


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, float) else repr(value)


def _error(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="error", message=message, fix=fix)
