"""Measured throughput and peak memory of finished attempts, kept in the ledger.

Keyed by what decides them: architecture (model_type), size (exact parameter count), method,
peft and flavor (`local` for this machine). Estimates for the same key use the measurements
instead of the FLOPs model and say so. The tracker calls record_measurement when an attempt ends,
with the numbers of the job's `metrics` event (tokens_per_second, peak_memory_bytes).

The throughput is the attempt's steady state (estimate/steady.py: its step events' tokens over the seconds between
them, warm-up, checkpoint commits and evaluations left out), so a short calibrating run's first steps and checkpoint
do not dilute the pace a long run is estimated at; an attempt too short to show one keeps its whole-run figure
(tokens over train_runtime), and says so (`source`). A bench can record a steady figure of its own for a flavor
(record_measured_rate). Steady figures are preferred to whole-run ones of the same key.

Within a key, measurements at the estimate's own micro-batch, max_length and gradient checkpointing are preferred;
others are used rescaled by the FLOPs model (estimate/rates.py), because tokens/s is not stable across shapes: a
small model's step is mostly per-micro-batch overhead, so its tokens/s grows with the batch. The time outside the
steady steps (start, imports, loading, warm-up, checkpoints, evaluations, saving) is measured too: the attempt's
own wall time less its tokens at the steady rate (less train_runtime for a whole-run figure).
"""

from __future__ import annotations

import statistics
import uuid
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from jobtrail.estimate.params import model_shape
from jobtrail.estimate.steady import steady_rate
from jobtrail.models import CalibrationRow, RateSource

if TYPE_CHECKING:
    from jobtrail.ledger.store import Ledger

STEADY: tuple[RateSource, ...] = ("steady", "bench")

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
        None,
        description="Median seconds of the attempts outside their steady steps: start, imports, loading, warm-up, "
        "checkpoints, evaluations, saving.",
    )
    gradient_checkpointing: bool | None = Field(None, description="Whether the runs measured recomputed activations.")
    sources: list[RateSource] = Field(
        default_factory=list, description="Where the throughput's measurements came from (steady, runtime, bench)."
    )

    @property
    def steady(self) -> bool:
        """Whether the throughput is steady-state steps only (no whole-run figure among them)."""
        return bool(self.sources) and all(s in STEADY for s in self.sources)


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
    gradient_checkpointing: bool | None = None,
) -> None:
    """Store one attempt's measurement; recording the same attempt again replaces it. Its throughput is the steady
    state of its step events in the ledger; `tokens_per_second` (the whole run's, from its metrics event) only when
    they show none."""
    steady = steady_rate(ledger.events(attempt_id))
    rate = steady.tokens_per_second if steady else tokens_per_second
    _record(
        ledger,
        attempt_id,
        architecture=architecture,
        params=params,
        method=method,
        peft=peft,
        flavor=flavor,
        tokens_per_second=rate,
        peak_memory_bytes=peak_memory_bytes,
        max_length=max_length,
        batch=batch,
        gradient_checkpointing=gradient_checkpointing,
        source="steady" if steady else "runtime" if rate else None,
    )


def record_measured_rate(
    ledger: Ledger,
    *,
    model_config: dict[str, Any],
    method: str,
    peft: str,
    flavor: str,
    tokens_per_second: float,
    max_length: int,
    batch: int,
    gradient_checkpointing: bool,
    peak_memory_bytes: int | None = None,
    source: RateSource = "bench",
) -> str:
    """Record a steady-state tokens/s measured outside a job (a bench's per-step timings after warm-up, checkpoint
    time left out) as a calibration of `flavor` (a catalog name whose GPU it ran on, e.g. "h200", or the name of
    the Flavor estimates are asked for); its id. `model_config` is the model's config.json (load_model_config),
    which gives the key's architecture and exact parameter count; `tokens_per_second` counts non-padding tokens,
    as TRL does. Estimates of that key use it like a job's measurement, at its shape or rescaled."""
    if not tokens_per_second or tokens_per_second <= 0:
        raise ValueError(f"tokens_per_second must be positive, not {tokens_per_second!r}")
    shape = model_shape(model_config)
    entry = f"{source}-{uuid.uuid4().hex[:16]}"
    _record(
        ledger,
        entry,
        architecture=shape.architecture,
        params=shape.params,
        method=method,
        peft=peft,
        flavor=flavor,
        tokens_per_second=float(tokens_per_second),
        peak_memory_bytes=peak_memory_bytes,
        max_length=max_length,
        batch=batch,
        gradient_checkpointing=gradient_checkpointing,
        source=source,
    )
    return entry


