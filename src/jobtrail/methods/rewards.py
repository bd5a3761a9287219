"""GRPO's method inputs: the built-in reward names and jobtrail's reward knobs with their defaults.

The built-in reward functions themselves run inside the job (scripts/grpo.py, its
`BUILTIN_REWARDS`); a test keeps the two lists equal. The knobs are jobtrail's, not TRL config
fields: they travel in the job's CONFIG["rewards"] block, never in its training_args.
"""

from __future__ import annotations

from typing import Any

BUILTIN_REWARDS: tuple[str, ...] = ("exact_match", "numeric_match", "format", "length")
DEFAULT_FORMAT_REGEX = r"<think>.*?</think>\s*<answer>.*?</answer>"
DEFAULT_LENGTH_TARGET = 256  # tokens
REWARD_HYPERPARAMETERS: dict[str, Any] = {
    "reward_funcs": [],
    "reward_format_regex": DEFAULT_FORMAT_REGEX,
    "reward_length_target": DEFAULT_LENGTH_TARGET,
}
