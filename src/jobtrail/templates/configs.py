"""Job configs: the CONFIG block a rendered training script runs with (its immutable snapshot).

Built from the effective hyperparameters (defaults.py), so the config holds exactly the values
preflight judged. A GRPO config also carries the user's reward file's source, read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobtrail.models import JobSpec
from jobtrail.templates.defaults import effective

TEMPLATE_VERSION = 1


def build_config(
    spec: JobSpec, output_dir: str, max_positions: int | None = None, *, push_to: str | None = None
) -> dict[str, Any]:
    """The job's config snapshot: everything the rendered script needs, nothing secret.

    When the caller did not choose max_length, the default is capped at the model's positions.
    """
    values = effective(spec.method, spec.hyperparameters)
    training_args = values.training_args
    if max_positions and "max_length" in training_args and "max_length" not in spec.hyperparameters:
        training_args["max_length"] = min(training_args["max_length"], max_positions)
    config = {
        "template": spec.method,
        "template_version": TEMPLATE_VERSION,
        "model": spec.model,
        "dataset": {"source": spec.dataset, "split": values.job["dataset_split"], "mapping": spec.dataset_mapping},
        "output_dir": output_dir,
        "peft": values.peft,
        "training_args": training_args,
        "checkpoint_retention": values.job["checkpoint_retention"],
        "push_to_hub": push_to is not None,
        "hub_model_id": push_to,
    }
    if spec.method == "grpo":
        user = {"file": spec.reward_file, "function": spec.reward_function or "reward"} if spec.reward_file else None
        config["rewards"] = rewards_config(spec.hyperparameters, user)
    return config


def rewards_config(hyperparameters: Mapping[str, Any], user: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The GRPO job's CONFIG["rewards"] block.

    `hyperparameters`: the user's, whose reward knobs (GRPO's inputs in the registry) it reads
    with their defaults; `user`: None, or {"file": path, "function": name} for a reward file that
    check_reward_file accepted (its source is read now, so the config snapshot holds the code).
    """
    settings = effective("grpo", hyperparameters).inputs
    names = settings["reward_funcs"] or []
    return {
        "builtin": [names] if isinstance(names, str) else list(names),
        "user": _user_block(user) if user else None,
        "format_regex": settings["reward_format_regex"],
        "length_target": settings["reward_length_target"],
    }


def _user_block(user: Mapping[str, Any]) -> dict[str, str]:
    return {"function": str(user["function"]), "source": Path(user["file"]).expanduser().read_text(encoding="utf-8")}
