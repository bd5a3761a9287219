"""Migration 0012: an attempt's own receipts (placement, last metrics, summary) packed in their row.

They are JSON that every attempt spells out key by key (~600 bytes, a third of the row): packed with the
ledger's dictionary (codec.packed), which holds those keys, they take ~200. No query reads into them; what SQL
groups or sums on (backend, flavor, host, reason, GPU-seconds, cost) has columns of its own. The migration runs
as one transaction with its SQL (db.py): every row is moved, or none.
"""

from __future__ import annotations

import json

from jobtrail.ledger.blobs import Executes
from jobtrail.ledger.codec import packed

# An attempt's field → its column before this migration (TEXT, JSON); after it, the column named as the field
# holds the packed JSON (BLOB). What this migration moved, frozen: a field packed later (codec.PACKED_FIELDS)
# gets its column from a migration of its own.
MOVED_FIELDS = {"placement": "placement_json", "last_metrics": "last_metrics_json", "summary": "summary_json"}
BEFORE = ";\n".join(f"ALTER TABLE attempts ADD COLUMN {field} BLOB" for field in MOVED_FIELDS)
AFTER = ";\n".join(f"ALTER TABLE attempts DROP COLUMN {column}" for column in MOVED_FIELDS.values())
_BATCH = 1000


def move(conn: Executes) -> None:
    columns = ", ".join(MOVED_FIELDS.values())
    assignments = ", ".join(f"{field} = ?" for field in MOVED_FIELDS)
    after = ""
    while True:
        rows = conn.execute(
            f"SELECT attempt_id, {columns} FROM attempts WHERE attempt_id > ? ORDER BY attempt_id LIMIT ?",
            (after, _BATCH),
        ).fetchall()
        if not rows:
            break
        for row in rows:
            values = [None if row[c] is None else packed(json.loads(row[c])) for c in MOVED_FIELDS.values()]
            conn.execute(f"UPDATE attempts SET {assignments} WHERE attempt_id = ?", (*values, row["attempt_id"]))
        after = rows[-1]["attempt_id"]
