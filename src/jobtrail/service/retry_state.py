"""Where a run stands with its retries: what the retry policy says now, why automatic retries stopped,
and whether a run that did not succeed has ended for good (no automatic retry will follow), which is
what a job waiting for it (after=...) needs to know.

A smoke run (submit(smoke_steps=N)) is never retried automatically and does not count toward max_retries:
it is the check before the job, not a try at it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from jobtrail.backends.registry import traits_of
from jobtrail.ledger.store import Ledger
from jobtrail.models import AttemptRecord, JobSpec, JobStatus, RunRecord, TerminationReason
from jobtrail.outcomes import events, retry as retry_policy

# The automatic retry is added by the process that saw the attempt end, right after it: a failed attempt
# with no newer one this long after its end will not get one (that process stopped, or its launch was refused).
RETRY_GRACE_S = 60.0


def counted(attempts: list[AttemptRecord]) -> int:
    """Attempts that count toward max_retries: every one but smoke runs."""
    return sum(1 for a in attempts if not a.smoke_steps)


def retries_stopped(ledger: Ledger, run: RunRecord, attempts: list[AttemptRecord]) -> str | None:
    """Why submit(max_retries=N) started no new attempt after the latest one failed; None if it did not stop."""
    latest = attempts[-1]
    if run.max_retries < 1 or latest.status is not JobStatus.FAILED:
        return None
    if latest.smoke_steps:
        return "A failed smoke run is never retried automatically (next_steps says what a retry by hand does)."
    if counted(attempts) > run.max_retries:
        return f"max_retries ({run.max_retries}) is spent (next_steps says what a retry by hand does)."
    decision = decide(ledger, run, attempts, latest.spec or run.spec, None, automatic=True)
    if decision.retry:  # due, yet not started: only a refused change does that
        return "The automatic retry's changes did not pass preflight (a retry with them by hand names the finding)."
    return " ".join(part for part in (decision.message, decision.fix) if part)


def ended_for_good(ledger: Ledger, run: RunRecord, attempts: list[AttemptRecord], now: float) -> bool:
    """The run did not succeed and no automatic retry will follow: its latest attempt ended otherwise, and it
    was cancelled, a smoke run, had no retries left or none the policy allows, or none came within RETRY_GRACE_S."""
    latest = attempts[-1]
    if not latest.status.is_terminal or latest.status is JobStatus.SUCCEEDED:
        return False
    if latest.status is JobStatus.CANCELLED or latest.smoke_steps or run.max_retries < 1:
        return True
    if counted(attempts) > run.max_retries:
        return True
    if not decide(ledger, run, attempts, latest.spec or run.spec, None, automatic=True).retry:
        return True
    return now - (latest.ended_at or latest.created_at) > RETRY_GRACE_S


def retry_decision(ledger: Ledger, run: RunRecord, attempts: list[AttemptRecord]) -> retry_policy.Decision:
    """What retry(job_id) without changes would do now, for a run whose latest attempt has ended."""
    return decide(ledger, run, attempts, attempts[-1].spec or run.spec, None, automatic=False)


def decide(
    ledger: Ledger,
    run: RunRecord,
    attempts: list[AttemptRecord],
    spec: JobSpec,
    changes: dict[str, Any] | None,
    *,
    automatic: bool,
) -> retry_policy.Decision:
    ran_with = attempts[-1].config.get("training_args", {})
    job = retry_policy.JobFacts(
        job_id=attempts[-1].run_id,
        method=spec.method,
        timeout=spec.timeout_s,
        flavor=spec.flavor,
        dataset_mapping=spec.dataset_mapping,
        max_cost_usd=run.max_cost_usd,
        learning_rate=ran_with.get("learning_rate"),
        ran_with=ran_with,
        spent_usd=sum(a.cost_usd or 0.0 for a in attempts),  # every attempt has ended: its cost is recorded
        disk=disk_room(ledger, attempts[-1]),
    )
    history = [_attempt_facts(ledger, a) for a in attempts]
    return retry_policy.decide(history, spec.hyperparameters, changes, automatic=automatic, job=job)


def disk_room(ledger: Ledger, attempt: AttemptRecord) -> retry_policy.DiskRoom | None:
    """After a full disk on this machine: the room now on the disk the job's termination event named (None:
    another ending, a job that ran elsewhere, or no path it named)."""
    if attempt.termination_reason is not TerminationReason.DISK_FULL or not traits_of(attempt.backend).runs_here:
        return None
    ending = events.termination_event(ledger.events(attempt.attempt_id, "termination")) or {}
    if not isinstance(ending.get("path"), str):
        return None
    path = Path(ending["path"])
    while not path.exists() and path != path.parent:  # a checkpoint folder the job could not finish may be gone
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    needed = ending.get("needed_bytes")
    return retry_policy.DiskRoom(ending["path"], free, needed if isinstance(needed, int) else None)


def _attempt_facts(ledger: Ledger, a: AttemptRecord) -> retry_policy.AttemptFacts:
    resumes = ledger.events(a.attempt_id, "resume")
    return retry_policy.AttemptFacts(
        number=a.number,
        reason=a.termination_reason,
        config_sha256=a.config_sha256,
        last_step=(a.last_metrics or {}).get("step"),
        start_step=resumes[-1].get("step") if resumes else None,
    )
