"""report(): attempts, GPU-hours and cost by termination reason, and the README's SQL agrees."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

from jobtrail.app import build_service
from jobtrail.models import TerminationReason
from jobtrail.surface.server import build_server
from support.mcp_client import call_tool
from support.records import add_ended_run

README = Path(__file__).resolve().parents[2] / "README.md"
DAY = 86400.0


def seed(ledger, run_id: str, reason: TerminationReason, ended_ago_days: float, gpu_s: float, cost: float) -> None:
    ended_at = time.time() - ended_ago_days * DAY
    add_ended_run(ledger, run_id, reason, ended_at=ended_at, gpu_seconds=gpu_s, cost_usd=cost)


def test_report_groups_recent_attempts_and_matches_the_readme_sql(tmp_path):
    service = build_service(tmp_path)
    seed(service.ledger, "jt-a", TerminationReason.OOM, 1, 3600, 2.5)
    seed(service.ledger, "jt-b", TerminationReason.OOM, 2, 7200, 5.0)
    seed(service.ledger, "jt-c", TerminationReason.SUCCEEDED, 0.5, 1800, 1.25)
    seed(service.ledger, "jt-d", TerminationReason.TIMEOUT, 30, 3600, 9.0)  # outside the 7-day window

    result = call_tool(build_server(service), "report", {"days": 7})
    data = result.structured_content
    rows = {r["termination_reason"]: r for r in data["rows"]}
    assert set(rows) == {"oom", "succeeded"}
    assert rows["oom"]["attempts"] == 2 and rows["oom"]["gpu_hours"] == 3.0 and rows["oom"]["cost_usd"] == 7.5
    assert data["total_attempts"] == 3
    assert "3 attempts ended in the last 7 days" in result.content[0].text

    sql = re.search(r"```sql\n(.*?)```", README.read_text(), re.S).group(1)
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        by_sql = {r[0]: (r[1], round(r[2], 4), round(r[3], 4)) for r in conn.execute(sql)}
    assert by_sql == {k: (v["attempts"], v["gpu_hours"], v["cost_usd"]) for k, v in rows.items()}

    by_method = service.report(days=60, group_by="method")
    assert [(r.group, r.attempts) for r in by_method.rows] == [("sft", 4)]
