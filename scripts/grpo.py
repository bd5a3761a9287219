# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15",
#   "trackio>=0.43",
# ]
# ///
"""jobtrail GRPO job: group relative policy optimisation (LoRA, QLoRA or full) with TRL's GRPOTrainer.

The model generates num_generations completions per prompt ('prompt' column) and learns from
how reward functions score them against each other. The rewards come from CONFIG["rewards"]:
built-in functions by name (defined below) and/or one function from the user's reward file,
whose source travels inside CONFIG and is loaded here into a namespace of its own. Every other
dataset column reaches the reward functions as a keyword argument (e.g. `answer`).

Runs as it is from scripts/ or rendered by jobtrail, like sft.py, and prints the same
`JOBTRAIL {...}` events; step events also carry the rewards (mean, spread, per function) and
how long the completions ran. A run can "succeed" without learning: when the rewards never differ
within a group (reward_std 0) or most completions hit max_completion_length, an `alert` event
says so as soon as most logged steps show it.
"""

import functools
import json  # noqa: F401 - the rendered config block is `CONFIG: dict = json.loads(...)`
import linecache
import math
import numbers
import re
from collections.abc import Callable
from typing import Any

# --- jobtrail:runtime ---
from _runtime import phase, run_job
from _training import Method, example_config, train

# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict[str, Any] = example_config(
    "grpo",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "trl-lib/DeepMath-103K",
    learning_rate=1e-5,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=2,
    num_generations=4,
    max_completion_length=256,
) | {
    "rewards": {
        "builtin": ["numeric_match", "format"],
        "user": None,
        "format_regex": r"<think>.*?</think>\s*<answer>.*?</answer>",
        "length_target": 256,
    }
}
# --- end jobtrail:config ---

REFERENCE_COLUMNS = ("answer", "solution")  # where exact_match and numeric_match look, in order
USER_REWARD_FILE = "user_reward.py"  # the name tracebacks give the user's reward source
RewardFunc = Callable[..., list[float | None]]
MOSTLY = 0.5  # an alert when more than this share of the steps (or completions) shows the problem


# --- built-in rewards ----------------------------------------------------------------------------
# TRL calls each reward with keyword arguments: prompts, completions, completion_ids,
# trainer_state, and one list per dataset column; each returns one float (or None: no opinion)
# per completion. Completions are strings, or lists of messages for conversational prompts.
# The names here are the ones hyperparameters["reward_funcs"] accepts (jobtrail.preflight.reward_file checks them).

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


def completion_text(completion: Any) -> str:
    """The text of a completion: the string itself, or the content of its messages."""
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    return str(completion)


def final_answer(completion: Any) -> str:
    """What the completion answers: inside its last <answer>...</answer>, else all of it."""
    text = completion_text(completion)
    tagged = _ANSWER_TAG.findall(text)
    return (tagged[-1] if tagged else text).strip()


def _normalise(text: str) -> str:
    return " ".join(str(text).split()).casefold().rstrip(".")


def _last_number(text: str) -> float | None:
    found = _NUMBER.findall(str(text))
    try:
        return float(found[-1].replace(",", "")) if found else None
    except ValueError:
        return None


def _references(kwargs: dict[str, Any]) -> list[Any]:
    for column in REFERENCE_COLUMNS:
        if kwargs.get(column) is not None:
            return list(kwargs[column])
    raise KeyError(f"this reward needs a dataset column named one of {list(REFERENCE_COLUMNS)}")


def exact_match(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the final answer equals the reference (case, spacing, a final period ignored)."""
    references = _references(kwargs)
    return [
        None if ref is None else float(_normalise(final_answer(c)) == _normalise(ref))
        for c, ref in zip(completions, references, strict=True)
    ]


def numeric_match(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the final answer's last number equals the reference's (relative tolerance 1e-6)."""
    references = _references(kwargs)
    scores: list[float | None] = []
    for completion, ref in zip(completions, references, strict=True):
        expected = _last_number(ref) if ref is not None else None
        got = _last_number(final_answer(completion))
        if expected is None:
            scores.append(None)  # a reference without a number cannot judge this row
        else:
            scores.append(float(got is not None and math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)))
    return scores


def format_reward(pattern: str) -> RewardFunc:
    """1.0 for completions that match `pattern` as a whole (`.` also matches newlines)."""
    compiled = re.compile(pattern, re.DOTALL)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [float(compiled.fullmatch(completion_text(c).strip()) is not None) for c in completions]

    return reward


def length_reward(target: int) -> RewardFunc:
    """1.0 at `target` tokens, falling linearly to 0.0 at 0 and at twice the target."""

    def reward(completion_ids: list[list[int]], **kwargs: Any) -> list[float | None]:
        return [max(0.0, 1.0 - abs(len(ids) - target) / target) for ids in completion_ids]

    return reward


# name → how to build it from CONFIG["rewards"] (the settings some of them take).
BUILTIN_REWARDS: dict[str, Callable[[dict[str, Any]], RewardFunc]] = {
    "exact_match": lambda settings: exact_match,
    "numeric_match": lambda settings: numeric_match,
    "format": lambda settings: format_reward(settings["format_regex"]),
    "length": lambda settings: length_reward(int(settings["length_target"])),
}


# --- the job's reward functions ------------------------------------------------------------------


def build_reward_funcs(settings: dict[str, Any]) -> list[RewardFunc]:
    """The built-in rewards named in settings["builtin"], then the user's function, if any."""
    unknown = [name for name in settings.get("builtin") or [] if name not in BUILTIN_REWARDS]
    if unknown:
        raise ValueError(f"unknown built-in reward(s) {unknown}; use {sorted(BUILTIN_REWARDS)}")
    funcs = [_named(BUILTIN_REWARDS[name](settings), name) for name in settings.get("builtin") or []]
    if settings.get("user"):
        funcs.append(load_user_reward(settings["user"]))
    if not funcs:
        raise ValueError("GRPO needs at least one reward function: name built-in rewards or give a reward file")
    return funcs


