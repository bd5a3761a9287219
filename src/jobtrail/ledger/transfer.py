"""`jobtrail ledger export|import`: a ledger's rows as JSON Lines, and those lines into another ledger.

This is how a personal SQLite ledger moves into a team's PostgreSQL one: export where the rows are, import where
they go. Import is idempotent: a row whose key the target already holds is left as the target has it (the team's
ledger may have moved on since), counted as `already_present`, or as `differing` when its content is not the
file's. The whole import is one transaction: a file that cannot go in changes nothing.

The file's first line names the migrations of the ledger it came from; a target at other migrations is refused,
because the rows' columns would not match (export and import with one jobtrail version).

Exporting is also how a damaged ledger is saved (db.check refuses to write to it): opened read-only, every row SQLite
can still read is written. Where a table's pages stop making sense, its remaining rows are read one by one by key,
and those that cannot be are counted in `unreadable` with what SQLite said.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from jobtrail.errors import InvalidRequestError
from jobtrail.ledger.connection import LedgerConnection, damaged

FORMAT = "jobtrail-ledger-export"
VERSION = 1
# Every table a ledger holds, parents before the rows that reference them, with the columns that identify a row.
# tests/ledger/test_transfer.py fails when a migration adds a table that is missing here.
TABLES: dict[str, tuple[str, ...]] = {
    "blobs": ("sha256",),
    "scripts": ("sha256",),
    "runs": ("run_id",),
    "attempts": ("attempt_id",),
    "event_packs": ("attempt_id", "first_seq"),
    "checkpoints": ("attempt_id", "path"),
    "calibration": ("attempt_id",),
    "evals": ("eval_attempt_id",),
    "webhook_deliveries": ("run_id", "notice"),
    "mcp_tasks": ("task_id",),
}
# runs.after_run_id references another run: oldest first puts every parent before its followers.
_ORDER = {"runs": "created_at, run_id"}
_PAGE = 2000
_BYTES = "$base64"


@dataclass
class TableCounts:
    inserted: int = 0
    already_present: int = 0
    differing: int = 0


@dataclass
class ExportReport:
    written: dict[str, int] = field(default_factory=dict)  # rows per table
    unreadable: dict[str, str] = field(default_factory=dict)  # table -> the rows not read, and what SQLite said


@dataclass
class ImportReport:
    tables: dict[str, TableCounts] = field(default_factory=dict)
    # The keys of rows the target holds with other content, a few per table: what to look at before trusting it.
    differing_keys: dict[str, list[str]] = field(default_factory=dict)


def table_names(conn: LedgerConnection) -> set[str]:
    """The ledger's tables, but for the migrations table (each ledger keeps its own)."""
    if conn.dialect == "sqlite":
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        names = {r["name"] for r in rows}
    else:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
        names = {r["tablename"] for r in rows}
    return {n for n in names if n != "migrations" and not n.startswith("sqlite_")}


def migrations(conn: LedgerConnection) -> list[str]:
    return [r["name"] for r in conn.execute("SELECT name FROM migrations ORDER BY name").fetchall()]


def write_export(conn: LedgerConnection, out: IO[str]) -> ExportReport:
    """Write the header, then every row of every table as one JSON line each, in import order; say what was written
    (and what a damaged SQLite ledger would not give). Inside one transaction, so the pages are one consistent
    snapshot (writers wait; a read-only connection's is a read)."""
    with conn.transaction():
        return _write_rows(conn, out)


def _write_rows(conn: LedgerConnection, out: IO[str]) -> ExportReport:
    out.write(json.dumps({"format": FORMAT, "version": VERSION, "migrations": migrations(conn)}) + "\n")
    report = ExportReport(written=dict.fromkeys(TABLES, 0))
    for table, key in TABLES.items():
        order = _ORDER.get(table, ", ".join(key))
        while True:
            page = (_PAGE, report.written[table])
            try:
                rows = conn.execute(f"SELECT * FROM {table} ORDER BY {order} LIMIT ? OFFSET ?", page).fetchall()
            except sqlite3.DatabaseError as exc:
                if not damaged(exc):
                    raise
                _salvage(conn, out, table, report, str(exc))
                break
            for row in rows:
                _write_row(out, table, row)
            report.written[table] += len(rows)
            if len(rows) < _PAGE:
                break
    return report


