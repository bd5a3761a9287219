"""Content-addressed storage: scripts cut at lines their content chooses, each chunk stored once; packed
events; reads that come back byte for byte or fail."""

from __future__ import annotations

import hashlib
import random

import pytest

from jobtrail.ledger import blobs, codec
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec
from jobtrail.preflight.plan import job_values
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import render_script
from support.records import add_queued_run


def _script(method: str = "sft", **hyperparameters: object) -> str:
    spec = JobSpec(method=method, model="Qwen/Qwen2.5-0.5B", dataset="org/chat", hyperparameters=hyperparameters)
    return render_script(method, build_config(spec, job_values(spec), None))


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
    assert _stored_bytes(ledger) < 2 * len(codec.pack(scripts[0].encode()))


def test_a_blob_that_no_longer_matches_its_sha256_is_refused(ledger_location):
    ledger = Ledger(ledger_location)
    conn = ledger._conn()
    with ledger.transaction():
        sha = blobs.put_script(conn, "print('hello')\n")
        conn.execute("UPDATE blobs SET data = ?", (codec.pack(b"print('bye')\n"),))
    with pytest.raises(codec.CorruptBlobError):
        ledger.script(sha)
    with pytest.raises(LookupError):
        ledger.script("0" * 64)


def test_packing_round_trips_small_and_large_values():
    rng = random.Random(3)
    for data in (b"", b"x", b"{}", rng.randbytes(300), b"step " * 5000, rng.randbytes(20_000)):
        assert codec.unpack(codec.pack(data)) == data
    with pytest.raises(codec.CorruptBlobError):
        codec.unpack(b"?abc")


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


def test_values_packed_before_the_dictionary_read_back_as_ever():
    """Ledgers written before codec "d" hold zlib ("z") and LZMA ("x") values: they are read, never rewritten."""
    import lzma
    import zlib

    text = b'{"event":"step","time":1795387859.782,"loss":6.6722183}\n' * 200
    assert codec.unpack(b"z" + zlib.compress(text, 9)) == text
    legacy = lzma.compress(text, format=lzma.FORMAT_RAW, filters=codec._LZMA_FILTERS)
    assert codec.unpack(b"x" + legacy) == text
    assert codec.pack(text)[:1] == b"d"


def test_the_dictionary_makes_a_config_snapshot_a_fraction_of_its_zlib_size():
    """What every config repeats is in the dictionary: a snapshot of a job packs to a fraction of zlib's size."""
    import zlib

    from jobtrail.util.digest import config_json

    spec = JobSpec(
        method="dpo",
        model="meta-llama/Llama-3.2-1B",
        dataset="acme/prefs-b",
        backend="hf-jobs",
        flavor="h100",
        hyperparameters={"learning_rate": 5e-6, "max_steps": 300, "lora_r": 64, "beta": 0.2},
    )
    snapshot = config_json(build_config(spec, job_values(spec), "jobtrail-output", push_to="acme/dpo-prefs-b")).encode()
    assert codec.unpack(codec.pack(snapshot)) == snapshot
    assert len(codec.pack(snapshot)) < len(zlib.compress(snapshot, 9)) / 3


def test_the_dictionary_file_is_the_one_values_were_packed_with(tmp_path, monkeypatch):
    """The dictionary is part of the format: a changed file is refused before anything is packed with it."""
    from jobtrail.ledger import dictionary

    assert hashlib.sha256(dictionary.DICTIONARY_FILE.read_bytes()).hexdigest() == dictionary.DICTIONARY_SHA256
    edited = tmp_path / "zstd_dictionary_v1.txt"
    edited.write_bytes(dictionary.DICTIONARY_FILE.read_bytes() + b"\n")
    monkeypatch.setattr(dictionary, "DICTIONARY_FILE", edited)
    dictionary._dictionary.cache_clear()
    try:
        with pytest.raises(dictionary.DictionaryMismatchError):
            dictionary._dictionary()
    finally:
        monkeypatch.undo()
        dictionary._dictionary.cache_clear()


def test_a_script_row_names_its_blocks_and_rows_that_name_every_chunk_still_read(ledger_location):
    """One more script of a template adds a row naming ~5 blocks (the runtime's chunks listed once, shared);
    a row written before blocks (every chunk's digest, in order) reads as it always did."""
    ledger = Ledger(ledger_location)
    conn = ledger._conn()
    first, second = _script(learning_rate=1e-4), _script(learning_rate=3e-4)
    with ledger.transaction():
        blobs.put_script(conn, first)
        sha = blobs.put_script(conn, second)
        found = conn.execute("SELECT chunks FROM scripts WHERE sha256 = ?", (codec.key(sha),)).fetchone()
        row = bytes(found["chunks"])
        legacy = "print('stored before blocks')\n" * 300 + second
        chunks = blobs.put_blobs(conn, blobs.chunk_lines(legacy.encode()))
        legacy_sha = hashlib.sha256(legacy.encode()).hexdigest()
        conn.execute(
            "INSERT INTO scripts (sha256, chunks) VALUES (?, ?)",
            (codec.key(legacy_sha), b"".join(bytes.fromhex(c) for c in chunks)),
        )
        odd = "\0 not python\n" + "x = 1\n" * 2000
        odd_sha = blobs.put_script(conn, odd)
    assert len(blobs.chunk_lines(second.encode())) > 15 and len(row) <= 1 + 6 * blobs.DIGEST_BYTES
    assert blobs.read_script(conn, sha) == second
    assert blobs.read_script(conn, legacy_sha) == legacy and blobs.read_script(conn, odd_sha) == odd


def test_a_new_sqlite_ledger_has_16k_pages(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    assert ledger._conn().execute("PRAGMA page_size").fetchone()[0] == 16384
