"""Secrets are references, resolved at launch, and redacted longest first."""

from __future__ import annotations

import pytest

from jobtrail.errors import InvalidRequestError
from jobtrail.service.secrets import REDACTED, Redactor, resolve, validate


def test_only_references_to_the_environment_are_accepted():
    assert validate({"WANDB_API_KEY": "$WANDB_API_KEY"}) == {"WANDB_API_KEY": "$WANDB_API_KEY"}
    with pytest.raises(InvalidRequestError) as info:
        validate({"WANDB_API_KEY": "abc123secret"})
    assert "$WANDB_API_KEY" in info.value.fix and "abc123secret" not in str(info.value)
    with pytest.raises(InvalidRequestError):
        validate({"bad-name": "$X"})


def test_resolution_names_the_missing_variable():
    assert resolve({"K": "$MY_K"}, {"MY_K": "v"}) == {"K": "v"}
    with pytest.raises(InvalidRequestError) as info:
        resolve({"K": "$MY_K"}, {})
    assert "MY_K" in info.value.message


def test_redaction_is_longest_first():
    redact = Redactor(["hf_abc", "hf_abcdef123", ""])
    assert redact("token=hf_abcdef123 short=hf_abc") == f"token={REDACTED} short={REDACTED}"
    assert redact("nothing here") == "nothing here"
