"""Migration 0009: receipts that stay small. Scripts, configs and the large JSON that attempts repeat move into
content-addressed storage (blobs.py), events into compressed packs (eventlog.py); the old columns go.

Before it, each attempt held its whole rendered script (~120 KB) and its JSON receipts inline, and each event
was a row repeating its kind and time beside its payload. It runs as one transaction with the migration's
SQL (db.py): a ledger is moved whole, or not at all.
"""

from __future__ import annotations

import json
from typing import Any

from jobtrail.ledger import eventlog
from jobtrail.ledger.blobs import Executes, put_blobs, put_script
from jobtrail.ledger.codec import json_bytes
from jobtrail.util.digest import config_json

# The columns of `checkpoints` as migration 0002 created them (db.py uses this for it): 0009 rebuilds the table
# with these same columns and copies every row across, so the two cannot be allowed to differ.
CHECKPOINTS_COLUMNS = """
    attempt_id      TEXT NOT NULL REFERENCES attempts(attempt_id),
    path            TEXT NOT NULL,
    step            INTEGER,
    state           TEXT NOT NULL,
    manifest_sha256 TEXT,
    updated_at      REAL NOT NULL,
    PRIMARY KEY (attempt_id, path)
"""
# This migration's move stores blobs, scripts and packs as blobs.py and eventlog.py store them now, so two things
# were changed after it first ran: `kinds` (dropped by 0013) has a default, packs being written without it, and the
# keys of blobs and scripts are BLOBs (their sha256's bytes since 0014; BYTEA in PostgreSQL). Ledgers that applied
# 0009 before hold TEXT keys and a `kinds` column: 0013 and 0014 bring them to the same place.
# Tables of small rows read by their key alone are SQLite's WITHOUT ROWID (PostgreSQL has no such clause, db.py
# leaves it out): the key (a sha256; an attempt and a checkpoint's path) is stored once, not again in an index
# beside the row. Not `scripts`: a list of ~30 digests is near the ~1 KB past which such a row spills.
BEFORE = """
    CREATE TABLE blobs (
        sha256 BLOB PRIMARY KEY,
        data   BLOB NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE scripts (
        sha256 BLOB PRIMARY KEY,
        chunks BLOB NOT NULL
    );
    CREATE TABLE event_packs (
        attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
        first_seq  INTEGER NOT NULL,
        last_seq   INTEGER NOT NULL,
        kinds      TEXT NOT NULL DEFAULT '',
        data       BLOB NOT NULL,
        PRIMARY KEY (attempt_id, first_seq)
    );
    ALTER TABLE attempts ADD COLUMN spec_sha256 TEXT;
    ALTER TABLE attempts ADD COLUMN environment_sha256 TEXT;
    ALTER TABLE attempts ADD COLUMN data_manifest_sha256 TEXT;
    ALTER TABLE attempts ADD COLUMN findings_sha256 TEXT;
    ALTER TABLE runs ADD COLUMN spec_sha256 TEXT
"""
# SQLite drops a column since 3.35 (2021), PostgreSQL always. The checkpoints become WITHOUT ROWID too.
# Indexes: ps lists runs newest first; report reads the attempts that ended since a moment, grouped, from the
# index alone (it holds every column report groups or sums on).
AFTER = f"""
    ALTER TABLE attempts DROP COLUMN script;
    ALTER TABLE attempts DROP COLUMN config_json;
    ALTER TABLE attempts DROP COLUMN spec_json;
    ALTER TABLE attempts DROP COLUMN environment_json;
    ALTER TABLE attempts DROP COLUMN data_manifest_json;
    ALTER TABLE attempts DROP COLUMN findings_json;
    ALTER TABLE runs DROP COLUMN spec_json;
    DROP TABLE events;
    CREATE TABLE checkpoints_by_attempt ({CHECKPOINTS_COLUMNS}) WITHOUT ROWID;
    INSERT INTO checkpoints_by_attempt
        SELECT attempt_id, path, step, state, manifest_sha256, updated_at FROM checkpoints;
    DROP TABLE checkpoints;
    ALTER TABLE checkpoints_by_attempt RENAME TO checkpoints;
    DROP INDEX attempts_by_ended;
    CREATE INDEX attempts_by_ended ON attempts(ended_at, termination_reason, backend, flavor, run_id, gpu_seconds,
        cost_usd);
    CREATE INDEX runs_by_created ON runs(created_at)
"""
# The JSON columns that become references to blobs, and the column that names each blob.
JSON_REFERENCES = {
    "spec_json": "spec_sha256",
    "environment_json": "environment_sha256",
    "data_manifest_json": "data_manifest_sha256",
    "findings_json": "findings_sha256",
}
_BATCH = 200  # attempts read at once: their scripts are ~120 KB each


def move(conn: Executes) -> None:
    """Every attempt's script, config and JSON receipts into blobs, every event into packs."""
    after = ""
    while True:
        rows = conn.execute(
            "SELECT * FROM attempts WHERE attempt_id > ? ORDER BY attempt_id LIMIT ?", (after, _BATCH)
        ).fetchall()
        if not rows:
            break
        for row in rows:
            _move_attempt(conn, row)
        after = rows[-1]["attempt_id"]
    for run in conn.execute("SELECT run_id, spec_json FROM runs").fetchall():
        (spec,) = put_blobs(conn, [json_bytes(json.loads(run["spec_json"]))])
        conn.execute("UPDATE runs SET spec_sha256 = ? WHERE run_id = ?", (spec, run["run_id"]))


def _move_attempt(conn: Executes, row: Any) -> None:
    attempt_id = row["attempt_id"]
    # The config is stored as its canonical JSON, whose sha256 is the one the attempt named (config_sha256).
    (config,) = put_blobs(conn, [config_json(json.loads(row["config_json"])).encode()])
    references: dict[str, str | None] = {"script_sha256": put_script(conn, row["script"]), "config_sha256": config}
    for column, reference in JSON_REFERENCES.items():
        raw = row[column]
        references[reference] = None if raw is None else put_blobs(conn, [json_bytes(json.loads(raw))])[0]
    assignments = ", ".join(f"{name} = ?" for name in references)
    conn.execute(f"UPDATE attempts SET {assignments} WHERE attempt_id = ?", (*references.values(), attempt_id))
    payloads = conn.execute(
        "SELECT payload_json FROM events WHERE attempt_id = ? ORDER BY seq", (attempt_id,)
    ).fetchall()
    eventlog.append(conn, attempt_id, [json.loads(p["payload_json"]) for p in payloads])
