"""Calibration from steady-state steps (issue 29 item 5): a finished attempt calibrates with the tokens/s of its
steady steps, read from its step events in the ledger (warm-up, checkpoint commits and evaluations left out), not
with its whole train_runtime; a bench records its own steady figure for a flavor (record_measured_rate)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jobtrail.estimate import lookup, record_measured_rate, record_measurement
from jobtrail.estimate.calibration import checkpointing_of
from jobtrail.estimate.params import model_shape
from jobtrail.estimate.steady import MIN_STEADY_STEPS, WARMUP_STEPS, steady_rate
from jobtrail.ledger.store import Ledger
from jobtrail.models import TerminationReason
from jobtrail.preflight.plan import estimate_alone
from jobtrail.requests import EstimateRequest
from support.estimates import OFFLINE, QWEN25_05B
from support.records import add_ended_run

SHAPE = model_shape(QWEN25_05B)
TOKENS, STEP_S = 2700, 0.4  # per steady step: the H100 bench's 0.5B full fine-tuning, as issue 29 reports it
FIRST_STEP_S, CHECKPOINT_S, EVAL_S = 6.7, 16.7, 3.0


def _job_events(
    steps: int = 30, *, start: int = 0, every: int = 1, checkpoint_at: int | None = 10, written_s: float | None = None
) -> list[dict]:
    """The events a job prints, as the ledger holds them: loading, training from `start`, a step event every `every`
    steps with the running token count; the first step slow, a checkpoint written and committed after the step
    event at `checkpoint_at`, an evaluation after step start+15. `written_s`: the commit runs in the background (as
    jobs do since issue 29): training waits that long for the bytes, then goes on while the commit hashes for
    CHECKPOINT_S, and the `committed` event, printed among later steps, says when training went on (written_at)."""
    t = 1000.0
    events: list[dict[str, Any]] = [
        {"event": "phase", "time": t - 20, "phase": "loading_model"},
        {"event": "phase", "time": t, "phase": "training", "max_steps": start + steps, "step": start},
    ]
    tokens = 0
    for step in range(start + 1, start + steps + 1):
        t += FIRST_STEP_S if step == start + 1 else STEP_S
        tokens += TOKENS
        if step == checkpoint_at:
            events.append({"event": "checkpoint", "time": t, "state": "writing", "step": step, "path": "c"})
        if step % every == 0:
            events.append({"event": "step", "time": t + 0.001, "step": step, "loss": 2.0, "tokens": tokens})
        if step == checkpoint_at and written_s is None:
            t += CHECKPOINT_S
            events.append({"event": "checkpoint", "time": t, "state": "committed", "step": step, "path": "c"})
        elif step == checkpoint_at:
            t += written_s
            committed = {"event": "checkpoint", "time": t + CHECKPOINT_S, "state": "committed", "step": step}
            events.append({**committed, "path": "c", "written_at": t})
        if step == start + 15:
            events.append({"event": "phase", "time": t + 0.002, "phase": "evaluating"})
            t += EVAL_S
            events.append({"event": "eval", "time": t, "step": step, "metrics": {"eval_loss": 2.1}})
            events.append({"event": "phase", "time": t + 0.002, "phase": "training"})
    events.append({"event": "phase", "time": t + 0.01, "phase": "saving"})
    return sorted(events, key=lambda e: e["time"])  # in the order they were printed


def test_the_steady_rate_leaves_out_warm_up_checkpoints_and_evaluations():
    events = _job_events()
    steady = steady_rate(events)
    assert steady is not None
    assert steady.tokens_per_second == pytest.approx(TOKENS / STEP_S, rel=1e-3)
    assert steady.steps == 30 - WARMUP_STEPS  # intervals from step 3 on
    assert steady.paused_s == pytest.approx(CHECKPOINT_S + EVAL_S, abs=0.01)
    # What train_runtime would have said: the slow first step, the commit and the evaluation inside it.
    whole = 30 * TOKENS / (FIRST_STEP_S + 29 * STEP_S + CHECKPOINT_S + EVAL_S)
    assert whole < 0.35 * steady.tokens_per_second  # a third of the pace a long run keeps


def test_a_commit_in_the_background_pauses_training_only_until_written_at():
    written_s = 2.0  # the bytes; the hashing (CHECKPOINT_S) runs beside the next 30-odd steps (and an evaluation)
    events = _job_events(steps=80, written_s=written_s)
    committed = next(e for e in events if e.get("state") == "committed")
    later = [e["step"] for e in events if e["event"] == "step" and e["time"] < committed["time"]]
    assert later[-1] > 10 + 30  # it was printed among later steps
    steady = steady_rate(events)
    assert steady is not None and steady.steps == 80 - WARMUP_STEPS
    assert steady.paused_s == pytest.approx(written_s + EVAL_S, abs=0.01)
    assert steady.tokens_per_second == pytest.approx(TOKENS / STEP_S, rel=1e-3)
    # Read as an older job's commit (training waited until `committed`), the 30-odd steps trained while it hashed
    # would be taken for the pause's and not measured.
    older = [{k: v for k, v in e.items() if k != "written_at"} for e in events]
    misread = steady_rate(older)
    assert misread is not None and misread.steps < steady.steps - 30


def test_a_resumed_attempt_warms_up_from_its_checkpoint_and_sparse_logs_still_measure():
    resumed = steady_rate(_job_events(start=50, checkpoint_at=60))
    assert resumed is not None and resumed.steps == 30 - WARMUP_STEPS
    assert resumed.tokens_per_second == pytest.approx(TOKENS / STEP_S, rel=1e-3)
    # Logged every 10 steps (the default): the interval before the first log holds the warm-up and is not one.
    sparse = steady_rate(_job_events(every=10))
    assert sparse is not None and sparse.steps == 20
    assert sparse.tokens_per_second == pytest.approx(TOKENS / STEP_S, rel=1e-3)


def test_too_few_steady_steps_or_no_token_counts_measure_nothing():
    assert steady_rate(_job_events(steps=WARMUP_STEPS + MIN_STEADY_STEPS - 1, checkpoint_at=None)) is None
    assert steady_rate(_job_events(steps=WARMUP_STEPS + MIN_STEADY_STEPS, checkpoint_at=None)) is not None
    untokened = [{k: v for k, v in e.items() if k != "tokens"} for e in _job_events()]
    assert steady_rate(untokened) is None
    assert steady_rate([]) is None


KEY = dict(architecture=SHAPE.architecture, params=SHAPE.params, method="sft", peft="none", flavor="h200")
SHAPED = dict(max_length=1024, batch=8, gradient_checkpointing=False)


def _finished_attempt(ledger: Ledger, run_id: str, events: list[dict], *, wall_s: float) -> None:
    """An ended attempt with `events` ingested and the metrics event's summary, as the tracker leaves it."""
    started = time.time() - wall_s
    add_ended_run(ledger, run_id, TerminationReason.SUCCEEDED, started_at=started, ended_at=started + wall_s)
    steps = [e for e in events if e["event"] == "step"]
    runtime = steps[-1]["time"] - next(e["time"] for e in events if e.get("phase") == "training")
    summary = {"train_runtime": runtime, "tokens_per_second": steps[-1]["tokens"] / runtime}
    ledger.ingest(
        f"{run_id}/1", from_offset=0, to_offset=100, events=events, fields={"summary": summary}, checkpoints=[]
    )


