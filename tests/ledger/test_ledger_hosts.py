"""The ledger of servers on several machines, on SQLite and on PostgreSQL: a local backend's slots are counted on
its host, a remote one's across every server; a new run never takes an id another run holds; attempts recorded
before hosts were get the host their placement names."""

from __future__ import annotations

import pytest

from jobtrail.ledger.db import connect, migrate
from jobtrail.ledger.store import Ledger, RunIdTaken
from jobtrail.models import JobStatus, Placement
from support.records import add_queued_run


def _add(ledger: Ledger, run_id: str, backend: str, status: JobStatus, host: str | None, **attempt) -> str:
    """A run whose one attempt is in `status` on `backend`, of `host`."""
    add_queued_run(ledger, run_id, status=status, backend=backend, host=host, **attempt)
    return f"{run_id}/1"


def test_local_slots_are_each_hosts_and_remote_slots_every_servers(ledger_location):
    ledger = Ledger(ledger_location)
    _add(ledger, "jt-arunning", "local", JobStatus.RUNNING, "host-a")
    queued_a = _add(ledger, "jt-aqueued0", "local", JobStatus.QUEUED, "host-a")
    queued_b = _add(ledger, "jt-bqueued0", "local", JobStatus.QUEUED, "host-b")
    assert ledger.claim_slot(queued_a, "local", 1, "host-a") == "full"  # host-a's one slot is taken
    assert ledger.claim_slot(queued_b, "local", 1, "host-b") == "claimed"  # host-b's is free
    assert ledger.claim_slot(queued_b, "local", 2, "host-b") == "taken"
    assert ledger.get_attempt(queued_b).status is JobStatus.STARTING
    # A remote backend's jobs run nowhere in particular: one running, from whichever server, fills a slot of 1.
    _add(ledger, "jt-rrunning", "hf-jobs", JobStatus.RUNNING, None)
    queued_remote = _add(ledger, "jt-rqueued0", "hf-jobs", JobStatus.QUEUED, None)
    assert ledger.claim_slot(queued_remote, "hf-jobs", 1) == "full"
    assert ledger.claim_slot(queued_remote, "hf-jobs", 2) == "claimed"


def test_a_local_attempt_queued_before_hosts_were_is_its_claimants(ledger_location):
    ledger = Ledger(ledger_location)
    legacy = _add(ledger, "jt-legacy00", "local", JobStatus.QUEUED, None)
    assert ledger.claim_slot(legacy, "local", 1, "host-b") == "claimed"
    assert ledger.get_attempt(legacy).host == "host-b"


def test_a_run_id_another_run_holds_is_refused_and_nothing_is_overwritten(ledger_location):
    ledger = Ledger(ledger_location)
    _add(ledger, "jt-taken000", "local", JobStatus.RUNNING, "host-a")
    with pytest.raises(RunIdTaken):
        _add(ledger, "jt-taken000", "hf-jobs", JobStatus.QUEUED, None)
    kept = ledger.get_attempt("jt-taken000/1")
    assert (kept.backend, kept.status, kept.host) == ("local", JobStatus.RUNNING, "host-a")


def test_attempts_recorded_before_hosts_were_get_their_placements_host(ledger_location):
    ledger = Ledger(ledger_location)
    placement = Placement(backend="local", host="gpu-box", pid=1, workdir="/w", started_at=1.0)
    _add(ledger, "jt-running0", "local", JobStatus.RUNNING, None, placement=placement, cancel_requested_at=2.0)
    _add(ledger, "jt-queued00", "local", JobStatus.QUEUED, None)
    # The ledger as it was before migration 0010: no host, no cancel_sent_at, the placement as JSON (0012 packs it).
    conn = connect(ledger_location)
    for column in ("host", "cancel_sent_at"):
        conn.execute(f"ALTER TABLE attempts DROP COLUMN {column}")
    conn.execute("ALTER TABLE attempts ADD COLUMN placement_json TEXT")
    conn.execute(
        "UPDATE attempts SET placement_json = ? WHERE attempt_id = 'jt-running0/1'", (placement.model_dump_json(),)
    )
    conn.execute("DELETE FROM migrations WHERE name = '0010_hosts'")
    assert migrate(conn) == ["0010_hosts"]
    running, queued = ledger.get_attempt("jt-running0/1"), ledger.get_attempt("jt-queued00/1")
    assert (running.host, queued.host) == ("gpu-box", None)
    # Before, a cancel was sent as soon as it was asked for, wherever there was a placement to signal.
    assert running.cancel_sent_at == running.cancel_requested_at == 2.0
