"""Named migrations (one transaction each) for both engines of the ledger, the check a ledger passes before
anything writes to it, and opening a checked, migrated connection.

Migrations are append-only: a released name is never edited; a change is a new entry. Their SQL is SQLite's
and serves PostgreSQL too: its column types are mapped in one place (_POSTGRES_TYPES), and a statement whose
dialect differs has its PostgreSQL form beside it (POSTGRES_STATEMENTS), never a second copy of a migration.

`check` runs when a ledger is opened for writing (the server at start, every CLI command): a SQLite file must
carry SQLite's header and a whole number of pages, and pass `PRAGMA quick_check` (~0.1 s for 170 MB); a
PostgreSQL ledger must answer; either must hold no migration this jobtrail does not know (a newer one
migrated it). A ledger that fails is never written to: LedgerDamaged says how to save what it holds (`jobtrail
ledger export` reads it read-only) and how to start again from that; `serve --read-only` reads it meanwhile.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from jobtrail.errors import JobtrailError
from jobtrail.ledger import binary_digests, compact_receipts, deliveries, packed_receipts, task_rows
from jobtrail.ledger.connection import SQLITE_NOTADB, LedgerConnection, SqliteConnection, opener, redact

# A migration's steps: SQL (statements separated by ';'), or a function that moves data (the connection given).
Step = str | Callable[[LedgerConnection], None]
MIGRATIONS: list[tuple[str, str | tuple[Step, ...]]] = [
    (
        "0001_runs_and_attempts",
        """
        CREATE TABLE runs (
            run_id      TEXT PRIMARY KEY,
            created_at  REAL NOT NULL,
            method      TEXT NOT NULL,
            model       TEXT NOT NULL,
            dataset     TEXT NOT NULL,
            backend     TEXT NOT NULL,
            flavor      TEXT,
            spec_json   TEXT NOT NULL
        );
        CREATE TABLE attempts (
            attempt_id          TEXT PRIMARY KEY,
            run_id              TEXT NOT NULL REFERENCES runs(run_id),
            number              INTEGER NOT NULL,
            status              TEXT NOT NULL,
            created_at          REAL NOT NULL,
            started_at          REAL,
            ended_at            REAL,
            backend             TEXT NOT NULL,
            flavor              TEXT,
            timeout_s           INTEGER,
            config_json         TEXT NOT NULL,
            config_sha256       TEXT NOT NULL,
            script              TEXT NOT NULL,
            script_sha256       TEXT NOT NULL,
            forced              INTEGER NOT NULL DEFAULT 0,
            findings_json       TEXT NOT NULL DEFAULT '[]',
            placement_json      TEXT,
            exit_code           INTEGER,
            signal              INTEGER,
            termination_reason  TEXT,
            termination_message TEXT,
            evidence            TEXT,
            environment_json    TEXT,
            data_manifest_json  TEXT,
            resumed_from        TEXT,
            last_metrics_json   TEXT,
            summary_json        TEXT,
            log_offset          INTEGER NOT NULL DEFAULT 0,
            cancel_requested_at REAL,
            gpu_seconds         REAL,
            cost_usd            REAL,
            UNIQUE (run_id, number)
        );
        CREATE INDEX attempts_by_status ON attempts(status);
        CREATE INDEX attempts_by_ended ON attempts(ended_at);
        """,
    ),
    (
        "0002_events_and_checkpoints",
        f"""
        CREATE TABLE events (
            attempt_id   TEXT NOT NULL REFERENCES attempts(attempt_id),
            seq          INTEGER NOT NULL,
            kind         TEXT NOT NULL,
            time         REAL,
            payload_json TEXT NOT NULL,
            PRIMARY KEY (attempt_id, seq)
        );
        CREATE TABLE checkpoints ({compact_receipts.CHECKPOINTS_COLUMNS});
        """,
    ),
    (
        "0003_retries",
        """
        ALTER TABLE runs ADD COLUMN max_retries INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE attempts ADD COLUMN spec_json TEXT;
        ALTER TABLE attempts ADD COLUMN not_before REAL;
        ALTER TABLE attempts ADD COLUMN retry_note TEXT;
        """,
    ),
    (
        "0004_calibration",
        """
        CREATE TABLE calibration (
            attempt_id        TEXT PRIMARY KEY,
            recorded_at       REAL NOT NULL,
            architecture      TEXT NOT NULL,
            params            INTEGER NOT NULL,
            method            TEXT NOT NULL,
            peft              TEXT NOT NULL,
            flavor            TEXT NOT NULL,
            tokens_per_second REAL,
            peak_memory_bytes INTEGER,
            max_length        INTEGER,
            batch             INTEGER
        );
        CREATE INDEX calibration_by_key ON calibration(architecture, params, method, peft, flavor, recorded_at);
        """,
    ),
    (
        "0005_evals",
        """
        CREATE TABLE evals (
            eval_attempt_id   TEXT PRIMARY KEY REFERENCES attempts(attempt_id),
            target_run_id     TEXT REFERENCES runs(run_id),
            checkpoint        TEXT NOT NULL,
            state             TEXT NOT NULL,
            created_at        REAL NOT NULL,
            finished_at       REAL,
            metrics_json      TEXT,
            task_set_sha256   TEXT,
            evaluator_sha256  TEXT,
            record_json       TEXT
        );
        CREATE INDEX evals_by_target ON evals(target_run_id, task_set_sha256);
        """,
    ),
    (
        "0006_caps",
        """
        ALTER TABLE runs ADD COLUMN max_cost_usd REAL;
        ALTER TABLE attempts ADD COLUMN stop_reason TEXT;
        CREATE INDEX attempts_by_started ON attempts(started_at);
        """,
    ),
    (
        # submit(idempotency_key=...): one run per key, whichever process inserts first (the UNIQUE index);
        # request_json is the normalised request the key was used with. after_run_id: the job a run waits
        # for (submit/evaluate/convert_gguf after=...). smoke_steps: an attempt that runs only that many steps.
        "0007_pipelines",
        """
        ALTER TABLE runs ADD COLUMN idempotency_key TEXT;
        ALTER TABLE runs ADD COLUMN request_json TEXT;
        ALTER TABLE runs ADD COLUMN after_run_id TEXT REFERENCES runs(run_id);
        CREATE UNIQUE INDEX runs_by_idempotency_key ON runs(idempotency_key);
        CREATE INDEX runs_by_after ON runs(after_run_id);
        ALTER TABLE attempts ADD COLUMN smoke_steps INTEGER;
        """,
    ),
    (
        # Where each attempt writes, beside its config: a local job without a chosen output gets its run's
        # directory at launch, and its CONFIG names none. Earlier attempts' configs named it.
        "0008_attempt_output_dir",
        """
        ALTER TABLE attempts ADD COLUMN output_dir TEXT;
        UPDATE attempts SET output_dir = COALESCE(json_extract(config_json, '$.output_dir'), '');
        """,
    ),
    (
        # Receipts that stay small (compact_receipts.py): scripts and configs stored once by sha256, events packed.
        "0009_content_addressed_receipts",
        (compact_receipts.BEFORE, compact_receipts.move, compact_receipts.AFTER),
    ),
    (
        # Servers on several machines share a ledger: a local attempt belongs to the host that submitted its
        # job, and only that host's server starts, follows and stops it. Earlier attempts take the host their
        # placement names; a queued one has none until a server launches it. cancel_sent_at: a cancel asked
        # through a server that cannot reach the attempt waits for the host's server to carry it out.
        "0010_hosts",
        """
        ALTER TABLE attempts ADD COLUMN host TEXT;
        ALTER TABLE attempts ADD COLUMN cancel_sent_at REAL;
        UPDATE attempts SET host = json_extract(placement_json, '$.host') WHERE backend = 'local';
        UPDATE attempts SET cancel_sent_at = cancel_requested_at WHERE placement_json IS NOT NULL
        """,
    ),
    (
        # report at scale, from indexes alone: the daily window's spend reads each ended attempt's started_at, and
        # the count of capped jobs reads each recent run's cap and backend.
        "0011_report_from_indexes",
        """
        DROP INDEX attempts_by_ended;
        CREATE INDEX attempts_by_ended ON attempts(ended_at, termination_reason, backend, flavor, run_id, gpu_seconds,
            cost_usd, started_at);
        DROP INDEX runs_by_created;
        CREATE INDEX runs_by_created ON runs(created_at, max_cost_usd, backend)
        """,
    ),
    (
        # An attempt's own JSON receipts (placement, last metrics, summary) packed with the ledger's dictionary.
        "0012_packed_attempt_receipts",
        (packed_receipts.BEFORE, packed_receipts.move, packed_receipts.AFTER),
    ),
    (
        # A read of one kind of event reads the attempt's packs whole (eventlog.py): the list of kinds each pack
        # held only repeated its payload.
        "0013_event_packs_without_kinds",
        "ALTER TABLE event_packs DROP COLUMN kinds",
    ),
    (
        # The sha256s the ledger computes itself stored as their bytes (binary_digests.py).
        "0014_binary_digests",
        (binary_digests.move, binary_digests.manifests),
    ),
    (
        # A checkpoint's path below its attempt's (absolute) output_dir, which the attempt's row holds: the cut
        # codec.stored_path makes, in SQL (both engines); paths written before it are whole.
        "0015_checkpoint_paths_below_output_dir",
        """
        UPDATE checkpoints SET path = substr(path, length(a.output_dir) + 2)
        FROM attempts a
        WHERE a.attempt_id = checkpoints.attempt_id AND a.output_dir LIKE '/%'
          AND substr(checkpoints.path, 1, length(a.output_dir) + 1) = a.output_dir || '/'
        """,
    ),
    (
        # Where a calibration's tokens/s came from (a job's steady steps, its train_runtime, or a bench), and whether
        # the run recomputed activations: a rate measured without checkpointing is not one with it.
        "0016_calibration_source",
        """
        ALTER TABLE calibration ADD COLUMN source TEXT;
        ALTER TABLE calibration ADD COLUMN gradient_checkpointing INTEGER
        """,
    ),
    (
        # What each job's webhook was told (service/webhook.py): one row per notice, claimed then recorded.
        "0017_webhook_deliveries",
        deliveries.TABLE,
    ),
    (
        # MCP tasks (surface/mcp_tasks.py): a task id, the job it follows and the client context that created it,
        # so a task outlives the server that answered its call.
        "0018_mcp_tasks",
        task_rows.TABLE,
    ),
]


# The PostgreSQL form of a migration's statement that SQLite's dialect alone can say, by migration name and
# the statement as written there.
POSTGRES_STATEMENTS: dict[str, dict[str, str]] = {
    "0008_attempt_output_dir": {
        "UPDATE attempts SET output_dir = COALESCE(json_extract(config_json, '$.output_dir'), '')": (
            "UPDATE attempts SET output_dir = COALESCE(config_json::json ->> 'output_dir', '')"
        )
    },
    "0010_hosts": {
        "UPDATE attempts SET host = json_extract(placement_json, '$.host') WHERE backend = 'local'": (
            "UPDATE attempts SET host = placement_json::json ->> 'host' WHERE backend = 'local'"
        )
    },
}
# SQLite's REAL and INTEGER are 8 bytes; PostgreSQL's are 4: timestamps would lose their seconds' fractions
# and byte counts would overflow. SQLite's BLOB (packed bytes) is PostgreSQL's BYTEA.
_POSTGRES_TYPES = {"REAL": "DOUBLE PRECISION", "INTEGER": "BIGINT", "BLOB": "BYTEA"}
# A table SQLite keeps by its key alone; PostgreSQL's tables are all heaps beside their indexes.
_NO_ROWID = " WITHOUT ROWID"
_TYPE_NAMES = re.compile(r"\b(" + "|".join(_POSTGRES_TYPES) + r")\b")
_MIGRATIONS_TABLE = "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
_QUICK_CHECK_LINES = 5  # what quick_check reports of a damaged file: the first problems are enough to name it


class LedgerDamaged(JobtrailError):
    """The ledger failed its check: nothing writes to it (its fix says how to save what it holds and start again)."""


def connect(location: Path | str) -> LedgerConnection:
    """A connection to the ledger at `location` (a SQLite file, or a PostgreSQL URL), checked and migrated."""
    check(location)
    conn = opener(location)()
    migrate(conn)
    return conn


def check(location: Path | str) -> None:
    """Refuse a ledger nothing may write to: a damaged SQLite file, or a ledger a newer jobtrail migrated
    (LedgerDamaged); an unreachable PostgreSQL server raises the connection's own refusal."""
    if isinstance(location, Path) and not _check_sqlite(location):
        return  # a new ledger: nothing to check yet
    conn = opener(location, read_only=True)()
    try:
        unknown = sorted(set(_applied(conn)) - {name for name, _ in MIGRATIONS})
    except sqlite3.DatabaseError as exc:  # a page quick_check did not read
        raise _damaged(location, f"SQLite cannot read it ({exc})") from None
    finally:
        conn.close()
    if unknown:
        shown = location if isinstance(location, Path) else redact(location)
        raise LedgerDamaged(
            f"The ledger at {shown} was migrated by a newer jobtrail (migrations this one does not know: "
            f"{', '.join(unknown)}): this version would not record what that one does, so it writes nothing there.",
            fix="Upgrade jobtrail here (pip install -U jobtrail), or `jobtrail serve --read-only` to read the "
            "ledger as it is.",
        )


