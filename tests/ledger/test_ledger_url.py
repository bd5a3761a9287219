"""JOBTRAIL_LEDGER_URL: a PostgreSQL URL puts the ledger there; anything else stops start-up with the fix, and the
password is never shown. A connection the server dropped is replaced at the next call."""

from __future__ import annotations

import socket

import psycopg
import pytest

from jobtrail.errors import InvalidRequestError, JobtrailError
from jobtrail.ledger.connection import LEDGER_URL_ENV, redact
from jobtrail.ledger.store import Ledger
from jobtrail.surface import cli
from support.records import add_queued_run

SECRET = "s3cret-pw"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once the probe closes


@pytest.mark.parametrize(
    "url, said",
    [
        (f"mysql://me:{SECRET}@db.example/ledger", "is a mysql:// URL"),
        (f"me:{SECRET}@db.example/ledger", "is not a URL"),
        (f"postgresql://me:{SECRET}@db.example:fivefour/ledger", "is not a valid PostgreSQL URL"),
        (f"postgresql://me:{SECRET}@db.example:5432/", "names no database"),
        (f"postgres://me@db.example/ledger?password={SECRET}&colour=blue", "is not a valid PostgreSQL URL"),
    ],
)
def test_a_url_that_is_not_a_postgresql_ledger_is_refused_with_the_form_it_takes(url, said):
    with pytest.raises(InvalidRequestError) as refused:
        Ledger(url)
    shown = str(refused.value)
    assert said in shown and LEDGER_URL_ENV in shown and "postgresql://USER[:PASSWORD]@HOST" in shown
    assert refused.value.fix and SECRET not in shown


def test_an_unreachable_server_stops_the_cli_at_start_with_the_password_hidden(monkeypatch, tmp_path, capsys):
    url = f"postgresql://me:{SECRET}@127.0.0.1:{_closed_port()}/ledger"
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(LEDGER_URL_ENV, url)
    assert cli.main(["ps"]) == 2
    said = capsys.readouterr().err
    assert "Cannot reach the PostgreSQL ledger at postgresql://me:***@127.0.0.1" in said
    assert "Connection refused" in said and f"Fix: Start the server or correct {LEDGER_URL_ENV}" in said
    assert SECRET not in said
    assert not (tmp_path / "home" / "ledger.sqlite").exists()  # no SQLite ledger made on the side


def test_redact_hides_the_password_wherever_the_url_holds_it():
    assert redact(f"postgresql://me:{SECRET}@h:5432/db") == "postgresql://me:***@h:5432/db"
    assert redact(f"postgresql://h/db?user=me&password={SECRET}") == "postgresql://h/db?user=me&password=***"
    assert redact("postgresql://me:p@ss:w/rd@h/db") == "postgresql://me:***@h/db"
    assert redact(f"me:{SECRET}@h/db") == "me:***@h/db"  # not quite a URL
    assert redact("postgresql://me@h:5432/db") == "postgresql://me@h:5432/db"


def test_a_ledger_with_a_password_in_its_url_works_and_a_dropped_connection_is_replaced(postgres_url):
    with_password = postgres_url.replace("postgres@", f"postgres:{SECRET}@")  # trust auth takes any password
    ledger = Ledger(with_password)
    add_queued_run(ledger, "jt-first")
    _drop_connections(postgres_url)  # the server drops the ledger's connection
    assert ledger.get_run("jt-first") is not None  # a read that finds it dropped is asked again on a new one
    _drop_connections(postgres_url)
    with pytest.raises(JobtrailError, match="may or may not have been recorded") as caught:
        ledger.set_max_cost("jt-first", 5.0)  # a change: the caller hears it, nothing is repeated behind it
    assert caught.value.fix and SECRET not in str(caught.value)
    ledger.set_max_cost("jt-first", 5.0)  # the next call reconnects
    assert ledger.get_run("jt-first").max_cost_usd == 5.0


def _drop_connections(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        others = "pid <> pg_backend_pid() AND datname = current_database()"
        admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {others}")
