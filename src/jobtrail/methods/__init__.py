"""The ONE method registry: every training method jobtrail runs is declared here once.

This module names the methods (the tool argument type and its choices); registry.py holds each
one's spec (TRL classes, data formats, defaults, FLOPs rule, checks), rules.py the checks and
rewards.py GRPO's reward inputs. Other modules (tool arguments, CLI choices, preflight, dataset
validation, estimates, configs) read these; none keeps its own list. The names stay apart from
the specs so that models.py can import them without importing the rules (which return Findings).
"""

from __future__ import annotations

from typing import Literal, get_args

TrainingMethod = Literal["sft", "dpo", "grpo", "reward", "kto"]
METHODS: tuple[TrainingMethod, ...] = get_args(TrainingMethod)
