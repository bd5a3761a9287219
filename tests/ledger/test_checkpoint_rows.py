"""A checkpoint's row keeps its path below its attempt's output_dir and its manifest's sha256 as bytes; every
read gives back the path and hex the job printed (migrations 0014 and 0015 bring older rows there)."""

from __future__ import annotations

from jobtrail.ledger.codec import full_path, stored_path
from jobtrail.ledger.db import connect, migrate
from jobtrail.ledger.store import Ledger
from jobtrail.models import CheckpointRecord
from support.records import add_queued_run

MANIFEST = "c0" * 32


def _committed(path: str, step: int) -> CheckpointRecord:
    return CheckpointRecord(path=path, step=step, state="committed", manifest_sha256=MANIFEST, updated_at=1.0)


def _ingest(ledger: Ledger, attempt_id: str, *checkpoints: CheckpointRecord) -> None:
    offset = ledger.get_attempt(attempt_id).log_offset
    ledger.ingest(attempt_id, from_offset=offset, to_offset=offset + 1, events=[], fields={}, checkpoints=checkpoints)


def test_paths_below_the_output_dir_are_kept_short_and_read_back_whole(ledger_location):
    ledger = Ledger(ledger_location)
    add_queued_run(ledger, "jt-local001")  # output_dir /runs/jt-local001/output
    add_queued_run(ledger, "jt-remote01", backend="hf-jobs", output_dir="jobtrail-output")
    printed = {
        "jt-local001/1": ["/runs/jt-local001/output/checkpoint-10", "/runs/jt-local001/output/final", "/else/x"],
        "jt-remote01/1": ["jobtrail-output/checkpoint-10"],
    }
    for attempt_id, paths in printed.items():
        _ingest(ledger, attempt_id, *(_committed(path, 10) for path in paths))
    conn = ledger._conn()
    stored = {row["path"] for row in conn.execute("SELECT path FROM checkpoints").fetchall()}
    assert stored == {"checkpoint-10", "final", "/else/x", "jobtrail-output/checkpoint-10"}
    for attempt_id, paths in printed.items():
        read = ledger.checkpoints(attempt_id)
        assert sorted(c.path for c in read) == sorted(paths) and {c.manifest_sha256 for c in read} == {MANIFEST}
    assert {c.path for c in ledger.committed_checkpoints("jt-local001")} == set(printed["jt-local001/1"])
    raw = conn.execute("SELECT manifest_sha256 AS m FROM checkpoints").fetchone()["m"]
    assert bytes(raw) == bytes.fromhex(MANIFEST)


def test_a_manifest_digest_that_is_no_sha256_is_not_kept(ledger_location):
    ledger = Ledger(ledger_location)
    add_queued_run(ledger, "jt-odd00001")
    _ingest(ledger, "jt-odd00001/1", CheckpointRecord(path="/p/c", step=1, state="committed",
                                                      manifest_sha256="not-a-digest", updated_at=1.0))  # fmt: skip
    [checkpoint] = ledger.checkpoints("jt-odd00001/1")
    assert checkpoint.path == "/p/c" and checkpoint.manifest_sha256 is None


def test_only_a_path_below_an_absolute_output_dir_is_cut():
    assert (
        stored_path("/o", "/o/checkpoint-1") == "checkpoint-1" and full_path("/o", "checkpoint-1") == "/o/checkpoint-1"
    )
    assert stored_path("/o", "/other/c") == "/other/c" and full_path("/o", "/other/c") == "/other/c"
    assert stored_path("/o", "/o/") == "/o/" and stored_path("/o", "/ox/c") == "/ox/c"
    assert stored_path("out", "out/c") == "out/c" and full_path("out", "out/c") == "out/c"
    assert stored_path(None, "/o/c") == "/o/c" and full_path(None, "c") == "c"


def test_migration_0015_cuts_the_paths_written_before_it(ledger_location):
    ledger = Ledger(ledger_location)
    add_queued_run(ledger, "jt-before01")
    whole = ["/runs/jt-before01/output/checkpoint-5", "/runs/jt-before01/output/final"]
    _ingest(ledger, "jt-before01/1", *(_committed(path, 5) for path in whole))
    conn = connect(ledger_location)
    for path in whole:  # as the ledger kept them before 0015: whole
        conn.execute("UPDATE checkpoints SET path = ? WHERE path = ?", (path, path.rsplit("/", 1)[1]))
    conn.execute("DELETE FROM migrations WHERE name = '0015_checkpoint_paths_below_output_dir'")
    assert migrate(conn) == ["0015_checkpoint_paths_below_output_dir"]
    assert {r["path"] for r in conn.execute("SELECT path FROM checkpoints").fetchall()} == {"checkpoint-5", "final"}
    assert [c.path for c in ledger.checkpoints("jt-before01/1")] == whole
