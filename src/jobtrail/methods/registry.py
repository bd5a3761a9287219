"""The method registry: each training method declared once, with everything that differs by method.

    method_spec("dpo") -> MethodSpec     TRL classes, data formats, defaults, FLOPs rule, checks, inputs

Preflight runs a spec's checks, effective.py merges its defaults and inputs under the
user's values, the estimate reads its FLOPs rule, and validate_dataset's verdicts keep to its data
formats (a test holds them together). Pure: no I/O, nothing heavy imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jobtrail.methods import METHODS, TrainingMethod, rules
from jobtrail.methods.rewards import REWARD_HYPERPARAMETERS

# TRL 1.16's own defaults for the values the rules read, where jobtrail sets none.
TRL_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "num_generations": 8,
    "eval_strategy": "no",
}
# Shared by every method: a save every 100 steps, logs every 10, one epoch, reported to trackio
# (templates/trackio_target.py says where; report_to="none" turns it off).
_COMMON_DEFAULTS: dict[str, Any] = {
    "num_train_epochs": 1,
    "logging_steps": 10,
    "save_strategy": "steps",
    "save_steps": 100,
    "seed": 42,
    "report_to": "trackio",
}


def _defaults(learning_rate: float, *, batch: int, accumulation: int, **own: Any) -> dict[str, Any]:
    """A method's defaults: the shared ones, its learning rate, micro-batch and gradient accumulation
    (their product is the examples per optimizer step), then values only some methods have."""
    return {
        **_COMMON_DEFAULTS,
        "learning_rate": learning_rate,
        "per_device_train_batch_size": batch,
        "gradient_accumulation_steps": accumulation,
        **own,
    }


@dataclass(frozen=True)
class FlopsRule:
    """What one training example costs, in passes over the model (estimate/cost.py turns it into FLOPs)."""

    sequences: int = 1  # sequences trained per example: forward and backward each
    extra_forwards: int = 0  # forwards without gradients per trained sequence (a reference model, a KL term)
    completion_tokens: int = 0  # tokens generated per trained sequence before it trains on them
    why: str = ""  # the extra forwards in words, for the estimate's assumptions

    @property
    def batch_sequences(self) -> int:
        """Sequences the model runs per row of per_device_train_batch_size: a pair's two (TRL concatenates
        chosen and rejected into one batch of twice the rows); a generating method's batch counts completions."""
        return 1 if self.completion_tokens else self.sequences


@dataclass(frozen=True)
class MethodSpec:
    name: TrainingMethod
    trl_name: str  # TRL 1.16 names the method's classes <trl_name>Config and <trl_name>Trainer
    # TRL dataset formats (validate_dataset's names) the method trains on as they are; other
    # shapes need a dataset_mapping.
    data_formats: tuple[str, ...]
    defaults: Mapping[str, Any]  # TRL config values jobtrail uses unless the user sets them
    flops: FlopsRule
    checks: tuple[rules.Rule, ...]  # run in this order; each returns Findings
    # The method's own knobs, which are not TRL config fields, with their defaults.
    inputs: Mapping[str, Any] = field(default_factory=dict)
    # How its TRL 1.16 trainer computes the loss from the last hidden states (estimate/memory.py's
    # Head): SFT, DPO, KTO and GRPO patch in a fused LM head that never builds the whole logits.
    lm_head: Literal["logits", "fused", "score"] = "fused"
    # Whether its TRL 1.16 trainer scores every batch with a frozen reference model (precompute_ref_log_probs=False,
    # TRL's default): a second copy of the starting model in memory under full fine-tuning; under PEFT the base with
    # the adapter switched off serves, so no copy.
    reference_model: bool = False

    @property
    def config_class(self) -> str:
        return f"{self.trl_name}Config"

    @property
    def trainer_class(self) -> str:
        return f"{self.trl_name}Trainer"