def _record(ledger: Ledger, entry: str, **fields: Any) -> None:
    ledger.record_calibration(CalibrationRow(attempt_id=entry, **fields))


def checkpointing_of(training_args: dict[str, Any]) -> bool | None:
    """Whether a job's training arguments recompute activations: the Trainer's gradient_checkpointing, or FSDP's
    activation_checkpointing where jobtrail shards the job (templates/configs.py); None when they do not say."""
    if training_args.get("fsdp") and isinstance(training_args.get("fsdp_config"), dict):
        value = training_args["fsdp_config"].get("activation_checkpointing")
    else:
        value = training_args.get("gradient_checkpointing")
    return bool(value) if value is not None else None


# Keyword-only like record_measurement (shape shared: the same key, written there and read here) and, by shape
# alone, like Runs.submit: each call names the measurement it means.
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
    gradient_checkpointing: bool | None = None,
) -> Measurement | None:
    """The newest measurement for this key, its throughput the median of the RECENT newest: steady-state ones where
    there are any, and of those the ones at `max_length`, `batch` and `gradient_checkpointing` when there are any
    (same_shape; a row that did not record its checkpointing matches either), else the key's newest whatever their
    shape."""
    rows = ledger.calibrations(
        architecture=architecture, params=params, method=method, peft=peft, flavor=flavor, limit=SEARCHED
    )
    if not rows:
        return None
    rows = [r for r in rows if r.source in STEADY] or rows
    if None in (max_length, batch):
        same = rows
    else:
        same = [r for r in rows if _at_shape(r, max_length, batch, gradient_checkpointing)]
    chosen = (same or rows)[:RECENT]
    rates = [r.tokens_per_second for r in chosen if r.tokens_per_second]
    newest = asdict(chosen[0])
    newest["tokens_per_second"] = statistics.median(rates) if rates else None
    overheads = [s for s in (_overhead_s(ledger, r) for r in chosen) if s is not None]
    return Measurement(
        **{k: v for k, v in newest.items() if k != "source"},
        sources=sorted({r.source or "runtime" for r in chosen if r.tokens_per_second}),
        samples=len(rates),
        same_shape=bool(same),
        overhead_s=statistics.median(overheads) if overheads else None,
    )


def _at_shape(row: CalibrationRow, max_length: int | None, batch: int | None, checkpointing: bool | None) -> bool:
    measured = row.gradient_checkpointing
    same_checkpointing = measured is None or checkpointing is None or measured == checkpointing
    return (row.max_length, row.batch) == (max_length, batch) and same_checkpointing


def _overhead_s(ledger: Ledger, row: CalibrationRow) -> float | None:
    """An attempt's wall time less its time training at the measured pace: its tokens at the steady rate, or its
    train_runtime for a whole-run figure. None when that is unknown (a bench's figure has no attempt), or when the
    trainer says it ran longer than the attempt lasted (another machine's clock)."""
    attempt = ledger.get_attempt(row.attempt_id)
    if attempt is None or attempt.started_at is None or attempt.ended_at is None:
        return None
    summary = attempt.summary or {}
    runtime, whole_rate = summary.get("train_runtime"), summary.get("tokens_per_second")
    if not isinstance(runtime, int | float) or runtime <= 0:
        return None
    training = runtime
    if row.source == "steady" and isinstance(whole_rate, int | float) and row.tokens_per_second:
        training = whole_rate * runtime / row.tokens_per_second  # the attempt's tokens at its steady pace
    wall = attempt.ended_at - attempt.started_at
    return wall - training if wall >= training else None
