"""The ledger, on SQLite and on PostgreSQL: named migrations, WAL, compare-and-set updates, exactly-once event
ingestion. `ledger_location` (support/postgres.py) runs each test on both engines."""

from __future__ import annotations

import threading

import pytest

from jobtrail.ledger.connection import opener
from jobtrail.ledger.db import MIGRATIONS, connect, migrate
from jobtrail.ledger.store import Ledger
from jobtrail.models import AttemptRecord, CheckpointRecord, JobSpec, JobStatus, NewAttempt, RunRecord
from support.records import new_attempt


def _run_and_attempt(run_id: str = "jt-test0001") -> tuple[RunRecord, NewAttempt]:
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl")
    run = RunRecord(
        run_id=run_id, created_at=1.0, method="sft", model="/m", dataset="/d.jsonl", backend="local", spec=spec
    )
    attempt = new_attempt(
        attempt_id=f"{run_id}/1",
        run_id=run_id,
        number=1,
        status=JobStatus.QUEUED,
        created_at=1.0,
        backend="local",
        config={"a": 1},
        script="print(1)",
        output_dir="/runs/out",
    )
    return run, attempt


def _tables(conn) -> set[str]:
    if conn.dialect == "sqlite":
        return {r["name"] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
    tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {r["tablename"] for r in tables}


def test_migrations_are_named_and_applied_once(ledger_location):
    conn = connect(ledger_location)
    names = [r["name"] for r in conn.execute("SELECT name FROM migrations ORDER BY name").fetchall()]
    assert names == [name for name, _ in MIGRATIONS]
    assert migrate(conn) == []  # nothing left to apply
    assert {"runs", "attempts", "event_packs", "checkpoints", "blobs", "scripts", "migrations"} <= _tables(conn)


def test_a_sqlite_ledger_is_in_wal_mode(tmp_path):
    conn = connect(tmp_path / "l.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()["journal_mode"] == "wal"


def test_postgresql_keeps_timestamps_and_counts_in_8_bytes(postgres_url):
    conn = connect(postgres_url)
    columns = "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?"
    types = {r["column_name"]: r["data_type"] for r in conn.execute(columns, ("attempts",)).fetchall()}
    assert types["ended_at"] == types["gpu_seconds"] == "double precision"
    assert types["log_offset"] == types["number"] == "bigint"
    assert types["script_sha256"] == types["config_sha256"] == "bytea"  # a sha256's 32 bytes (migration 0014)
    stored = {r["column_name"]: r["data_type"] for r in conn.execute(columns, ("blobs",)).fetchall()}
    assert stored == {"sha256": "bytea", "data": "bytea"}


def test_failed_migration_leaves_nothing_half_applied(ledger_location, monkeypatch):
    import jobtrail.ledger.db as db

    broken = [*db.MIGRATIONS, ("9999_broken", "CREATE TABLE ok_table (x INTEGER); CREATE TABLE nonsense (")]
    monkeypatch.setattr(db, "MIGRATIONS", broken)
    conn = opener(ledger_location)()
    with pytest.raises(Exception, match=r"syntax error|incomplete input"):
        db.migrate(conn)
    assert "ok_table" not in _tables(conn)
    applied = {r["name"] for r in conn.execute("SELECT name FROM migrations").fetchall()}
    assert "9999_broken" not in applied and "0008_attempt_output_dir" in applied


def test_an_attempt_recorded_before_output_dirs_were_gets_the_one_its_config_named(ledger_location, monkeypatch):
    import jobtrail.ledger.db as db

    run, attempt = _run_and_attempt()
    with monkeypatch.context() as older:
        older.setattr(db, "MIGRATIONS", [m for m in db.MIGRATIONS if m[0] < "0008"])
        conn = db.connect(ledger_location)
        conn.execute(
            "INSERT INTO runs (run_id, created_at, method, model, dataset, backend, spec_json)"
            " VALUES (?, 1.0, 'sft', '/m', '/d.jsonl', 'local', ?)",
            (run.run_id, run.spec.model_dump_json()),
        )
        conn.execute(
            "INSERT INTO attempts (attempt_id, run_id, number, status, created_at, backend, config_json,"
            " config_sha256, script, script_sha256) VALUES (?, ?, 1, 'failed', 1.0, 'local', ?, 'c', '', 's')",
            (attempt.attempt_id, run.run_id, '{"output_dir": "/home/runs/jt-test0001/output"}'),
        )
        conn.close()
    assert Ledger(ledger_location).get_attempt(attempt.attempt_id).output_dir == "/home/runs/jt-test0001/output"


def test_postgresql_forms_name_statements_their_migrations_have():
    """A PostgreSQL form is found by its migration's statement: one that names no statement would never run."""
    import jobtrail.ledger.db as db

    written = {
        name: {statement for step in db.steps(body) if isinstance(step, str) for statement in db._statements(step)}
        for name, body in MIGRATIONS
    }
    for name, forms in db.POSTGRES_STATEMENTS.items():
        assert set(forms) <= written[name], name


def test_round_trip_of_a_run_and_its_attempt(ledger_location):
    ledger = Ledger(ledger_location)
    run, attempt = _run_and_attempt()
    ledger.add_run(run, attempt)
    assert ledger.get_run(run.run_id) == run
    assert ledger.get_attempt(attempt.attempt_id) == AttemptRecord(**attempt.model_dump(exclude={"script"}))
    assert ledger.script(attempt.script_sha256) == "print(1)"
    [(listed_run, latest)] = ledger.list_runs(None, 10)
    assert listed_run.run_id == run.run_id and latest.attempt_id == attempt.attempt_id
    assert ledger.list_runs("running", 10) == []


def test_compare_and_set_lets_exactly_one_claimant_win(ledger_location):
    ledger = Ledger(ledger_location)
    run, attempt = _run_and_attempt()
    ledger.add_run(run, attempt)
    wins: list[bool] = []

    def claim() -> None:
        other = Ledger(ledger_location)
        wins.append(other.update_attempt(attempt.attempt_id, expect_status=["queued"], status=JobStatus.STARTING))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1
    assert ledger.get_attempt(attempt.attempt_id).status is JobStatus.STARTING


def test_ingest_records_each_log_range_once(ledger_location):
    ledger = Ledger(ledger_location)
    run, attempt = _run_and_attempt()
    ledger.add_run(run, attempt)
    ckpt = CheckpointRecord(
        path="/o/checkpoint-2", step=2, state="committed", manifest_sha256="ab" * 32, updated_at=2.0
    )
    args = dict(
        from_offset=0,
        to_offset=100,
        events=[{"event": "step", "step": 1, "loss": 2.0}],
        fields={"last_metrics": {"step": 1, "loss": 2.0}},
        checkpoints=[ckpt],
    )
    assert ledger.ingest(attempt.attempt_id, **args) is True
    assert ledger.ingest(attempt.attempt_id, **args) is False  # same bytes again: refused
    assert len(ledger.events(attempt.attempt_id)) == 1
    stored = ledger.get_attempt(attempt.attempt_id)
    assert stored.log_offset == 100 and stored.last_metrics == {"step": 1, "loss": 2.0}
    superseded = ckpt.model_copy(update={"state": "superseded", "manifest_sha256": None})
    ledger.ingest(attempt.attempt_id, from_offset=100, to_offset=150, events=[], fields={}, checkpoints=[superseded])
    [row] = ledger.checkpoints(attempt.attempt_id)
    assert row.state == "superseded" and row.manifest_sha256 == "ab" * 32