def _named(func: RewardFunc, name: str) -> RewardFunc:
    """`func` under `name`: TRL logs each reward as rewards/<function __name__>/mean."""

    @functools.wraps(func)
    def reward(**kwargs: Any) -> list[float | None]:
        return func(**kwargs)

    reward.__name__ = reward.__qualname__ = name
    return reward


def load_user_reward(user: dict[str, Any]) -> RewardFunc:
    """Run the user's reward source in a namespace of its own and return its checked function.

    A namespace of its own: the user's names can neither shadow nor be shadowed by this script's,
    and its `if __name__ == "__main__":` block (a common way to try a reward out) does not run.
    """
    name, source = user["function"], user["source"]
    # Registered so tracebacks through the user's code show its lines.
    linecache.cache[USER_REWARD_FILE] = (len(source), None, source.splitlines(keepends=True), USER_REWARD_FILE)
    namespace: dict[str, Any] = {"__name__": "jobtrail_user_reward"}
    try:  # exec: running the user's own reward code is the point
        exec(compile(source, USER_REWARD_FILE, "exec"), namespace)
    except Exception as exc:  # an ImportError in the chain still classifies as dependency_error
        raise ValueError(f"the reward file failed to load: {type(exc).__name__}: {exc}") from exc
    func = namespace.get(name)
    if not callable(func):
        raise ValueError(f"the reward file defines no function named {name!r}")
    return _checked(func, name)


def _checked(func: RewardFunc, name: str) -> RewardFunc:
    """The user's reward, failing in the 'reward' phase (config_error) with a clear message."""

    @functools.wraps(func)
    def reward(**kwargs: Any) -> list[float | None]:
        with phase("reward"):
            scores = func(**kwargs)
            expected = len(kwargs["completions"])
            if not isinstance(scores, list | tuple) or len(scores) != expected:
                raise TypeError(
                    f"reward function {name!r} returned {type(scores).__name__}"
                    + (f" of length {len(scores)}" if isinstance(scores, list | tuple) else "")
                    + f"; it must return a list of {expected} floats (or None), one per completion"
                )
            bad = next((s for s in scores if s is not None and not isinstance(s, numbers.Real)), None)
            if bad is not None:
                raise TypeError(f"reward function {name!r} returned {bad!r}; each score must be a float or None")
        return list(scores)

    return reward


# --- the job -----------------------------------------------------------------------------------


def detect_format(dataset: Any, config: dict[str, Any]) -> str:
    """Prompt-only rows, with the reference column the chosen rewards need."""
    settings = config.get("rewards") or {}
    columns = set(dataset.column_names)
    if "prompt" not in columns:
        raise ValueError(
            f"dataset columns {sorted(columns)} fit no GRPO format: need a 'prompt' column "
            "(GRPO generates the completions itself)"
        )
    needs_reference = [n for n in settings.get("builtin") or [] if n in ("exact_match", "numeric_match")]
    if needs_reference and not columns & set(REFERENCE_COLUMNS):
        raise ValueError(
            f"reward(s) {needs_reference} compare against a dataset column named one of "
            f"{list(REFERENCE_COLUMNS)}; the dataset has {sorted(columns)}"
        )
    return "prompt_only"


def step_alerts(steps: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """What the step metrics so far say about a GRPO run that may still end "succeeded" (see Method.check_steps)."""
    if not steps:
        return []
    last, alerts = steps[-1]["step"], []
    spreads = [s["reward_std"] for s in steps if "reward_std" in s]
    flat = sum(1 for spread in spreads if spread == 0)
    if spreads and flat > MOSTLY * len(spreads):
        rewards = [s["reward"] for s in steps if "reward" in s]
        mean = sum(rewards) / len(rewards) if rewards else float("nan")
        alerts.append(
            {
                "code": "grpo_reward_std_zero",
                "step": last,
                "message": f"reward_std was 0 in {flat} of {len(spreads)} logged steps (mean reward {mean:.3g}): "
                "every completion of a prompt scored the same, so the advantages, the loss and the update were 0 "
                "and the model learned nothing from those steps.",
                "fix": "Make the rewards tell completions apart (partial credit instead of all-or-nothing, a "
                "reward the model can already earn sometimes), or raise num_generations or temperature so "
                "completions differ; score a few sample completions with the reward functions first.",
            }
        )
    clipped = [s["completions/clipped_ratio"] for s in steps if "completions/clipped_ratio" in s]
    share = sum(clipped) / len(clipped) if clipped else 0.0
    if share > MOSTLY:
        limit = (config.get("training_args") or {}).get("max_completion_length", "TRL's default")
        alerts.append(
            {
                "code": "grpo_completions_clipped",
                "step": last,
                "message": f"{share:.0%} of the completions were cut at max_completion_length ({limit}): a cut "
                "completion rarely reaches the answer or the format the rewards look for.",
                "fix": f"Raise max_completion_length (now {limit}), or ask for shorter answers in the prompt.",
            }
        )
    return alerts


GRPO = Method(
    "grpo",
    "GRPO",
    detect_format,
    trainer_inputs=lambda config: {"reward_funcs": build_reward_funcs(config.get("rewards") or {})},
    check_steps=step_alerts,
    loss_spikes=False,  # GRPO's loss hovers around 0 by design: no scale to spike against
)

if __name__ == "__main__":
    run_job(lambda: train(CONFIG, GRPO), CONFIG.get("launcher"))
