"""What each hyperparameter takes: its kinds of value, its choices and its range, for every method.

    field_type(method, name) -> FieldType | None     None for a name the method does not have
    judge_value(method, name, value) -> ValueReading       the value read as the field's type, or why not
    takes_kind(method, name, value) -> bool            whether the field takes that kind of value
    typed(method, values) -> dict                     every value that can be read, read

TRL's config fields come from the bundled table (trl_config_types.json, re-derived from the
installed TRL and transformers by a test), so the server judges values without importing trl.
jobtrail's own knobs are declared here with their defaults. Pure.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from jobtrail.methods.registry import method_spec
from jobtrail.methods.rewards import BUILTIN_REWARDS
from jobtrail.util.data import load_table

TYPES_TABLE = "trl_config_types.json"

# jobtrail's own knobs, which TRL does not have, with their defaults.
PEFT_DEFAULTS: dict[str, Any] = {
    "peft": "lora",
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "lora_target_modules": "all-linear",
}
JOB_DEFAULTS: dict[str, Any] = {
    "checkpoint_retention": 2,
    "dataset_split": "train",
    # A held-out share of the training rows (fixed seed) the job evaluates on every eval_steps; None: no slice.
    "eval_split_ratio": None,
    # Minutes without a training step before the job raises a `stalled` alert; None: never.
    "stall_alert_minutes": 10,
    # Worker processes of the job (the launcher, chosen in preflight); None: one per GPU (one on a CPU).
    "num_processes": None,
}


@dataclass(frozen=True)
class FieldType:
    """The JSON kinds a field takes ("bool", "int", "float", "str", "list", "dict", "null", "any")."""

    kinds: tuple[str, ...]
    choices: tuple[Any, ...] = ()  # the only strings it takes (of a list's items, for a list)
    default: Any = None

    def admits_kind(self, value: Any) -> bool:
        return "any" in self.kinds or _kind(value) in self.kinds or (_kind(value) == "int" and "float" in self.kinds)

    def describe(self) -> str:
        words = {"null": "null", "list": "a list", "dict": "an object", "str": "a string"}
        words |= {"bool": "true or false", "int": "an integer", "float": "a number", "any": "anything"}
        return " or ".join(words[kind] for kind in self.kinds)


_OWN_TYPES: dict[str, FieldType] = {
    "peft": FieldType(("str",), ("lora", "qlora", "none"), "lora"),
    "lora_r": FieldType(("int",), default=16),
    "lora_alpha": FieldType(("int",), default=32),
    "lora_dropout": FieldType(("float",), default=0.05),
    "lora_target_modules": FieldType(("str", "list"), default="all-linear"),
    "checkpoint_retention": FieldType(("int",), default=2),
    "dataset_split": FieldType(("str",), default="train"),
    "eval_split_ratio": FieldType(("float", "null")),
    "stall_alert_minutes": FieldType(("float", "null"), default=10),
    "num_processes": FieldType(("int", "null")),
    "reward_funcs": FieldType(("list", "str", "null"), BUILTIN_REWARDS),
    "reward_format_regex": FieldType(("str",)),
    "reward_length_target": FieldType(("int",), default=256),
}


@dataclass(frozen=True)
class Range:
    """The numbers a field takes beyond its type: [minimum, maximum], either end open, plus `also`."""

    minimum: float | None = None
    maximum: float | None = None
    open_min: bool = False
    open_max: bool = False
    also: tuple[float, ...] = ()  # sentinels outside the range (max_steps=-1: "train by epochs")
    why: str = ""  # what a value beyond it does, where the range alone does not say

    def admits(self, x: float) -> bool:
        if x in self.also:
            return True
        low = self.minimum is None or (x > self.minimum if self.open_min else x >= self.minimum)
        high = self.maximum is None or (x < self.maximum if self.open_max else x <= self.maximum)
        return low and high

    def describe(self) -> str:
        if self.minimum == 1 and self.maximum is None and not self.open_min:
            text = "a whole number of at least 1"
        elif self.maximum is None:
            text = f"a number {'above' if self.open_min else 'of at least'} {_number(self.minimum)}"
        elif self.minimum is None:
            text = f"a number {'below' if self.open_max else 'of at most'} {_number(self.maximum)}"
        else:
            left, right = "(" if self.open_min else "[", ")" if self.open_max else "]"
            text = f"a number in {left}{_number(self.minimum)}, {_number(self.maximum)}{right}"
        return text + "".join(f", or {_number(x)}" for x in self.also)


# Ranges the types cannot say: no library declares them (TRL and transformers check a few in
# __post_init__, others only fail mid-run), so they are written here by hand.
_COUNT = Range(minimum=1)
_PROBABILITY = Range(minimum=0, maximum=1)
_POSITIVE = Range(minimum=0, open_min=True)
_NOT_NEGATIVE = Range(minimum=0)
RANGES: dict[str, Range] = {
    **dict.fromkeys(
        (
            "per_device_train_batch_size",
            "per_device_eval_batch_size",
            "gradient_accumulation_steps",
            "lora_r",
            "lora_alpha",
            "checkpoint_retention",
            "num_generations",
            "num_iterations",
            "max_length",
            "max_completion_length",
            "reward_length_target",
            "generation_batch_size",
            "steps_per_generation",
            "num_processes",
        ),
        _COUNT,
    ),
    # Steps between logs, saves and evaluations; below 1 they are a fraction of the run.
    **dict.fromkeys(("logging_steps", "save_steps", "eval_steps"), _POSITIVE),
    # warmup_steps below 1 is a fraction of the run (transformers 5), above it a step count.
    **dict.fromkeys(("warmup_steps", "seed", "dataloader_num_workers", "max_grad_norm", "beta"), _NOT_NEGATIVE),
    # Decoupled weight decay above 1 would shrink the weights faster than they learn.
    **dict.fromkeys(("weight_decay", "top_p", "adam_beta1", "adam_beta2", "dropout"), _PROBABILITY),
    "lora_dropout": Range(
        minimum=0,
        maximum=1,
        open_max=True,
        why="a dropout of 1 zeroes every input of the adapter, so its gradients stay 0",
    ),
    "max_steps": Range(minimum=1, also=(-1,)),
    "num_train_epochs": _POSITIVE,
    "learning_rate": Range(minimum=0, maximum=1, open_min=True, open_max=True),
    # Half the rows or more held out would train on less than it evaluates.
    "eval_split_ratio": Range(minimum=0, maximum=0.5, open_min=True, open_max=True),
    "stall_alert_minutes": _POSITIVE,
    "temperature": _POSITIVE,
}


@cache
def trl_types(method: str) -> dict[str, FieldType]:
    """TRL's config fields of `method` (its registry name) with their types, from the bundled table."""
    table = load_table(TYPES_TABLE)[method]
    return {
        name: FieldType(tuple(entry["kinds"]), tuple(entry.get("choices", ())), entry.get("default"))
        for name, entry in table.items()
    }


