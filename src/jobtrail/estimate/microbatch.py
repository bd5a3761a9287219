"""The micro-batch and gradient checkpointing a GPU job trains with, chosen from the memory model. Pure.

What a step learns stays the caller's: the effective batch (per_device_train_batch_size ×
gradient_accumulation_steps, the caller's values over the method's defaults) is kept, and only how
it is split changes. Among the splits whose estimated peak stays within FILL of the device's
memory, the fastest is taken:
  1. without gradient checkpointing (it recomputes every layer's forward in backward: +2N FLOPs
     per token, a third more for full fine-tuning and half more for LoRA), at the largest
     micro-batch that fits, provided it is not smaller than the one the job would start from;
  2. otherwise with checkpointing, at the largest micro-batch that fits;
  3. otherwise (nothing fits) the job's own values, which the estimate then says do not fit.
A value the caller gave is never changed: a given micro-batch is kept as it is, a given
gradient_checkpointing too.

Only where the memory model was measured (bf16 GPUs, SFT: estimate/memory.py) is anything chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from jobtrail.estimate.memory import Device
from jobtrail.results.estimate import MicroBatch

# The share of device memory the chosen shape may fill: the estimate is within ±15% of measured
# peaks, and the allocator holds 5-10% more than it allocated, so 0.75 × 1.15 stays below the 0.9
# the fit check allows (memory.HEADROOM).
FILL = 0.75
TUNED_DEVICES: tuple[Device, ...] = ("cuda_bf16",)  # fp16 autocast over fp32 weights (T4) was never measured
TUNED_METHODS = ("sft",)  # the measured method; DPO/KTO/reward rows hold two or more sequences


def tunable(device: Device, method: str) -> str | None:
    """None when the split may be chosen for this device and method, else why not."""
    if device == "cpu":
        return "a CPU job keeps its defaults (no GPU memory to fill)"
    if device not in TUNED_DEVICES:
        return "the memory model is not measured for fp16 autocast over fp32 weights (a GPU without bf16)"
    if method not in TUNED_METHODS:
        return f"only SFT's memory is measured; {method} keeps its defaults"
    return None


def choose_micro_batch(
    memory_gb: Callable[[int, bool], float],
    *,
    batch: int,
    accumulation: int,
    gradient_checkpointing: bool,
    given: Collection[str],
    device_gb: float,
) -> MicroBatch:
    """The split to train with. `memory_gb(micro_batch, gradient_checkpointing)` is one device's
    estimated peak; batch, accumulation and gradient_checkpointing are the job's values (the
    caller's or the defaults), `given` the names the caller chose: a given micro-batch or
    accumulation keeps the split, a given gradient_checkpointing the checkpointing."""
    batch_given = bool({"per_device_train_batch_size", "gradient_accumulation_steps"} & set(given))
    checkpointing_given = "gradient_checkpointing" in given
    effective = batch * accumulation
    budget = FILL * device_gb
    sizes = [batch] if batch_given else [b for b in range(effective, 0, -1) if effective % b == 0]
    options = [gradient_checkpointing] if checkpointing_given else [False, True]

    def split(b: int, checkpointing: bool, reason: str) -> MicroBatch:
        changed = [
            name
            for name, new, old in (
                ("per_device_train_batch_size", b, batch),
                ("gradient_accumulation_steps", effective // b, accumulation),
                ("gradient_checkpointing", checkpointing, gradient_checkpointing),
            )
            if new != old
        ]
        total = memory_gb(b, checkpointing)
        return MicroBatch(
            per_device_train_batch_size=b,
            gradient_accumulation_steps=effective // b,
            gradient_checkpointing=checkpointing,
            total_gb=round(total, 3),
            budget_gb=round(budget, 3),
            changed=changed,
            why=reason.format(total=total, budget=budget, device=device_gb, fill=FILL),
        )

    for checkpointing in options:
        # Turning checkpointing off is worth it only without shrinking the micro-batch.
        smallest = batch if not checkpointing and not checkpointing_given else 1
        fitting = [b for b in sizes if b >= smallest and memory_gb(b, checkpointing) <= budget]
        if fitting:
            return split(fitting[0], checkpointing, _FITS)
    return split(batch, gradient_checkpointing, _NOTHING_FITS)


_FITS = "estimated {total:.1f} GB, within the {budget:.1f} GB jobtrail fills ({fill:.0%} of {device:g} GB)"
_NOTHING_FITS = (
    "no split fits the {budget:.1f} GB jobtrail fills ({fill:.0%} of {device:g} GB): the job's own values are kept"
)
