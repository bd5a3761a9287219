"""Measured throughput and peak memory of finished attempts, kept in the ledger.

Keyed by what decides them: architecture (model_type), size (exact parameter count), method,
peft and flavor (`local` for this machine). Estimates for the same key use the measurements
instead of the FLOPs model and say so. The tracker calls record_measurement when an attempt ends,
with the numbers of the job's `metrics` event (tokens_per_second, peak_memory_bytes).

Within a key, measurements at the estimate's own micro-batch and max_length are preferred; others
are used rescaled by the FLOPs model (estimate/rates.py), because tokens/s is not stable across
shapes: a small model's step is mostly per-micro-batch overhead, so its tokens/s grows with the
batch. The time around the training loop (start, imports, loading, saving) is measured too, from
the attempt's own wall time less the trainer's train_runtime.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from jobtrail.ledger.store import Ledger

# Throughput is the median of this many most recent measurements: one slow attempt (a noisy
# neighbour, a cold cache) should not move the estimate by itself.
RECENT = 5
# How many of a key's newest measurements are searched for ones at the estimate's own shape.
SEARCHED = 50


class Measurement(BaseModel):
    architecture: str
    params: int
    method: str
    peft: str
    flavor: str
    tokens_per_second: float | None = Field(
        description="Median of the most recent measurements (non-padding tokens/s)."
    )
    peak_memory_bytes: int | None = Field(
        description="Newest attempt's peak: max_memory_allocated (GPU), ru_maxrss (CPU)."
    )
    max_length: int | None = None
    batch: int | None = None
    attempt_id: str = Field(description="The newest attempt measured.")
    recorded_at: float
    samples: int = Field(1, description="How many measurements the throughput is the median of.")
    same_shape: bool = Field(
        True, description="Whether they were measured at the estimate's micro-batch and max_length (else rescaled)."
    )
    overhead_s: float | None = Field(
        None, description="Median seconds of the attempts outside train(): start, imports, loading, saving."
    )


def record_measurement(
    ledger: Ledger,
    *,
    architecture: str,
    params: int,
    method: str,
    peft: str,
    flavor: str,
    tokens_per_second: float | None,
    peak_memory_bytes: int | None,
    max_length: int | None,
    batch: int | None,
    attempt_id: str,
) -> None:
    """Store one attempt's measurement; recording the same attempt again replaces it."""
    ledger.record_calibration(
        {
            "attempt_id": attempt_id,
            "architecture": architecture,
            "params": int(params),
            "method": method,
            "peft": peft,
            "flavor": flavor,
            "tokens_per_second": tokens_per_second,
            "peak_memory_bytes": peak_memory_bytes,
            "max_length": max_length,
            "batch": batch,
        }
    )


def lookup(
    ledger: Ledger,
    *,
    architecture: str,
    params: int,
    method: str,
    peft: str,
    flavor: str,
    max_length: int | None = None,
    batch: int | None = None,
) -> Measurement | None:
    """The newest measurement for this key, its throughput the median of the RECENT newest: those at
    `max_length` and `batch` when there are any (same_shape), else the key's newest whatever their shape."""
    rows = ledger.calibrations(
        architecture=architecture, params=params, method=method, peft=peft, flavor=flavor, limit=SEARCHED
    )
    if not rows:
        return None
    wanted = (max_length, batch)
    same = [r for r in rows if (r["max_length"], r["batch"]) == wanted] if None not in wanted else rows
    chosen = (same or rows)[:RECENT]
    rates = [r["tokens_per_second"] for r in chosen if r["tokens_per_second"]]
    newest = dict(chosen[0])
    newest["tokens_per_second"] = statistics.median(rates) if rates else None
    overheads = [s for s in (_overhead_s(ledger, r["attempt_id"]) for r in chosen) if s is not None]
    return Measurement(
        **newest,
        samples=len(rates),
        same_shape=bool(same),
        overhead_s=statistics.median(overheads) if overheads else None,
    )


def _overhead_s(ledger: Ledger, attempt_id: str) -> float | None:
    """An attempt's wall time less its train_runtime; None when either is unknown, or when the trainer
    says it ran longer than the attempt lasted (another machine's clock)."""
    attempt = ledger.get_attempt(attempt_id)
    if attempt is None or attempt.started_at is None or attempt.ended_at is None:
        return None
    runtime = (attempt.summary or {}).get("train_runtime")
    if not isinstance(runtime, int | float) or runtime <= 0:
        return None
    wall = attempt.ended_at - attempt.started_at
    return wall - runtime if wall >= runtime else None
