"""Read-only tools answer from the ledger when it cannot be written, saying so (issue 28 item 6): a ledger opened
read-only, on both engines, answers ps, inspect, logs, metrics and wait with a note and refuses every change,
writing nothing; and SQLite's own SQLITE_FULL, the error a full disk under the ledger gives, is LedgerUnwritable, the
error the tracker turns into that note (tracker.refresh catches it for both).

SQLITE_FULL without root or a small filesystem: the ledger reaches SQLite's page limit (PRAGMA max_page_count on the
connection), which answers a write that needs a new page with it. That cannot make every write fail (pages in use
keep their free room), so a job's whole run on a full disk is bench/faults.py's, on a real small filesystem."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.ledger.connection import LedgerUnwritable
from jobtrail.ledger.store import Ledger
from jobtrail.models import TerminationReason
from jobtrail.service.tracker import UNRECORDED_CODE
from support.records import add_ended_run, add_queued_run


def _fill_to_the_brim(ledger: Ledger) -> None:
    """Every page the ledger may have is taken: the next write that needs one fails with SQLITE_FULL."""
    conn = ledger._conn()  # the connection this thread's calls use
    with ledger.transaction() as tx:
        tx.execute("CREATE TABLE brim (data BLOB)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    for size in (8192, 1024, 128, 16):  # the free pages, then what is left in the pages in use
        while True:
            try:
                with ledger.transaction() as tx:
                    tx.execute("INSERT INTO brim VALUES (zeroblob(?))", (size,))
            except LedgerUnwritable:
                break


def _digest(location: Path | str) -> object:
    """What the ledger holds, as its rows (both engines)."""
    conn = Ledger(location, read_only=True)
    return [(r.run_id, a.status, a.termination_reason) for r, a in conn.list_runs(None, 100)]


def test_a_ledger_opened_read_only_answers_and_changes_nothing(ledger_location, tmp_path, monkeypatch) -> None:
    if isinstance(ledger_location, str):
        monkeypatch.setenv("JOBTRAIL_LEDGER_URL", ledger_location)
    else:
        ledger_location = tmp_path / "home" / "ledger.sqlite"
    writable = Ledger(ledger_location)
    add_ended_run(writable, "jt-ended001", TerminationReason.OOM)
    add_queued_run(writable, "jt-queued01")
    add_ended_run(writable, "jt-stopped01", TerminationReason.CANCELLED)
    before = _digest(ledger_location)
    if isinstance(ledger_location, Path):
        sqlite_bytes = ledger_location.read_bytes()
    monkeypatch.setenv("JOBTRAIL_READ_ONLY", "1")
    service = build_service(tmp_path / "home")

    listed = service.ps()
    assert {job.job_id for job in listed.jobs} == {"jt-ended001", "jt-queued01", "jt-stopped01"}
    assert listed.note and "The ledger is open read-only (serve --read-only)" in listed.note
    assert service.inspect("jt-queued01").status == "queued"  # never started: nothing is dispatched
    assert any(w["code"] == UNRECORDED_CODE for w in service.inspect("jt-ended001").warnings)
    assert any(w["code"] == UNRECORDED_CODE for w in service.wait("jt-ended001", timeout_s=0).warnings)
    for note in (service.logs("jt-ended001").note, service.metrics("jt-ended001").note):
        assert note and note.startswith("Shown as last recorded (jobs may have moved on since): The ledger is open")
    # A cancel, and a retry the policy takes (a cancelled job resumes): only the ledger refuses them.
    for change in (lambda: service.cancel("jt-queued01"), lambda: service.retry("jt-stopped01")):
        with pytest.raises(LedgerUnwritable, match="takes no changes: this server opened it read-only"):
            change()
    assert _digest(ledger_location) == before
    if isinstance(ledger_location, Path):
        assert ledger_location.read_bytes() == sqlite_bytes


def test_the_full_ledger_error_is_sqlites_own(tmp_path) -> None:
    """What _fill_to_the_brim produces is SQLITE_FULL, the code a full disk gives, mapped to LedgerUnwritable."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    _fill_to_the_brim(ledger)
    with pytest.raises(LedgerUnwritable) as refused, ledger.transaction() as tx:
        tx.execute("INSERT INTO brim VALUES (zeroblob(100000))")
    cause = refused.value.__context__
    assert isinstance(cause, sqlite3.OperationalError) and cause.sqlite_errorcode & 0xFF == 13
