"""`jobtrail ledger export|import|check`: move a ledger's receipts into another ledger (a personal SQLite ledger into
a team's PostgreSQL one), and say whether a ledger is sound. All act on the ledger jobtrail is configured with:
JOBTRAIL_LEDGER_URL, else the SQLite file under JOBTRAIL_HOME.

Export opens the ledger read-only and checks nothing first: it is also how a damaged ledger is saved (the rows
SQLite can still read), which the server and every other command refuse to write to (ledger/db.py check)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobtrail.errors import NotFoundError

if TYPE_CHECKING:
    from jobtrail.ledger.connection import LedgerConnection


def add_ledger_commands(sub: Any) -> None:
    ledger = sub.add_parser(
        "ledger",
        help="export this ledger's receipts, import an export into it, or check it",
        description="Move receipts between ledgers: `jobtrail ledger export FILE` where they are, then "
        "`JOBTRAIL_LEDGER_URL=postgresql://... jobtrail ledger import FILE` where they go. Importing again adds "
        "nothing: rows the target holds are left as they are.",
    )
    actions = ledger.add_subparsers(required=True, metavar="ACTION")
    export = actions.add_parser("export", help="write every row of this ledger to FILE (JSON Lines; - for stdout)")
    export.add_argument("file", help="where to write the export (created private to you), or - for stdout")
    export.set_defaults(handler=_export)
    load = actions.add_parser("import", help="add the rows of an export that this ledger lacks (one transaction)")
    load.add_argument("file", help="a file `jobtrail ledger export` wrote")
    load.add_argument("--json", action="store_true", help="print JSON instead of text")
    load.set_defaults(handler=_import)
    check = actions.add_parser(
        "check", help="check the ledger as the server does at start (SQLite: its header and quick_check)"
    )
    check.set_defaults(handler=_check)


def _export(args: argparse.Namespace) -> int:
    from jobtrail.ledger.connection import opener
    from jobtrail.ledger.transfer import write_export

    location, shown = _configured()
    conn = opener(location, read_only=True)()  # nothing written, nothing checked: a damaged ledger is saved this way
    if args.file == "-":
        report = write_export(conn, sys.stdout)
    else:
        with open(args.file, "w", encoding="utf-8") as out:  # private: the CLI's umask is 077
            report = write_export(conn, out)
    said = sys.stderr if args.file == "-" else sys.stdout
    counts = ", ".join(f"{table} {n}" for table, n in report.written.items())
    print(f"Exported {shown}: {counts}.", file=said)
    for table, why in report.unreadable.items():
        print(f"  {table}: {why} could not be read.", file=said)
    if report.unreadable:
        print("Some rows could not be read: the file holds every row that could.", file=said)
        return 1
    if args.file != "-":
        print(f"Next: JOBTRAIL_LEDGER_URL=postgresql://USER@HOST/DATABASE jobtrail ledger import {args.file}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from jobtrail.ledger.db import check

    location, shown = _configured()
    check(location)  # a damaged ledger raises LedgerDamaged: the CLI prints it with the way back and exits 2
    print(f"The ledger {shown} is sound.")
    return 0


def _import(args: argparse.Namespace) -> int:
    from jobtrail.ledger.transfer import import_lines

    path = Path(args.file)
    if not path.is_file():
        raise NotFoundError(f"No ledger export at {path}.", fix="Pass the file `jobtrail ledger export FILE` wrote.")
    conn, shown = _connect()
    with path.open(encoding="utf-8") as lines:
        report = import_lines(conn, lines, str(path))
    tables = {table: vars(counts) for table, counts in report.tables.items()}
    if args.json:
        print(json.dumps({"ledger": shown, "tables": tables, "differing_keys": report.differing_keys}, indent=2))
        return 0
    print(f"Imported {path} into {shown}:")
    for table, counts in tables.items():
        print(f"  {table}: {counts['inserted']} inserted, {counts['already_present']} already present", end="")
        print(f", {counts['differing']} held with other content (left as they are)" if counts["differing"] else "")
    for table, keys in report.differing_keys.items():
        print(f"  {table} held with other content: {', '.join(keys)}")
    return 0


def _connect() -> tuple[LedgerConnection, str]:
    """A checked, migrated connection to the configured ledger, and how to name it to a person (no password)."""
    from jobtrail.ledger.db import connect

    location, shown = _configured()
    return connect(location), shown


def _configured() -> tuple[Path | str, str]:
    """The configured ledger's location, and how to name it to a person (no password)."""
    from jobtrail.app import home, ledger_location, private_home
    from jobtrail.ledger.connection import redact

    location = ledger_location(private_home(home()))
    return location, redact(location) if isinstance(location, str) else str(location)
