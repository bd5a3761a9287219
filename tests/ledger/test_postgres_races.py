"""One PostgreSQL ledger, several processes at once (servers on different machines, in effect): migrating a new
database, dispatching under a concurrency limit and submitting with one idempotency key each hold, because
every writer takes the ledger's advisory lock (connection.py). Without it each of these races breaks: two
CREATE TABLEs of one name, more claims than the limit, a unique-key violation instead of the first run's id.

The racers import everything, say they are ready, and start together when the go file appears.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from jobtrail.ledger.connection import opener
from jobtrail.ledger.db import MIGRATIONS
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobStatus, TerminationReason
from support.records import add_ended_run, add_queued_run
from support.waiting import wait_for

RACERS = 6
_START_TOGETHER = """
import json, sys, time
from pathlib import Path
import psycopg
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec, NewAttempt, RunRecord
from jobtrail.util.digest import config_json, sha256_text
ready, go, url, me = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ready.touch()
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.001)
"""


def _race(tmp_path: Path, url: str, body: str) -> list[str]:
    """Run `body` in RACERS processes released at once (`url`, `me`: the ledger, the racer's number); their
    outputs, each racer's last line."""
    go = tmp_path / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _START_TOGETHER + body, str(tmp_path / f"ready-{n}"), str(go), url, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(RACERS)
    ]
    try:
        wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == RACERS, 120, "the racers to be ready")
    finally:
        go.touch()
    outputs = [racer.communicate(timeout=120) for racer in racers]
    failed = [err for racer, (_, err) in zip(racers, outputs, strict=True) if racer.returncode != 0]
    assert not failed, failed[0]
    return [out.strip().splitlines()[-1] for out, _ in outputs]


def test_processes_migrating_one_new_database_at_once_apply_each_migration_once(tmp_path, postgres_url):
    _race(tmp_path, postgres_url, "Ledger(url)\nprint('ok')")
    conn = opener(postgres_url)()
    names = [r["name"] for r in conn.execute("SELECT name FROM migrations ORDER BY name").fetchall()]
    assert names == [name for name, _ in MIGRATIONS]


def test_processes_claiming_slots_at_once_never_pass_the_limit(tmp_path, postgres_url):
    ledger, limit, queued = Ledger(postgres_url), 3, 12
    add_ended_run(ledger, "jt-ended", TerminationReason.SUCCEEDED)  # an ended attempt holds no slot
    for n in range(queued):
        add_queued_run(ledger, f"jt-q{n:02d}")
    # Each racer starts with a different attempt, so all of them count the free slots at the same moment.
    claims = _race(
        tmp_path,
        postgres_url,
        f"ledger = Ledger(url)\nids = [f'jt-q{{n:02d}}/1' for n in range({queued})]\n"
        f"print(json.dumps([ledger.claim_slot(i, 'local', {limit}) for i in ids[me:] + ids[:me]]))",
    )
    outcomes = [outcome for line in claims for outcome in json.loads(line)]
    assert outcomes.count("claimed") == limit
    starting = [a for a in ledger.attempts_in([JobStatus.STARTING.value]) if a.run_id.startswith("jt-q")]
    assert len(starting) == limit


def test_processes_submitting_one_idempotency_key_at_once_make_one_run(tmp_path, postgres_url):
    Ledger(postgres_url)  # migrated before the race: the race is the submissions'
    answers = _race(
        tmp_path,
        postgres_url,
        "spec = JobSpec(method='sft', model='/m', dataset='/d.jsonl')\n"
        "run = RunRecord(run_id=f'jt-racer{me}', created_at=1.0, method='sft', model='/m', dataset='/d.jsonl',"
        " backend='local', spec=spec, idempotency_key='k-1')\n"
        "attempt = NewAttempt(attempt_id=f'jt-racer{me}/1', run_id=run.run_id, number=1, status='queued',"
        " created_at=1.0, backend='local', config={}, config_sha256=sha256_text(config_json({})), script='',"
        " script_sha256=sha256_text(''), output_dir='/o')\n"
        "print(json.dumps(Ledger(url).add_run(run, attempt, {'method': 'sft'})))",
    )
    held = Ledger(postgres_url).run_by_idempotency_key("k-1")
    assert held is not None
    winner = held[0].run_id
    assert sorted(json.loads(a) for a in answers if a != "null") == [winner] * (RACERS - 1)
    assert answers.count("null") == 1
