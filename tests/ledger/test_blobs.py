"""Content-addressed storage: scripts cut at lines their content chooses, each chunk stored once; packed
events; reads that come back byte for byte or fail."""

from __future__ import annotations

import hashlib
import random

import pytest

from jobtrail.ledger import blobs
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import render_script
from support.records import add_queued_run


def _script(method: str = "sft", **hyperparameters: object) -> str:
    spec = JobSpec(method=method, model="Qwen/Qwen2.5-0.5B", dataset="org/chat", hyperparameters=hyperparameters)
    return render_script(method, build_config(spec, None))


def _stored_bytes(ledger: Ledger) -> int:
    """What the blobs and the scripts' chunk lists hold, packed (LENGTH of a BLOB or BYTEA: its bytes)."""
    conn = ledger._conn()
    data = conn.execute("SELECT COALESCE(SUM(LENGTH(data)), 0) AS n FROM blobs").fetchone()["n"]
    return int(data + conn.execute("SELECT COALESCE(SUM(LENGTH(chunks)), 0) AS n FROM scripts").fetchone()["n"])


def test_chunks_join_back_into_the_text_whatever_its_lines():
    rng = random.Random(7)
    texts = [
        "",
        "no newline at the end",
        "\n\n\n",
        "a\r\nb\rc\n",
        "".join(f"line {rng.random()}\n" for _ in range(5000)),
        "x" * 100_000,  # one line longer than a chunk may be
        _script(),
    ]
    for text in texts:
        chunks = blobs.chunk_lines(text.encode())
        assert b"".join(chunks) == text.encode()
        assert all(len(c) <= blobs.MAX_CHUNK for c in chunks[:-1]) or len(chunks) == 1


def test_two_configs_of_one_template_share_every_chunk_but_their_config():
    first, second = _script(learning_rate=1e-4, max_steps=300), _script(learning_rate=2e-5, lora_r=32)
    a, b = blobs.chunk_lines(first.encode()), blobs.chunk_lines(second.encode())
    assert len(first) > 100_000 and first != second
    differ = set(a) ^ set(b)
    assert len(differ) == 2 and all(b"CONFIG: dict = json.loads(" in chunk for chunk in differ)


def test_an_edit_changes_only_the_chunks_around_it():
    script = _script()
    lines = script.splitlines(keepends=True)
    middle = len(lines) // 2
    edited = "".join([*lines[:middle], "    x = 1  # an edit\n", *lines[middle:]])
    before, after = blobs.chunk_lines(script.encode()), blobs.chunk_lines(edited.encode())
    assert len(set(after) - set(before)) == 1
    assert len(set(before) & set(after)) == len(before) - 1


def test_scripts_come_back_byte_for_byte_and_a_second_config_costs_little(ledger_location):
    ledger = Ledger(ledger_location)
    scripts = [_script(learning_rate=1e-4), _script(learning_rate=3e-4), _script("dpo", beta=0.2)]
    for number, script in enumerate(scripts, 1):
        before = _stored_bytes(ledger)
        add_queued_run(ledger, f"jt-blob000{number}", script=script)
        added = _stored_bytes(ledger) - before
        if number == 2:  # the same template again: its config's chunk and its list of chunks
            assert added < 2000
        sha256 = hashlib.sha256(script.encode()).hexdigest()
        assert ledger.get_attempt(f"jt-blob000{number}/1").script_sha256 == sha256
        assert ledger.script(sha256) == script
    # three scripts of ~120 KB (two templates) take less room than two of them compressed whole
    assert _stored_bytes(ledger) < 2 * len(blobs.pack(scripts[0].encode()))


def test_a_blob_that_no_longer_matches_its_sha256_is_refused(ledger_location):
    ledger = Ledger(ledger_location)
    conn = ledger._conn()
    with ledger.transaction():
        sha = blobs.put_script(conn, "print('hello')\n")
        conn.execute("UPDATE blobs SET data = ?", (blobs.pack(b"print('bye')\n"),))
    with pytest.raises(blobs.CorruptBlobError):
        ledger.script(sha)
    with pytest.raises(LookupError):
        ledger.script("0" * 64)


def test_packing_round_trips_small_and_large_values():
    rng = random.Random(3)
    for data in (b"", b"x", b"{}", rng.randbytes(300), b"step " * 5000, rng.randbytes(20_000)):
        assert blobs.unpack(blobs.pack(data)) == data
    with pytest.raises(blobs.CorruptBlobError):
        blobs.unpack(b"?abc")


def test_an_attempt_planned_again_names_its_new_script_and_config_and_a_wrong_sha256_is_refused(ledger_location):
    ledger = Ledger(ledger_location)
    add_queued_run(ledger, "jt-again001", script=_script(learning_rate=1e-4))
    script, config = _script(learning_rate=2e-4), {"template": "sft", "learning_rate": 2e-4}
    sha256 = hashlib.sha256(script.encode()).hexdigest()
    ledger.update_attempt("jt-again001/1", script=script, script_sha256=sha256, config=config)
    planned = ledger.get_attempt("jt-again001/1")
    assert planned.script_sha256 == sha256 and ledger.script(sha256) == script and planned.config == config
    with pytest.raises(ValueError, match="config_sha256"):
        ledger.update_attempt("jt-again001/1", config={"other": 1}, config_sha256=planned.config_sha256)
