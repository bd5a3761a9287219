"""A measured throughput carried to another shape of the same job. Pure.

tokens/s is not a constant of a model and a machine: a step pays per-micro-batch host overhead
(Python, kernel launches, the optimizer) besides its FLOPs, so a small model's tokens/s grows with
the tokens per micro-batch, while a big model on a GPU is near constant; recomputing activations
(gradient checkpointing) costs a third more FLOPs. A measurement taken at another micro-batch,
max_length or checkpointing is therefore carried over by the FLOPs model's own ratio
between the two shapes: the model supplies how speed changes with shape, the measurement the level
(which the model gets wrong by up to a few × on an unmeasured machine).
"""

from __future__ import annotations

from collections.abc import Callable

from jobtrail.estimate.calibration import Measurement
from jobtrail.estimate.cost import TimeEstimate, Workload


def rescaled_rate(
    measurement: Measurement, work: Workload, time_of: Callable[..., TimeEstimate], *, same_shape: bool
) -> float | None:
    """The measured tokens/s at `work`'s shape: as measured when the shapes match, else times the
    model's tokens/s at `work` over its tokens/s at the measured micro-batch, max_length and gradient
    checkpointing (`time_of(work, gradient_checkpointing=...)` times a workload with either)."""
    rate = measurement.tokens_per_second
    if not rate or same_shape or not measurement.batch or not measurement.max_length:
        return rate
    recomputed = measurement.gradient_checkpointing
    as_measured = {} if recomputed is None else {"gradient_checkpointing": recomputed}
    cut = measurement.max_length
    measured = work.model_copy(
        update={
            "batch": measurement.batch,
            "seq_len": min(work.seq_len, cut),
            "real_tokens_per_example": min(work.real_tokens_per_example, cut),
        }
    )
    then, now = time_of(measured, **as_measured).tokens_per_second, time_of(work).tokens_per_second
    return rate * now / then if then > 0 and now > 0 else rate
