"""Ledger queries the use cases rely on: a run's committed checkpoints, calibration measurements."""

from __future__ import annotations

from typing import Literal

from jobtrail.ledger.store import Ledger
from jobtrail.models import AttemptRecord, CheckpointRecord, JobSpec, JobStatus, RunRecord

CheckpointState = Literal["writing", "committed", "superseded"]


def _attempt(run_id: str, number: int) -> AttemptRecord:
    return AttemptRecord(
        attempt_id=f"{run_id}/{number}",
        run_id=run_id,
        number=number,
        status=JobStatus.QUEUED,
        created_at=1.0,
        backend="local",
        config={},
        config_sha256="c" * 64,
        script="",
        script_sha256="s" * 64,
    )


def _checkpoint(path: str, step: int, state: CheckpointState = "committed") -> CheckpointRecord:
    return CheckpointRecord(path=path, step=step, state=state, updated_at=1.0)


def _record(ledger: Ledger, attempt_id: str, *checkpoints: CheckpointRecord) -> None:
    assert ledger.ingest(attempt_id, from_offset=0, to_offset=1, events=[], fields={}, checkpoints=checkpoints)


def test_committed_checkpoints_of_a_run_attempt_by_attempt_then_by_step(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
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


def test_calibration_rows_newest_first_and_one_per_attempt(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    key = dict(architecture="qwen2", params=1000, method="sft", peft="lora", flavor="cpu-basic")
    for attempt_id, rate in (("jt-a/1", 10.0), ("jt-b/1", 20.0), ("jt-a/1", 30.0)):
        ledger.record_calibration(
            {
                **key,
                "attempt_id": attempt_id,
                "tokens_per_second": rate,
                "peak_memory_bytes": 5,
                "max_length": 64,
                "batch": 1,
            }
        )
    rows = ledger.calibrations(**key, limit=5)
    assert [(r["attempt_id"], r["tokens_per_second"]) for r in rows] == [("jt-a/1", 30.0), ("jt-b/1", 20.0)]
    assert [r["attempt_id"] for r in ledger.calibrations(**key, limit=1)] == ["jt-a/1"]
    assert ledger.calibrations(**{**key, "flavor": "a10g-small"}, limit=5) == []
