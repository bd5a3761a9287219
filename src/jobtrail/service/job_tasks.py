"""MCP tasks over jobs: the state, result, listing and cancelling of a task that follows a job (surface/mcp_tasks.py
speaks the protocol; this module decides what a task says).

A task is a row in the ledger (ledger/task_rows.py) naming its job; the job's receipt is the task's state, so a task
survives a server restart and two servers on one ledger answer alike. What a task says:
- `working` while its job is queued, starting or running (held behind another job too); the status message says the
  phase, step, ETA, the attempt after a retry, what a queued job waits for and the alerts the job raised;
- `completed` when the job ended, succeeded or failed: the tool did what it was asked (ran the job and reports its
  receipt), and a job that failed or raised a blocking alert is a result that says so, as `wait` and `inspect`
  return it, never a tool error. The specification (2025-11-25, tasks) keeps `failed` for a tool call whose result is
  an error (isError), and the tasks extension (io.modelcontextprotocol/tasks) for a JSON-RPC error; here a task is
  `failed` only when its creating call itself was refused (isError: an unknown argument, an unknown job to wait on);
- `cancelled` when its job ended cancelled, or once tasks/cancel asked (sticky, whatever the job does after);
  cancelling a `wait` task stops the following, never the job.
A call that started no job (a dry run, a refused submit, an error) is a task that ended with that call's answer.

ttl: the retention a client asks for, kept between TTL_MIN_MS and TTL_MAX_MS (TTL_DEFAULT_MS when it asks none);
a task past it is deleted once its job has ended, never while the job runs, and the job's receipt never.
pollInterval follows the job's pace: seconds while it starts, up to a minute during a long run.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.ledger import task_rows
from jobtrail.ledger.task_rows import TaskRow
from jobtrail.results.watch import progress_line

if TYPE_CHECKING:
    from jobtrail.models import AttemptRecord
    from jobtrail.results.jobs import InspectResult
    from jobtrail.results.watch import WaitResult
    from jobtrail.service.facade import JobService

Status = Literal["working", "completed", "failed", "cancelled"]
HOUR_MS = 3_600_000
TTL_DEFAULT_MS = 7 * 24 * HOUR_MS
TTL_MIN_MS = HOUR_MS  # a task must outlast the end of the job it follows long enough to be read
TTL_MAX_MS = 30 * 24 * HOUR_MS
PAGE_SIZE = 50
# Tools whose task only watches a job another call started: cancelling the task stops the watching.
WATCHING_TOOLS = frozenset({"wait"})
# What a result's status says when the call started no job.
_NO_JOB = frozenset({"rejected", "dry_run"})


class TaskNotFound(NotFoundError):
    """No task of this id for this context: unknown, another context's, or past its ttl."""


class TaskEnded(InvalidRequestError):
    """tasks/cancel of a task already in a terminal status."""


class BadCursor(InvalidRequestError):
    """A tasks/list cursor this server did not write."""


@dataclass(frozen=True)
class TaskState:
    """What tasks/get says of a task."""

    task_id: str
    tool: str
    job_id: str | None
    status: Status
    message: str
    created_at: float
    updated_at: float
    ttl_ms: int | None
    poll_ms: int | None  # None once it ended: nothing left to poll for
    step: int | None = None  # the job's, for progress notifications
    max_steps: int | None = None

    @property
    def terminal(self) -> bool:
        return self.status != "working"


@dataclass(frozen=True)
class Outcome:
    """A task's result once it ended: the job's receipt with the creating tool's own fields, or, for a call that
    started no job, that call's answer as it was sent."""

    task_id: str
    tool: str
    receipt: InspectResult | None = None
    own: dict[str, Any] | None = None  # the tool's structured content: a submit's findings, a wait's end
    answer: dict[str, Any] | None = None


def ttl_for(requested_ms: int | None) -> int:
    """The retention a task gets for the one a client asked."""
    return TTL_DEFAULT_MS if requested_ms is None else min(max(requested_ms, TTL_MIN_MS), TTL_MAX_MS)


def started_job(call: dict[str, Any]) -> str | None:
    """The job a tool call started or named (its structured content's job_id), None when it started none."""
    content = call.get("structuredContent") or {}
    if call.get("isError") or content.get("status") in _NO_JOB:
        return None
    job_id = content.get("job_id")
    return job_id if isinstance(job_id, str) else None


