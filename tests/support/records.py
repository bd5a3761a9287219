"""Ledger records written straight into a ledger, for tests of what the service reads back (no job runs)."""

from __future__ import annotations

import time
from typing import Any

from jobtrail.ledger.store import Ledger
from jobtrail.models import AttemptRecord, JobSpec, JobStatus, RunRecord, TerminationReason


def add_queued_run(
    ledger: Ledger, run_id: str, *, method: str = "sft", spec: dict[str, Any] | None = None, **attempt: Any
) -> None:
    """A run of `method` on /m and /d.jsonl with one attempt (`run_id`/1), queued now on the local backend; `spec`
    adds JobSpec fields, `attempt` sets or overrides AttemptRecord fields (status, ended_at, config ...)."""
    now = time.time()
    job = JobSpec(method=method, model="/m", dataset="/d.jsonl", **(spec or {}))
    run = RunRecord(
        run_id=run_id, created_at=now, method=method, model="/m", dataset="/d.jsonl", backend="local", spec=job
    )
    fields: dict[str, Any] = {
        "attempt_id": f"{run_id}/1",
        "run_id": run_id,
        "number": 1,
        "status": JobStatus.QUEUED,
        "created_at": now,
        "backend": "local",
        "config": {},
        "config_sha256": "c",
        "script": "",
        "script_sha256": "s",
        "output_dir": f"/runs/{run_id}/output",
        "spec": job,
    }
    ledger.add_run(run, AttemptRecord(**{**fields, **attempt}))


def add_ended_run(
    ledger: Ledger,
    run_id: str,
    reason: TerminationReason,
    *,
    method: str = "sft",
    spec: dict[str, Any] | None = None,
    **attempt: Any,
) -> None:
    """add_queued_run's run, its attempt ended now with `reason`."""
    ended = {"status": reason.status, "ended_at": time.time(), "termination_reason": reason}
    add_queued_run(ledger, run_id, method=method, spec=spec, **{**ended, **attempt})
