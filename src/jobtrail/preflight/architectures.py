"""Which model types transformers knows, without importing transformers.

The list is bundled (transformers_architectures.json, generated from the installed
transformers); a test compares it with the installed version so it cannot drift silently.
"""

from __future__ import annotations

from functools import cache

from jobtrail.util.data import load_table


@cache
def _table() -> dict[str, frozenset[str]]:
    data = load_table("transformers_architectures.json")
    return {"known": frozenset(data["model_types"]), "causal_lm": frozenset(data["causal_lm_model_types"])}


def is_known(model_type: str) -> bool:
    return model_type in _table()["known"]


def is_causal_lm(model_type: str) -> bool:
    return model_type in _table()["causal_lm"]
