"""`jobtrail ledger export|import`: a personal SQLite ledger moves into a team's PostgreSQL ledger whole, and
importing again changes nothing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobtrail.errors import InvalidRequestError
from jobtrail.ledger import task_rows
from jobtrail.ledger.db import connect
from jobtrail.ledger.store import Ledger
from jobtrail.ledger.task_rows import TaskRow
from jobtrail.ledger.transfer import TABLES, import_lines, table_names, write_export
from jobtrail.models import CalibrationRow, CheckpointRecord, TerminationReason
from support.records import add_ended_run, add_queued_run


def _filled(location: Path | str) -> Ledger:
    """Every table holds rows: runs (one following another), attempts, events, checkpoints, an evaluation, a
    calibration and a webhook delivery."""
    ledger = Ledger(location)
    add_ended_run(ledger, "jt-parent01", TerminationReason.SUCCEEDED, gpu_seconds=3600.0, cost_usd=2.5)
    add_queued_run(ledger, "jt-follow01", spec={"after": "jt-parent01"})
    ledger.ingest(
        "jt-parent01/1",
        from_offset=0,
        to_offset=120,
        events=[{"event": "metrics", "time": 1.5, "step": 1, "loss": 2.25}, {"event": "phase", "phase": "training"}],
        fields={"last_metrics": {"loss": 2.25}},
        checkpoints=[CheckpointRecord(path="checkpoint-1", step=1, state="committed", updated_at=2.0)],
    )
    ledger.add_eval("jt-follow01/1", "jt-parent01", "checkpoint-1")
    with ledger.transaction() as conn:  # an MCP task following a job
        task_rows.add(conn, TaskRow("task-x1", "local", "submit", "jt-parent01", 3.0, 3_600_000, None, {"content": []}))
    ledger.claim_delivery("jt-parent01", "ended:1", "ended", 1)
    ledger.record_delivery("jt-parent01", "ended:1", sent=True, status_code=200, tries=2, error=None)
    ledger.record_calibration(
        CalibrationRow(
            attempt_id="jt-parent01/1",
            architecture="Qwen2ForCausalLM",
            params=494_032_768,
            method="sft",
            peft="lora",
            flavor="a100-large",
            tokens_per_second=1234.5,
            peak_memory_bytes=12 * 2**30,
        )
    )
    return ledger


def _export(location: Path | str) -> str:
    out = io.StringIO()
    write_export(connect(location), out)
    return out.getvalue()


def test_every_table_of_a_migrated_ledger_is_exported(ledger_location: Path | str) -> None:
    assert table_names(connect(ledger_location)) == set(TABLES), "add the new table to transfer.TABLES"


def test_a_sqlite_ledger_moves_into_postgresql_whole_and_a_second_import_adds_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    personal = _filled(tmp_path / "personal" / "ledger.sqlite")
    exported = _export(tmp_path / "personal" / "ledger.sqlite")

    first = import_lines(connect(postgres_url), exported.splitlines(), "export.jsonl")
    inserted = {t: c.inserted for t, c in first.tables.items()}
    assert inserted | {"blobs": 0, "scripts": 0} == {
        "blobs": 0, "scripts": 0, "runs": 2, "attempts": 2, "event_packs": 1, "checkpoints": 1, "calibration": 1,
        "evals": 1, "webhook_deliveries": 1, "mcp_tasks": 1,
    }  # fmt: skip
    assert inserted["blobs"] > 0 and inserted["scripts"] > 0
    team = Ledger(postgres_url)
    for run_id in ("jt-parent01", "jt-follow01"):
        assert team.get_run(run_id) == personal.get_run(run_id)
        assert team.attempts(run_id) == personal.attempts(run_id)
    assert team.events("jt-parent01/1") == personal.events("jt-parent01/1")
    assert team.committed_checkpoints("jt-parent01") == personal.committed_checkpoints("jt-parent01")
    assert team.children(["jt-parent01"]) == {"jt-parent01": ["jt-follow01"]}
    assert team.evals_of("jt-parent01") == personal.evals_of("jt-parent01")
    assert team.deliveries("jt-parent01") == personal.deliveries("jt-parent01") != []
    assert team.report(0, "termination_reason") == personal.report(0, "termination_reason")
    # The whole ledger, byte for byte as an export sees it.
    assert _export(postgres_url) == exported

    again = import_lines(connect(postgres_url), exported.splitlines(), "export.jsonl")
    assert all(c.inserted == 0 and c.differing == 0 for c in again.tables.values())
    assert {t: c.already_present for t, c in again.tables.items()} == inserted
    assert _export(postgres_url) == exported


def test_a_row_the_target_changed_since_is_kept_and_reported(tmp_path: Path, ledger_location: Path | str) -> None:
    _filled(tmp_path / "personal" / "ledger.sqlite")
    exported = _export(tmp_path / "personal" / "ledger.sqlite")
    import_lines(connect(ledger_location), exported.splitlines(), "export.jsonl")
    team = Ledger(ledger_location)
    team.update_attempt("jt-follow01/1", status="cancelled", cancel_requested_at=5.0)  # the team moved on

    report = import_lines(connect(ledger_location), exported.splitlines(), "export.jsonl")
    assert report.tables["attempts"].differing == 1 and report.differing_keys == {"attempts": ["jt-follow01/1"]}
    assert team.attempts("jt-follow01")[0].status == "cancelled"


def test_a_file_that_is_not_an_export_or_from_other_migrations_changes_nothing(
    tmp_path: Path, ledger_location: Path | str
) -> None:
    _filled(tmp_path / "personal" / "ledger.sqlite")
    lines = _export(tmp_path / "personal" / "ledger.sqlite").splitlines()
    header = json.loads(lines[0])
    newer = [json.dumps({**header, "migrations": [*header["migrations"], "0099_from_the_future"]}), *lines[1:]]
    cut = [*lines[:5], lines[5][:20]]  # a row cut short: the rows before it are not kept either
    for bad, words in (
        (["not json", *lines[1:]], "not a jobtrail ledger export"),
        (newer, "only the file's: 0099_from_the_future"),
        (cut, "line 6 is not a ledger row"),
        ([lines[0], json.dumps({"table": "migrations", "row": {"name": "x"}})], "not a ledger table"),
    ):
        with pytest.raises(InvalidRequestError, match=words) as caught:
            import_lines(connect(ledger_location), bad, "export.jsonl")
        assert caught.value.fix
        assert Ledger(ledger_location).list_runs(None, 10) == []


def test_the_cli_moves_a_personal_ledger_into_a_team_ledger(tmp_path: Path, postgres_url: str) -> None:
    home = tmp_path / "home"
    _filled(home / "ledger.sqlite")
    env = {k: v for k, v in os.environ.items() if k != "JOBTRAIL_LEDGER_URL"} | {"JOBTRAIL_HOME": str(home)}

    def jobtrail(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jobtrail", *args]
        return subprocess.run(command, env=env | extra, capture_output=True, text=True, timeout=120)

    exported = jobtrail("ledger", "export", str(tmp_path / "mine.jsonl"))
    assert exported.returncode == 0, exported.stderr
    assert "runs 2, attempts 2, event_packs 1" in exported.stdout and "jobtrail ledger import" in exported.stdout
    assert (tmp_path / "mine.jsonl").stat().st_mode & 0o077 == 0  # the receipts are the user's alone

    for inserted in (2, 0):
        done = jobtrail("ledger", "import", str(tmp_path / "mine.jsonl"), "--json", JOBTRAIL_LEDGER_URL=postgres_url)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["tables"]["runs"]["inserted"] == inserted
    listed = jobtrail("ps", "--json", JOBTRAIL_LEDGER_URL=postgres_url)
    assert {job["job_id"] for job in json.loads(listed.stdout)["jobs"]} == {"jt-parent01", "jt-follow01"}

    missing = jobtrail("ledger", "import", str(tmp_path / "nowhere.jsonl"), JOBTRAIL_LEDGER_URL=postgres_url)
    assert missing.returncode == 2 and "jobtrail ledger export" in missing.stderr
