"""Ledger queries the use cases rely on, on both engines: a run's committed checkpoints, calibration measurements."""

from __future__ import annotations

from typing import Literal

from jobtrail.ledger.store import Ledger
from jobtrail.models import CalibrationRow, CheckpointRecord, JobSpec, JobStatus, NewAttempt, RunRecord
from support.records import new_attempt

CheckpointState = Literal["writing", "committed", "superseded"]


def _attempt(run_id: str, number: int) -> NewAttempt:
    return new_attempt(
        attempt_id=f"{run_id}/{number}",
        run_id=run_id,
        number=number,
        status=JobStatus.QUEUED,
        created_at=1.0,
        backend="local",
        output_dir=f"/runs/{run_id}/output",
    )


def _checkpoint(path: str, step: int, state: CheckpointState = "committed") -> CheckpointRecord:
    return CheckpointRecord(path=path, step=step, state=state, updated_at=1.0)


def _record(ledger: Ledger, attempt_id: str, *checkpoints: CheckpointRecord) -> None:
    assert ledger.ingest(attempt_id, from_offset=0, to_offset=1, events=[], fields={}, checkpoints=checkpoints)


def test_committed_checkpoints_of_a_run_attempt_by_attempt_then_by_step(ledger_location):
    ledger = Ledger(ledger_location)
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl")
    for run_id in ("jt-one", "jt-other"):
        run = RunRecord(
            run_id=run_id, created_at=1.0, method="sft", model="/m", dataset="/d.jsonl", backend="local", spec=spec
        )
        ledger.add_run(run, _attempt(run_id, 1))
    assert ledger.add_attempt(_attempt("jt-one", 2))
    _record(ledger, "jt-one/2", _checkpoint("/o/checkpoint-6", 6), _checkpoint("/o/checkpoint-8", 8, "writing"))
    _record(ledger, "jt-one/1", _checkpoint("/o/checkpoint-4", 4), _checkpoint("/o/checkpoint-2", 2, "superseded"))
    _record(ledger, "jt-other/1", _checkpoint("/x/checkpoint-9", 9))

    assert [c.path for c in ledger.committed_checkpoints("jt-one")] == ["/o/checkpoint-4", "/o/checkpoint-6"]
    assert ledger.committed_checkpoints("jt-missing") == []


def test_calibration_rows_newest_first_and_one_per_attempt(ledger_location):
    ledger = Ledger(ledger_location)
    key = dict(architecture="qwen2", params=1000, method="sft", peft="lora", flavor="cpu-basic")
    for attempt_id, rate in (("jt-a/1", 10.0), ("jt-b/1", 20.0), ("jt-a/1", 30.0)):
        ledger.record_calibration(
            CalibrationRow(
                **key, attempt_id=attempt_id, tokens_per_second=rate, peak_memory_bytes=5, max_length=64, batch=1
            )
        )
    rows = ledger.calibrations(**key, limit=5)
    assert [(r.attempt_id, r.tokens_per_second) for r in rows] == [("jt-a/1", 30.0), ("jt-b/1", 20.0)]
    assert [r.attempt_id for r in ledger.calibrations(**key, limit=1)] == ["jt-a/1"]
    assert ledger.calibrations(**{**key, "flavor": "a10g-small"}, limit=5) == []


def _run(run_id: str, *, key: str | None = None, after: str | None = None) -> RunRecord:
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl", after=after)
    return RunRecord(
        run_id=run_id,
        created_at=1.0,
        method="sft",
        model="/m",
        dataset="/d.jsonl",
        backend="local",
        spec=spec,
        idempotency_key=key,
    )


def test_one_run_per_idempotency_key_across_connections(ledger_location):
    # Two Ledger objects are two connections, as two servers sharing the ledger would have.
    first, second = Ledger(ledger_location), Ledger(ledger_location)
    request = {"method": "sft", "max_retries": 0}
    assert first.add_run(_run("jt-first", key="k-1"), _attempt("jt-first", 1), request) is None
    assert second.add_run(_run("jt-second", key="k-1"), _attempt("jt-second", 1), request) == "jt-first"
    assert second.get_run("jt-second") is None and second.attempts("jt-second") == []  # nothing half-inserted
    held = second.run_by_idempotency_key("k-1")
    assert held is not None and held[0].run_id == "jt-first" and held[0].idempotency_key == "k-1"
    assert held[1] == request
    assert second.run_by_idempotency_key("k-2") is None
    # Runs without a key never collide.
    assert (
        first.add_run(_run("jt-a"), _attempt("jt-a", 1)) is None
        and first.add_run(_run("jt-b"), _attempt("jt-b", 1)) is None
    )


def test_children_and_smoke_checkpoints(ledger_location):
    ledger = Ledger(ledger_location)
    ledger.add_run(_run("jt-parent"), _attempt("jt-parent", 1).model_copy(update={"smoke_steps": 2}))
    for child in ("jt-child1", "jt-child2"):
        ledger.add_run(_run(child, after="jt-parent"), _attempt(child, 1))
    assert ledger.children(["jt-parent", "jt-child1"]) == {"jt-parent": ["jt-child1", "jt-child2"]}
    assert ledger.children([]) == {}
    # A smoke run's checkpoints are its own: the run's checkpoints are the full job's.
    assert ledger.update_attempt("jt-parent/1", status=JobStatus.SUCCEEDED, then_add=_attempt("jt-parent", 2))
    _record(ledger, "jt-parent/1", _checkpoint("/smoke/checkpoint-2", 2))
    _record(ledger, "jt-parent/2", _checkpoint("/out/checkpoint-4", 4))
    assert [c.path for c in ledger.committed_checkpoints("jt-parent")] == ["/out/checkpoint-4"]
    assert [a.smoke_steps for a in ledger.attempts("jt-parent")] == [2, None]
