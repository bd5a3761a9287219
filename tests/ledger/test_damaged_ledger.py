"""A damaged ledger is never written to (issue 28 item 6): the server and every command stop with the way back,
`jobtrail ledger export` saves what it still holds and `import` starts again from it, and `serve --read-only`
reads it meanwhile. A ledger a newer jobtrail migrated is refused the same way, on both engines.

The damage is the issue's: 4 KiB of random bytes written over part of the file (a page of event packs, the
header, or added at the end). Commands run as a person runs them, `python -m jobtrail` in a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.ledger.db import LedgerDamaged, check
from jobtrail.ledger.store import Ledger
from jobtrail.models import TerminationReason
from support.records import add_ended_run

RUNS = 30
GARBAGE = 4096


def _filled(path: Path) -> None:
    """RUNS ended runs, each with three packs of events holding 4 KB of random text: the event packs span pages
    of their own, apart from their key's index."""
    ledger = Ledger(path)
    draw = random.Random(0)
    for n in range(RUNS):
        add_ended_run(ledger, f"jt-saved{n:03d}", TerminationReason.SUCCEEDED)
        for pack in range(3):
            noise = draw.randbytes(3000).hex()
            events = [{"event": "step", "time": 1.0 + pack, "step": pack + 1, "loss": 2.0, "noise": noise}]
            ledger.ingest(
                f"jt-saved{n:03d}/1", from_offset=pack, to_offset=pack + 1, events=events, fields={}, checkpoints=[]
            )
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself, where the damage goes
    conn.close()


def _damage(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(random.Random(1).randbytes(GARBAGE))


def _an_events_page(path: Path) -> int:
    """The byte offset of a page in the middle of the event packs' rows."""
    conn = sqlite3.connect(path)
    pages = [n for (n,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'event_packs' AND pagetype = 'leaf'")]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    assert len(pages) > 10, pages
    return (sorted(pages)[len(pages) // 2] - 1) * size


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def jobtrail(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k not in ("JOBTRAIL_LEDGER_URL", "JOBTRAIL_READ_ONLY")}
    env["JOBTRAIL_HOME"] = str(tmp_path / "home")

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jobtrail", *args]
        return subprocess.run(
            command, env=env | extra, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )

    return run


def test_a_damaged_ledger_stops_the_server_and_every_command_with_the_way_back(tmp_path: Path, jobtrail) -> None:
    ledger = tmp_path / "home" / "ledger.sqlite"
    _filled(ledger)
    _damage(ledger, _an_events_page(ledger))
    before = _digest(ledger)
    for command in (("serve",), ("ps",), ("inspect", "jt-saved000"), ("ledger", "check")):
        done = jobtrail(*command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        said = done.stderr
        assert f"The ledger {ledger} is damaged: " in said, said
        assert "jobtrail does not write to it." in said and "failed unexpectedly" not in said
        assert "`jobtrail ledger export saved.jsonl`" in said and "`jobtrail ledger import saved.jsonl`" in said
        assert f"`mv {ledger} {ledger}.damaged`" in said and "`jobtrail serve --read-only`" in said
    assert _digest(ledger) == before  # not a byte written, by any of them


def test_export_saves_what_a_damaged_ledger_holds_and_import_starts_again_from_it(tmp_path: Path, jobtrail) -> None:
    ledger = tmp_path / "home" / "ledger.sqlite"
    _filled(ledger)
    _damage(ledger, _an_events_page(ledger))
    before = _digest(ledger)
    saved = tmp_path / "saved.jsonl"
    exported = jobtrail("ledger", "export", str(saved))
    assert exported.returncode == 1, exported.stderr  # something could not be read, and it says so
    assert f"runs {RUNS}, attempts {RUNS}," in exported.stdout
    lost = re.search(
        r"  event_packs: (\d+) rows \(database disk image is malformed\) could not be read\.", exported.stdout
    )
    assert lost and 0 < int(lost[1]) < RUNS, exported.stdout  # the rows of one page, not the table
    assert _digest(ledger) == before
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):  # the way back, as the refusal says
        if (ledger.parent / name).exists():
            (ledger.parent / name).rename(ledger.parent / f"{name}.damaged")
    imported = jobtrail("ledger", "import", str(saved), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["tables"]["attempts"]["inserted"] == RUNS
    listed = jobtrail("ps", "--json", "--limit", "100")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["jobs"]) == RUNS
    assert jobtrail("ledger", "check").stdout.startswith(f"The ledger {ledger} is sound.")


def test_serve_read_only_reads_a_damaged_ledger_without_writing_it(tmp_path: Path, jobtrail, monkeypatch) -> None:
    ledger = tmp_path / "home" / "ledger.sqlite"
    _filled(ledger)
    _damage(ledger, _an_events_page(ledger))
    before = _digest(ledger)
    listed = jobtrail("ps", "--json", "--limit", "100", JOBTRAIL_READ_ONLY="1")
    assert listed.returncode == 0, listed.stderr
    result = json.loads(listed.stdout)
    assert len(result["jobs"]) == RUNS and "The ledger is open read-only" in result["note"]
    monkeypatch.setenv("JOBTRAIL_READ_ONLY", "1")
    service = build_service(tmp_path / "home")
    for job in result["jobs"]:  # every receipt reads, its events where their pages still make sense
        assert service.inspect(job["job_id"]).status == "succeeded"
    assert _digest(ledger) == before


@pytest.mark.parametrize(
    ("where", "said", "readable"),
    [
        (0, "it is not a SQLite database (its header is not SQLite's)", False),
        (None, "bytes were added or cut", True),  # None: 4 KiB added at the end
    ],
)
def test_a_header_or_a_size_that_is_not_sqlites_is_refused(
    tmp_path: Path, where: int | None, said: str, readable: bool
) -> None:
    ledger = tmp_path / "ledger.sqlite"
    _filled(ledger)
    _damage(ledger, ledger.stat().st_size if where is None else where)
    before = _digest(ledger)
    with pytest.raises(LedgerDamaged) as refused:
        Ledger(ledger)
    assert said in refused.value.message
    assert ("jobtrail ledger export saved.jsonl" in (refused.value.fix or "")) is readable
    assert _digest(ledger) == before


def test_a_ledger_a_newer_jobtrail_migrated_is_not_written(ledger_location: Path | str) -> None:
    ledger = Ledger(ledger_location)
    with ledger.transaction() as conn:
        conn.execute("INSERT INTO migrations (name, applied_at) VALUES ('9999_from_the_future', 0)")
    with pytest.raises(LedgerDamaged) as refused:
        check(ledger_location)
    assert "migrated by a newer jobtrail (migrations this one does not know: 9999_from_the_future)" in str(
        refused.value
    )
    with pytest.raises(LedgerDamaged):
        Ledger(ledger_location)
    assert Ledger(ledger_location, read_only=True).list_runs(None, 5) == []  # read-only still reads it
