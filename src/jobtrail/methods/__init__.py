"""The ONE method registry: every training method jobtrail runs is declared here once.

Other modules (tool arguments, CLI choices, preflight, dataset validation, estimates, configs)
read these names and specs; none keeps its own list.
"""

from __future__ import annotations

from typing import Literal, get_args

TrainingMethod = Literal["sft", "dpo", "grpo", "reward", "kto"]
METHODS: tuple[TrainingMethod, ...] = get_args(TrainingMethod)
