"""Credentials never travel in a job's arguments: `hyperparameters` and `dataset_mapping` are stored in the ledger,
rendered into the script (and its trackio run and model card) and shown by inspect, so a credential in them, at any
depth, is refused before anything is planned or stored, by its key's name or by its value's shape. The refusal
names where it is (model_init_kwargs.token) and shows the value masked, never the value.

    refuse_credentials(spec)   raises InvalidRequestError naming each place, pointing to `secrets`
    credential_name(key)       a key that names a credential (token, use_auth_token, api_key, hf_token ...)
    credential_shape(text)     a known token format in a string (hf_, ghp_, sk-, AKIA, xoxb-, a JWT, a PEM key)
    mask_samples(value)        a data sample with credential-looking keys' values and token shapes masked
    walk(value)                every (path, value) below a value, JSON object strings opened
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec

# Names that are credentials whatever their value's shape (compared lowercased).
CREDENTIAL_NAMES = frozenset(
    {
        "token",
        "hf_token",
        "hub_token",
        "use_auth_token",
        "auth_token",
        "access_token",
        "push_to_hub_token",
        "api_key",
        "apikey",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "private_key",
        "secret_key",
        "access_key",
        "credential",
        "credentials",
        "authorization",
    }
)
_CREDENTIAL_ENDINGS = ("_token", "api_key", "apikey", "_secret", "password", "_passwd", "_credentials", "_private_key")
# Names ending like a credential that are not one: a tokenizer's special tokens.
_SPECIAL_TOKENS = frozenset(
    {"pad_token", "eos_token", "bos_token", "unk_token", "sep_token", "cls_token", "mask_token"}
)
# Known token formats: (what it is, its pattern); a match is masked down to its public prefix.
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a Hugging Face token", re.compile(r"hf_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("an OpenAI-style API key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[bpas]-[A-Za-z0-9-]{10,}")),
    ("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.?[A-Za-z0-9_-]*")),
    ("a private key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")),
)
_PUBLIC_PREFIX = re.compile(r"^(?:hf_|gh[pousr]_|github_pat_|sk-(?:proj-|ant-)?|AKIA|ASIA|xox[bpas]-|eyJ|-----BEGIN)")
# Keys of a data row whose values are masked in samples (split into words: num_tokens and keywords are not).
_SAMPLE_KEY_WORDS = frozenset(
    {"token", "key", "apikey", "secret", "password", "passwd", "pwd", "auth", "authorization", "credential"}
    | {"credentials", "cookie", "session", "bearer", "jwt"}
)
_MAX_DEPTH = 32
_SHOWN = 5


def credential_name(key: str) -> bool:
    lowered = key.lower()
    if lowered in _SPECIAL_TOKENS:
        return False
    return lowered in CREDENTIAL_NAMES or lowered.endswith(_CREDENTIAL_ENDINGS)


def credential_shape(text: str) -> str | None:
    """What known credential `text` holds (e.g. "a GitHub token"), or None."""
    return next((what for what, pattern in SHAPES if pattern.search(text)), None)


def mask(value: Any) -> str:
    """A credential as it may be shown: its format's public prefix (hf_, ghp_, sk-, AKIA ...) and its length."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    prefix = _PUBLIC_PREFIX.match(value)
    return f"{prefix[0] if prefix else ''}*** ({len(value)} character{'' if len(value) == 1 else 's'})"


def walk(value: Any, path: tuple[str, ...] = (), depth: int = 0) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) for `value` and everything below it: a mapping's keys, a list's items ("[0]"), and a string
    holding a JSON object or list (transformers reads model_init_kwargs='{"token": ...}' as the object it is)."""
    yield path, value
    inner = _opened(value)
    if depth >= _MAX_DEPTH:
        return
    if isinstance(inner, Mapping):
        for key, item in inner.items():
            yield from walk(item, (*path, str(key)), depth + 1)
    elif isinstance(inner, list | tuple):
        for index, item in enumerate(inner):
            yield from walk(item, (*path, f"[{index}]"), depth + 1)


def dotted(path: tuple[str, ...]) -> str:
    return "".join(part if part.startswith("[") or i == 0 else f".{part}" for i, part in enumerate(path))


def refuse_credentials(spec: JobSpec) -> None:
    """A credential in `hyperparameters` or `dataset_mapping`, at any depth, is refused before anything is
    planned, stored or rendered (force included); the error names each place and masks each value."""
    found = [
        *_credentials("hyperparameters", spec.hyperparameters),
        *_credentials("dataset_mapping", spec.dataset_mapping or {}),
    ]
    if not found:
        return
    shown = "; ".join(found[:_SHOWN]) + (f"; and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")
    raise InvalidRequestError(
        f"Credentials in the job's arguments: {shown}. Hyperparameters and dataset_mapping are stored in the ledger "
        "and the rendered script (and its tracking run and model card) and shown by inspect, so credentials never "
        "travel in them.",
        fix="Remove them. The Hugging Face token comes from HF_TOKEN in the server's environment (jobs get it to "
        'download and push); another credential goes in secrets={"NAME": "$ENV_VAR"}, a reference to a variable of '
        "the server's environment, which the job receives as NAME and which every output shows redacted.",
    )


def _credentials(argument: str, values: Mapping[str, Any]) -> Iterator[str]:
    for path, value in walk(dict(values)):
        if not path:
            continue
        where = f"{argument} {dotted(path)}"
        key = path[-1]
        if not key.startswith("[") and credential_name(key) and value not in (None, False, ""):
            yield f"{where} = {mask(value)} is a credential by its name"
        elif isinstance(value, str) and (shape := credential_shape(value)) and _opened(value) is value:
            yield f"{where} = {mask(value)} looks like {shape}"


def mask_samples(value: Any, depth: int = 0) -> Any:
    """A data sample as results may show it: the values of keys that look like credentials (api_key, auth, token,
    password ...) masked whole, and known token formats masked wherever they appear in a string."""
    if isinstance(value, str):
        masked = value
        for _, pattern in SHAPES:
            masked = pattern.sub(lambda m: mask(m[0]), masked)
        return masked
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {k: mask(v) if _sample_key(str(k)) and v else mask_samples(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_samples(item, depth + 1) for item in value]
    return value


def _sample_key(key: str) -> bool:
    words = re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower())
    return credential_name(key) or any(word in _SAMPLE_KEY_WORDS for word in words)


def _opened(value: Any) -> Any:
    """A string holding a JSON object or list, parsed; anything else as it is."""
    if not isinstance(value, str) or not value.lstrip().startswith(("{", "[")):
        return value
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return parsed if isinstance(parsed, dict | list) else value
