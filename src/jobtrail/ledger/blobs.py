"""Content-addressed storage: what many attempts share is stored once, under the sha256 of its bytes.

    blobs    sha256 → packed bytes (codec.pack): config snapshots, JSON receipts (spec, environment, data manifest,
             findings) and the chunks of scripts
    scripts  sha256 → the sha256s of its chunks, in order

A rendered script is ~120 KB, nearly all of it the job runtime its template inlines; two attempts of one
template differ in their CONFIG line and perhaps their header. So a script is cut into chunks at lines
chosen by their own content (chunk_lines): an edit changes the chunks around it and every other chunk is
the one already stored. What one more attempt adds is its config's chunk and its list of chunks.

The chunking is written here because the content-defined chunkers on PyPI (fastcdc, pyfastcdc) cut bytes
with a rolling hash: a cut may fall inside a line and the chunk holding a changed line is an average chunk
long, and the fast one needs a compiled extension. Cutting between lines, and always before a marked
section (the renderer marks the blocks it fills: `# --- jobtrail:config ---`), keeps the config in a chunk
of its own, in a dozen lines of code.

Every read is checked against its sha256: a script comes back byte for byte as it was stored, or not at all.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from jobtrail.ledger.codec import CorruptBlobError, hex_of, key, pack, unpack

# A cut follows a line whose crc32 has these low bits all zero (1 line in 128: ~4 KB chunks of code),
# once the chunk has MIN_CHUNK bytes; a chunk never grows past MAX_CHUNK.
_CUT_MASK = 0x7F
MIN_CHUNK = 2048
MAX_CHUNK = 32768
_SECTION = b"# --- "  # a line that opens a section of a script always starts a chunk
_BLOCK, _BLOCK_END = b"# --- jobtrail:", b"# --- end jobtrail:"  # ... and one of the renderer's, a block
_CHUNK_LIST = b"\0"
_BLOCKS_ROW = b"b"
DIGEST_BYTES = 32


class Executes(Protocol):
    """What these functions need of a connection: SQL with `?` placeholders, rows read by column name."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chunk_lines(data: bytes) -> list[bytes]:
    """`data` (a script's UTF-8) cut between lines, at cuts its lines choose; b"".join() of the chunks is `data`."""
    lines = data.splitlines(keepends=True)
    # Which lines may end a chunk, by their crc32 (the same on every machine and Python, unlike hash()).
    ends = [zlib.crc32(line) & _CUT_MASK == 0 for line in lines]
    chunks: list[bytes] = []
    start = size = 0
    for at, line in enumerate(lines):
        if at > start and (line.startswith(_SECTION) or size + len(line) > MAX_CHUNK):
            chunks.append(b"".join(lines[start:at]))
            start, size = at, 0
        size += len(line)
        if size >= MIN_CHUNK and ends[at]:
            chunks.append(b"".join(lines[start : at + 1]))
            start, size = at + 1, 0
    if start < len(lines):
        chunks.append(b"".join(lines[start:]))
    return chunks


def put_blobs(conn: Executes, contents: Sequence[bytes]) -> list[str]:
    """Store each content once; return their sha256s, in order. What is stored already is not packed again."""
    digests = [sha256_hex(content) for content in contents]
    held = _held(conn, digests)
    for digest, content in zip(digests, contents, strict=True):
        if digest not in held:
            packed = pack(content)
            conn.execute(
                "INSERT INTO blobs (sha256, data) VALUES (?, ?) ON CONFLICT (sha256) DO NOTHING", (key(digest), packed)
            )
            held.add(digest)
    return digests


def _held(conn: Executes, digests: Sequence[str]) -> set[str]:
    if not digests:
        return set()
    marks = ", ".join("?" for _ in digests)
    rows = conn.execute(f"SELECT sha256 FROM blobs WHERE sha256 IN ({marks})", [key(d) for d in digests]).fetchall()
    return {hex_of(row["sha256"]) for row in rows}


