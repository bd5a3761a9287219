"""Migration 0009 and packed events: a ledger of migration 0008 moves whole (scripts byte for byte, configs,
JSON receipts, events in order) in one transaction; events read back the same before and after their attempt
ends and they are packed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import jobtrail.ledger.db as db
from jobtrail.ledger import compact_receipts
from jobtrail.ledger.connection import opener
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec, JobStatus, RunRecord
from jobtrail.preflight.plan import job_values
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import render_script
from jobtrail.util.digest import config_json, sha256_text
from support.records import new_attempt

ENVIRONMENT = {"python": "3.11.7", "packages": {"torch": "2.13.0", "trl": "1.16.0"}, "device": "cpu", "gpu": None}
MANIFEST = {"source": "/d/chat.jsonl", "kind": "file", "sha256": "ab" * 32, "rows": 64, "columns": ["messages"]}


def _old_attempt(run_id: str, number: int, method: str, lr: float) -> dict[str, Any]:
    spec = JobSpec(method=method, model="Qwen/Qwen2.5-0.5B", dataset="/d/chat.jsonl", hyperparameters={"lr": lr})
    changed = spec.model_copy(update={"hyperparameters": {"learning_rate": lr}})
    config = build_config(changed, job_values(changed), None)
    script = render_script(method, config)
    events = [
        {"event": "start", "time": 10.0 + number, "template": method},
        {"event": "environment", "time": 11.0, **ENVIRONMENT},
        *({"event": "step", "time": 12.0 + s, "step": s, "loss": 2.0 / s, "metrics": {"é": "ünïcode"}} for s in (1, 2)),
        {"event": "termination", "time": 20.0, "reason": "oom"},
    ]
    return {
        "attempt_id": f"{run_id}/{number}",
        "run_id": run_id,
        "number": number,
        "spec": spec,
        "config": config,
        "script": script,
        "events": events,
    }


def _ledger_at_0008(location: Path | str, attempts: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A ledger as jobtrail wrote it before 0009: scripts and JSON inline, one row per event."""
    with monkeypatch.context() as older:
        older.setattr(db, "MIGRATIONS", [m for m in db.MIGRATIONS if m[0] < "0009"])
        conn = db.connect(location)
    for a in attempts:
        conn.execute(
            "INSERT INTO runs (run_id, created_at, method, model, dataset, backend, spec_json)"
            " VALUES (?, 1.0, ?, 'Qwen/Qwen2.5-0.5B', '/d/chat.jsonl', 'local', ?) ON CONFLICT (run_id) DO NOTHING",
            (a["run_id"], a["spec"].method, a["spec"].model_dump_json()),
        )
        conn.execute(
            "INSERT INTO attempts (attempt_id, run_id, number, status, created_at, backend, config_json, config_sha256,"
            " script, script_sha256, findings_json, environment_json, data_manifest_json, spec_json, output_dir)"
            " VALUES (?, ?, ?, 'failed', 1.0, 'local', ?, ?, ?, ?, ?, ?, ?, ?, '/o')",
            (
                a["attempt_id"],
                a["run_id"],
                a["number"],
                json.dumps(a["config"]),  # as the old store wrote it: not the canonical form
                sha256_text(config_json(a["config"])),
                a["script"],
                sha256_text(a["script"]),
                json.dumps([{"code": "model.ok", "severity": "info", "message": "fine", "fix": None}]),
                json.dumps(ENVIRONMENT),
                json.dumps(MANIFEST),
                a["spec"].model_dump_json(),
            ),
        )
        for seq, event in enumerate(a["events"], 1):
            conn.execute(
                "INSERT INTO events (attempt_id, seq, kind, time, payload_json) VALUES (?, ?, ?, ?, ?)",
                (a["attempt_id"], seq, event["event"], event["time"], json.dumps(event)),
            )
    conn.close()


def _attempts() -> list[dict[str, Any]]:
    first = _old_attempt("jt-old00001", 1, "sft", 1e-4)
    retry = {**_old_attempt("jt-old00001", 2, "sft", 1e-4), "events": first["events"][:2]}  # the same script
    return [first, retry, _old_attempt("jt-old00002", 1, "sft", 3e-4), _old_attempt("jt-old00003", 1, "dpo", 5e-6)]


def _columns(conn: Any, table: str) -> set[str]:
    if conn.dialect == "sqlite":
        return {r["name"] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()}
    found = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ?", (table,))
    return {r["column_name"] for r in found.fetchall()}


