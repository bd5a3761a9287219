"""The current attempt, announced when it is not the first: its number, why the attempt before it ended (the
reason, at which step) and where it starts. An agent that sees the step fall from 11 to 10, or a smoke run's
3 steps followed by a full job at step 0, reads why here; wait puts the same line in its progress
notifications when the attempt changes while it waits.

Where it starts is the job's own word once it has said it (its `resume` event: the checkpoint it verified and
loaded, or none); before that, the checkpoint it will find: the newest committed `checkpoint-N` of the attempts
it continues. A smoke run's checkpoints are its own (a directory of its own): the full job after it starts from
scratch, and no smoke checkpoint is ever the job's last committed one (Ledger.committed_checkpoints).

Pure: the caller hands in the attempts, their events and the checkpoints the earlier attempts committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from jobtrail.models import AttemptRecord, CheckpointRecord, JobStatus
from jobtrail.results.progress import reached_step

# Described once: wait and inspect carry the same field.
AttemptNote = Annotated[
    str | None,
    Field(
        description="Set when the current attempt is not the first: its number, why the attempt before it ended "
        "(termination reason, at which step) and where it starts ('Attempt 2 started after timeout at step 11, from "
        "checkpoint-10.'; 'Attempt 2 started from scratch, after the smoke run's 3 steps succeeded.'). `progress` is "
        "this attempt's own."
    ),
]
_REASON_WORDS = {"cancelled": "a cancel", "budget": "its spending cap stopped it"}


def lineage(attempts: Sequence[AttemptRecord]) -> list[AttemptRecord]:
    """The attempts the latest continues, itself last: the full job's attempts, or the smoke run's (a full job
    never continues a smoke run, and a smoke run's retry continues only smoke runs)."""
    smoke = bool(attempts[-1].smoke_steps)
    return [a for a in attempts if bool(a.smoke_steps) == smoke]


def resume_point(checkpoints: Sequence[CheckpointRecord]) -> CheckpointRecord | None:
    """The committed checkpoint a new attempt resumes from: the newest `checkpoint-N` (never `final`, a model
    rather than a trainer state)."""
    resumable = [
        c
        for c in checkpoints
        if c.state == "committed" and c.step is not None and Path(c.path).name.startswith("checkpoint-")
    ]
    return max(resumable, key=lambda c: c.step or 0) if resumable else None


def attempt_note(
    attempts: Sequence[AttemptRecord],
    logged: dict[str, list[dict[str, Any]]],
    earlier_checkpoints: Sequence[CheckpointRecord],
) -> str | None:
    """The line that announces the latest attempt, or None for a first attempt. `logged`: each attempt's events;
    `earlier_checkpoints`: those the attempts it continues committed (what it will resume from, before it says)."""
    current = attempts[-1]
    if len(attempts) < 2:
        return None
    previous = attempts[-2]
    name = f"Attempt {current.number}" + (" (the smoke run again)" if current.smoke_steps else "")
    queued = current.status in (JobStatus.QUEUED, JobStatus.STARTING)
    verb = f"is {current.status.value}" if queued else "started"
    if previous.smoke_steps and not current.smoke_steps:
        steps = previous.smoke_steps
        after = f"after the smoke run's {steps} step{'s' if steps != 1 else ''} succeeded"
        return f"{name} {verb}: it starts from scratch, {after}." if queued else f"{name} {verb} from scratch, {after}."
    reason = _value(previous) or "the attempt before it ended"
    ended = _REASON_WORDS.get(reason, reason)
    at = reached_step(logged.get(previous.attempt_id, []))
    why = f"after {ended}" + (f" at step {at}" if at is not None else "")
    resumes = [e for e in logged.get(current.attempt_id, []) if e.get("event") == "resume"]
    if resumes:
        checkpoint = resumes[-1].get("checkpoint")
        start = f"from {Path(str(checkpoint)).name}" if checkpoint else "from scratch"
        return f"{name} {verb} {why}, {start}."
    expected = resume_point(earlier_checkpoints)
    will = f"it will resume from {Path(expected.path).name}" if expected else "it will start from scratch"
    return f"{name} {verb} {why}; {will}."


def _value(attempt: AttemptRecord) -> str | None:
    return attempt.termination_reason.value if attempt.termination_reason else None
