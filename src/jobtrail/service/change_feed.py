"""What changed in each job since the server last looked: the source of resource updates and webhook notices.

The serve poller calls `look(context)` after each refresh. The feed compares every job it follows with its mark
from the last look (latest attempt, status, committed checkpoints, alerts, held or not) and hands each difference,
as a typed JobChange, to its listeners. It follows the jobs with an attempt queued, starting or running, those it
saw unfinished last time (so their ending is seen), and those created since its last look (a job that starts and
ends between two looks is still seen ending). The first look only takes the marks: what was already so when the
server started is not news.

Listeners run on the poller's thread: each hands the change on (to an event loop, to a queue) and returns at once.
Importing this module is light (the server imports it at start); the ledger reads come with the first look.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from jobtrail.models import AttemptRecord, JobStatus

if TYPE_CHECKING:
    from jobtrail.service.context import ServiceContext

log = logging.getLogger("jobtrail.service.change_feed")
LOOKED_AT = ("queued", "starting", "running")
# A run is created a moment before its row is written (and on another server's clock in a shared ledger): a look
# also takes the runs created this long before the last one.
CREATED_SLACK_S = 5.0
# An ended job's mark is kept this long, so a later look that meets it again (the slack above) knows it is old.
ENDED_KEPT_S = 60.0


class Change(enum.StrEnum):
    STATE = "state"  # queued, starting, running; or a new attempt (a retry) queued
    CHECKPOINT = "checkpoint"  # a checkpoint committed
    ALERT = "alert"  # the job raised an alert (a blocking one or a warning)
    HELD = "held"  # a follower is held: the job it follows ended with a blocking alert or diverged
    ENDED = "ended"  # the run's latest attempt ended and no retry follows it (yet)


@dataclass(frozen=True)
class JobChange:
    job_id: str
    change: Change
    attempt: int
    detail: str  # the new status; the checkpoint's name; the alert's code; why it is held; the termination reason


@dataclass(frozen=True)
class JobMark:
    """What a look saw of one job: the latest attempt's status, its checkpoints and alerts, and whether it is held."""

    attempt: int
    status: JobStatus
    reason: str | None
    checkpoints: frozenset[tuple[int, str]]  # (step, path) of each checkpoint it ever committed
    alerts: frozenset[tuple[int, str]]  # (step, code) of each alert
    held: str | None
    seen_at: float


def changes(job_id: str, before: JobMark | None, now: JobMark) -> list[JobChange]:
    """What happened between two marks of a job (None: the job is new), in the order it happened: a new state,
    then the checkpoints, alerts and hold, the ending last."""
    same = before is not None and before.attempt == now.attempt
    moved = not same or (before is not None and before.status is not now.status)
    found: list[JobChange] = []
    if moved and not now.status.is_terminal:
        found.append(JobChange(job_id, Change.STATE, now.attempt, now.status.value))
    seen_checkpoints = before.checkpoints if same and before else frozenset()
    for _, path in sorted(now.checkpoints - seen_checkpoints):
        found.append(JobChange(job_id, Change.CHECKPOINT, now.attempt, PurePath(path).name))
    seen_alerts = before.alerts if same and before else frozenset()
    for _, code in sorted(now.alerts - seen_alerts):
        found.append(JobChange(job_id, Change.ALERT, now.attempt, code))
    if now.held and not (same and before and before.held):
        found.append(JobChange(job_id, Change.HELD, now.attempt, now.held))
    if moved and now.status.is_terminal:
        found.append(JobChange(job_id, Change.ENDED, now.attempt, now.reason or now.status.value))
    return found


Listener = Callable[[JobChange], None]


class ChangeFeed:
    def __init__(self) -> None:
        self._listeners: dict[object, Listener] = {}
        self._lock = threading.Lock()
        self._marks: dict[str, JobMark] | None = None  # None until the first look
        self._looked_at = 0.0

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` with every change from now on; returns what stops that."""
        token = object()
        with self._lock:
            self._listeners[token] = listener

        def unsubscribe() -> None:
            with self._lock:
                self._listeners.pop(token, None)

        return unsubscribe

    def publish(self, change: JobChange) -> None:
        with self._lock:
            listeners = list(self._listeners.values())
        for listener in listeners:
            try:
                listener(change)
            except Exception:  # one listener failing must not keep the change from the others
                log.exception("a change listener failed on %s", change)

    def look(self, context: ServiceContext) -> list[JobChange]:
        """Read the jobs the feed follows, publish what changed since the last look and return it."""
        now = time.time()
        latest = self._followed(context, now)
        marks = {run_id: mark_of(context, attempt, now) for run_id, attempt in latest.items()}
        found: list[JobChange] = []
        if self._marks is not None:
            found = [c for run_id, mark in marks.items() for c in changes(run_id, self._marks.get(run_id), mark)]
        kept = {
            run_id: mark
            for run_id, mark in (self._marks or {}).items()
            if run_id not in marks and now - mark.seen_at < ENDED_KEPT_S
        }
        self._marks, self._looked_at = {**kept, **marks}, now
        for change in found:
            self.publish(change)
        return found

    def _followed(self, context: ServiceContext, now: float) -> dict[str, AttemptRecord]:
        """Each followed run's latest attempt, by run id."""
        ledger = context.ledger
        active = {a.run_id: a for a in ledger.attempts_in(LOOKED_AT)}
        marks = self._marks or {}
        wanted = {run_id for run_id, mark in marks.items() if not mark.status.is_terminal}
        if self._marks is not None:
            wanted |= set(ledger.runs_created_since(self._looked_at - CREATED_SLACK_S))
        found = dict(active)
        for run_id, attempts in ledger.attempts_of(sorted(wanted - set(active))).items():
            if attempts and _unseen_or_moved(marks.get(run_id), attempts[-1]):
                found[run_id] = attempts[-1]
        return found


def _unseen_or_moved(mark: JobMark | None, attempt: AttemptRecord) -> bool:
    return mark is None or (mark.attempt, mark.status) != (attempt.number, attempt.status)


def mark_of(context: ServiceContext, attempt: AttemptRecord, now: float) -> JobMark:
    from jobtrail.outcomes import events  # the first look imports it, not the server's start
    from jobtrail.service import chaining

    ledger = context.ledger
    committed = {
        (c.step or 0, c.path) for c in ledger.checkpoints(attempt.attempt_id) if c.state in ("committed", "superseded")
    }
    alerts = {
        (a.get("step") or 0, str(a.get("code"))) for a in events.alerts(ledger.events(attempt.attempt_id, "alert"))
    }
    return JobMark(
        attempt=attempt.number,
        status=attempt.status,
        reason=attempt.termination_reason.value if attempt.termination_reason else None,
        checkpoints=frozenset(committed),
        alerts=frozenset(alerts),
        held=chaining.hold_reason(context, attempt),
        seen_at=now,
    )
