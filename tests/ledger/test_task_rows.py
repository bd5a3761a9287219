"""MCP task rows (ledger/task_rows.py) on both engines: one task per owner, tool and job, whatever races to add it;
a newest-first page that goes on from where the last ended; a cancel whose first time stands."""

from __future__ import annotations

from pathlib import Path

from jobtrail.ledger import task_rows
from jobtrail.ledger.store import Ledger
from jobtrail.ledger.task_rows import TaskRow
from jobtrail.models import TerminationReason
from support.records import add_ended_run


def _row(task_id: str, run_id: str | None, created_at: float, owner: str = "local", tool: str = "submit") -> TaskRow:
    return TaskRow(task_id, owner, tool, run_id, created_at, 3_600_000, None, {"content": [], "n": task_id})


def test_one_task_per_owner_tool_and_job(ledger_location: Path | str) -> None:
    ledger = Ledger(ledger_location)
    add_ended_run(ledger, "jt-job00001", TerminationReason.SUCCEEDED)
    with ledger.transaction() as conn:
        first = task_rows.add(conn, _row("task-a", "jt-job00001", 1.0))
        again = task_rows.add(conn, _row("task-b", "jt-job00001", 2.0))  # the same submit sent twice
        waiting = task_rows.add(conn, _row("task-c", "jt-job00001", 3.0, tool="wait"))
        theirs = task_rows.add(conn, _row("task-d", "jt-job00001", 4.0, owner="bearer:ab"))
        jobless = [task_rows.add(conn, _row(f"task-n{i}", None, 5.0 + i)) for i in range(2)]  # never one another
    assert first == again == _row("task-a", "jt-job00001", 1.0)
    assert (waiting.task_id, theirs.task_id) == ("task-c", "task-d")
    with ledger.transaction() as conn:
        assert task_rows.get(conn, "task-b") is None
        assert [task_rows.get(conn, row.task_id) for row in jobless] == jobless


def test_pages_newest_first_and_cancel_and_delete(ledger_location: Path | str) -> None:
    ledger = Ledger(ledger_location)
    with ledger.transaction() as conn:
        for i in range(5):
            task_rows.add(conn, _row(f"task-{i}", None, float(i // 2)))  # two pairs share a creation time
        task_rows.add(conn, _row("task-other", None, 9.0, owner="bearer:ab"))
        first = task_rows.page(conn, "local", None, 3)
        rest = task_rows.page(conn, "local", (first[-1].created_at, first[-1].task_id), 3)
        assert [r.task_id for r in first + rest] == ["task-4", "task-3", "task-2", "task-1", "task-0"]
        task_rows.cancel(conn, "task-1", 7.0)
        task_rows.cancel(conn, "task-1", 8.0)
        cancelled = task_rows.get(conn, "task-1")
        assert cancelled is not None and cancelled.cancelled_at == 7.0
        task_rows.delete(conn, ["task-1", "task-2"])
        assert [r.task_id for r in task_rows.page(conn, "local", None, 10)] == ["task-4", "task-3", "task-0"]
        assert [r.task_id for r in task_rows.page(conn, "bearer:ab", None, 10)] == ["task-other"]
