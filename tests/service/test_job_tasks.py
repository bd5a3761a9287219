"""What a task says of its job (service/job_tasks.py), over a real service and ledger: a task is its creator's alone,
is paged, expires only after its job ended and never takes the receipt with it; its poll interval follows the job's
pace and its status message says where the job is."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jobtrail.app import build_service
from jobtrail.models import TerminationReason
from jobtrail.results.progress import Progress
from jobtrail.results.watch import WaitResult
from jobtrail.service.job_tasks import (
    PAGE_SIZE,
    TTL_DEFAULT_MS,
    TTL_MAX_MS,
    TTL_MIN_MS,
    BadCursor,
    JobTasks,
    TaskEnded,
    TaskNotFound,
    poll_interval_ms,
    ttl_for,
    working_message,
)
from support.records import add_ended_run

DRY_RUN = {
    "content": [{"type": "text", "text": "**Dry run**: would be accepted.\nNext: submit"}],
    "structuredContent": {"job_id": None, "status": "dry_run"},
}


@pytest.fixture
def tasks(tmp_path) -> JobTasks:
    return JobTasks(build_service(tmp_path / "home"))


def test_a_task_is_visible_to_the_context_that_created_it_alone(tasks):
    mine = tasks.open("bearer:aaaa", "submit", None, DRY_RUN)
    assert (mine.status, mine.message, mine.job_id) == ("completed", "Dry run: would be accepted.", None)
    assert tasks.state("bearer:aaaa", mine.task_id) == mine
    for act in (tasks.state, tasks.cancel, tasks.outcome):
        with pytest.raises(TaskNotFound):
            act("local", mine.task_id)
    assert tasks.page("local", None) == ([], None)
    with pytest.raises(TaskEnded):
        tasks.cancel("bearer:aaaa", mine.task_id)
    outcome = tasks.outcome("bearer:aaaa", mine.task_id)
    assert outcome is not None and outcome.answer == DRY_RUN


def test_the_ended_job_of_an_expired_task_keeps_its_receipt(tasks):
    add_ended_run(tasks.service.ledger, "jt-ended001", TerminationReason.OOM)
    ended = tasks.open("local", "submit", None, {"structuredContent": {"job_id": "jt-ended001", "status": "queued"}})
    assert ended.status == "completed" and ended.message.startswith("jt-ended001: failed (oom)")
    assert tasks.open("local", "submit", 5, {"structuredContent": {"job_id": "jt-ended001"}}) == ended  # one task
    with tasks.service.ledger.transaction() as conn:  # created two hours ago, kept one
        conn.execute(
            "UPDATE mcp_tasks SET created_at = ?, ttl_ms = ? WHERE task_id = ?",
            (time.time() - 7200, TTL_MIN_MS, ended.task_id),
        )
    with pytest.raises(TaskNotFound, match="has expired"):
        tasks.state("local", ended.task_id)
    with pytest.raises(TaskNotFound, match="not found"):
        tasks.state("local", ended.task_id)  # deleted with its expiry
    assert tasks.service.inspect("jt-ended001").termination_reason == "oom"


def test_tasks_are_paged_newest_first(tasks):
    opened = [tasks.open("local", "submit", None, DRY_RUN).task_id for _ in range(PAGE_SIZE + 1)]
    first, cursor = tasks.page("local", None)
    assert len(first) == PAGE_SIZE and cursor is not None
    rest, end = tasks.page("local", cursor)
    assert [s.task_id for s in first + rest] == sorted(opened, key=opened.index, reverse=True) and end is None
    with pytest.raises(BadCursor):
        tasks.page("local", "not-a-cursor")


def test_ttl_is_kept_between_an_hour_and_thirty_days():
    assert ttl_for(None) == TTL_DEFAULT_MS and ttl_for(1) == TTL_MIN_MS and ttl_for(10**12) == TTL_MAX_MS
    assert ttl_for(2 * TTL_MIN_MS) == 2 * TTL_MIN_MS


def _waited(
    status: str,
    attempts: int = 1,
    waiting_for: str | None = None,
    alerts: list[dict[str, Any]] | None = None,
    **at: Any,
) -> WaitResult:
    return WaitResult(
        job_id="jt-pace0001",
        status=status,
        terminal=status in ("succeeded", "failed", "cancelled"),
        attempts=attempts,
        progress=Progress(**at),
        waited_s=0.0,
        timed_out=False,
        waiting_for=waiting_for,
        alerts=alerts or [],
    )


def test_the_poll_interval_follows_the_job_s_pace():
    assert poll_interval_ms(_waited("starting", phase="loading_model")) == 2_000
    assert poll_interval_ms(_waited("queued", waiting_for="jt-first001 to end")) == 10_000
    assert poll_interval_ms(_waited("running", step=3, phase="training")) == 5_000  # no ETA yet
    assert poll_interval_ms(_waited("running", step=3, eta_seconds=30.0)) == 5_000
    assert poll_interval_ms(_waited("running", step=30, eta_seconds=300.0)) == 10_000
    assert poll_interval_ms(_waited("running", step=300, eta_seconds=3 * 3600.0)) == 60_000
    assert poll_interval_ms(_waited("succeeded", step=300)) is None


def test_the_status_message_says_step_eta_attempt_and_alerts():
    alert = {"code": "loss_spike", "step": 40, "message": "The loss jumped 4x.", "fix": "Lower the learning rate."}
    message = working_message(
        _waited(
            "running",
            step=40,
            max_steps=100,
            fraction=0.4,
            eta_seconds=120.0,
            phase="training",
            attempts=2,
            alerts=[alert],
        )
    )
    assert message.startswith("jt-pace0001 running: step 40/100 (40%), about 2m")
    assert "phase training" in message and "attempt 2" in message
    assert "alert loss_spike at step 40: The loss jumped 4x." in message
