"""lora_target_modules against the model's own modules, matched as PEFT matches them. Pure.

PEFT adapts a module when a listed name is the module's path or its last parts ('q_proj' matches
'model.layers.0.self_attn.q_proj'), or, for one string, when the string as a regex matches the whole path
("q_proj|v_proj" matches nothing: it stops the job with NoMatchingPeftModuleError). The model's modules are
known from its weights (the safetensors names: every path), else from its architecture (the bundled table of
the modules each model type builds: names only, and the model's own code may differ, so a miss there warns).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection

from jobtrail.models import Finding, JobSpec
from jobtrail.preflight.architectures import lora_modules
from jobtrail.preflight.facts import Facts
from jobtrail.preflight.probes import ModelFacts

ALL_LINEAR = "all-linear"  # PEFT's own choice of every linear layer but the output head
_NORM = re.compile(r"norm|^ln(_|\d|$)", re.IGNORECASE)  # layer norms hold weights, yet LoRA cannot adapt them


def check_lora_targets(spec: JobSpec, facts: Facts) -> list[Finding]:
    peft = facts.job_values.peft
    targets, model = peft["target_modules"], facts.model
    if peft["method"] == "none" or targets == ALL_LINEAR or model is None or model.access != "ok":
        return []
    if not isinstance(targets, str | list):  # a value the field cannot take: the hyperparameter rules refuse it
        return []
    model_type = str((model.config or {}).get("model_type") or "")
    built = lora_modules(model_type)
    if model.module_names is None and built is None:
        return [
            Finding(
                code="lora.targets_unverified",
                severity="warning",
                message="Could not read the model's module names (no safetensors weights to read, and model_type "
                f"{model_type!r} is not in the table of architectures), so lora_target_modules was not checked.",
                fix=f'Use "{ALL_LINEAR}" to let PEFT pick every linear layer.',
            )
        ]
    if isinstance(targets, str):
        return _pattern(spec, targets, model)
    names = set(model.module_names or ()) | (built.linear | built.embedding if built else set())
    missing = [t for t in targets if not _listed_matches(str(t), names, model.module_paths)]
    if not missing:
        return []
    suggested = _suggested(model, built.linear if built else None)
    found, where = (
        ("do not exist in", spec.model)
        if model.module_names is not None
        else ("are not modules of", f"{model_type} models (its architecture's modules)")
    )
    return [
        Finding(
            code="lora.targets",
            # The weights name every module; the architecture's table names those transformers builds, which a
            # model's own code may not: a miss there is likely, not certain.
            severity="error" if model.module_names is not None else "warning",
            message=f"lora_target_modules {missing} {found} {where}: PEFT would stop the job "
            f"(NoMatchingPeftModuleError). Its modules LoRA can adapt: {', '.join(suggested)}.",
            fix=f"Pass hyperparameters={json.dumps({'lora_target_modules': suggested})}, or "
            f'"{ALL_LINEAR}" to let PEFT pick every linear layer.',
        )
    ]


def _pattern(spec: JobSpec, pattern: str, model: ModelFacts) -> list[Finding]:
    """One string is a regex that must match a module's whole path (only the weights name the paths)."""
    paths = model.module_paths
    try:
        compiled: re.Pattern[str] | None = re.compile(pattern)
    except re.error as exc:
        compiled, problem = None, f"is not a valid regex ({exc})"
    if compiled is not None:
        if paths is None or any(compiled.fullmatch(path) for path in paths):
            return []
        problem = f"matches the whole path of none of {spec.model}'s modules"
    names = [part for part in re.split(r"[|()]", pattern) if part]
    meant = names if names and set(names) <= set(model.module_names or ()) else _suggested(model, None)
    example = next((path for path in paths or () if path.rsplit(".", 1)[-1] in meant), None)
    if compiled is not None and example:
        problem += f" (such as {example!r})"
    return [
        Finding(
            code="lora.targets",
            severity="error",
            message=f"lora_target_modules={pattern!r} {problem}: PEFT reads one string as one regex over the "
            "whole module path, and would stop the job (NoMatchingPeftModuleError).",
            fix=f"Pass the names as a list: hyperparameters={json.dumps({'lora_target_modules': meant})}, or "
            f'"{ALL_LINEAR}".',
        )
    ]


def _listed_matches(target: str, names: Collection[str], paths: list[str] | None) -> bool:
    """Whether PEFT adapts some module for `target` in a list: a path that is it or ends with it."""
    if paths is not None and any(path == target or path.endswith(f".{target}") for path in paths):
        return True
    return target.rsplit(".", 1)[-1] in names and (paths is None or "." not in target)


def _suggested(model: ModelFacts, linear: Collection[str] | None) -> list[str]:
    """The model's repeated linear layers (those of every block): its weights' names that recur and are no layer
    norm, else the architecture's linear layers but the output head."""
    leaves = Counter(path.rsplit(".", 1)[-1] for path in model.module_paths or ())
    repeated = sorted(leaf for leaf, times in leaves.items() if times > 1 and not _NORM.search(leaf))
    return (
        repeated or sorted(set(linear or ()) - {"lm_head"}) or sorted(leaf for leaf in leaves if not _NORM.search(leaf))
    )