def _salvage(conn: LedgerConnection, out: IO[str], table: str, report: ExportReport, said: str) -> None:
    """The rows of a damaged table after those already written, one by one by key: the keys are read from the
    table's key index, and a row whose pages do not make sense is skipped and counted (all of them, when even its
    keys cannot be read)."""
    key = TABLES[table]
    order = _ORDER.get(table, ", ".join(key))
    columns = ", ".join(key)
    where = " AND ".join(f"{column} = ?" for column in key)
    try:
        keys = conn.execute(
            f"SELECT {columns} FROM {table} ORDER BY {order} LIMIT -1 OFFSET ?", (report.written[table],)
        )
        rest = keys.fetchall()
    except sqlite3.DatabaseError:
        report.unreadable[table] = f"{' '.join(said.split())}; its keys too, after the rows above"
        return
    lost = 0
    for found in rest:
        try:
            row = conn.execute(f"SELECT * FROM {table} WHERE {where}", [found[c] for c in key]).fetchone()
        except sqlite3.DatabaseError:
            lost += 1
            continue
        _write_row(out, table, row)
        report.written[table] += 1
    report.unreadable[table] = f"{lost} row{'s' if lost != 1 else ''} ({' '.join(said.split())})"


def _write_row(out: IO[str], table: str, row: Any) -> None:
    out.write(json.dumps({"table": table, "row": {name: _encode(value) for name, value in dict(row).items()}}))
    out.write("\n")


def import_lines(conn: LedgerConnection, lines: Iterable[str], source: str) -> ImportReport:
    """Insert the rows of an export (`source` names it in errors) that the target lacks, in one transaction."""
    numbered = enumerate(lines, start=1)
    header = _header(next(numbered, (1, "")), source)
    report = ImportReport(tables={table: TableCounts() for table in TABLES})
    with conn.transaction():
        if header["migrations"] != migrations(conn):
            raise InvalidRequestError(
                f"{source} was exported from a ledger at other migrations than this one"
                f" ({_migration_difference(header['migrations'], migrations(conn))}).",
                fix="Export and import with the same jobtrail version: upgrade the older side, open its ledger once"
                " (any jobtrail command migrates it), and export again.",
            )
        for number, line in numbered:
            if line.strip():
                table, row = _row(line, number, source)
                _insert(conn, table, row, report)
    return report


def _insert(conn: LedgerConnection, table: str, row: dict[str, Any], report: ImportReport) -> None:
    key = TABLES[table]
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    inserted = conn.execute(
        f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT ({', '.join(key)}) DO NOTHING", list(row.values())
    ).rowcount
    counts = report.tables[table]
    if inserted == 1:
        counts.inserted += 1
        return
    where = " AND ".join(f"{column} = ?" for column in key)
    held = conn.execute(f"SELECT * FROM {table} WHERE {where}", [row[c] for c in key]).fetchone()
    if held is not None and all(_same(held[name], value) for name, value in row.items()):
        counts.already_present += 1
        return
    counts.differing += 1
    shown = report.differing_keys.setdefault(table, [])
    if len(shown) < 5:
        shown.append("/".join(str(row[c]) for c in key))


def _same(held: Any, value: Any) -> bool:
    return bool((bytes(held) if isinstance(held, memoryview) else held) == value)


def _header(first: tuple[int, str], source: str) -> dict[str, Any]:
    try:
        header = json.loads(first[1])
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidRequestError(
            f"{source} is not a jobtrail ledger export (its first line should name the format {FORMAT!r}).",
            fix="Pass a file written by `jobtrail ledger export`.",
        )
    if header.get("version") != VERSION or not isinstance(header.get("migrations"), list):
        raise InvalidRequestError(
            f"{source} is a ledger export of format version {header.get('version')!r}; this jobtrail reads {VERSION}.",
            fix="Import it with the jobtrail version that exported it.",
        )
    return header


def _row(line: str, number: int, source: str) -> tuple[str, dict[str, Any]]:
    try:
        item = json.loads(line)
        table, row = item["table"], item["row"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InvalidRequestError(
            f"{source} line {number} is not a ledger row (JSON with 'table' and 'row').",
            fix="Pass the file `jobtrail ledger export` wrote, unedited; export again if it was cut short.",
        ) from None
    if table not in TABLES or not isinstance(row, dict) or not set(TABLES[table]) <= set(row):
        raise InvalidRequestError(
            f"{source} line {number} is a row of {table!r}, which is not a ledger table (or lacks its key).",
            fix="Pass the file `jobtrail ledger export` wrote, unedited.",
        )
    return table, {name: _decode(value) for name, value in row.items()}


def _migration_difference(theirs: list[str], ours: list[str]) -> str:
    only_theirs = sorted(set(theirs) - set(ours))
    only_ours = sorted(set(ours) - set(theirs))
    parts = [f"only the file's: {', '.join(only_theirs)}" if only_theirs else ""]
    parts.append(f"only this ledger's: {', '.join(only_ours)}" if only_ours else "")
    return "; ".join(p for p in parts if p)


def _encode(value: Any) -> Any:
    if isinstance(value, (bytes, memoryview)):
        return {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {_BYTES}:
        return base64.b64decode(value[_BYTES])
    return value
