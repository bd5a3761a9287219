"""Effective hyperparameters: every default under the user's values, merged once, here.

preflight/plan.py computes them once per job and hands the one result to every reader: the rules,
the method checks, the speedups, the estimate and the config builder (templates/configs.py), so a
value the user left out is the one the job will run with wherever it is judged. Every input that
changes them is an argument: the method, the user's values, and whether there is an eval_dataset
(an eval_split_ratio is one of the values). The user's values are read as their fields' types
first ("2e-4" → 2e-4; preflight says so), so the config never holds a number as a string. Pure.

    effective: (method, hyperparameters, eval_dataset) -> Effective(training_args, peft, job, inputs)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobtrail.methods.hyperparameters import JOB_DEFAULTS, PEFT_DEFAULTS, trl_types, typed
from jobtrail.methods.registry import METHOD_INPUTS, TRL_DEFAULTS, method_spec

__all__ = ["Effective", "effective"]

# Evaluation during training, once there is something to evaluate on (an eval_dataset, or an
# eval_split_ratio slice of the training rows): TRL's eval_strategy "no" becomes "steps", every tenth
# of the run (an eval_steps below 1 is a fraction of the total steps), unless the user chose.
EVAL_DEFAULTS: dict[str, Any] = {"eval_strategy": "steps", "eval_steps": 0.1}
# The config's peft block, by the hyperparameter each entry comes from.
_PEFT_BLOCK = {
    "method": "peft",
    "r": "lora_r",
    "alpha": "lora_alpha",
    "dropout": "lora_dropout",
    "target_modules": "lora_target_modules",
}


@dataclass(frozen=True)
class Effective:
    """One job's hyperparameters with every default filled in, sorted by where they go. Shared by every
    reader of a plan: a reader that edits one (the config builder) edits its own copy."""

    method: str
    training_args: dict[str, Any]  # the TRL config's arguments: the method's defaults under the user's values
    peft: dict[str, Any]  # the config's peft block: {"method", "r", "alpha", "dropout", "target_modules"}
    job: dict[str, Any]  # jobtrail's job options (checkpoint_retention, dataset_split, eval_split_ratio, ...)
    inputs: dict[str, Any]  # the method's own knobs (GRPO's rewards), defaults filled in
    given: Mapping[str, Any]  # the user's values, read as their fields' types

    @property
    def judged(self) -> dict[str, Any]:
        """Every value the job runs with, TRL's own defaults included where jobtrail sets none:
        what the rules judge."""
        return {**TRL_DEFAULTS, **self.inputs, **self.training_args}

    @property
    def peft_method(self) -> str:
        return str(self.peft["method"])

    def runs_with(self, name: str) -> Any:
        """TRL config field `name` as the job runs it: the user's or jobtrail's value, else TRL's own default
        (the bundled table); None for a field the method's config lacks."""
        if name in self.training_args:
            return self.training_args[name]
        field = trl_types(self.method).get(name)
        return field.default if field else None


def effective(method: str, hyperparameters: Mapping[str, Any], *, eval_dataset: bool) -> Effective:
    """Defaults + the user's `hyperparameters` for `method` (ValueError for an unknown method).

    eval_dataset: the job has one (submit(eval_dataset=...)); with it, or an eval_split_ratio, the job
    evaluates during training (EVAL_DEFAULTS). No default: a caller that forgot it would judge a job
    that evaluates as one that does not."""
    spec = method_spec(method)
    given = typed(method, hyperparameters)
    merged = {**spec.defaults, **PEFT_DEFAULTS, **JOB_DEFAULTS, **given}
    inputs = {name: merged.pop(name, default) for name, default in spec.inputs.items()}
    for name in METHOD_INPUTS:  # another method's knobs: refused by the name check, never TRL's
        merged.pop(name, None)
    peft = {key: merged.pop(name) for key, name in _PEFT_BLOCK.items()}
    job = {name: merged.pop(name) for name in JOB_DEFAULTS}
    if eval_dataset or job["eval_split_ratio"]:
        merged.update({name: value for name, value in EVAL_DEFAULTS.items() if name not in given})
    return Effective(method=method, training_args=merged, peft=peft, job=job, inputs=inputs, given=given)