def field_type(method: str, name: str) -> FieldType | None:
    """The type of `name` for `method`, None for a name it does not have (whether the name belongs
    to the method is the name check's business)."""
    own = _OWN_TYPES.get(name)
    if own is not None:
        return own
    trl = trl_types(method).get(name)
    jobtrail_default = method_spec(method).defaults.get(name) if trl is not None else None
    # The default an agent should hear of is the one its job gets: jobtrail's where it sets one, else TRL's.
    return replace(trl, default=jobtrail_default) if trl is not None and jobtrail_default is not None else trl


@dataclass(frozen=True)
class ValueReading:
    """One hyperparameter's value as the job will read it, and what is wrong with it, if anything."""

    value: Any  # the value read as the field's type where it could be (else as given)
    converted: bool = False  # a string (or a whole float) read as the field's number or bool
    problem: str | None = None  # why the job cannot use it
    fix: str | None = None
    out_of_range: bool = False  # the problem: a value of the field's type, beyond its range


def judge_value(method: str, name: str, value: Any) -> ValueReading:
    """`value` for `name` of `method`: read, and checked against the field's type, choices and range."""
    ftype = field_type(method, name)
    if ftype is None:
        return ValueReading(value)
    read = _read(value, ftype)
    converted = read is not value
    numeric = "int" in ftype.kinds or "float" in ftype.kinds
    if (isinstance(read, float) or numeric) and not_finite(read):
        return ValueReading(
            value,
            problem=f"{name} must be a finite number, not {_shown(value)}.",
            fix=_fix(name, ftype, RANGES.get(name)),
        )
    if not ftype.admits_kind(read):
        return ValueReading(
            value,
            problem=f"{name} takes {ftype.describe()}, not {_shown(value)}.",
            fix=_fix(name, ftype, RANGES.get(name)),
        )
    items = read if isinstance(read, list) else [read]
    unknown = [item for item in items if isinstance(item, str) and ftype.choices and item not in ftype.choices]
    if unknown or (isinstance(read, list) and ftype.choices and not all(isinstance(i, str) for i in read)):
        shown = unknown[0] if unknown else read
        return ValueReading(read, converted, f"{name}={shown!r} is not one of its choices.", _fix(name, ftype))
    limits = RANGES.get(name)
    if limits and isinstance(read, int | float) and not isinstance(read, bool) and not limits.admits(read):
        return ValueReading(
            read,
            converted,
            f"{name}={value!r} is out of range: it must be {limits.describe()}"
            + (f" ({limits.why})." if limits.why else "."),
            _fix(name, ftype, limits),
            out_of_range=True,
        )
    return ValueReading(read, converted)


