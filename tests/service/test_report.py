"""report(): attempts, GPU-hours and cost by termination reason, and the README's SQL agrees."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

from jobtrail.app import build_service
from jobtrail.models import TerminationReason
from jobtrail.results.tasks import JOB_CAPS_LISTED
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


def test_report_counts_every_capped_job_and_lists_those_to_look_at(tmp_path):
    """A busy week holds thousands of capped jobs that simply finished: they are counted; the ones stopped by
    their cap are listed, newest first, at most JOB_CAPS_LISTED."""
    service = build_service(tmp_path)
    remote = {"backend": "hf_jobs", "flavor": "a10g-small", "gpu_seconds": 600.0}
    for n in range(25):
        add_ended_run(service.ledger, f"jt-under{n:02}", TerminationReason.SUCCEEDED, run={"max_cost_usd": 1.0},
                      cost_usd=0.5, **remote)  # fmt: skip
    add_ended_run(service.ledger, "jt-atcap", TerminationReason.SUCCEEDED, run={"max_cost_usd": 1.0}, cost_usd=1.0,
                  **remote)  # fmt: skip
    add_ended_run(service.ledger, "jt-local", TerminationReason.SUCCEEDED, run={"max_cost_usd": 1.0})  # costs nothing
    add_ended_run(service.ledger, "jt-stopped", TerminationReason.BUDGET, run={"max_cost_usd": 1.0}, cost_usd=1.0,
                  **remote)  # fmt: skip

    data = call_tool(build_server(service), "report", {"days": 7}).structured_content
    assert data["capped_jobs"] == 27
    assert [(c["job_id"], c["termination_reason"], c["spent_usd"]) for c in data["job_caps"]] == [
        ("jt-stopped", "budget", 1.0)
    ]
    assert "27 capped jobs, 1 stopped by its cap (budget)." in data["summary"]

    for n in range(JOB_CAPS_LISTED + 2):
        add_ended_run(service.ledger, f"jt-stop{n:02}", TerminationReason.BUDGET, run={"max_cost_usd": 1.0},
                      cost_usd=1.5, **remote)  # fmt: skip
    data = call_tool(build_server(service), "report", {"days": 7}).structured_content
    assert data["capped_jobs"] == 27 + JOB_CAPS_LISTED + 2 and len(data["job_caps"]) == JOB_CAPS_LISTED
    assert data["job_caps"][0]["job_id"] == f"jt-stop{JOB_CAPS_LISTED + 1:02}"  # newest first
    assert f"the newest {JOB_CAPS_LISTED} to look at are listed" in data["summary"]
