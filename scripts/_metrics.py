"""jobtrail job-side metrics: the numbers a training job prints, at the precision they were computed in.

render.py inlines this file into the training scripts (like _runtime.py, standard library only and
without `from __future__` imports); the server loads it where it writes the same numbers (the ledger's
bench and dictionary, tools/ledger_dictionary.py).
"""

import struct
from typing import Any


def as_float32(value: Any) -> Any:
    """A training metric as the float32 it came from: the shortest decimal that reads back as the same
    float32 (at most 9 digits, against a double's 17), nested dicts and lists too; anything else as it is.

    Losses, gradient norms, accuracies and entropies are fp32/bf16 tensors' .item()s (a mean of them at
    most), so digits past float32's are noise the receipts would store in every step event; TensorBoard
    keeps scalars as float32 for the same reason. Not for timestamps: a float32 resolves 2 minutes of one."""
    if isinstance(value, dict):
        return {name: as_float32(item) for name, item in value.items()}
    if isinstance(value, list):
        return [as_float32(item) for item in value]
    if not isinstance(value, float) or value != value or value in (float("inf"), float("-inf")):
        return value
    try:
        nearest = struct.pack("<f", value)
    except OverflowError:  # past float32's range: not a tensor's value, kept whole
        return value
    exact = struct.unpack("<f", nearest)[0]
    # Every step event prints several of these, so the fewest digits are found by halving (4 tries, not up to 9):
    # a text that reads back with d digits does with d + 1 too (its d-digit form is a (d + 1)-digit text, and the
    # nearest (d + 1)-digit one is no farther from the float32; a sweep of float32's range and of every power of
    # two's neighbours, where the rounding interval is lopsided, found the one-by-one search's text every time).
    fewest, most = 1, 9
    while fewest < most:
        middle = (fewest + most) // 2
        if _reads_back(f"{exact:.{middle}g}", nearest):
            most = middle
        else:
            fewest = middle + 1
    return float(f"{exact:.{fewest}g}")


def _reads_back(text: str, nearest: bytes) -> bool:
    try:
        return struct.pack("<f", float(text)) == nearest
    except OverflowError:  # rounded up past float32's largest: more digits, then
        return False
