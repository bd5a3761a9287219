"""Code a job would run that nobody wrote here: a model's own Python (trust_remote_code, a local model directory's
auto_map and .py files) and Hub kernels (an attn_implementation naming a Hub repo, which `kernels` downloads and
loads). Each is allowed, never silently; a trust_remote_code that is no JSON boolean is refused, since Python reads
the string "false" as true.

    check_trust_remote_code(hyperparameters)        pure: hyperparams.check_names' part (its errors block the config)
    remote_code(model, hyperparameters, runs_here)  the model directory's code and Hub kernels: plan.py's findings
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobtrail.models import Finding
from jobtrail.preflight.credentials import dotted, walk
from jobtrail.util.data import read_json_object
from jobtrail.util.refs import looks_local
from jobtrail.util.values import type_name

TRUST = "trust_remote_code"
# The strings people write for a boolean: the fix proposes the JSON boolean they meant.
_MEANT = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False, "on": True, "off": False}
# transformers' Hub kernel syntax: org/name, optionally @revision and :function.
_KERNEL_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(?:@[\w./-]+)?(?::[\w.-]+)?")
# Files whose auto_map names the modules transformers imports from the model's directory.
_AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
_SHOWN = 6
_OFFLINE = ("1", "true", "yes", "on")


def check_trust_remote_code(hyperparameters: Mapping[str, Any]) -> list[Finding]:
    """Wherever trust_remote_code appears (top level, model_init_kwargs, ref_model_init_kwargs ...) it is a JSON
    boolean or null; true is a warning that says what it runs."""
    findings: list[Finding] = []
    trusted = False
    for path, value in walk(dict(hyperparameters)):
        if not path or path[-1] != TRUST or value is None:
            continue
        if isinstance(value, bool):
            trusted |= value
            continue
        meant = _MEANT.get(str(value).strip().lower()) if isinstance(value, str | int) else None
        fix = json.dumps(meant) if meant is not None else "true or false"
        findings.append(
            Finding(
                code="hyperparameters.value",
                severity="error",
                message=f"{dotted(path)}={json.dumps(value)} is a {type_name(value)}, not a JSON boolean: the library "
                'reads any non-empty string, "false" included, as true, and would run the model\'s own code.',
                fix=f"Pass {dotted(path)}: {fix} (a JSON boolean, without quotes).",
            )
        )
    if trusted:
        findings.append(
            Finding(
                code="hyperparameters.trust_remote_code",
                severity="warning",
                message="trust_remote_code=true runs arbitrary Python code from the model's repo inside the job, "
                "with the job's access to this machine's files and to its secrets (HF_TOKEN included).",
                fix="Leave it off unless the model needs it and you trust its repo; then pin the revision you "
                'reviewed (model_init_kwargs={"revision": "<commit>"}), since the code can change under the same name.',
            )
        )
    return findings


def trusts_remote_code(hyperparameters: Mapping[str, Any]) -> bool:
    return any(path and path[-1] == TRUST and value is True for path, value in walk(dict(hyperparameters)))


def remote_code(model: str, hyperparameters: Mapping[str, Any], runs_here: bool) -> list[Finding]:
    """The local model directory's own Python, and every Hub kernel the hyperparameters name (refused when the job
    runs here with HF_HUB_OFFLINE set: it could not download it)."""
    return [*_model_code(model, trusts_remote_code(hyperparameters)), *_kernels(hyperparameters, runs_here)]


def _model_code(model: str, trusted: bool) -> list[Finding]:
    path = Path(model).expanduser()
    if not looks_local(model) or not path.is_dir():
        return []
    mapped: set[str] = set()
    for name in _AUTO_MAP_FILES:
        auto_map = (read_json_object(path / name) or {}).get("auto_map")
        if isinstance(auto_map, Mapping):
            mapped |= {f"{name} → {ref}" for ref in _references(auto_map)}
    files = sorted(p.name for p in path.glob("*.py") if p.is_file())
    if not mapped and not files:
        return []
    parts = []
    if files:
        parts.append(_listed(files) + " in the directory")
    if mapped:
        parts.append("auto_map: " + _listed(sorted(mapped)))
    runs = (
        "trust_remote_code=true runs it inside the job, with the job's access to this machine's files and secrets."
        if trusted
        else "It runs only with trust_remote_code=true; without it transformers loads the model with its own class "
        "for the model_type, or fails to load it."
    )
    return [
        Finding(
            code="model.remote_code",
            severity="warning",
            message=f"The model directory {model} holds its own Python ({'; '.join(parts)}). {runs}",
            fix="Read those files before trusting them, or use a model whose architecture transformers has built in.",
        )
    ]


def _references(auto_map: Mapping[str, Any]) -> set[str]:
    """The modules an auto_map's entries name ("modeling_x.XModel", a [slow, fast] pair, "repo--module.Class")."""
    found = set()
    for value in auto_map.values():
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and "." in ref:
                found.add(ref.rsplit(".", 1)[0] + ".py")
    return found


def _kernels(hyperparameters: Mapping[str, Any], runs_here: bool) -> list[Finding]:
    offline = runs_here and os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFFLINE
    findings = []
    for path, value in walk(dict(hyperparameters)):
        if not path or path[-1] != "attn_implementation" or not isinstance(value, str):
            continue
        if not _KERNEL_REPO.fullmatch(value.strip()):
            continue
        where = f"{dotted(path)}={value!r}"
        if offline:
            findings.append(
                Finding(
                    code="hyperparameters.hub_kernel",
                    severity="error",
                    message=f"{where} names a Hub kernel repo, which the job downloads and runs, and this server's "
                    "jobs run with HF_HUB_OFFLINE set: it cannot be downloaded.",
                    fix=f'Use a built-in implementation ({dotted(path)}: "sdpa" or "flash_attention_2"), or unset '
                    "HF_HUB_OFFLINE for the server.",
                )
            )
            continue
        findings.append(
            Finding(
                code="hyperparameters.hub_kernel",
                severity="warning",
                message=f"{where} names a Hub kernel repo: the job downloads its compiled code and runs it, with the "
                "job's access to this machine's files and secrets, as trust_remote_code would.",
                fix=f'Use a built-in implementation ({dotted(path)}: "sdpa" or "flash_attention_2") unless you trust '
                f"{value.split('@')[0].split(':')[0]}; then pin the revision you reviewed (org/name@<commit>).",
            )
        )
    return findings


def _listed(names: list[str]) -> str:
    return ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
