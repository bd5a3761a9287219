"""Each training method's own rules: pure, a method's values in, Findings out.

Each rule catches, before a GPU is paid for, what TRL would refuse at start-up (or, worse, accept
and train badly), and its fix names exact values. The registry (registry.py) lists which rules a
method runs; the values arrive merged with their defaults (effective.py), so a value the
user did not give is judged at the one the job would use. Names are checked elsewhere
(preflight/hyperparams.py); the data's format by validate_dataset; a reward file by
preflight/reward_file.py.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from jobtrail.methods.rewards import BUILTIN_REWARDS, REWARD_HYPERPARAMETERS
from jobtrail.models import Finding

PROCESSES = 1  # jobtrail runs a job as one process (one GPU); GRPO's batch arithmetic counts them
KTO_LOSSES = ("kto", "apo_zero_unpaired")


@dataclass(frozen=True)
class RuleInput:
    """What a method rule judges."""

    method: str
    values: Mapping[str, Any]  # every value the job runs with: TRL's and jobtrail's defaults under the user's
    given: Mapping[str, Any]  # the user's hyperparameters as passed
    user_reward: Mapping[str, Any] | None = None  # {"function": name} when a reward file comes with the job


Rule = Callable[[RuleInput], list[Finding]]


# --- GRPO: batches -----------------------------------------------------------------------------


def grpo_batch(rule: RuleInput) -> list[Finding]:
    """num_generations completions per prompt must fill the generation batch in whole groups."""
    values = rule.values
    names = ["per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"]
    names += [n for n in ("generation_batch_size", "steps_per_generation") if values.get(n) is not None]
    typed = {name: _whole(values, name, minimum=1) for name in names}
    problems = [f for _, f in typed.values() if f]
    if problems:
        return problems
    generations = typed["num_generations"][0]
    if generations < 2:
        return [
            _error(
                "grpo.num_generations",
                f"num_generations={generations}: GRPO scores each completion against the others for the same prompt, "
                "so it needs at least 2.",
                "Set num_generations=4 (or any value from 2 up that divides the generation batch).",
            )
        ]
    if values.get("auto_find_batch_size"):
        return [
            _error(
                "grpo.auto_find_batch_size",
                "auto_find_batch_size would halve the batch on out-of-memory and split prompts' groups of completions; "
                "TRL refuses it for GRPO.",
                "Remove auto_find_batch_size and set a smaller per_device_train_batch_size yourself.",
            )
        ]
    if "generation_batch_size" in typed and "steps_per_generation" in typed:
        return [
            _error(
                "grpo.generation_batch",
                "generation_batch_size and steps_per_generation are both set; TRL accepts one or the other.",
                "Remove one of them (with steps_per_generation, the generation batch is per_device_train_batch_size x "
                "steps_per_generation).",
            )
        ]
    sizes = {name: value for name, (value, _) in typed.items()}
    return _divides(_generation_batch(sizes, generations), generations) + _grpo_eval_batch(values, generations)


class _Batch(NamedTuple):
    """How many completions one generation round makes, how that comes about, and what sets it."""

    size: int
    explained: str
    # (name, value, step): the batch is fine once that value is a multiple of step.
    knobs: list[tuple[str, int, int]]
    problem: str | None = None  # a constraint of TRL's other than divisibility by num_generations


def _generation_batch(sizes: dict[str, int], generations: int) -> _Batch:
    """TRL's rule: an explicit generation_batch_size (a multiple of the global batch), else
    per-device batch x steps per generation (default: gradient_accumulation_steps) x processes."""
    per_device = sizes["per_device_train_batch_size"]
    global_batch = per_device * PROCESSES
    if "generation_batch_size" in sizes:
        size = sizes["generation_batch_size"]
        knobs = [("generation_batch_size", size, math.lcm(global_batch, generations))]
        problem = (
            None
            if size % global_batch == 0
            else (
                f"generation_batch_size={size} is not a multiple of the global batch, per_device_train_batch_size "
                f"({per_device}) x {PROCESSES} process"
            )
        )
        return _Batch(size, f"generation_batch_size={size}", knobs, problem)
    name = "steps_per_generation" if "steps_per_generation" in sizes else "gradient_accumulation_steps"
    steps = sizes[name]
    size = global_batch * steps
    return _Batch(
        size,
        f"per_device_train_batch_size ({per_device}) x {name} ({steps}) on {PROCESSES} process = {size}",
        # value x factor = size, so the value must be a multiple of generations / gcd(factor, generations).
        [
            (knob, value, generations // math.gcd(size // value, generations))
            for knob, value in ((name, steps), ("per_device_train_batch_size", per_device))
        ],
    )


def _divides(batch: _Batch, generations: int) -> list[Finding]:
    """Whole groups per batch; the fix raises one knob to the next value that gives them."""
    fixes = [f"{name}={_next_multiple(value, step)}" for name, value, step in batch.knobs]
    if batch.problem:
        return [_error("grpo.generation_batch", batch.problem + ".", "Set " + ", or ".join(fixes) + ".")]
    if batch.size % generations == 0:
        return []
    divisors = [d for d in range(2, batch.size + 1) if batch.size % d == 0]
    if divisors:
        fixes.append(f"num_generations={' or '.join(map(str, divisors[-3:]))}")
    fix = "Set " + ", or ".join(fixes) + "."
    if batch.size < generations:
        return [
            _error(
                "grpo.generation_batch_small",
                f"The generation batch, {batch.explained}, holds fewer completions than one prompt's group "
                f"(num_generations={generations}).",
                fix,
            )
        ]
    return [
        _error(
            "grpo.num_generations",
            f"num_generations={generations} does not divide the generation batch, {batch.explained}: GRPO needs whole "
            "groups of completions per prompt in every batch.",
            fix,
        )
    ]


def _grpo_eval_batch(values: Mapping[str, Any], generations: int) -> list[Finding]:
    if values.get("eval_strategy") in (None, "no") and not values.get("do_eval"):
        return []
    eval_batch, problem = _whole(values, "per_device_eval_batch_size", minimum=1)
    if problem:
        return [problem]
    eval_generations = values.get("num_generations_eval") or generations
    if (eval_batch * PROCESSES) % eval_generations == 0:
        return []
    return [
        _error(
            "grpo.eval_batch",
            f"per_device_eval_batch_size ({eval_batch}) is not divisible by the evaluation's num_generations "
            f"({eval_generations}).",
            f"Set per_device_eval_batch_size={_next_multiple(eval_batch, eval_generations)}.",
        )
    ]


# --- GRPO: generation and rewards ---------------------------------------------------------------


def grpo_generation(rule: RuleInput) -> list[Finding]:
    """Completions of a positive length, sampled (temperature > 0), and a KL weight that is not negative."""
    values = rule.values
    findings = []
    if "max_completion_length" in values:
        findings += [f for f in [_whole(values, "max_completion_length", minimum=1, example=256)[1]] if f]
    temperature = values.get("temperature")
    if temperature is not None and (not _is_number(temperature) or temperature <= 0):
        findings.append(
            _error(
                "grpo.temperature",
                f"temperature={temperature!r}: GRPO samples its completions and needs temperature > 0 (at 0 every "
                "completion of a prompt is the same, so there is nothing to compare).",
                "Set temperature=1.0 (TRL's default), or 0.7 for less random samples.",
            )
        )
    beta = values.get("beta")
    if beta is not None and (not _is_number(beta) or beta < 0):
        findings.append(
            _error(
                "grpo.beta",
                f"beta={beta!r} must be 0 (no reference model) or positive.",
                "Set beta=0.0 (TRL's default) or a small KL weight such as 0.04.",
            )
        )
    return findings


def grpo_rewards(rule: RuleInput) -> list[Finding]:
    """GRPO learns only from rewards: built-in names that exist, settings that parse, one weight each."""
    values, user = rule.values, rule.user_reward
    names, findings = _reward_names(values.get("reward_funcs"))
    if not names and not user and not findings:
        return [
            _error(
                "grpo.rewards_missing",
                "GRPO learns only from rewards, and none is given.",
                f'Pass hyperparameters={{"reward_funcs": ["exact_match"]}} (built-ins: {", ".join(BUILTIN_REWARDS)}), '
                "or a reward file with the function to call.",
            )
        ]
    for name in names:
        if name not in BUILTIN_REWARDS:
            close = difflib.get_close_matches(name, BUILTIN_REWARDS, n=1, cutoff=0.5)
            findings.append(
                _error(
                    "grpo.reward_unknown",
                    f"There is no built-in reward {name!r}." + (f" Did you mean {close[0]!r}?" if close else ""),
                    (f"Use {close[0]!r}" if close else f"Use one of {', '.join(BUILTIN_REWARDS)}")
                    + ", or give your own function in a reward file.",
                )
            )
    for name in sorted({n for n in names if names.count(n) > 1}):
        findings.append(
            Finding(
                code="grpo.reward_duplicate",
                severity="warning",
                message=f"Reward {name!r} is listed {names.count(name)} times, so it counts "
                f"{names.count(name)} times over.",
                fix="List it once; use reward_weights to weigh rewards.",
            )
        )
    return findings + _reward_settings(values, names) + _reward_weights(values, len(names) + (1 if user else 0))


def _reward_names(value: Any) -> tuple[list[str], list[Finding]]:
    if value is None:
        return [], []
    if isinstance(value, str):
        return [value], []
    if isinstance(value, list | tuple) and all(isinstance(n, str) for n in value):
        return list(value), []
    return [], [
        _error(
            "grpo.reward_funcs",
            f"reward_funcs={value!r} must be a list of reward names.",
            'Pass e.g. reward_funcs=["exact_match", "format"].',
        )
    ]


def _reward_settings(values: Mapping[str, Any], names: list[str]) -> list[Finding]:
    findings = []
    pattern = values["reward_format_regex"]
    try:
        re.compile(pattern)
    except (re.error, TypeError) as exc:
        findings.append(
            _error(
                "grpo.format_regex",
                f"reward_format_regex {pattern!r} is not a valid regular expression: {exc}.",
                f"Fix it, or leave it out for the default {REWARD_HYPERPARAMETERS['reward_format_regex']!r}.",
            )
        )
    _, problem = _whole(values, "reward_length_target", minimum=1, example=256, code="grpo.length_target")
    return findings + ([problem] if problem else [])


def _reward_weights(values: Mapping[str, Any], count: int) -> list[Finding]:
    weights = values.get("reward_weights")
    if weights is None:
        return []
    if not isinstance(weights, list | tuple) or not all(_is_number(w) for w in weights):
        return [
            _error(
                "grpo.reward_weights",
                f"reward_weights={weights!r} must be a list of numbers.",
                f"Pass {count} numbers, e.g. reward_weights={[1.0] * count}.",
            )
        ]
    if len(weights) != count:
        return [
            _error(
                "grpo.reward_weights",
                f"reward_weights has {len(weights)} value(s) for {count} reward function(s) (the built-ins in "
                "reward_funcs order, then the reward file's function).",
                f"Pass exactly {count}, e.g. reward_weights={[1.0] * count}.",
            )
        ]
    return []


def rewards_only_for_grpo(rule: RuleInput) -> list[Finding]:
    """Reward knobs or a reward file given to a method that generates nothing to score."""
    method = rule.method
    given = [name for name in REWARD_HYPERPARAMETERS if name in rule.given]
    given += ["a reward file"] if rule.user_reward else []
    if not given:
        return []
    return [
        _error(
            "rewards.not_grpo",
            f"Rewards ({', '.join(given)}) apply only to method 'grpo'; "
            f"{method} does not generate completions to score.",
            f"Leave out {' and '.join(given)}, or use method='grpo'.",
        )
    ]


# --- DPO, KTO, reward ----------------------------------------------------------------------------


def positive_beta(rule: RuleInput) -> list[Finding]:
    """DPO's and KTO's beta: the strength of the pull towards the reference model."""
    return _positive(rule.method, rule.values, "beta", "0.1")


def dpo_label_smoothing(rule: RuleInput) -> list[Finding]:
    smoothing = rule.values.get("label_smoothing", 0.0)
    if _is_number(smoothing) and 0 <= smoothing < 0.5:
        return []
    return [
        _error(
            "dpo.label_smoothing",
            f"label_smoothing={smoothing!r}: it is the assumed share of wrongly labelled pairs "
            "and must be in [0, 0.5).",
            "Leave it out (0.0) or set e.g. label_smoothing=0.1.",
        )
    ]


def kto_loss_and_batch(rule: RuleInput) -> list[Finding]:
    """A KTO loss, positive weights, and for the KL estimate: micro-batches of 2+ rows in a fixed order."""
    values = rule.values
    loss = values.get("loss_type", "kto")
    if loss not in KTO_LOSSES:
        return [
            _error(
                "kto.loss_type",
                f"loss_type={loss!r} is not a KTO loss.",
                f"Use one of {', '.join(KTO_LOSSES)} (or leave it out for 'kto').",
            )
        ]
    findings = [
        *_positive("kto", values, "desirable_weight", "1.0"),
        *_positive("kto", values, "undesirable_weight", "1.0"),
    ]
    if loss == "apo_zero_unpaired":
        return findings  # the only KTO loss without a KL estimate: no batch constraints
    batch, problem = _whole(values, "per_device_train_batch_size", minimum=1)
    if problem:
        return [*findings, problem]
    if batch < 2:
        findings.append(
            _error(
                "kto.batch_size",
                f"per_device_train_batch_size={batch}: KTO estimates its KL term from the other rows of the same "
                "micro-batch, so it needs at least 2 (TRL refuses 1).",
                "Set per_device_train_batch_size=2 or more (lower gradient_accumulation_steps to keep the effective "
                "batch).",
            )
        )
    sampling = values.get("train_sampling_strategy", "sequential")
    if sampling != "sequential":
        findings.append(
            _error(
                "kto.sampling",
                f"train_sampling_strategy={sampling!r}: KTO pairs each row with its neighbours for the KL estimate, "
                "which needs the rows in a fixed order.",
                "Remove train_sampling_strategy (KTO's default is 'sequential'; shuffle the data beforehand instead).",
            )
        )
    return findings


def reward_centering(rule: RuleInput) -> list[Finding]:
    coefficient = rule.values.get("center_rewards_coefficient")
    if coefficient is None or (_is_number(coefficient) and coefficient >= 0):
        return []
    return [
        _error(
            "reward.center_rewards",
            f"center_rewards_coefficient={coefficient!r} must be 0 or positive.",
            "Leave it out, or set a small value such as 0.01 to keep rewards centred on zero.",
        )
    ]


# --- helpers -----------------------------------------------------------------------------------


def _positive(method: str, values: Mapping[str, Any], name: str, example: str) -> list[Finding]:
    value = values.get(name)
    if value is None or (_is_number(value) and value > 0):
        return []
    return [
        _error(
            f"{method}.{name}",
            f"{name}={value!r} must be a positive number.",
            f"Set {name}={example} (the usual value) or another positive number.",
        )
    ]


def _whole(
    values: Mapping[str, Any], name: str, *, minimum: int, example: int = 4, code: str | None = None
) -> tuple[int, Finding | None]:
    """(value, None) for a whole number >= minimum, else (0, the finding)."""
    value = values.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value, None
    return 0, _error(
        code or f"hyperparameters.{name}",
        f"{name}={value!r} must be a whole number of at least {minimum}.",
        f"Set {name} to a whole number, e.g. {name}={max(minimum, example)}.",
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _next_multiple(value: int, step: int) -> int:
    """The smallest multiple of `step` that is at least `value`."""
    return max(step, -(-value // step) * step)


def _error(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="error", message=message, fix=fix)
