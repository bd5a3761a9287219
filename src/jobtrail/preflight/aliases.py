"""The field a misspelled or foreign hyperparameter name means, so the fix keeps the user's value.

    suggest(name, value, known, accepts) -> (field, value) | None

First the names people really write (other trainers' and papers' spellings, abbreviations),
with hyphens, spaces and case normalised; then close spellings, only among fields that take the
value (a string never suggests a bool field). None when nothing fits: guessing would do harm.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection
from typing import Any

_ALIASES: dict[str, str] = {
    **dict.fromkeys(("lr", "learningrate", "learn_rate", "base_lr", "max_lr"), "learning_rate"),
    **dict.fromkeys(
        ("epochs", "num_epochs", "n_epochs", "epoch", "train_epochs", "nepochs", "max_epochs"), "num_train_epochs"
    ),
    **dict.fromkeys(
        (
            "batch",
            "batch_size",
            "bs",
            "bsz",
            "micro_batch",
            "batchsize",
            "train_batch_size",
            "micro_batch_size",
            "per_device_batch_size",
            "per_gpu_train_batch_size",
            "mini_batch_size",
            "device_batch_size",
        ),
        "per_device_train_batch_size",
    ),
    **dict.fromkeys(("eval_batch_size", "per_gpu_eval_batch_size"), "per_device_eval_batch_size"),
    **dict.fromkeys(
        (
            "grad_accum",
            "gradient_accumulation",
            "accumulation_steps",
            "grad_accumulation_steps",
            "grad_accum_steps",
            "gradient_accumulation_step",
            "accum_steps",
        ),
        "gradient_accumulation_steps",
    ),
    **dict.fromkeys(("lora_rank", "rank", "r", "lora_dim", "lora_r_value"), "lora_r"),
    **dict.fromkeys(("alpha", "lora_scaling", "lora_alpha_value"), "lora_alpha"),
    **dict.fromkeys(("lora_drop", "lora_dropout_rate", "lora_dropout_p", "dropout"), "lora_dropout"),
    **dict.fromkeys(("target_modules", "lora_targets", "lora_target", "lora_modules"), "lora_target_modules"),
    **dict.fromkeys(
        (
            "max_seq_length",
            "max_seq_len",
            "seq_len",
            "seq_length",
            "sequence_length",
            "max_len",
            "cutoff_len",
            "context_length",
            "context_len",
            "max_sequence_length",
            "block_size",
            "model_max_length",
        ),
        "max_length",
    ),
    **dict.fromkeys(("wd", "weightdecay", "weight_decay_rate", "decay"), "weight_decay"),
    **dict.fromkeys(("scheduler", "lr_scheduler", "lr_schedule", "schedule", "scheduler_type"), "lr_scheduler_type"),
    **dict.fromkeys(("optimizer", "optimiser", "optim_type", "optimizer_type"), "optim"),
    **dict.fromkeys(("steps", "num_steps", "total_steps", "train_steps", "max_train_steps", "iters"), "max_steps"),
    **dict.fromkeys(("grad_clip", "clip_grad_norm", "max_norm", "gradient_clipping"), "max_grad_norm"),
    **dict.fromkeys(
        ("grad_checkpointing", "gradient_checkpoint", "activation_checkpointing"), "gradient_checkpointing"
    ),
    **dict.fromkeys(
        ("eval_split", "val_split", "validation_split", "eval_ratio", "val_ratio", "test_size", "holdout"),
        "eval_split_ratio",
    ),
    **dict.fromkeys(("log_steps", "log_every", "logging_interval"), "logging_steps"),
    **dict.fromkeys(("save_every", "checkpoint_steps", "save_interval"), "save_steps"),
    **dict.fromkeys(("split", "train_split"), "dataset_split"),
    **dict.fromkeys(("num_completions", "group_size", "generations"), "num_generations"),
    **dict.fromkeys(("max_new_tokens", "completion_length", "max_completion_len"), "max_completion_length"),
    **dict.fromkeys(("rewards", "reward_functions", "reward_fns"), "reward_funcs"),
}
# Warmup is a step count or a fraction of the run, by its value (transformers 5 reads a
# warmup_steps below 1 as a fraction; older versions had warmup_ratio for it).
_WARMUP = {
    "warmup",
    "warmup_ratio",
    "warmup_pct",
    "warmup_percent",
    "warmup_fraction",
    "warmup_proportion",
    "num_warmup_steps",
    "warmup_iters",
    "lr_warmup_steps",
}


def normalise(name: str) -> str:
    return re.sub(r"[\s\-.]+", "_", name.strip()).lower()


def suggest(
    name: str, value: Any, known: Collection[str], accepts: Callable[[str, Any], bool], *, close: bool = True
) -> tuple[str, Any] | None:
    """(the known field `name` most likely means, the value to give it): the user's value, except a
    warmup percentage, which becomes a fraction. None when no field that takes the value fits.
    close=False: only the names people really write, no close spelling."""
    key = normalise(name)
    if key in _WARMUP:
        return _warmup(key, value, known)
    for target in (key, _ALIASES.get(key)):
        if target and target != name and target in known and accepts(target, value):
            return target, value
    if not close:
        return None
    compatible = sorted(field for field in known if accepts(field, value))
    closest = difflib.get_close_matches(key, compatible, n=1, cutoff=0.8)
    return (closest[0], value) if closest else None


def _warmup(key: str, value: Any, known: Collection[str]) -> tuple[str, Any] | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if number < 0 or isinstance(value, bool):
        return None
    if key.endswith(("pct", "percent")) and 1 <= number <= 100:
        number, value = number / 100, number / 100  # 10 (%) is a tenth of the run
    if number < 1 and "warmup_ratio" in known:
        return "warmup_ratio", value
    return "warmup_steps", value
