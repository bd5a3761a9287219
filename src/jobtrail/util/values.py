"""JSON-ish row values as reports describe them: a short type name, the characters of text
they hold, and a copy cut short enough to show as a sample. Pure."""

from __future__ import annotations

from typing import Any

SAMPLE_CHARS = 200  # longer strings in samples are cut, with a marker saying by how much
SAMPLE_ITEMS = 8  # longer lists in samples are cut the same way
_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object", type(None): "null"}


def type_name(value: Any) -> str:
    """A short, human type name for a JSON-ish value (never recursing more than one level)."""
    if type(value) in _SCALARS:
        return _SCALARS[type(value)]
    if not isinstance(value, list):
        return type(value).__name__
    if not value:
        return "list"
    first = value[0]
    if isinstance(first, dict):
        if "role" in first:
            return "messages"
        return "list[{" + ", ".join(sorted(str(k) for k in first)[:4]) + "}]"
    return f"list[{_SCALARS.get(type(first), type(first).__name__)}]"


def text_chars(value: Any) -> int:
    """Characters of text in a row, however nested (message contents, prompt/completion turns)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_chars(v) for v in value.values())
    if isinstance(value, list):
        return sum(text_chars(v) for v in value)
    return 0


def cut_sample(value: Any, depth: int = 0) -> Any:
    """A JSON-able copy with long strings and lists shortened (and a marker saying by how much)."""
    if depth > 6:
        return "…"
    if isinstance(value, str):
        if len(value) <= SAMPLE_CHARS:
            return value
        return value[:SAMPLE_CHARS] + f"… (+{len(value) - SAMPLE_CHARS} chars)"
    if isinstance(value, dict):
        return {str(k): cut_sample(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        head = [cut_sample(v, depth + 1) for v in value[:SAMPLE_ITEMS]]
        return head + ([f"… (+{len(value) - SAMPLE_ITEMS} items)"] if len(value) > SAMPLE_ITEMS else [])
    if value is None or isinstance(value, bool | int | float):
        return value
    return cut_sample(str(value), depth)  # datetimes, bytes, decimals from Parquet