def _applied(conn: LedgerConnection) -> list[str]:
    """The migrations the ledger holds (none: a new ledger)."""
    if conn.dialect == "sqlite":
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'").fetchone()
    else:
        exists = conn.execute("SELECT to_regclass('migrations') IS NOT NULL AS found").fetchone()["found"]
    return [row["name"] for row in conn.execute("SELECT name FROM migrations").fetchall()] if exists else []


def _check_sqlite(path: Path) -> bool:
    """SQLite's header, a whole number of pages, and quick_check, read without writing a byte. False: no ledger
    there yet (no file, or one created and never written).

    Read through SQLite alone, never by opening the file here: closing a descriptor of a database drops every lock
    this process holds on it (connection.py), while SQLite keeps its own open until its other connections are done."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    conn = SqliteConnection(path, read_only=True)
    try:
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        if size % page:
            raise _damaged(
                path, f"its {size:,} bytes are not a whole number of its {page:,}-byte pages: bytes were added or cut"
            )
        found = [row[0] for row in conn.execute(f"PRAGMA quick_check({_QUICK_CHECK_LINES})").fetchall()]
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode & 0xFF == SQLITE_NOTADB:
            raise _damaged(path, "it is not a SQLite database (its header is not SQLite's)", readable=False) from None
        raise _damaged(path, f"SQLite cannot read it ({exc})") from None
    finally:
        conn.close()
    if found != ["ok"]:
        raise _damaged(path, "SQLite's quick_check finds: " + "; ".join(" ".join(line.split()) for line in found))
    return True


def _damaged(location: Path | str, what: str, *, readable: bool = True) -> LedgerDamaged:
    """The refusal, with the way back: save what can be read, move the file aside, load the saved rows."""
    aside = f"`mv {location} {location}.damaged` (and its -wal and -shm files, if any)"
    home = Path(location).parent if isinstance(location, Path) else None
    kept = f" The jobs' own files under {home / 'runs'} (logs, checkpoints, outputs) are not touched." if home else ""
    if readable:
        fix = (
            f"Save what it still holds: `jobtrail ledger export saved.jsonl` reads it read-only and says what it "
            f"could not read. Then move it aside, {aside}, and load the saved rows into a new, empty ledger: "
            f"`jobtrail ledger import saved.jsonl`. Meanwhile `jobtrail serve --read-only` answers ps, inspect and "
            f"logs from it without writing.{kept}"
        )
    else:
        fix = (
            f"Nothing can be read from it. Put a backup of the file in its place if there is one; otherwise move it "
            f"aside, {aside}, and jobtrail starts a new, empty ledger.{kept}"
        )
    return LedgerDamaged(f"The ledger {location} is damaged: {what}. jobtrail does not write to it.", fix=fix)


def migrate(conn: LedgerConnection) -> list[str]:
    """Apply the migrations this database lacks, each atomically; return their names."""
    with conn.transaction():
        conn.execute(_in_dialect(conn, "", _MIGRATIONS_TABLE))
    applied: list[str] = []
    for name, sql in MIGRATIONS:
        with conn.transaction():
            # Re-checked inside the write lock: two processes may start at once.
            if conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone():
                continue
            for step in steps(sql):
                if callable(step):
                    step(conn)
                    continue
                for statement in _statements(step):
                    conn.execute(_in_dialect(conn, name, statement))
            conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
            applied.append(name)
    return applied


def steps(body: str | tuple[Step, ...]) -> tuple[Step, ...]:
    """A migration's steps: its SQL alone, or SQL and the functions that move data between."""
    return (body,) if isinstance(body, str) else body


def _in_dialect(conn: LedgerConnection, migration: str, statement: str) -> str:
    """A migration's statement as this connection's engine runs it."""
    if conn.dialect == "sqlite":
        return statement
    statement = POSTGRES_STATEMENTS.get(migration, {}).get(statement, statement).replace(_NO_ROWID, "")
    return _TYPE_NAMES.sub(lambda found: _POSTGRES_TYPES[found.group(1)], statement)


def _statements(sql: str) -> list[str]:
    # executescript() would commit our transaction; split plain DDL on ';' instead.
    return [s.strip() for s in sql.split(";") if s.strip()]