def test_a_finished_attempt_calibrates_with_its_steady_steps_and_the_rest_is_overhead(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    events = _job_events()
    _finished_attempt(ledger, "jt-a", events, wall_s=120.0)
    whole = ledger.get_attempt("jt-a/1").summary["tokens_per_second"]
    record_measurement(
        ledger, **KEY, **SHAPED, tokens_per_second=whole, peak_memory_bytes=int(16.8e9), attempt_id="jt-a/1"
    )
    m = lookup(ledger, **KEY, **SHAPED)
    assert m is not None and m.sources == ["steady"] and m.steady and m.gradient_checkpointing is False
    assert m.tokens_per_second == pytest.approx(TOKENS / STEP_S, rel=1e-3)
    # Everything outside the steady steps is the attempt's overhead: its wall time less its tokens at that pace.
    assert m.overhead_s == pytest.approx(120.0 - 30 * TOKENS / (TOKENS / STEP_S), abs=0.05)

    estimate = estimate_alone(
        EstimateRequest(
            "Qwen/Qwen2.5-0.5B",
            peft="none",
            num_examples=8000,
            avg_tokens=1024,
            max_length=1024,
            per_device_train_batch_size=8,
            gradient_checkpointing=False,
            flavor="h200",
        ),
        config=QWEN25_05B,
        calibration=ledger,
        api=OFFLINE,
    )
    assert estimate.tokens_per_second == pytest.approx(TOKENS / STEP_S, rel=1e-3)
    assert estimate.speed_source == "calibrated from 1 run on h200 (steady-state steps)"
    assert "steady-state steps" in estimate.assumptions["throughput"]
    assert "warm-up, checkpoints" in estimate.assumptions["startup"]


def test_a_short_attempt_keeps_its_whole_run_figure_and_steady_ones_are_preferred(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    short = _job_events(steps=5, checkpoint_at=None)
    _finished_attempt(ledger, "jt-short", short, wall_s=60.0)
    whole = ledger.get_attempt("jt-short/1").summary["tokens_per_second"]
    record_measurement(
        ledger, **KEY, **SHAPED, tokens_per_second=whole, peak_memory_bytes=None, attempt_id="jt-short/1"
    )
    m = lookup(ledger, **KEY, **SHAPED)
    assert m is not None and m.sources == ["runtime"] and not m.steady and m.tokens_per_second == whole
    assert m.overhead_s == pytest.approx(60.0 - short[-2]["time"] + 1000.0, abs=0.05)  # wall less train_runtime
    _finished_attempt(ledger, "jt-long", _job_events(), wall_s=120.0)
    record_measurement(ledger, **KEY, **SHAPED, tokens_per_second=1.0, peak_memory_bytes=None, attempt_id="jt-long/1")
    m = lookup(ledger, **KEY, **SHAPED)
    assert m is not None and m.sources == ["steady"] and m.samples == 1  # the whole-run figure is left out


def test_a_bench_records_its_steady_figure_for_a_flavor_and_estimates_use_it(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    entry = record_measured_rate(
        ledger,
        model_config=QWEN25_05B,
        method="sft",
        peft="none",
        flavor="h200",
        tokens_per_second=9000.0,
        max_length=1024,
        batch=8,
        gradient_checkpointing=False,
        peak_memory_bytes=int(16.8e9),
    )
    assert entry.startswith("bench-")
    m = lookup(ledger, **KEY, **SHAPED)
    assert m is not None and m.sources == ["bench"] and m.tokens_per_second == 9000.0 and m.overhead_s is None

    def estimate(calibration: Ledger | None = ledger, **options: Any) -> Any:
        ask: dict[str, Any] = dict(
            peft="none",
            num_examples=8000,
            avg_tokens=1024,
            max_length=1024,
            per_device_train_batch_size=8,
            gradient_checkpointing=False,
            flavor="h200",
        )
        request = EstimateRequest("Qwen/Qwen2.5-0.5B", **{**ask, **options})
        return estimate_alone(request, config=QWEN25_05B, calibration=calibration, api=OFFLINE)

    same = estimate()
    assert same.tokens_per_second == pytest.approx(9000.0)
    assert same.speed_source == "calibrated from 1 bench run on h200 (steady-state steps)"
    assert same.memory.total_gb == pytest.approx(16.8 + 0.5)  # its peak, plus the CUDA context
    # The job recomputes activations, the bench did not: the model's own ratio between the two carries the rate
    # over (a third more FLOPs for full fine-tuning, here mostly hidden behind the host's per-layer launches), and the
    # bench's peak is not this job's.
    recomputing = estimate(gradient_checkpointing=True)
    assert "rescaled from batch 8 × max_length 1024, no gradient checkpointing" in recomputing.speed_source
    with_, without = (estimate(gradient_checkpointing=c, calibration=None).tokens_per_second for c in (True, False))
    assert with_ < without
    assert recomputing.tokens_per_second == pytest.approx(9000.0 * with_ / without, rel=1e-3)
    assert recomputing.memory.total_gb < 16.8
    with pytest.raises(ValueError):
        record_measured_rate(
            ledger,
            model_config=QWEN25_05B,
            method="sft",
            peft="none",
            flavor="h200",
            tokens_per_second=0.0,
            max_length=1024,
            batch=8,
            gradient_checkpointing=False,
        )


def test_a_jobs_checkpointing_is_read_from_its_training_arguments():
    assert checkpointing_of({"gradient_checkpointing": False}) is False
    assert checkpointing_of({"gradient_checkpointing": True}) is True
    sharded = {"gradient_checkpointing": False, "fsdp": True, "fsdp_config": {"activation_checkpointing": True}}
    assert checkpointing_of(sharded) is True
    assert checkpointing_of({}) is None
