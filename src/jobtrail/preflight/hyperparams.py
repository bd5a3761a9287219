"""Hyperparameter names: the ones TRL/transformers use, jobtrail's few extras (templates/defaults.py
holds them with their defaults), the method's own inputs, and the names jobtrail manages itself.

The TRL field list is bundled (trl_config_fields.json) so the server can check names without
importing trl; a test compares it with the installed TRL so it cannot drift silently.
"""

from __future__ import annotations

import difflib
from functools import cache
from typing import Any

from jobtrail.methods.registry import method_spec
from jobtrail.models import Finding
from jobtrail.templates.defaults import JOB_DEFAULTS, PEFT_DEFAULTS
from jobtrail.util.data import load_table

# Names jobtrail sets itself; passing them would fight the job runtime.
MANAGED: dict[str, str] = {
    "output_dir": "pass output=... to submit instead (a directory, or a Hub repo on remote backends)",
    "save_total_limit": "use checkpoint_retention (jobtrail never deletes the last committed checkpoint)",
    "push_to_hub": "remote backends always push to `output`; the local backend writes to disk",
    "hub_model_id": "pass output=... to submit instead",
    "resume_from_checkpoint": "jobtrail resumes from the newest committed checkpoint by itself",
}


@cache
def trl_fields(method: str) -> frozenset[str]:
    data = load_table("trl_config_fields.json")
    return frozenset(data[method])


def known_names(method: str) -> set[str]:
    extras = set(method_spec(method).inputs)
    return (set(trl_fields(method)) | set(PEFT_DEFAULTS) | set(JOB_DEFAULTS) | extras) - set(MANAGED)


def check_names(method: str, hyperparameters: dict[str, Any]) -> list[Finding]:
    known = known_names(method)
    findings: list[Finding] = []
    for name in hyperparameters:
        if name in MANAGED:
            findings.append(
                Finding(
                    code="hyperparameters.managed",
                    severity="error",
                    message=f"{name!r} is set by jobtrail, not through hyperparameters.",
                    fix=MANAGED[name][0].upper() + MANAGED[name][1:] + ".",
                )
            )
        elif name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            hint = f"Did you mean {' or '.join(repr(c) for c in close)}?" if close else None
            findings.append(
                Finding(
                    code="hyperparameters.unknown",
                    severity="error",
                    message=f"Unknown hyperparameter {name!r} for method {method!r}." + (f" {hint}" if hint else ""),
                    fix=f"Rename it to {close[0]!r}." if close else "Remove it; names follow TRL's config fields.",
                )
            )
    if hyperparameters.get("peft", "lora") not in ("lora", "qlora", "none"):
        findings.append(
            Finding(
                code="hyperparameters.peft",
                severity="error",
                message=f"peft={hyperparameters['peft']!r} is not supported.",
                fix='Use peft="lora" (adapter), "qlora" (adapter on a 4-bit base, CUDA only) or "none" '
                "(full fine-tuning).",
            )
        )
    return findings
