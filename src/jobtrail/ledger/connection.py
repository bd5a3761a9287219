"""The ledger's two engines behind one small interface, so that its SQL is written once.

SQL is written with `?` placeholders in the dialect both engines speak. A connection runs it, returns rows
read by column name, and gives `transaction()` one meaning on both: one writer at a time per ledger, so
every compare-and-set in the store holds across threads, processes and machines.
- SQLite (the default, a file under $JOBTRAIL_HOME): BEGIN IMMEDIATE takes the database's write lock.
- PostgreSQL (JOBTRAIL_LEDGER_URL, a team's shared ledger): BEGIN, then a transaction-scoped advisory lock
  every jobtrail writer of that database takes. psycopg is imported only when a URL asks for PostgreSQL.

Opened read-only (a damaged ledger, `serve --read-only`), neither engine can write: SQLite opens the file with
mode=ro and query_only, PostgreSQL's sessions default to read-only transactions; transaction() is then a
consistent read. A change that cannot be recorded, for want of space or because the ledger is read-only, raises
LedgerUnwritable (a JobtrailError saying so), never the driver's own error.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import quote, unquote, urlsplit

from jobtrail.errors import InvalidRequestError, JobtrailError
from jobtrail.util.files import make_private, private_dir

if TYPE_CHECKING:
    import psycopg

LEDGER_URL_ENV = "JOBTRAIL_LEDGER_URL"
POSTGRES_SCHEMES = ("postgresql", "postgres")
# pg_advisory_xact_lock's key (advisory locks are per database): "jobtrail" as a 64-bit integer.
WRITER_LOCK_KEY = int.from_bytes(b"jobtrail", "big")
_URL_FORM = "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
# [scheme://]user:PASSWORD@ up to the last @ (a password written with : or @ in it is still hidden whole),
# and a password= parameter.
_USERINFO_PASSWORD = re.compile(r"^((?:[^:/?#]+://)?+[^:/?#@]*):(.*)@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)")
Dialect = Literal["sqlite", "postgresql"]
# SQLite's primary result codes (the low byte of sqlite_errorcode) and PostgreSQL's SQLSTATEs for a change that
# cannot be recorded: no space left, or a ledger open read-only.
_SQLITE_FULL, _SQLITE_READONLY = 13, 8
# SQLite's result codes for pages that do not make sense (never a lock or a full disk).
SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26
_POSTGRES_FULL, _POSTGRES_READ_ONLY = "53100", "25006"
FREE_SPACE = (
    "Free space on that disk (old checkpoints and outputs under $JOBTRAIL_HOME/runs, the Hugging Face cache), then "
    "call again. ps, inspect, logs, metrics and wait answer from the ledger meanwhile."
)


class LedgerUnwritable(JobtrailError):
    """A change the ledger could not record: its disk is full, or it is open read-only. Nothing was changed."""


def damaged(exc: BaseException) -> bool:
    """Is `exc` SQLite meeting pages that do not make sense (a damaged file)?"""
    return isinstance(exc, sqlite3.DatabaseError) and exc.sqlite_errorcode & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB)


def unwritable(exc: BaseException, where: str, read_only: bool) -> LedgerUnwritable | None:
    """The driver's error `exc` as LedgerUnwritable where it means the ledger cannot take a change; None: another
    error. `where` names the ledger to a person (a path, a URL without its password)."""
    code = getattr(exc, "sqlite_errorcode", None)
    state = getattr(exc, "sqlstate", None)
    said = " ".join(str(exc).split())
    if (code is not None and code & 0xFF == _SQLITE_FULL) or state == _POSTGRES_FULL:
        return LedgerUnwritable(
            f"The ledger could not record this: the disk holding {where} is full ({said}). Nothing was changed.",
            fix=FREE_SPACE,
        )
    if (code is not None and code & 0xFF == _SQLITE_READONLY) or state == _POSTGRES_READ_ONLY:
        why = "this server opened it read-only" if read_only else "it cannot be written"
        return LedgerUnwritable(
            f"The ledger at {where} takes no changes: {why} ({said}). Nothing was changed.",
            fix="ps, inspect, logs, metrics and wait answer from it as it is. To change anything, restart the server "
            "without --read-only (and without JOBTRAIL_READ_ONLY) once the ledger is sound: `jobtrail ledger "
            "check` says whether it is.",
        )
    return None


class Row(Protocol):
    """A result row, read by column name (`row["status"]`, `dict(row)`): never by position."""

    def keys(self) -> Iterable[str]: ...
    def __getitem__(self, column: str, /) -> Any: ...


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...  # a Row, or None
    def fetchall(self) -> list[Any]: ...  # Rows


class LedgerConnection(Protocol):
    dialect: Dialect

    @property
    def closed(self) -> bool: ...
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...
    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...
    def transaction(self) -> AbstractContextManager[None]:
        """One writer at a time: the statements inside see every earlier writer's commits and none after."""
        ...

    def close(self) -> None: ...


