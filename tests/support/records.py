"""Ledger records written straight into a ledger, for tests of what the service reads back (no job runs)."""

from __future__ import annotations

import time
from typing import Any

from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec, JobStatus, NewAttempt, RunRecord, TerminationReason
from jobtrail.util.digest import config_json, sha256_text


def new_attempt(*, config: dict[str, Any] | None = None, script: str = "", **fields: Any) -> NewAttempt:
    """An attempt to add to a ledger, its config and script fingerprinted as the service does."""
    config = config or {}
    return NewAttempt(
        config=config,
        config_sha256=sha256_text(config_json(config)),
        script=script,
        script_sha256=sha256_text(script),
        **fields,
    )


def add_queued_run(
    ledger: Ledger,
    run_id: str,
    *,
    method: str = "sft",
    spec: dict[str, Any] | None = None,
    run: dict[str, Any] | None = None,
    **attempt: Any,
) -> None:
    """A run of `method` on /m and /d.jsonl with one attempt (`run_id`/1), queued now on the local backend; `spec`
    adds JobSpec fields, `run` sets RunRecord fields (max_cost_usd ...), `attempt` sets or overrides AttemptRecord
    fields (status, ended_at, backend, config ...); the run's backend is its attempt's."""
    now = time.time()
    job = JobSpec(method=method, model="/m", dataset="/d.jsonl", **(spec or {}))
    backend = attempt.get("backend", "local")
    record = RunRecord(
        run_id=run_id, created_at=now, method=method, model="/m", dataset="/d.jsonl", backend=backend, spec=job
    )
    fields: dict[str, Any] = {
        "attempt_id": f"{run_id}/1",
        "run_id": run_id,
        "number": 1,
        "status": JobStatus.QUEUED,
        "created_at": now,
        "backend": "local",
        "output_dir": f"/runs/{run_id}/output",
        "spec": job,
    }
    ledger.add_run(record.model_copy(update=run or {}), new_attempt(**{**fields, **attempt}))


def add_ended_run(ledger: Ledger, run_id: str, reason: TerminationReason, **queued: Any) -> None:
    """add_queued_run's run (`queued`: its method, spec, run and attempt arguments), its attempt ended now with
    `reason`."""
    ended = {"status": reason.status, "ended_at": time.time(), "termination_reason": reason}
    add_queued_run(ledger, run_id, **{**ended, **queued})
