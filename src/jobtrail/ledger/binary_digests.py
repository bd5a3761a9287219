"""Migration 0014: the sha256s the ledger computes itself (blob and script keys, and the attempts' and runs'
references to them) stored as their 32 bytes instead of 64 hex characters, ~330 bytes an attempt with the keys'
indexes. Records and tool results still show the hex (codec.key/hex_of convert at the ledger's edge).

Checkpoints' manifest_sha256 too, where it is one (a job prints it: codec.manifest_key). The evals' digests stay
hex, so the README's queries print them readably.

PostgreSQL changes each column's type (BYTEA, decoded from the hex); SQLite has no column types to change and,
before 3.41, no unhex(): each value is rewritten from Python, the column's declared TEXT aside (SQLite stores a
BLOB as a BLOB whatever the declaration). One transaction with the migration's record (db.py).
"""

from __future__ import annotations

from jobtrail.ledger.codec import key, manifest_key
from jobtrail.ledger.connection import LedgerConnection

# Each table's digest columns, and the key its rows are found by in SQLite.
DIGEST_COLUMNS: dict[str, tuple[tuple[str, ...], str]] = {
    "blobs": (("sha256",), "sha256"),
    "scripts": (("sha256",), "rowid"),
    "runs": (("spec_sha256",), "rowid"),
    "attempts": (
        (
            "config_sha256",
            "script_sha256",
            "spec_sha256",
            "environment_sha256",
            "data_manifest_sha256",
            "findings_sha256",
        ),
        "rowid",
    ),
}


def manifests(conn: LedgerConnection) -> None:
    """Checkpoints' manifest digests to bytes; one that is no sha256 to NULL (codec.manifest_key)."""
    if conn.dialect == "postgresql":
        conn.execute(
            "ALTER TABLE checkpoints ALTER COLUMN manifest_sha256 TYPE BYTEA USING"
            " CASE WHEN manifest_sha256 ~ '^[0-9a-f]{64}$' THEN decode(manifest_sha256, 'hex') END"
        )
        return
    for row in conn.execute(
        "SELECT attempt_id, path, manifest_sha256 FROM checkpoints WHERE typeof(manifest_sha256) = 'text'"
    ).fetchall():
        conn.execute(
            "UPDATE checkpoints SET manifest_sha256 = ? WHERE attempt_id = ? AND path = ?",
            (manifest_key(row["manifest_sha256"]), row["attempt_id"], row["path"]),
        )


def move(conn: LedgerConnection) -> None:
    """Every hex digest to its bytes. Some are bytes already: a ledger migrated through 0009 since 0014 exists got
    its blobs' and scripts' keys from today's blobs.py (compact_receipts.py)."""
    for table, (columns, row_key) in DIGEST_COLUMNS.items():
        if conn.dialect == "postgresql":
            for column in columns:
                found = conn.execute(
                    "SELECT data_type FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
                    (table, column),
                ).fetchone()
                if found["data_type"] == "text":
                    conn.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE BYTEA USING decode({column}, 'hex')")
            continue
        rows = conn.execute(f"SELECT {row_key} AS row_key, {', '.join(columns)} FROM {table}").fetchall()
        assignments = ", ".join(f"{column} = ?" for column in columns)
        for row in rows:
            values = [key(row[column]) if isinstance(row[column], str) else row[column] for column in columns]
            conn.execute(f"UPDATE {table} SET {assignments} WHERE {row_key} = ?", (*values, row["row_key"]))