SQLITE_PAGE_SIZE = 16384


WAL_SWITCH_TIMEOUT_S = 30.0


def use_wal(conn: sqlite3.Connection) -> None:
    """Put the ledger in WAL mode (a no-op once it is). Written by hand because SQLite does not wait here: two
    processes opening the same new ledger both read it, then both need it alone to switch, and SQLite answers
    one of them 'database is locked' at once rather than deadlock (its busy timeout is never consulted). That
    one tries again: by then the other has switched, and the mode is the file's."""
    deadline = time.monotonic() + WAL_SWITCH_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class SqliteConnection:
    dialect: Dialect = "sqlite"
    closed = False

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path, self.read_only = path, read_only
        if read_only:
            # mode=ro: SQLite never writes the file (nor creates it); query_only refuses changes before trying.
            uri = f"file:{quote(str(path))}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA query_only=ON")
            return
        if not path.parent.exists():
            private_dir(path.parent)
        # isolation_level=None: transactions are explicit (transaction() below).
        self._conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        # Private by chmod, never by opening the file ourselves: closing any descriptor of the database drops
        # every POSIX lock this process holds on it, its other connections' included, and another process
        # may then take the database for unused and delete the WAL under them (lost writes, a malformed
        # database: https://www.sqlite.org/howtocorrupt.html 2.2). The file SQLite just created is still
        # empty; SQLite gives the -wal and -shm files the database's mode, and older ones are narrowed here.
        for own in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            make_private(own)
        self._conn.row_factory = sqlite3.Row
        # A new ledger's pages are 16 KB: an attempt's event pack (~2 KB) and its row (~1.3 KB) leave most of a
        # 4 KB page unused when the next row does not fit, ~1 KB an attempt. A ledger that exists keeps its
        # pages (the pragma does nothing once a table is written).
        self._conn.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
        use_wal(self._conn)
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA synchronous=NORMAL")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            if refused := unwritable(exc, str(self.path), self.read_only):
                raise refused from None
            raise

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            self._conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            if refused := unwritable(exc, str(self.path), self.read_only):
                raise refused from None
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self.read_only:
            # A deferred BEGIN: one consistent snapshot to read (there is no write lock to take). It ends with a
            # rollback, there being nothing to commit: a damaged file's error must not outlive the read that met it.
            self.execute("BEGIN")
            try:
                yield
            finally:
                if self._conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
            return
        self.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if self._conn.in_transaction:  # SQLite may have rolled back itself (a full disk)
                self._conn.execute("ROLLBACK")
            raise
        self.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class PostgresConnection:
    dialect: Dialect = "postgresql"

    def __init__(self, url: str, read_only: bool = False) -> None:
        self._url = url
        self.read_only = read_only
        self._writing = False
        self._conn = self._open()

    def _open(self) -> psycopg.Connection[dict[str, Any]]:
        conn = _connect_postgres(self._url)
        if self.read_only:  # every transaction of this session, statements on their own included
            conn.execute("SET default_transaction_read_only = on")
        # A thread's connection goes when the thread does (or its Ledger): closed then, not left to the driver.
        weakref.finalize(self, conn.close)
        return conn

    @property
    def closed(self) -> bool:
        """The server closed it (a restart, a lost network): the next use opens a new one."""
        return bool(self._conn.closed)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        import psycopg

        try:
            return self._conn.execute(_postgres_sql(sql), params)
        except psycopg.Error as exc:
            if refused := unwritable(exc, redact(self._url), self.read_only):
                raise refused from None
            if not isinstance(exc, psycopg.OperationalError) or not self._conn.closed:
                raise
            # The server dropped the connection (a restart, the network). A read on its own is asked again on a
            # new one; a change may or may not have been applied, so the caller hears so and decides.
            if self._writing or not sql.lstrip().upper().startswith("SELECT"):
                raise self._lost(exc) from None
            self._conn = self._open()
            return self._conn.execute(_postgres_sql(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        import psycopg

        try:
            with self._conn.cursor() as cursor:
                cursor.executemany(_postgres_sql(sql), rows)
        except psycopg.Error as exc:
            if refused := unwritable(exc, redact(self._url), self.read_only):
                raise refused from None
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        import psycopg

        # READ COMMITTED (the default) matters: each statement after the lock sees the commits made before it
        # was granted. Under REPEATABLE READ the snapshot would be the lock statement's, taken while waiting.
        self._writing = True
        try:
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK_KEY,))
                yield
        except psycopg.Error as exc:
            if refused := unwritable(exc, redact(self._url), self.read_only):
                raise refused from None
            if not isinstance(exc, psycopg.OperationalError) or not self._conn.closed:
                raise
            raise self._lost(exc) from None
        finally:
            self._writing = False

    def _lost(self, exc: Exception) -> JobtrailError:
        return JobtrailError(
            f"The PostgreSQL ledger at {redact(self._url)} dropped the connection during a change"
            f" ({_without_password(str(exc), self._url)}); it may or may not have been recorded.",
            fix="Call again: the next call reconnects. Check with ps or inspect before repeating a submit or"
            " retry (an idempotency_key makes a repeated submit safe).",
        )

    def close(self) -> None:
        self._conn.close()