# Learning rates suit adapters (jobtrail's default peft is LoRA); TRL's own defaults (1e-6 for
# DPO, KTO and GRPO) assume full fine-tuning and barely move a LoRA adapter.
_SFT = MethodSpec(
    name="sft",
    trl_name="SFT",
    data_formats=("messages", "prompt_completion", "text"),
    defaults=_defaults(2e-4, batch=2, accumulation=4, max_length=1024),
    flops=FlopsRule(),
    checks=(rules.rewards_only_for_grpo,),
)
_DPO = MethodSpec(
    name="dpo",
    trl_name="DPO",
    data_formats=("preference", "preference_implicit_prompt"),
    defaults=_defaults(5e-6, batch=2, accumulation=4, max_length=1024, beta=0.1),
    # Chosen and rejected both train, and the reference model scores both (TRL 1.16's default
    # precompute_ref_log_probs=False; under LoRA the reference is the base with adapters off).
    flops=FlopsRule(sequences=2, extra_forwards=1, why="reference forward"),
    checks=(rules.rewards_only_for_grpo, rules.positive_beta, rules.dpo_label_smoothing),
    reference_model=True,
)
_KTO = MethodSpec(
    name="kto",
    trl_name="KTO",
    data_formats=("unpaired_preference", "preference", "preference_implicit_prompt"),
    # KTO estimates its KL term from the other rows of the same micro-batch: it needs more than one.
    defaults=_defaults(5e-6, batch=4, accumulation=2, max_length=1024, beta=0.1),
    # One sequence trains; the reference model scores it, and for the KL term (loss_type "kto",
    # the default) policy and reference each run a forward on a mismatched completion (TRL 1.16
    # KTOTrainer; under LoRA the reference is the base with adapters off).
    flops=FlopsRule(extra_forwards=3, why="reference forward + KL forwards"),
    checks=(rules.rewards_only_for_grpo, rules.positive_beta, rules.kto_loss_and_batch),
    reference_model=True,
)
_REWARD = MethodSpec(
    name="reward",
    trl_name="Reward",
    data_formats=("preference", "preference_implicit_prompt"),
    defaults=_defaults(1e-4, batch=2, accumulation=4, max_length=1024),
    flops=FlopsRule(sequences=2),  # chosen and rejected, scored against each other; no reference model
    checks=(rules.rewards_only_for_grpo, rules.reward_centering),
    lm_head="score",  # a sequence-classification model: one score per sequence, no vocabulary logits
)
# Generation batch 4 x 2 = 8 completions: two prompts' groups of 4 per optimizer step. GRPO has
# no max_length: prompts are kept whole and completions capped by max_completion_length.
_GRPO_DEFAULTS = _defaults(1e-5, batch=4, accumulation=2, num_generations=4, max_completion_length=256)
_GRPO = MethodSpec(
    name="grpo",
    trl_name="GRPO",
    # Any row with a prompt: GRPO generates the completions, and the other columns reach the rewards.
    data_formats=("prompt_only", "prompt_completion", "preference", "unpaired_preference"),
    defaults=_GRPO_DEFAULTS,
    # Each prompt's group of completions is generated, then trained on (beta=0: no reference model).
    flops=FlopsRule(
        sequences=_GRPO_DEFAULTS["num_generations"], completion_tokens=_GRPO_DEFAULTS["max_completion_length"]
    ),
    checks=(rules.grpo_batch, rules.grpo_generation, rules.grpo_rewards),
    inputs=REWARD_HYPERPARAMETERS,
)

SPECS: dict[str, MethodSpec] = {spec.name: spec for spec in (_SFT, _DPO, _GRPO, _REWARD, _KTO)}
# Every method's own knobs: none of them is ever a TRL config argument.
METHOD_INPUTS: frozenset[str] = frozenset(name for spec in SPECS.values() for name in spec.inputs)


def method_spec(method: str) -> MethodSpec:
    """The registry entry of `method`; ValueError for a name that is not a training method."""
    try:
        return SPECS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}") from None


def training_defaults(method: str) -> dict[str, Any]:
    """The TRL config values jobtrail uses for `method` unless the user sets them (a copy)."""
    return dict(method_spec(method).defaults)
