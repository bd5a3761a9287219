"""Opening the ledger from a second thread never drops the first connection's locks: another process that
closes its connection must not take the database for unused and delete the WAL under the first (the
soak bench found writes lost and a malformed ledger when connect() opened and closed the file itself)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from jobtrail.ledger.connection import use_wal
from jobtrail.ledger.db import connect

COUNT_AND_CHECK = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
    "print(c.execute('SELECT COUNT(*) FROM t').fetchone()[0], c.execute('PRAGMA integrity_check').fetchone()[0])"
)


def test_a_second_connection_keeps_the_first_ones_locks(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    first = connect(ledger)
    first.execute("CREATE TABLE t (x INTEGER)")
    first.execute("INSERT INTO t VALUES (0)")
    second = connect(ledger)  # what a second thread (the poller, a tool's worker) does
    # Another process reads and closes: it must see that this process still uses the database.
    subprocess.run([sys.executable, "-c", COUNT_AND_CHECK, str(ledger)], check=True, capture_output=True)
    assert (tmp_path / "ledger.sqlite-wal").exists()
    for n in range(100):
        first.execute("INSERT INTO t VALUES (?)", (n,))
        second.execute("INSERT INTO t VALUES (?)", (n,))
    seen = subprocess.run(
        [sys.executable, "-c", COUNT_AND_CHECK, str(ledger)], check=True, capture_output=True, text=True
    )
    assert seen.stdout.split() == ["201", "ok"]


def test_the_ledger_and_its_wal_are_private_whatever_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        conn = connect(tmp_path / "home" / "ledger.sqlite")
        conn.execute("CREATE TABLE t (x INTEGER)")
    finally:
        os.umask(previous)
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
        assert stat.S_IMODE((tmp_path / "home" / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700


class _RacedOpen:
    """A connection whose switch to WAL meets another process switching the same new ledger `races` times: SQLite
    answers 'database is locked' at once then (no busy wait: waiting would deadlock), as it did in CI."""

    def __init__(self, races: int, error: str = "database is locked") -> None:
        self.races, self.error, self.calls = races, error, 0

    def execute(self, sql: str) -> None:
        self.calls += 1
        assert sql == "PRAGMA journal_mode=WAL"
        if self.calls <= self.races:
            raise sqlite3.OperationalError(self.error)


def test_a_new_ledger_two_processes_open_at_once_is_switched_to_wal_by_both():
    raced = _RacedOpen(races=2)
    use_wal(raced)  # type: ignore[arg-type]  # the one method use_wal calls
    assert raced.calls == 3
    broken = _RacedOpen(races=1, error="disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):  # only the race is tried again
        use_wal(broken)  # type: ignore[arg-type]
    assert broken.calls == 1
