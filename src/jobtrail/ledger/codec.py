"""How a ledger row holds its values today: the bytes every read and write goes through.

- A JSON receipt is its compact JSON, keys in the order they came (json_bytes); a config is its canonical JSON
  (util/digest.config_json), whose sha256 the receipt names.
- Packed bytes start with their codec: zstd with the ledger's dictionary (dictionary.py) is what is written,
  plain bytes where that is no smaller; zlib and LZMA are what ledgers written before it hold, read as ever.
- An attempt's own receipts (PACKED_FIELDS: placement, last metrics, summary) are packed JSON in its row (~200
  bytes where their JSON takes ~600: the dictionary holds their keys). No query reads into them; what SQL groups
  or sums on has columns of its own.
- A sha256 the ledger computes itself (a blob's, a script's, and the columns naming them) is its 32 bytes where
  its hex takes 64 (key); records and tool results show the hex (hex_of).
- A checkpoint keeps its path below its attempt's output_dir and its manifest's sha256 as bytes. A local
  attempt's checkpoints are `<output_dir>/checkpoint-N` and `<output_dir>/final`, output_dir an absolute path
  under $JOBTRAIL_HOME (~50 characters) that the attempt's row already holds: each checkpoint row (3 or 4 an
  attempt, each also in the key's index) keeps only what follows it. Only a path below an ABSOLUTE output_dir
  is cut, so a stored path that is relative where the output_dir is absolute is always one that was cut; a
  remote attempt's paths ("jobtrail-output/...", relative to its machine) are kept whole. A job prints the
  manifest's sha256: a value that is no sha256 is not kept (NULL), and the checkpoint event still holds it.

The migrations that brought older rows to this form (compact_receipts, packed_receipts, binary_digests, and
0015 in db.py) hold only their steps.
"""

from __future__ import annotations

import json
import lzma
import re
import zlib
from typing import Any

from jobtrail.ledger import dictionary

# Packed bytes start with their codec ("d", zstd with the dictionary, is written). The filter chain is part of
# the format: a packed value names no filters, so they may never change for codec "x".
_RAW, _ZLIB, _LZMA, _ZSTD_V1 = b"-", b"z", b"x", b"d"
_LZMA_FILTERS: list[dict[str, Any]] = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": 1 << 16}]
PACKED_FIELDS = ("placement", "last_metrics", "summary")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class CorruptBlobError(RuntimeError):
    """Stored bytes that cannot be read back: an unknown codec, bytes that no longer match their sha256, or a chunk
    a script names that is missing."""


def json_bytes(value: Any) -> bytes:
    """The bytes a JSON receipt is stored as (its keys in the order they came)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def pack(data: bytes) -> bytes:
    squeezed = dictionary.compress(data)
    return _ZSTD_V1 + squeezed if len(squeezed) < len(data) else _RAW + data


def unpack(packed: bytes) -> bytes:
    codec, body = packed[:1], packed[1:]
    if codec == _ZSTD_V1:
        return dictionary.decompress(body)
    if codec == _ZLIB:
        return zlib.decompress(body)
    if codec == _LZMA:
        return lzma.decompress(body, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    if codec == _RAW:
        return bytes(body)
    raise CorruptBlobError(f"unknown codec {codec!r}")


def packed(value: Any) -> bytes | None:
    """One of an attempt's PACKED_FIELDS as its column holds it."""
    return None if value is None else pack(json_bytes(value))


def unpacked(raw: bytes | None) -> Any:
    return None if raw is None else json.loads(unpack(bytes(raw)))


def key(digest: str) -> bytes:
    """A sha256 as the ledger stores it: its 32 bytes."""
    return bytes.fromhex(digest)


def hex_of(stored: bytes | memoryview) -> str:
    return bytes(stored).hex()


def _cuts(output_dir: str | None) -> bool:
    return bool(output_dir) and str(output_dir).startswith("/")


def stored_path(output_dir: str | None, path: str) -> str:
    """A checkpoint's path as its row keeps it."""
    prefix = f"{output_dir}/"
    return path[len(prefix) :] if _cuts(output_dir) and path.startswith(prefix) and len(path) > len(prefix) else path


def full_path(output_dir: str | None, stored: str) -> str:
    return f"{output_dir}/{stored}" if _cuts(output_dir) and not stored.startswith("/") else stored


def manifest_key(digest: str | None) -> bytes | None:
    """A checkpoint's manifest sha256 as its row keeps it (None: the job printed no sha256)."""
    return bytes.fromhex(digest) if digest is not None and _SHA256_HEX.fullmatch(digest) else None


def manifest_hex(stored: Any) -> str | None:
    return None if stored is None else bytes(stored).hex()
