"""A method's own rules, run on the values the job will use: the registry's checks for its method.

Pure. The rules themselves live with the registry (jobtrail.methods.rules); this is where
preflight gives them the job's effective hyperparameters (methods/effective.py, computed once per
plan).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobtrail.methods import METHODS
from jobtrail.methods.effective import Effective
from jobtrail.methods.registry import SPECS
from jobtrail.methods.rules import RuleInput
from jobtrail.models import Finding


def unknown_method(method: str) -> list[Finding]:
    """A job of a method jobtrail does not train: nothing of it can be judged or built."""
    return [
        Finding(
            code="method.unknown",
            severity="error",
            message=f"Unknown method {method!r}.",
            fix=f"Use one of: {', '.join(METHODS)}.",
        )
    ]


def check_method(values: Effective, rewards: Mapping[str, Any] | None = None) -> list[Finding]:
    """Findings for the job's method with its effective hyperparameters `values`.

    `rewards`: the user's reward function given with the submission, as {"function": name, ...}
    (the file itself is reward_file.check_reward_file's business), or None. Built-in rewards are
    named in hyperparameters["reward_funcs"].
    """
    rule = RuleInput(method=values.method, values=values.judged, given=values.given, user_reward=rewards)
    return [finding for check in SPECS[values.method].checks for finding in check(rule)]
