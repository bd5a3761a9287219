"""Claims on the ledger's clock, on SQLite and on PostgreSQL (issue 25, item 6): a claim is stamped and aged by
the ledger, whatever the calling process's time.time() says; an unlaunched claim expires only once it is old by
that clock and only while no launch is recorded; a run never has a second attempt claimed while one may run."""

from __future__ import annotations

import time

import pytest

from jobtrail.ledger.store import Ledger
from jobtrail.models import JobStatus, Placement, TerminationReason
from support.records import add_queued_run, new_attempt

SKEW_S = 600.0
LOST = {
    "status": TerminationReason.LOST.status,
    "termination_reason": TerminationReason.LOST,
    "termination_message": "expired",
}


@pytest.fixture
def skewed(monkeypatch: pytest.MonkeyPatch) -> float:
    """This process's clock runs SKEW_S ahead, as a server's on a machine whose clock is wrong; the real time."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + SKEW_S)
    return real()


def test_a_claim_is_stamped_and_aged_on_the_ledgers_clock_not_a_skewed_servers(ledger_location, skewed):
    ledger = Ledger(ledger_location)
    add_queued_run(ledger, "jt-skewed00")
    assert ledger.claim_slot("jt-skewed00/1", "local", 1, "host-a") == "claimed"
    claimed = ledger.get_attempt("jt-skewed00/1")
    assert claimed.started_at is not None and abs(claimed.started_at - skewed) < 60, claimed.started_at
    assert abs(ledger.now() - skewed) < 60  # the ledger's clock, not this process's
    # Fresh by the ledger's clock: a server whose clock runs 600 s ahead cannot end it.
    assert not ledger.expire_claim("jt-skewed00/1", 120.0, **LOST)
    assert ledger.get_attempt("jt-skewed00/1").status is JobStatus.STARTING


def test_an_unlaunched_claim_expires_once_old_and_a_recorded_launch_never_does(ledger_location):
    ledger = Ledger(ledger_location)
    for run_id in ("jt-orphan00", "jt-launched"):
        add_queued_run(ledger, run_id)
        assert ledger.claim_slot(f"{run_id}/1", "local", 2, "host-a") == "claimed"
        ledger.update_attempt(f"{run_id}/1", started_at=ledger.now() - 121)  # claimed 121 s ago
    placement = Placement(backend="local", host="host-a", pid=1, workdir="/w", started_at=ledger.now())
    ledger.update_attempt("jt-launched/1", placement=placement)  # its launcher recorded it meanwhile
    assert not ledger.expire_claim("jt-launched/1", 120.0, **LOST)
    assert ledger.get_attempt("jt-launched/1").status is JobStatus.STARTING
    assert ledger.expire_claim("jt-orphan00/1", 120.0, **LOST)
    ended = ledger.get_attempt("jt-orphan00/1")
    assert ended.termination_reason is TerminationReason.LOST
    assert not ledger.expire_claim("jt-orphan00/1", 120.0, **LOST)  # once


def test_a_run_never_has_a_second_attempt_claimed_while_one_may_run(ledger_location):
    ledger = Ledger(ledger_location)
    add_queued_run(ledger, "jt-onerun00")
    assert ledger.claim_slot("jt-onerun00/1", "local", None, "host-a") == "claimed"
    second = new_attempt(
        attempt_id="jt-onerun00/2",
        run_id="jt-onerun00",
        number=2,
        status=JobStatus.QUEUED,
        created_at=time.time(),
        backend="local",
        output_dir="/runs/jt-onerun00/output",
    )
    assert ledger.add_attempt(second)
    # No slot limit, on any host: still refused while attempt 1 is starting, then running.
    assert ledger.claim_slot("jt-onerun00/2", "local", None, "host-b") == "busy"
    ledger.update_attempt("jt-onerun00/1", status=JobStatus.RUNNING)
    assert ledger.claim_slot("jt-onerun00/2", "local", None, "host-a") == "busy"
    assert ledger.get_attempt("jt-onerun00/2").status is JobStatus.QUEUED
    ledger.update_attempt("jt-onerun00/1", **{**LOST, "ended_at": ledger.now()})
    assert ledger.claim_slot("jt-onerun00/2", "local", None, "host-a") == "claimed"
