"""Measured throughput and peak memory of finished attempts, kept in the ledger.

Keyed by what decides them: architecture (model_type), size (exact parameter count), method,
peft and flavor. Estimates for the same key use the measurements instead of the FLOPs model
and say so. The integrator calls record_measurement when an attempt ends, with the numbers of
the job's `metrics` event (tokens_per_second, peak_memory_bytes).
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
    ledger: Ledger, *, architecture: str, params: int, method: str, peft: str, flavor: str
) -> Measurement | None:
    """The newest measurement for this key, its throughput the median of the RECENT newest."""
    rows = ledger.calibrations(
        architecture=architecture, params=params, method=method, peft=peft, flavor=flavor, limit=RECENT
    )
    if not rows:
        return None
    rates = [r["tokens_per_second"] for r in rows if r["tokens_per_second"]]
    newest = dict(rows[0])
    newest["tokens_per_second"] = statistics.median(rates) if rates else None
    return Measurement(**newest, samples=len(rates))