def _tables(conn: Any) -> set[str]:
    if conn.dialect == "sqlite":
        return {r["name"] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
    return {r["tablename"] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_a_ledger_of_0008_moves_whole_scripts_byte_for_byte(ledger_location, monkeypatch):
    old = _attempts()
    _ledger_at_0008(ledger_location, old, monkeypatch)

    ledger = Ledger(ledger_location)  # migrates
    for a in old:
        attempt = ledger.get_attempt(a["attempt_id"])
        assert attempt is not None
        script = ledger.script(attempt.script_sha256)
        assert script == a["script"] and hashlib.sha256(script.encode()).hexdigest() == attempt.script_sha256
        assert attempt.config == a["config"] and sha256_text(config_json(attempt.config)) == attempt.config_sha256
        assert attempt.environment == ENVIRONMENT and attempt.data_manifest == MANIFEST
        assert attempt.spec == a["spec"] and [f.code for f in attempt.findings] == ["model.ok"]
        assert ledger.events(a["attempt_id"]) == a["events"]
        assert ledger.events(a["attempt_id"], "step") == [e for e in a["events"] if e["event"] == "step"]
    assert ledger.get_run("jt-old00003").spec == old[3]["spec"]

    conn = ledger._conn()
    gone = {"script", "config_json", "spec_json", "environment_json", "data_manifest_json", "findings_json"}
    assert not _columns(conn, "attempts") & gone and "spec_json" not in _columns(conn, "runs")
    assert "events" not in _tables(conn)
    # one script row per distinct script (the retry ran its first attempt's), one environment for all
    assert conn.execute("SELECT COUNT(*) AS n FROM scripts").fetchone()["n"] == 3
    assert conn.execute("SELECT COUNT(DISTINCT environment_sha256) AS n FROM attempts").fetchone()["n"] == 1


def test_a_migration_that_fails_half_way_leaves_the_ledger_as_it_was(ledger_location, monkeypatch):
    old = _attempts()
    _ledger_at_0008(ledger_location, old, monkeypatch)
    moved: list[str] = []
    real = compact_receipts.put_script

    def fail_on_the_third(conn: Any, script: str) -> str:
        moved.append(script)
        if len(moved) == 3:
            raise RuntimeError("disk full")
        return real(conn, script)

    monkeypatch.setattr(compact_receipts, "put_script", fail_on_the_third)
    with pytest.raises(RuntimeError, match="disk full"):
        Ledger(ledger_location)
    monkeypatch.setattr(compact_receipts, "put_script", real)

    conn = opener(ledger_location)()
    assert "0009_content_addressed_receipts" not in {r["name"] for r in conn.execute("SELECT name FROM migrations")}
    assert "events" in _tables(conn) and "blobs" not in _tables(conn) and "script" in _columns(conn, "attempts")
    assert conn.execute("SELECT COUNT(*) AS n FROM attempts WHERE script != ''").fetchone()["n"] == len(old)
    conn.close()
    assert Ledger(ledger_location).script(sha256_text(old[0]["script"])) == old[0]["script"]  # a later start moves it


def test_events_read_the_same_before_and_after_their_attempt_ends_and_they_are_packed(ledger_location):
    ledger = Ledger(ledger_location)
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl")
    run = RunRecord(run_id="jt-ev", created_at=1.0, method="sft", model="/m", dataset="/d", backend="local", spec=spec)
    attempt = new_attempt(
        attempt_id="jt-ev/1", run_id="jt-ev", number=1, status=JobStatus.RUNNING, created_at=1.0, backend="local",
        output_dir="/o",
    )  # fmt: skip
    ledger.add_run(run, attempt)
    printed = [
        {"event": "phase", "time": 1.0, "phase": "training"},
        *({"event": "step", "time": 1.0 + s, "step": s, "loss": 1 / s} for s in range(1, 40)),
        {"event": "alert", "time": 50.0, "code": "nan_loss"},
        {"event": "termination", "time": 51.0, "reason": "diverged"},
    ]
    offset = 0
    for start in range(0, len(printed), 4):  # one ingest per few log lines, as a running job's are
        batch = printed[start : start + 4]
        assert ledger.ingest(
            "jt-ev/1", from_offset=offset, to_offset=offset + 1, events=batch, fields={}, checkpoints=[]
        )
        offset += 1
    conn = ledger._conn()
    packs = "SELECT COUNT(*) AS n FROM event_packs WHERE attempt_id = 'jt-ev/1'"
    assert conn.execute(packs).fetchone()["n"] == 11
    assert ledger.events("jt-ev/1") == printed
    assert ledger.events("jt-ev/1", "alert") == [printed[-2]]

    ledger.update_attempt("jt-ev/1", status=JobStatus.FAILED)
    assert conn.execute(packs).fetchone()["n"] == 1
    assert ledger.events("jt-ev/1") == printed
    assert ledger.events("jt-ev/1", "step") == printed[1:-2] and ledger.events("jt-ev/1", "missing") == []
    assert ledger.ingest(
        "jt-ev/1", from_offset=offset, to_offset=offset + 1, events=printed[:1], fields={}, checkpoints=[]
    )
    assert ledger.events("jt-ev/1")[-1] == printed[0]  # a late line comes after the rest


def test_a_ledger_of_0011_packs_each_attempts_own_receipts_in_its_row(ledger_location, monkeypatch):
    """Migration 0012: placement, last metrics and summary move from JSON columns into packed ones, equal."""
    old = _attempts()
    _ledger_at_0008(ledger_location, old, monkeypatch)
    placement = {"backend": "local", "host": "ws", "pid": 7, "pgid": 7, "workdir": "/w", "started_at": 12.5,
                 "remote_id": None, "namespace": None, "url": None, "flavor": None, "image": None,
                 "secret_sources": []}  # fmt: skip
    last_metrics = {"step": 2, "loss": 1.0, "é": "ünïcode"}
    with monkeypatch.context() as older:
        older.setattr(db, "MIGRATIONS", [m for m in db.MIGRATIONS if m[0] < "0012"])
        conn = db.connect(ledger_location)
        conn.execute(
            "UPDATE attempts SET placement_json = ?, last_metrics_json = ?, summary_json = ? WHERE attempt_id = ?",
            (json.dumps(placement), json.dumps(last_metrics), json.dumps({"train_loss": 1.5}), old[0]["attempt_id"]),
        )
        conn.close()

    ledger = Ledger(ledger_location)  # migrates
    first = ledger.get_attempt(old[0]["attempt_id"])
    assert first is not None and first.placement is not None
    assert first.placement.model_dump(mode="json") == placement
    assert (first.last_metrics, first.summary) == (last_metrics, {"train_loss": 1.5})
    retry = ledger.get_attempt(old[1]["attempt_id"])
    assert retry is not None and (retry.placement, retry.last_metrics, retry.summary) == (None, None, None)
    columns = _columns(ledger._conn(), "attempts")
    assert {"placement", "last_metrics", "summary"} <= columns
    assert not {"placement_json", "last_metrics_json", "summary_json"} & columns


def test_a_ledger_of_0013_stores_its_digests_as_bytes_and_reads_the_same_hex(ledger_location, monkeypatch):
    """Migration 0014 on a ledger whose blob keys and references are hex (as 0009 to 0013 wrote them): every
    digest becomes its 32 bytes, every record reads as before."""
    old = _attempts()
    _ledger_at_0008(ledger_location, old, monkeypatch)
    with monkeypatch.context() as older:
        older.setattr(db, "MIGRATIONS", [m for m in db.MIGRATIONS if m[0] < "0014"])
        conn = db.connect(ledger_location)
        hexed = {"blobs": "sha256", "scripts": "sha256"}
        for table, column in hexed.items():  # as 0009 wrote them before 0014: hex keys
            if conn.dialect == "postgresql":
                conn.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE TEXT USING encode({column}, 'hex')")
            else:
                for row in conn.execute(f"SELECT {column} AS k FROM {table}").fetchall():
                    conn.execute(
                        f"UPDATE {table} SET {column} = ? WHERE {column} = ?", (bytes(row["k"]).hex(), row["k"])
                    )
        before = conn.execute("SELECT config_sha256, script_sha256 FROM attempts ORDER BY attempt_id").fetchall()
        conn.close()
    assert all(isinstance(row["config_sha256"], str) for row in before)

    ledger = Ledger(ledger_location)  # migrates
    conn = ledger._conn()
    for row, a in zip(before, old, strict=True):
        attempt = ledger.get_attempt(a["attempt_id"])
        assert attempt is not None and attempt.config_sha256 == row["config_sha256"]
        assert attempt.script_sha256 == row["script_sha256"]
        assert ledger.script(attempt.script_sha256) == a["script"] and attempt.spec == a["spec"]
    keys = [bytes(r["k"]) for r in conn.execute("SELECT sha256 AS k FROM blobs UNION ALL SELECT sha256 FROM scripts")]
    assert keys and all(len(k) == 32 for k in keys)
    assert ledger.get_run("jt-old00003").spec == old[3]["spec"]
