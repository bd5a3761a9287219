"""Secrets: named in a job, resolved from the server's environment at launch, never stored.

A job names its secrets as references to the server's environment, {"WANDB_API_KEY":
"$WANDB_API_KEY"}: values never travel through tool arguments (which agents log), never
reach the ledger or the rendered script, and are redacted from every log line and result
(util/redaction.py: raw, JSON-escaped, repr ... forms alike).

A secret becomes an environment variable of the job, so its name must say it holds a credential and nothing
else: it matches SECRET_NAMES (`*_API_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, AWS's key pair), which no
loader or runtime variable does (LD_PRELOAD, GLIBC_TUNABLES, GCONV_PATH, OPENSSL_CONF, NODE_OPTIONS, CC,
RANK, MASTER_ADDR ...), and it is none of the credentials the job's own tools read under a reserved prefix
(UV_PUBLISH_TOKEN, JOBTRAIL_AUTH_TOKEN; HF_TOKEN is the Hugging Face token and allowed). A reference never
names one of jobtrail's own variables: its settings and credentials never reach a job (backends/job_env.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from jobtrail.backends.job_env import ENV_NAME, OWN_PREFIX
from jobtrail.errors import InvalidRequestError
from jobtrail.util.redaction import MIN_SECRET_LENGTH, REDACTED, Redactor, credential_values

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "Redactor", "credential_values", "resolve", "validate"]

_REFERENCE = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")
# What a secret may be called, compared upper-cased (README's Tools section lists these).
SECRET_NAMES = re.compile(
    r"(?:[A-Z0-9_]*_)?(?:API_KEY|TOKEN|SECRET|PASSWORD)|(?:[A-Z0-9]+_)?(?:SECRET_ACCESS_KEY|ACCESS_KEY_ID)"
)
# Prefixes whose credentials configure the job's own runtime (an index, the Hub client, jobtrail itself).
_RESERVED_PREFIXES = (
    OWN_PREFIX, "PYTHON", "LD_", "DYLD_", "UV_", "PIP_", "CONDA_", "CUDA_", "NCCL_", "TORCH", "PYTORCH_",
    "HF_", "HUGGINGFACE_", "HUGGING_FACE_", "TRANSFORMERS_", "ACCELERATE_", "TRACKIO_", "XDG_", "LC_",
)  # fmt: skip
_ALLOWED = frozenset({"HF_TOKEN"})


def validate(secrets: Mapping[str, str] | None) -> dict[str, str]:
    """Check that every secret is NAME → "$ENV_VAR", NAME a credential's name the job's runtime does not read
    and ENV_VAR not jobtrail's own; return them unchanged (references only)."""
    checked: dict[str, str] = {}
    for name, ref in (secrets or {}).items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise InvalidRequestError(
                f"Secret name {_excerpt(name)} is not a plain environment variable name.",
                fix="Use letters, digits and underscores, not starting with a digit, e.g. WANDB_API_KEY.",
            )
        if not allowed_name(name):
            raise InvalidRequestError(
                f"Secret name {name!r} is not a credential's name: a secret's name ends in _API_KEY, _TOKEN, "
                "_SECRET or _PASSWORD (or is AWS's key pair, or HF_TOKEN), and does not start with a prefix the "
                "job's runtime reads (PYTHON, LD_, UV_, HF_, JOBTRAIL_ ...).",
                fix="Name the secret after what reads it, e.g. WANDB_API_KEY; HF_TOKEN is the Hugging Face token. "
                "A setting that is not secret reaches a local job through JOBTRAIL_JOB_ENV_PASS.",
            )
        if not isinstance(ref, str) or not _REFERENCE.fullmatch(ref):
            raise InvalidRequestError(
                f"Secret {name!r} must reference an environment variable of the jobtrail server, not hold a value.",
                fix=f'Set {name} in the server\'s environment and pass {{"{name}": "${name}"}}.',
            )
        if ref[1:].upper().startswith(OWN_PREFIX):
            raise InvalidRequestError(
                f"Secret {name!r} refers to {ref}, one of jobtrail's own settings: they never reach a job.",
                fix="Refer to the variable that holds the credential itself, e.g. $WANDB_API_KEY.",
            )
        checked[name] = ref
    return checked


def allowed_name(name: str) -> bool:
    upper = name.upper()
    if upper in _ALLOWED:
        return True
    return SECRET_NAMES.fullmatch(upper) is not None and not upper.startswith(_RESERVED_PREFIXES)


def resolve(references: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """NAME → value, from the environment. A variable that is unset, or whose value is too short to redact, is
    one error naming it (never showing the value, nor which of the two it is)."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name, ref in references.items():
        var = ref[1:]
        value = env.get(var) or ""
        if len(value) < MIN_SECRET_LENGTH:
            raise InvalidRequestError(
                f"Secret {name!r} refers to ${var}, which is unset for the jobtrail server or not usable as a "
                f"secret: jobtrail hides every secret from the job's logs, so it must be at least "
                f"{MIN_SECRET_LENGTH} characters long.",
                fix=f"Set {var} to the real credential in the server's environment (its MCP client config) and "
                "retry; pass a value that is not secret another way.",
            )
        values[name] = value
    return values


def _excerpt(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "..."
