"""jobtrail job-side metrics: the numbers a training job prints, at the precision they were computed in.

render.py inlines this file into the training scripts (like _runtime.py, standard library only and
without `from __future__` imports); the server loads it where it writes the same numbers (the ledger's
bench and dictionary, tools/ledger_dictionary.py).
"""

import contextlib
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
    for digits in range(1, 10):  # 9 significant digits always read back as the float32 they print
        text = f"{exact:.{digits}g}"
        with contextlib.suppress(OverflowError):  # rounded up past float32's largest: more digits, then
            if struct.pack("<f", float(text)) == nearest:
                return float(text)
    return exact