def _connect_postgres(url: str) -> psycopg.Connection[dict[str, Any]]:
    import psycopg
    from psycopg.rows import dict_row

    try:
        # autocommit: a read outside transaction() is a transaction of its own, as in SQLite.
        conn = psycopg.connect(url, autocommit=True, row_factory=dict_row, connect_timeout=10)
    except psycopg.Error as exc:
        raise JobtrailError(
            f"Cannot reach the PostgreSQL ledger at {redact(url)}: {_without_password(str(exc), url)}",
            fix=f"Start the server or correct {LEDGER_URL_ENV} (host, port, user, password, database);"
            f" unset it to keep the ledger in SQLite under $JOBTRAIL_HOME.",
        ) from None  # psycopg's own exception text is shown above, redacted
    return conn


@functools.lru_cache(maxsize=1024)
def _postgres_sql(sql: str) -> str:
    """`?` → `%s` outside string literals; a literal `%` doubled (psycopg reads `%` as a placeholder)."""
    parts = re.split(r"('(?:[^']|'')*')", sql)  # odd parts are quoted literals
    escaped = [part.replace("%", "%%") for part in parts]
    return "".join(part if n % 2 else part.replace("?", "%s") for n, part in enumerate(escaped))


def opener(location: Path | str, read_only: bool = False) -> Callable[[], LedgerConnection]:
    """How to open connections to the ledger at `location`: a SQLite file's path, or a PostgreSQL URL (checked
    now, so a malformed one stops the server at start-up, not at its first query)."""
    if isinstance(location, Path):
        return functools.partial(SqliteConnection, location, read_only)
    url = checked_url(location)
    return functools.partial(PostgresConnection, url, read_only)


def checked_url(url: str) -> str:
    """A PostgreSQL URL psycopg accepts; anything else is refused with the form it should take."""
    shown = redact(url)
    parts = urlsplit(url)
    if parts.scheme not in POSTGRES_SCHEMES:
        scheme = f"a {parts.scheme}:// URL" if parts.scheme and "://" in url else "not a URL"
        raise InvalidRequestError(
            f"{LEDGER_URL_ENV}='{shown}' is {scheme}: a shared ledger is kept in PostgreSQL"
            f" ({' or '.join(s + '://' for s in POSTGRES_SCHEMES)}).",
            fix=f"Set {LEDGER_URL_ENV}={_URL_FORM}, or unset it to keep the ledger in SQLite under $JOBTRAIL_HOME.",
        )
    try:
        _ = parts.port  # a port that is not a number raises here
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(url)  # what libpq itself refuses (unknown parameters, bad escapes)
    except Exception as exc:  # noqa: BLE001 - ValueError (port) or psycopg's ProgrammingError: both mean malformed
        raise InvalidRequestError(
            f"{LEDGER_URL_ENV}='{shown}' is not a valid PostgreSQL URL ({_without_password(str(exc), url)}).",
            fix=f"Write it as {_URL_FORM} (percent-encode special characters in the password).",
        ) from None
    if not parts.path.strip("/"):
        raise InvalidRequestError(
            f"{LEDGER_URL_ENV}='{shown}' names no database.", fix=f"Write it as {_URL_FORM}: the database comes last."
        )
    return url


def redact(url: str) -> str:
    """The URL with its password (in the user part or a password= parameter) replaced by ***; also a string
    that is not quite a URL (no scheme, a password with : or @ in it)."""
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1:***@", url, count=1))


def _without_password(text: str, url: str) -> str:
    """A driver's message on one line, with any password of the URL hidden (libpq does not echo it: never trust
    that)."""
    found = _USERINFO_PASSWORD.match(url)
    secrets = [found.group(2)] if found else []
    secrets += [m.group(2) for m in _QUERY_PASSWORD.finditer(url)]
    for secret in sorted({form for s in secrets if s for form in (s, unquote(s))}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return " ".join(text.split())
