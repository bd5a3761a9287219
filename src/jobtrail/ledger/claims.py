"""Claims: the ledger's own clock, the claim that moves a queued attempt to starting, and its expiry.

Servers on several machines share one ledger, and their clocks need not agree: a server whose clock ran 600 s
ahead once read a claim made a second earlier as ten minutes old, called it abandoned, and started a second
attempt of the run beside the first. So every time a claim is stamped with, and every age it is judged by,
comes from one clock, the ledger's (`now`): PostgreSQL's server clock for a shared ledger; for SQLite, which
only processes of one machine share, the clock SQLite reads in the process that asks (that one machine's,
whatever a process's own idea of time.time() is). Nothing here compares a timestamp a server computed.

Each function runs inside the caller's write transaction (Ledger.transaction: one writer at a time), so the
checks and the write are one compare-and-set.
"""

from __future__ import annotations

from typing import Any, Literal

from jobtrail.ledger.connection import LedgerConnection

Claim = Literal["claimed", "full", "taken", "busy"]
_ACTIVE = ("starting", "running")
# Seconds since the epoch, as a double, in each engine's own terms. SQLite's julianday('now') has millisecond
# precision; clock_timestamp() is PostgreSQL's wall clock at the call (now() would be the transaction's start).
_NOW = {
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0 AS now",
    "postgresql": "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now",
}


def now(conn: LedgerConnection) -> float:
    """The ledger's clock, in seconds since the epoch."""
    return float(conn.execute(_NOW[conn.dialect]).fetchone()["now"])


def claim(conn: LedgerConnection, attempt_id: str, backend: str, limit: int | None, host: str | None) -> Claim:
    """Move a queued attempt to starting (see Ledger.claim_slot). "busy": another attempt of its run is starting
    or running, so this one waits; two attempts of one run would train in one output directory at once."""
    marks = ", ".join("?" for _ in _ACTIVE)
    sibling = conn.execute(
        f"SELECT 1 FROM attempts WHERE run_id = (SELECT run_id FROM attempts WHERE attempt_id = ?)"
        f" AND attempt_id <> ? AND status IN ({marks})",
        (attempt_id, attempt_id, *_ACTIVE),
    ).fetchone()
    if sibling is not None:
        return "busy"
    if limit is not None:
        sql = f"SELECT COUNT(*) AS active FROM attempts WHERE backend = ? AND status IN ({marks})"
        params: list[Any] = [backend, *_ACTIVE]
        if host is not None:
            sql += " AND host = ?"
            params.append(host)
        if conn.execute(sql, params).fetchone()["active"] >= limit:
            return "full"
    # started_at marks the claim, on the ledger's clock, until the launch records the process's own start. A
    # claim with no host keeps the one the attempt has (none, for one queued before hosts were recorded).
    moved = conn.execute(
        "UPDATE attempts SET status = 'starting', started_at = ?, host = COALESCE(?, host)"
        " WHERE attempt_id = ? AND status = 'queued'",
        (now(conn), host, attempt_id),
    )
    return "claimed" if moved.rowcount == 1 else "taken"


def stale(conn: LedgerConnection, attempt_id: str, older_than_s: float) -> bool:
    """Whether the attempt is a claim with no placement yet, made at least `older_than_s` ago by the ledger's
    clock. A claim with a placement was launched and recorded: it is followed, never expired."""
    row = conn.execute(
        "SELECT 1 FROM attempts WHERE attempt_id = ? AND status = 'starting' AND placement IS NULL AND started_at <= ?",
        (attempt_id, now(conn) - older_than_s),
    ).fetchone()
    return row is not None
