"""Which model types transformers knows, and the modules LoRA can adapt in each, without importing transformers.

The tables are bundled (transformers_architectures.json and lora_modules.json, generated from the installed
transformers by tools/bundled_tables.py); tests compare them with the installed version so they cannot drift
silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from jobtrail.util.data import load_table

LORA_MODULES_TABLE = "lora_modules.json"


@cache
def _table() -> dict[str, frozenset[str]]:
    data = load_table("transformers_architectures.json")
    return {"known": frozenset(data["model_types"]), "causal_lm": frozenset(data["causal_lm_model_types"])}


def is_known(model_type: str) -> bool:
    return model_type in _table()["known"]


def is_causal_lm(model_type: str) -> bool:
    return model_type in _table()["causal_lm"]


@dataclass(frozen=True)
class LoraModules:
    """The names of the modules of a model type that LoRA can adapt, as the architecture builds them."""

    linear: frozenset[str]  # Linear and transformers' Conv1D layers (lm_head included)
    embedding: frozenset[str]


def lora_modules(model_type: str) -> LoraModules | None:
    """The modules of `model_type` that LoRA can adapt; None for a type the table does not hold."""
    entry = load_table(LORA_MODULES_TABLE)["modules"].get(model_type)
    return LoraModules(frozenset(entry["linear"]), frozenset(entry["embedding"])) if entry is not None else None