def takes_kind(method: str, name: str, value: Any) -> bool:
    """Whether `name` takes values of `value`'s kind (read as its number or bool where it is a string),
    whatever its range: a renamed value out of range is refused by name afterwards."""
    ftype = field_type(method, name)
    return ftype is not None and ftype.admits_kind(_read(value, ftype))


def typed(method: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with every string that reads as its field's number or bool read; the rest as given."""
    return {name: judge_value(method, name, value).value for name, value in values.items()}


_INT = re.compile(r"[+-]?\d+")


# One item of a list written as a comma string: a name (a module, an integration, a reward), never a number or a
# pattern, so that a regex with a comma in it ("{1,2}") stays the string it is.
_LIST_ITEM = re.compile(r"[A-Za-z_][\w.\-/]*")


def _read(value: Any, ftype: FieldType) -> Any:
    """`value` as the field's kind where it is a string, or a whole float, the field cannot take as is; and a list
    field's items written as one comma string ("q_proj,v_proj") as that list: the library would read the string
    whole (PEFT as one regex, transformers as one integration name)."""
    kinds = ftype.kinds
    if isinstance(value, float) and value.is_integer() and "int" in kinds and "float" not in kinds:
        return int(value)
    if isinstance(value, str) and "list" in kinds and "," in value:
        items = [item.strip() for item in value.split(",")]
        if all(_LIST_ITEM.fullmatch(item) for item in items):
            return items
    if not isinstance(value, str) or "str" in kinds or "any" in kinds:
        return value
    text = value.strip().lower()
    if "bool" in kinds and text in ("true", "false"):
        return text == "true"
    if _INT.fullmatch(text) and ("int" in kinds or "float" in kinds):
        return int(text)
    try:
        number = float(text)
    except ValueError:
        return value
    if "int" in kinds and number.is_integer() and "float" not in kinds:
        return int(number)
    return number if "float" in kinds and math.isfinite(number) else value


def _fix(name: str, ftype: FieldType, limits: Range | None = None) -> str:
    if ftype.choices:
        return f"Set {name} to one of: {', '.join(map(str, ftype.choices))}."
    what = limits.describe() if limits else ftype.describe()
    example = f" (default {ftype.default!r})" if ftype.default is not None else ""
    return f"Set {name} to {what}{example}."


def not_finite(value: Any) -> bool:
    """NaN or an infinity, as a float or written as one ("inf", "nan"): a number, but none a field can take."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    return isinstance(value, float) and not math.isfinite(value)


def _shown(value: Any) -> str:
    """The value as the agent wrote it in JSON: null and true/false, not Python's None and True/False."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return repr(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        return "list"
    return "dict" if isinstance(value, dict) else "any"


def _number(x: float | None) -> str:
    return f"{x:g}" if x is not None else "-"
