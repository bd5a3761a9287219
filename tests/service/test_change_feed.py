"""The change feed reads the ledger as `serve`'s poller leaves it and says, per job, what changed since its last
look: a new job, a new state, a committed checkpoint, an alert, a hold, the end; each once. The jobs are ledger
records moved by hand, as the tracker would move them."""

from __future__ import annotations

import time

from jobtrail.app import build_service
from jobtrail.models import CheckpointRecord, TerminationReason
from jobtrail.service.change_feed import Change, ChangeFeed, JobChange
from support.records import add_ended_run, add_queued_run


def _said(changes: list[JobChange]) -> list[tuple[str, str, str]]:
    return [(c.job_id, c.change.value, c.detail) for c in changes]


def test_each_change_of_a_job_is_told_once_in_order(tmp_path):
    service = build_service(tmp_path / "home")
    ledger, context = service.ledger, service.context
    feed = ChangeFeed()
    heard: list[JobChange] = []
    stop = feed.subscribe(heard.append)
    add_queued_run(ledger, "jt-feed0001")
    assert feed.look(context) == []  # the first look only takes the marks: nothing is news at start

    add_queued_run(ledger, "jt-feed0002")
    ledger.update_attempt("jt-feed0001/1", status="running", started_at=time.time())
    assert sorted(_said(feed.look(context))) == [
        ("jt-feed0001", "state", "running"),
        ("jt-feed0002", "state", "queued"),  # a job created since the last look
    ]
    ledger.ingest(
        "jt-feed0001/1",
        from_offset=0,
        to_offset=100,
        events=[{"event": "alert", "code": "loss_spike", "step": 2, "message": "the loss jumped", "fix": None}],
        fields={},
        checkpoints=[CheckpointRecord(path="checkpoint-2", step=2, state="committed", updated_at=time.time())],
    )
    assert _said(feed.look(context)) == [
        ("jt-feed0001", "checkpoint", "checkpoint-2"),
        ("jt-feed0001", "alert", "loss_spike"),
    ]
    assert feed.look(context) == []  # nothing new: nothing told
    ledger.update_attempt(
        "jt-feed0001/1", status="succeeded", termination_reason=TerminationReason.SUCCEEDED, ended_at=time.time()
    )
    add_ended_run(ledger, "jt-feed0003", TerminationReason.OOM)  # submitted and ended between two looks
    assert sorted(_said(feed.look(context))) == [("jt-feed0001", "ended", "succeeded"), ("jt-feed0003", "ended", "oom")]
    assert feed.look(context) == []  # an ended job met again (created within the slack) is not told twice
    assert [c.change for c in heard] == [Change.STATE, Change.STATE, Change.CHECKPOINT, Change.ALERT] + [
        Change.ENDED
    ] * 2
    stop()
    add_ended_run(ledger, "jt-feed0004", TerminationReason.CANCELLED)
    assert _said(feed.look(context)) == [("jt-feed0004", "ended", "cancelled")] and len(heard) == 6  # unsubscribed


def test_a_follower_held_by_its_parents_blocking_alert_is_told(tmp_path):
    service = build_service(tmp_path / "home")
    ledger, context = service.ledger, service.context
    feed = ChangeFeed()
    feed.look(context)
    add_ended_run(ledger, "jt-parent01", TerminationReason.SUCCEEDED)
    ledger.ingest(
        "jt-parent01/1",
        from_offset=0,
        to_offset=100,
        events=[{"event": "alert", "code": "nothing_learned", "step": 3, "message": "no weight moved", "fix": "x"}],
        fields={},
        checkpoints=[],
    )
    add_queued_run(ledger, "jt-child001", spec={"after": "jt-parent01"})
    told = feed.look(context)
    assert sorted((c.job_id, c.change.value) for c in told) == [
        ("jt-child001", "held"),
        ("jt-child001", "state"),
        ("jt-parent01", "alert"),  # new to the feed: what it did before it was seen is told too
        ("jt-parent01", "ended"),
    ]
    [held] = [c for c in told if c.change is Change.HELD]
    assert held.detail.startswith("held: jt-parent01 succeeded, but nothing_learned at step 3"), held.detail
    assert feed.look(context) == []  # still held: told once