def poll_interval_ms(w: WaitResult) -> int | None:
    """How often to ask again: seconds while a job starts, longer the longer it has to go."""
    if w.terminal:
        return None
    if w.status == "queued" and w.waiting_for:
        return 10_000  # nothing moves before what it waits for does
    if w.status in ("queued", "starting") or w.progress.step is None:
        return 2_000
    eta = w.progress.eta_seconds
    if eta is None:
        return 5_000
    return int(min(60.0, max(5.0, eta / 30)) * 1000)  # about 30 polls over what is left


def working_message(w: WaitResult) -> str:
    """ "jt-ab12 running: step 16/60 (27%), 3.1 steps/s, about 14s to go, phase training; attempt 2 ..." """
    parts = [f"{w.job_id} {w.status}: {progress_line(w.progress)}"]
    if w.attempt_note:
        parts.append(w.attempt_note)
    elif w.attempts > 1:
        parts.append(f"attempt {w.attempts}")
    if w.waiting_for:
        parts.append(f"waiting for {w.waiting_for}")
    parts += [f"alert {a.get('code')} at step {a.get('step')}: {a.get('message')}" for a in w.alerts]
    return "; ".join(parts)


class JobTasks:
    def __init__(self, service: JobService) -> None:
        self.service = service

    def open(self, owner: str, tool: str, requested_ttl_ms: int | None, call: dict[str, Any]) -> TaskState:
        """The task for a tool call that just returned `call` (a CallToolResult as sent): the one task its owner
        has following the job the call started or named, or a task that ended with the call's answer."""
        row = TaskRow(
            task_id=f"task-{secrets.token_urlsafe(18)}",  # unguessable: the id is all a context-less client holds
            owner=owner,
            tool=tool,
            run_id=started_job(call),
            created_at=time.time(),
            ttl_ms=ttl_for(requested_ttl_ms),
            cancelled_at=None,
            call=call,
        )
        with self.service.ledger.transaction() as conn:
            row = task_rows.add(conn, row)
        return self._state(row)

    def state(self, owner: str, task_id: str) -> TaskState:
        return self._live(self._row(owner, task_id))

    def page(self, owner: str, cursor: str | None) -> tuple[list[TaskState], str | None]:
        """The owner's tasks, newest first, a page at a time; the cursor of the next page, None after the last."""
        self.service.refresh()
        with self.service.ledger.transaction() as conn:
            rows = task_rows.page(conn, owner, _read_cursor(cursor), PAGE_SIZE + 1)
        more, rows = len(rows) > PAGE_SIZE, rows[:PAGE_SIZE]
        latest = self.service.ledger.attempts_of([r.run_id for r in rows if r.run_id is not None])
        states: list[TaskState] = []
        expired: list[TaskState] = []
        for row in rows:
            attempts = latest.get(row.run_id or "", [])
            state = self._listed(row, attempts[-1] if attempts else None)
            (expired if _expired(row, state) else states).append(state)
        self._forget([s.task_id for s in expired])
        return states, _cursor(rows[-1]) if more else None

    def cancel(self, owner: str, task_id: str) -> TaskState:
        """Cancel the task and, unless it only watches its job, the job: the task reads cancelled from now on."""
        row = self._row(owner, task_id)
        current = self._live(row)
        if current.terminal:
            raise TaskEnded(f"Cannot cancel task: already in terminal status '{current.status}'.")
        with self.service.ledger.transaction() as conn:
            task_rows.cancel(conn, task_id, time.time())
        if row.run_id is not None and row.tool not in WATCHING_TOOLS:
            self.service.cancel(row.run_id)  # waits (bounded) until the job has stopped
        return self.state(owner, task_id)

    def outcome(self, owner: str, task_id: str) -> Outcome | None:
        """The task's result once it ended (None while it works)."""
        row = self._row(owner, task_id)
        if not self._live(row).terminal:
            return None
        if row.run_id is None:
            return Outcome(row.task_id, row.tool, answer=row.call)
        own = (
            self.service.wait(row.run_id, 0).model_dump(mode="json")
            if row.tool in WATCHING_TOOLS
            else row.call.get("structuredContent") or {}
        )
        return Outcome(row.task_id, row.tool, receipt=self.service.inspect(row.run_id), own=own)

    def _row(self, owner: str, task_id: str) -> TaskRow:
        with self.service.ledger.transaction() as conn:
            row = task_rows.get(conn, task_id)
        if row is None or row.owner != owner:  # another context's task is as unknown as no task
            raise TaskNotFound(f"Task not found: {task_id!r}.", fix="tasks/list lists the tasks of this client.")
        return row

    def _live(self, row: TaskRow) -> TaskState:
        """The task's state now, from its job; a task past its ttl whose job ended is deleted here."""
        state = self._state(row)
        if _expired(row, state):
            self._forget([row.task_id])
            raise TaskNotFound(
                f"Task has expired: {row.task_id!r} (kept {row.ttl_ms} ms from its creation).",
                fix=f"The job's receipt is kept: inspect(job_id={row.run_id!r})." if row.run_id else None,
            )
        return state

    def _state(self, row: TaskRow) -> TaskState:
        if row.run_id is None:
            failed = bool(row.call.get("isError"))
            return self._of(row, "failed" if failed else "completed", _first_text(row.call), row.created_at, None)
        w = self.service.wait(row.run_id, 0)
        latest = self.service.context.latest(row.run_id)
        updated = max(t for t in (latest.created_at, latest.started_at, latest.ended_at, row.created_at) if t)
        if row.cancelled_at is not None:
            updated = max(updated, row.cancelled_at)
            message = (
                f"Stopped following {row.run_id}; the job goes on ({w.status}): cancel(job_id={row.run_id!r}) stops it."
                if row.tool in WATCHING_TOOLS
                else f"Cancelled by request: {w.headline().replace('**', '')}"
            )
            return self._of(row, "cancelled", message, updated, None)
        if not w.terminal:
            state = self._of(row, "working", working_message(w), updated, poll_interval_ms(w))
        else:
            status: Status = "cancelled" if w.status == "cancelled" else "completed"
            state = self._of(row, status, w.headline().replace("**", ""), updated, None)
        return replace(state, step=w.progress.step, max_steps=w.progress.max_steps)

    def _listed(self, row: TaskRow, latest: AttemptRecord | None) -> TaskState:
        """A task as tasks/list shows it: its status from its job's latest attempt alone (tasks/get says more)."""
        if row.run_id is None or latest is None:
            return self._state(row)
        updated = max(t for t in (latest.created_at, latest.started_at, latest.ended_at, row.created_at) if t)
        reason = f" ({latest.termination_reason.value})" if latest.termination_reason else ""
        message = f"{row.run_id} {latest.status.value}{reason}"
        if row.cancelled_at is not None:
            return self._of(row, "cancelled", message, max(updated, row.cancelled_at), None)
        if not latest.status.is_terminal:
            return self._of(row, "working", message, updated, 5_000)
        status: Status = "cancelled" if latest.status.value == "cancelled" else "completed"
        return self._of(row, status, message, updated, None)

    @staticmethod
    def _of(row: TaskRow, status: Status, message: str, updated: float, poll_ms: int | None) -> TaskState:
        return TaskState(
            task_id=row.task_id,
            tool=row.tool,
            job_id=row.run_id,
            status=status,
            message=message,
            created_at=row.created_at,
            updated_at=updated,
            ttl_ms=row.ttl_ms,
            poll_ms=poll_ms,
        )

    def _forget(self, task_ids: list[str]) -> None:
        if task_ids:
            with self.service.ledger.transaction() as conn:
                task_rows.delete(conn, task_ids)


def _expired(row: TaskRow, state: TaskState) -> bool:
    return state.terminal and row.ttl_ms is not None and time.time() * 1000 > row.created_at * 1000 + row.ttl_ms


def _first_text(call: dict[str, Any]) -> str:
    texts = [block.get("text", "") for block in call.get("content") or [] if block.get("type") == "text"]
    return texts[0].partition("\n")[0].replace("**", "") if texts else ""


def _cursor(row: TaskRow) -> str:
    return base64.urlsafe_b64encode(json.dumps([row.created_at, row.task_id]).encode()).decode()


def _read_cursor(cursor: str | None) -> tuple[float, str] | None:
    if cursor is None:
        return None
    try:
        created_at, task_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return float(created_at), str(task_id)
    except (ValueError, TypeError, binascii.Error):
        raise BadCursor(
            "Invalid cursor for tasks/list.", fix="Pass the nextCursor of the previous page, or none."
        ) from None
