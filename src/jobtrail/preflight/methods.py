"""A method's own rules, run on the values the job will use: the registry's checks for `method`.

Pure. The rules themselves live with the registry (jobtrail.methods.rules); this is where
preflight gives them the effective hyperparameters (templates/defaults.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobtrail.methods import METHODS
from jobtrail.methods.registry import SPECS
from jobtrail.methods.rules import RuleInput
from jobtrail.models import Finding
from jobtrail.templates.defaults import effective


def check_method(
    method: str, hyperparameters: Mapping[str, Any], rewards: Mapping[str, Any] | None = None
) -> list[Finding]:
    """Findings for `method` with the user's `hyperparameters`.

    `rewards`: the user's reward function given with the submission, as {"function": name, ...}
    (the file itself is reward_file.check_reward_file's business), or None. Built-in rewards are
    named in hyperparameters["reward_funcs"].
    """
    if method not in SPECS:
        return [
            Finding(
                code="method.unknown",
                severity="error",
                message=f"Unknown method {method!r}.",
                fix=f"Use one of: {', '.join(METHODS)}.",
            )
        ]
    values = effective(method, hyperparameters).judged
    rule = RuleInput(method=method, values=values, given=hyperparameters, user_reward=rewards)
    return [finding for check in SPECS[method].checks for finding in check(rule)]
