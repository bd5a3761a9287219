"""MCP tasks (surface/mcp_tasks.py): which job each task follows, for which client context, kept how long.

A row maps a task id to the job it follows (run_id) and to the context that created it (owner), so a task outlives
the server that answered its call. The job's receipt is the task's state and its result: nothing of it is copied
here. `call_json` keeps what the creating call itself returned (a submit's findings and sha256s; the whole answer
of a call that started no job: a dry run, a refusal, an error). A row is deleted once its ttl has passed and its
job has ended (service/job_tasks.py); the job's receipt never is.

Each function runs on the caller's connection; writes inside Ledger.transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobtrail.ledger.connection import LedgerConnection, Row

TABLE = """
CREATE TABLE mcp_tasks (
    task_id      TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    tool         TEXT NOT NULL,
    run_id       TEXT REFERENCES runs(run_id),
    created_at   REAL NOT NULL,
    ttl_ms       INTEGER,
    cancelled_at REAL,
    call_json    TEXT NOT NULL
);
CREATE UNIQUE INDEX mcp_tasks_by_job ON mcp_tasks(owner, tool, run_id);
CREATE INDEX mcp_tasks_by_owner ON mcp_tasks(owner, created_at, task_id)
"""
_COLUMNS = "task_id, owner, tool, run_id, created_at, ttl_ms, cancelled_at, call_json"


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    owner: str
    tool: str
    run_id: str | None  # None: the call started no job; `call` is the task's whole result
    created_at: float
    ttl_ms: int | None
    cancelled_at: float | None
    call: dict[str, Any]  # the creating call's CallToolResult, as sent


def add(conn: LedgerConnection, row: TaskRow) -> TaskRow:
    """Insert `row`, unless its owner already has a task of that tool following that job: that one comes back (the
    same submit sent twice with one idempotency key names one job, and so one task)."""
    conn.execute(
        f"INSERT INTO mcp_tasks ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (owner, tool, run_id) DO NOTHING",
        (
            row.task_id,
            row.owner,
            row.tool,
            row.run_id,
            row.created_at,
            row.ttl_ms,
            row.cancelled_at,
            json.dumps(row.call, separators=(",", ":")),
        ),
    )
    if row.run_id is None:
        return row
    held = conn.execute(
        f"SELECT {_COLUMNS} FROM mcp_tasks WHERE owner = ? AND tool = ? AND run_id = ?",
        (row.owner, row.tool, row.run_id),
    ).fetchone()
    return _row(held)


def get(conn: LedgerConnection, task_id: str) -> TaskRow | None:
    found = conn.execute(f"SELECT {_COLUMNS} FROM mcp_tasks WHERE task_id = ?", (task_id,)).fetchone()
    return _row(found) if found is not None else None


def page(conn: LedgerConnection, owner: str, before: tuple[float, str] | None, limit: int) -> list[TaskRow]:
    """The owner's tasks, newest first, those created before `before` (created_at, task_id) only."""
    sql = f"SELECT {_COLUMNS} FROM mcp_tasks WHERE owner = ?"
    params: list[Any] = [owner]
    if before is not None:
        sql += " AND (created_at < ? OR (created_at = ? AND task_id < ?))"
        params += [before[0], before[0], before[1]]
    sql += " ORDER BY created_at DESC, task_id DESC LIMIT ?"
    return [_row(found) for found in conn.execute(sql, [*params, limit]).fetchall()]


def cancel(conn: LedgerConnection, task_id: str, at: float) -> None:
    """Mark the task cancelled (once: the first time stands)."""
    conn.execute("UPDATE mcp_tasks SET cancelled_at = ? WHERE task_id = ? AND cancelled_at IS NULL", (at, task_id))


def delete(conn: LedgerConnection, task_ids: Sequence[str]) -> None:
    conn.executemany("DELETE FROM mcp_tasks WHERE task_id = ?", [(task_id,) for task_id in task_ids])


def _row(found: Row) -> TaskRow:
    return TaskRow(
        task_id=found["task_id"],
        owner=found["owner"],
        tool=found["tool"],
        run_id=found["run_id"],
        created_at=float(found["created_at"]),
        ttl_ms=None if found["ttl_ms"] is None else int(found["ttl_ms"]),
        cancelled_at=None if found["cancelled_at"] is None else float(found["cancelled_at"]),
        call=json.loads(found["call_json"]),
    )
