"""A real PostgreSQL server for the tests, started from the binaries installed on this machine.

`postgres_server` (session; running_server() outside pytest): initdb + pg_ctl in a temp dir (trust auth,
fsync off, a unix socket in the dir and a free 127.0.0.1 port), stopped and removed at the end of the session,
also after a failure. PostgreSQL refuses to run as root, so as root it runs as the `postgres` user (runuser),
in a dir that user owns.
`postgres_url`: a fresh, empty database for one test, its URL (postgresql://postgres@127.0.0.1:PORT/NAME).
`ledger_location`: parametrized over both engines: a SQLite file under tmp_path, then a `postgres_url`; a
test that takes it runs twice, and the server starts only when a PostgreSQL case runs.

No PostgreSQL here fails the test with the command that installs it: nothing is skipped.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

INSTALL = "apt-get install -y postgresql (Debian/Ubuntu), dnf install -y postgresql-server, or brew install postgresql"
SUPERUSER = "postgres"
_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",  # every thread and process of a test holds its own connection
    "listen_addresses": "127.0.0.1",
}


@dataclass(frozen=True)
class PostgresServer:
    port: int
    socket_dir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"


def _binaries() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not installed:
        pytest.fail(f"The ledger's tests need a PostgreSQL server's binaries (initdb, pg_ctl); install them: {INSTALL}")
    return Path(installed[-1]).parent


def _as_server_user() -> list[str]:
    """The prefix that runs a command as the user PostgreSQL accepts (never root)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        pytest.fail("Running as root, the tests start PostgreSQL as the `postgres` user with runuser (util-linux).")
    return ["runuser", "-u", SUPERUSER, "--"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stdout}\n{done.stderr}")


@contextmanager
def running_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temp dir while the block runs (bench/ledger_scale.py starts one this way too)."""
    bin_dir, prefix = _binaries(), _as_server_user()
    # Not under pytest's tmp dir: as root that dir is 0700 and the postgres user could not reach its socket.
    root = Path(tempfile.mkdtemp(prefix="jobtrail-pg-"))
    data = root / "data"
    started = False
    try:
        if prefix:
            shutil.chown(root, SUPERUSER, SUPERUSER)
        initdb = [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8"]
        _run([*prefix, *initdb, "--locale=C", "--no-sync"], "initdb")
        for _attempt in range(5):  # another process may take the free port between the probe and the start
            port = _free_port()
            options = " ".join(f"-c {name}={value}" for name, value in _SETTINGS.items())
            pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60"]
            start = [*prefix, *pg_ctl, "-o", f"{options} -p {port} -k {root}", "start"]
            if subprocess.run(start, capture_output=True, timeout=120).returncode == 0:
                started = True
                break
        if not started:
            raise RuntimeError("PostgreSQL did not start: " + (root / "server.log").read_text(errors="replace"))
        yield PostgresServer(port=port, socket_dir=root)
    finally:
        if started:
            stop = [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            subprocess.run(stop, capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with running_server() as server:
        yield server


_databases = itertools.count(1)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A new empty database for this test; dropped afterwards, with any connection the test left open."""
    import psycopg

    name = f"test_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.url(name)
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's ledger lives: a SQLite file, then (second run) a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "ledger.sqlite"
    return str(request.getfixturevalue("postgres_url"))
