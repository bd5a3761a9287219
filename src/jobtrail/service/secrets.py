"""Secrets: named in a job, resolved from the server's environment at launch, never stored.

A job names its secrets as references to the server's environment, {"WANDB_API_KEY":
"$WANDB_API_KEY"}: values never travel through tool arguments (which agents log), never
reach the ledger or the rendered script, and are redacted from every log line and result.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from jobtrail.errors import InvalidRequestError

_REFERENCE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REDACTED = "[REDACTED]"


def validate(secrets: Mapping[str, str] | None) -> dict[str, str]:
    """Check that every secret is NAME → "$ENV_VAR"; return them unchanged (references only)."""
    checked: dict[str, str] = {}
    for name, ref in (secrets or {}).items():
        if not _NAME.match(name):
            raise InvalidRequestError(
                f"Secret name {name!r} is not a valid environment variable name.",
                fix="Use letters, digits and underscores, e.g. WANDB_API_KEY.",
            )
        if not isinstance(ref, str) or not _REFERENCE.match(ref):
            raise InvalidRequestError(
                f"Secret {name!r} must reference an environment variable of the jobtrail server, not hold a value.",
                fix=f'Set {name} in the server\'s environment and pass {{"{name}": "${name}"}}.',
            )
        checked[name] = ref
    return checked


def resolve(references: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """NAME → value, from the environment. A missing variable is an error naming it."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name, ref in references.items():
        var = ref[1:]
        if not env.get(var):
            raise InvalidRequestError(
                f"Secret {name!r} refers to ${var}, which is not set for the jobtrail server.",
                fix=f"Set {var} in the server's environment (its MCP client config) and retry.",
            )
        values[name] = env[var]
    return values


class Redactor:
    """Replaces secret values in text, longest first, so a secret containing another is fully hidden."""

    def __init__(self, values: Iterable[str]) -> None:
        self._values = sorted({v for v in values if v}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text