def read_blobs(conn: Executes, digests: Iterable[str]) -> dict[str, bytes]:
    """The contents stored under these sha256s (those missing are left out)."""
    wanted = sorted(set(digests))
    found: dict[str, bytes] = {}
    for start in range(0, len(wanted), 500):  # SQLite allows ~32k parameters; stay far below
        batch = wanted[start : start + 500]
        marks = ", ".join("?" for _ in batch)
        keys = [key(digest) for digest in batch]
        for row in conn.execute(f"SELECT sha256, data FROM blobs WHERE sha256 IN ({marks})", keys).fetchall():
            content, digest = unpack(row["data"]), hex_of(row["sha256"])
            if sha256_hex(content) != digest:
                raise CorruptBlobError(f"blob {digest} does not match its sha256")
            found[digest] = content
    return found


def blocks(chunks: Sequence[bytes]) -> list[list[bytes]]:
    """The chunks grouped by the renderer's blocks: a block starts at each `# --- jobtrail:` or
    `# --- end jobtrail:` line (render.py), so the inlined runtime is one block, the config another."""
    grouped: list[list[bytes]] = []
    for chunk in chunks:
        if not grouped or chunk.startswith(_BLOCK) or chunk.startswith(_BLOCK_END):
            grouped.append([])
        grouped[-1].append(chunk)
    return grouped


def put_script(conn: Executes, script: str) -> str:
    """Store a script as its chunks (each once) and its list of blocks; return its sha256.

    A script's row names one blob a block: the block's chunk if it has one, else a list of its chunks' digests
    (a blob of its own, marked by a leading NUL, which no Python source holds). Scripts of one template share
    the list of the runtime's ~20 chunks, so one more attempt's script adds a row of ~5 names, not ~25."""
    digest = sha256_hex(script.encode())
    if conn.execute("SELECT 1 FROM scripts WHERE sha256 = ?", (key(digest),)).fetchone() is None:
        names = []
        for block in blocks(chunk_lines(script.encode())):
            digests = put_blobs(conn, block)
            if len(digests) > 1 or block[0].startswith(_CHUNK_LIST):  # (a text that is no Python source)
                digests = put_blobs(conn, [_CHUNK_LIST + _raw(digests)])
            names.extend(digests)
        conn.execute(
            "INSERT INTO scripts (sha256, chunks) VALUES (?, ?) ON CONFLICT (sha256) DO NOTHING",
            (key(digest), _BLOCKS_ROW + _raw(names)),
        )
    return digest


def read_script(conn: Executes, digest: str) -> str | None:
    """The script stored under `digest`, byte for byte; None if none is."""
    try:
        row = conn.execute("SELECT chunks FROM scripts WHERE sha256 = ?", (key(digest),)).fetchone()
    except ValueError:  # not a sha256's hex: no script of ours
        return None
    if row is None:
        return None
    names = bytes(row["chunks"])
    if len(names) % DIGEST_BYTES == len(_BLOCKS_ROW):  # a row of blocks; rows written before name every chunk
        names = names[len(_BLOCKS_ROW) :]
    pieces = []
    for part in _read_named(conn, digest, _hex(names)):
        pieces.extend(_read_named(conn, digest, _hex(part[1:])) if part.startswith(_CHUNK_LIST) else [part])
    script = b"".join(pieces)
    if sha256_hex(script) != digest:
        raise CorruptBlobError(f"script {digest} does not match its sha256")
    return script.decode()


def _read_named(conn: Executes, script: str, names: list[str]) -> list[bytes]:
    found = read_blobs(conn, names)
    if len(found) != len(set(names)):
        raise CorruptBlobError(f"script {script} names chunks the ledger does not hold")
    return [found[name] for name in names]


def _raw(digests: Sequence[str]) -> bytes:
    return b"".join(key(digest) for digest in digests)


def _hex(raw: bytes) -> list[str]:
    return [raw[i : i + DIGEST_BYTES].hex() for i in range(0, len(raw), DIGEST_BYTES)]
