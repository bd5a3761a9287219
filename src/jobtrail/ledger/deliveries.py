"""Webhook deliveries: one row per notice a job's webhook sends (its ending, an alert, a hold), claimed before it is
sent and recorded after, so it is the job's receipt of what its endpoint was told.

Several servers may follow one ledger (two stdio servers on one home, servers on several machines): a notice is
sent by whichever claims its row first. A claim still `sending` after STALE_CLAIM_S was made by a server that died
mid-send: another may take it over. Times are the ledger's clock (claims.now). Each function runs inside the
caller's write transaction (Ledger.transaction), so a claim is one compare-and-set.
"""

from __future__ import annotations

from typing import Literal

from jobtrail.ledger.claims import now
from jobtrail.ledger.connection import LedgerConnection
from jobtrail.models import WebhookDelivery

DeliveryState = Literal["sending", "sent", "failed"]
# Longer than any send (its tries, timeouts and backoff: service/webhook.py) can take.
STALE_CLAIM_S = 600.0

TABLE = """
CREATE TABLE webhook_deliveries (
    run_id       TEXT NOT NULL REFERENCES runs(run_id),
    notice       TEXT NOT NULL,
    event        TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    state        TEXT NOT NULL,
    status_code  INTEGER,
    tries        INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    PRIMARY KEY (run_id, notice)
)
"""


def claim(conn: LedgerConnection, run_id: str, notice: str, event: str, attempt: int) -> bool:
    """Whether this server sends the notice: no server claimed it yet, or the one that did died sending it."""
    at = now(conn)
    row = conn.execute(
        "SELECT state, updated_at FROM webhook_deliveries WHERE run_id = ? AND notice = ?", (run_id, notice)
    ).fetchone()
    if row is None:
        conn.execute(
            "INSERT INTO webhook_deliveries (run_id, notice, event, attempt, state, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, 'sending', ?, ?)",
            (run_id, notice, event, attempt, at, at),
        )
        return True
    if row["state"] != "sending" or row["updated_at"] > at - STALE_CLAIM_S:
        return False
    conn.execute("UPDATE webhook_deliveries SET updated_at = ? WHERE run_id = ? AND notice = ?", (at, run_id, notice))
    return True


def record(
    conn: LedgerConnection,
    run_id: str,
    notice: str,
    *,
    state: DeliveryState,
    status_code: int | None,
    tries: int,
    error: str | None,
) -> None:
    conn.execute(
        "UPDATE webhook_deliveries SET state = ?, status_code = ?, tries = ?, error = ?, updated_at = ?"
        " WHERE run_id = ? AND notice = ?",
        (state, status_code, tries, error, now(conn), run_id, notice),
    )


def of_run(conn: LedgerConnection, run_id: str) -> list[WebhookDelivery]:
    rows = conn.execute(
        "SELECT * FROM webhook_deliveries WHERE run_id = ? ORDER BY created_at, notice", (run_id,)
    ).fetchall()
    return [
        WebhookDelivery(
            notice=row["notice"],
            event=row["event"],
            attempt=row["attempt"],
            sent=row["state"] == "sent",
            state=row["state"],
            status_code=row["status_code"],
            tries=row["tries"],
            error=row["error"],
            at=row["updated_at"],
        )
        for row in rows
    ]
