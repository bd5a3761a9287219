"""The indexes serve what ps, inspect and report ask: EXPLAIN QUERY PLAN of every statement they run through the
ledger names an index (or a table's own key) for each table, and reads no table whole."""

from __future__ import annotations

import re
import time

from jobtrail.ledger.store import Ledger
from jobtrail.models import CheckpointRecord, TerminationReason
from support.records import add_ended_run

WHOLE_TABLE = re.compile(r"^SCAN (\w+)$")  # SQLite's plan for a table read row by row, start to end


def test_ps_inspect_and_report_read_through_indexes(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    for n, reason in enumerate([TerminationReason.SUCCEEDED, TerminationReason.OOM] * 10):
        add_ended_run(ledger, f"jt-plan{n:04d}", reason, gpu_seconds=60.0, cost_usd=0.1)
        step = {"event": "step", "time": 1.0, "step": 1, "loss": 2.0}
        checkpoint = CheckpointRecord(path="/o/checkpoint-1", step=1, state="committed", updated_at=1.0)
        ledger.ingest(
            f"jt-plan{n:04d}/1", from_offset=0, to_offset=1, events=[step], fields={}, checkpoints=[checkpoint]
        )
    raw = ledger._conn()._conn  # type: ignore[attr-defined]  # the sqlite3 connection under SqliteConnection
    statements: list[str] = []
    raw.set_trace_callback(statements.append)
    week = time.time() - 7 * 86400
    ledger.list_runs(None, 20)  # ps
    ledger.list_runs("failed", 20)
    ledger.children(["jt-plan0001"])
    ledger.attempts("jt-plan0001")  # inspect
    ledger.events("jt-plan0001/1")
    ledger.events("jt-plan0001/1", "artifact")
    ledger.checkpoints("jt-plan0001/1")
    ledger.evals_of("jt-plan0001")
    for group in ("termination_reason", "method", "flavor"):  # report
        ledger.report(week, group)
    ledger.ended_spend_since(time.time() - 86400)
    ledger.cap_states(week, 20)
    ledger.attempts_in(["starting", "running"])  # every tool's refresh
    raw.set_trace_callback(None)

    queries = [s for s in dict.fromkeys(statements) if s.startswith("SELECT")]
    assert len(queries) >= 15
    for sql in queries:
        plan = [row["detail"] for row in raw.execute("EXPLAIN QUERY PLAN " + sql).fetchall()]
        # a subquery's rows materialized first (ps's newest runs) are read whole by design: they are `limit` rows
        materialized = {line.split()[1] for line in plan if line.startswith("MATERIALIZE ")}
        whole = [line for line in plan if (found := WHOLE_TABLE.match(line)) and found[1] not in materialized]
        assert not whole, f"{sql}\n reads a table whole: {plan}"
    # Grouped on an attempt's own column, report reads one covering index and nothing else (no join to runs).
    [by_reason] = [sql for sql in queries if "GROUP BY grp" in sql and "a.termination_reason AS grp" in sql]
    plan = [row["detail"] for row in raw.execute("EXPLAIN QUERY PLAN " + by_reason).fetchall()]
    assert [line for line in plan if line.startswith(("SEARCH", "SCAN"))] == [
        "SEARCH a USING COVERING INDEX attempts_by_ended (ended_at>?)"
    ], plan
