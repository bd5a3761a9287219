"""README's "Where the time and money went": its SQLite query and its PostgreSQL query, each run as written (as
sqlite3 and psql would run them) on its engine's ledger, answer what report() answers."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest

from jobtrail.ledger.store import Ledger
from jobtrail.models import TerminationReason
from support.records import add_ended_run, add_queued_run

README = Path(__file__).resolve().parents[2] / "README.md"
DAY_S = 86400


def _report_queries() -> dict[str, str]:
    """The section's queries of the attempts table: the SQLite one, then PostgreSQL's."""
    section = README.read_text().split("## Where the time and money went", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```sql\n(.*?)```", section, re.DOTALL) if "FROM attempts" in b]
    assert len(blocks) == 2, blocks
    sqlite_sql, postgres_sql = blocks
    assert "strftime" in sqlite_sql and "interval '7 days'" in postgres_sql
    return {"sqlite": sqlite_sql, "postgresql": postgres_sql}


def _rows_as_written(location: Path | str, sql: str) -> list[tuple]:
    if isinstance(location, Path):
        with sqlite3.connect(location) as conn:
            return conn.execute(sql).fetchall()
    with psycopg.connect(location) as conn:
        return conn.execute(sql).fetchall()  # no parameters: the text goes to the server as it is


def test_the_readme_queries_answer_what_report_answers(ledger_location):
    ledger = Ledger(ledger_location)
    oom, succeeded = TerminationReason.OOM, TerminationReason.SUCCEEDED
    add_ended_run(ledger, "jt-oom1", oom, gpu_seconds=3600.0, cost_usd=1.25)
    add_ended_run(ledger, "jt-oom2", oom, gpu_seconds=1800.0, cost_usd=0.5)
    add_ended_run(ledger, "jt-done", succeeded, gpu_seconds=7200.0, cost_usd=3.0)
    add_ended_run(ledger, "jt-old", oom, gpu_seconds=9000.0, cost_usd=9.0, ended_at=time.time() - 8 * DAY_S)
    add_queued_run(ledger, "jt-running", status="running", started_at=time.time(), gpu_seconds=60.0)

    engine = "sqlite" if isinstance(ledger_location, Path) else "postgresql"
    rows = _rows_as_written(ledger_location, _report_queries()[engine])
    assert [(r[0], r[1]) for r in rows] == [("oom", 2), ("succeeded", 1)]
    assert [(r[2], r[3]) for r in rows] == [pytest.approx((1.5, 1.75)), pytest.approx((2.0, 3.0))]
    reported = ledger.report(time.time() - 7 * DAY_S, "termination_reason")
    assert [(r.group, r.attempts, r.gpu_hours, r.cost_usd) for r in reported] == [tuple(r) for r in rows]
