"""Secrets: named in a job, resolved from the server's environment at launch, never stored.

A job names its secrets as references to the server's environment, {"WANDB_API_KEY":
"$WANDB_API_KEY"}: values never travel through tool arguments (which agents log), never
reach the ledger or the rendered script, and are redacted from every log line and result
(util/redaction.py: raw, JSON-escaped, repr ... forms alike).

A secret becomes an environment variable of the job, so its name must not be one that steers the
job's runtime: the interpreter and its loader (PYTHON*, LD_*, DYLD_*, PATH ...), the package
installers (UV_*, PIP_*), TLS and proxies, the ML libraries' locations and offline switches (HF_*
but HF_TOKEN, TRANSFORMERS_*, ...) and jobtrail's own JOBTRAIL_* (which the job also reports back).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from jobtrail.errors import InvalidRequestError
from jobtrail.util.redaction import MIN_SECRET_LENGTH, REDACTED, Redactor

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "Redactor", "resolve", "validate"]

# Matched with fullmatch: `^...$` lets a trailing newline through.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")
# Compared upper-cased: http_proxy steers a program as much as HTTP_PROXY does.
_RUNTIME_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "TMPDIR", "TMP", "TEMP", "LANG", "LANGUAGE", "TZ",
        "IFS", "ENV", "BASH_ENV", "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    }
)  # fmt: skip
_RUNTIME_PREFIXES = (
    "PYTHON", "LD_", "DYLD_", "JOBTRAIL_", "LC_", "UV_", "PIP_", "CONDA_", "CUDA_", "NCCL_", "TORCH",
    "PYTORCH_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "ACCELERATE_", "TRACKIO_", "XDG_",
)  # fmt: skip
_RUNTIME_SUFFIXES = ("_PROXY",)
# Credentials among the reserved prefixes: the reason to pass a secret at all.
_ALLOWED = frozenset({"HF_TOKEN"})


def validate(secrets: Mapping[str, str] | None) -> dict[str, str]:
    """Check that every secret is NAME → "$ENV_VAR" with a plain name the job's runtime does not
    read; return them unchanged (references only)."""
    checked: dict[str, str] = {}
    for name, ref in (secrets or {}).items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidRequestError(
                f"Secret name {_excerpt(name)} is not a plain environment variable name.",
                fix="Use letters, digits and underscores, not starting with a digit, e.g. WANDB_API_KEY.",
            )
        if steers_runtime(name):
            raise InvalidRequestError(
                f"Secret name {name!r} is an environment variable that steers the job's runtime "
                "(the interpreter, its loader, the package installer, the libraries or jobtrail itself); "
                "a secret may not set it.",
                fix="Name the secret after what reads it, e.g. WANDB_API_KEY; HF_TOKEN is the Hugging Face token.",
            )
        if not isinstance(ref, str) or not _REFERENCE.fullmatch(ref):
            raise InvalidRequestError(
                f"Secret {name!r} must reference an environment variable of the jobtrail server, not hold a value.",
                fix=f'Set {name} in the server\'s environment and pass {{"{name}": "${name}"}}.',
            )
        checked[name] = ref
    return checked


def steers_runtime(name: str) -> bool:
    upper = name.upper()
    if upper in _ALLOWED:
        return False
    return upper in _RUNTIME_NAMES or upper.startswith(_RUNTIME_PREFIXES) or upper.endswith(_RUNTIME_SUFFIXES)


def resolve(references: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """NAME → value, from the environment. A missing variable, or a value too short to redact, is an
    error naming it (never showing the value)."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name, ref in references.items():
        var = ref[1:]
        value = env.get(var)
        if not value:
            raise InvalidRequestError(
                f"Secret {name!r} refers to ${var}, which is not set for the jobtrail server.",
                fix=f"Set {var} in the server's environment (its MCP client config) and retry.",
            )
        if len(value) < MIN_SECRET_LENGTH:
            raise InvalidRequestError(
                f"Secret {name!r} (${var}) is shorter than {MIN_SECRET_LENGTH} characters: jobtrail hides "
                "every secret from the job's logs, and a value that short would rewrite ordinary text "
                "(and the job's events) wherever it occurs.",
                fix=f"Set {var} to the real credential (tokens and API keys are longer), "
                "or pass the value another way if it is not secret.",
            )
        values[name] = value
    return values


def _excerpt(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "..."
