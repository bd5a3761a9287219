"""An attempt's events, stored compactly: packs of JSON lines, compressed (codec.pack).

Each ingest of a log range adds one pack, its events numbered first_seq..last_seq in order. When the attempt
ends its packs become one (of PACK_EVENTS events at most): the same keys on every line and numbers of one
kind side by side compress far better in one pack than in many small ones. Nothing of a payload is copied
into a column (not even the kinds a pack holds: nearly every pack holds step events, which are what a read
of one kind asks for): an event is its line, as the job printed it (less what redaction removed).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from jobtrail.ledger.blobs import Executes
from jobtrail.ledger.codec import pack, unpack

PACK_EVENTS = 5000


def kind_of(event: dict[str, Any]) -> str:
    return str(event.get("event", "?"))


def append(conn: Executes, attempt_id: str, events: Sequence[dict[str, Any]]) -> None:
    """Add events after the attempt's last one."""
    if not events:
        return
    last = conn.execute(
        "SELECT COALESCE(MAX(last_seq), 0) AS last_seq FROM event_packs WHERE attempt_id = ?", (attempt_id,)
    ).fetchone()["last_seq"]
    _insert(conn, attempt_id, int(last) + 1, [json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in events])


class PackCache:
    """Packs already read, by attempt and seq range: a pack never changes (a merge writes a new range), so ps and
    inspect, which read every event of the jobs they show on each call, decompress and parse each pack once.
    The events handed out are shared with the cache: read them, never change them."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._packs: OrderedDict[tuple[str, int, int], list[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def events(self, row: Any) -> list[dict[str, Any]]:
        key = (row["attempt_id"], int(row["first_seq"]), int(row["last_seq"]))
        with self._lock:
            if key in self._packs:
                self._packs.move_to_end(key)
                return self._packs[key]
        # One JSON array per pack: a line holds no raw newline (json.dumps escapes it), so the lines are its items.
        events: list[dict[str, Any]] = json.loads("[" + unpack(row["data"]).decode().replace("\n", ",") + "]")
        with self._lock:
            self._packs[key] = events
            while len(self._packs) > self._size:
                self._packs.popitem(last=False)
        return events


def read(
    conn: Executes, cache: PackCache, attempt_ids: Sequence[str], kind: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Each attempt's events in order (with `kind`, those of that kind), in one query for them all."""
    found: dict[str, list[dict[str, Any]]] = {attempt_id: [] for attempt_id in attempt_ids}
    if not attempt_ids:
        return found
    marks = ", ".join("?" for _ in attempt_ids)
    rows = conn.execute(
        f"SELECT attempt_id, first_seq, last_seq, data FROM event_packs WHERE attempt_id IN ({marks})"
        " ORDER BY attempt_id, first_seq",
        list(attempt_ids),
    ).fetchall()
    for row in rows:
        packed = cache.events(row)
        found[row["attempt_id"]].extend(packed if kind is None else (e for e in packed if kind_of(e) == kind))
    return found


def merge(conn: Executes, attempt_id: str) -> None:
    """The attempt's events in as few packs as PACK_EVENTS allows, instead of one pack per ingest."""
    rows = conn.execute(
        "SELECT first_seq, data FROM event_packs WHERE attempt_id = ? ORDER BY first_seq", (attempt_id,)
    ).fetchall()
    if len(rows) < 2:
        return
    lines = [line for row in rows for line in unpack(row["data"]).decode().split("\n")]
    conn.execute("DELETE FROM event_packs WHERE attempt_id = ?", (attempt_id,))
    _insert(conn, attempt_id, int(rows[0]["first_seq"]), lines)


def _insert(conn: Executes, attempt_id: str, first_seq: int, lines: list[str]) -> None:
    """Lines numbered from first_seq, in packs of PACK_EVENTS at most."""
    for start in range(0, len(lines), PACK_EVENTS):
        part = lines[start : start + PACK_EVENTS]
        conn.execute(
            "INSERT INTO event_packs (attempt_id, first_seq, last_seq, data) VALUES (?, ?, ?, ?)",
            (attempt_id, first_seq + start, first_seq + start + len(part) - 1, pack("\n".join(part).encode())),
        )
