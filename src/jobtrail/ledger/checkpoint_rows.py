"""A checkpoint as its row keeps it: its path below its attempt's output_dir, its manifest's sha256 as bytes.

A local attempt's checkpoints are `<output_dir>/checkpoint-N` and `<output_dir>/final`, output_dir an absolute
path under $JOBTRAIL_HOME (~50 characters) that the attempt's row already holds: each checkpoint row (3 or 4 an
attempt, each also in the key's index) keeps only what follows it. Only a path below an ABSOLUTE output_dir is
cut, so a stored path that is relative where the output_dir is absolute is always one that was cut; a remote
attempt's paths ("jobtrail-output/...", relative to its machine) are kept whole.

The manifest's sha256 is kept as its 32 bytes (migration 0014). A job prints it: a value that is no sha256 is
not kept (NULL), and the checkpoint event still holds what was printed.
"""

from __future__ import annotations

import re
from typing import Any

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

# Migration 0015, the same cut in SQL (both engines): paths written before it are whole.
CUT_PATHS = """
    UPDATE checkpoints SET path = substr(path, length(a.output_dir) + 2)
    FROM attempts a
    WHERE a.attempt_id = checkpoints.attempt_id AND a.output_dir LIKE '/%'
      AND substr(checkpoints.path, 1, length(a.output_dir) + 1) = a.output_dir || '/'
"""


def _cuts(output_dir: str | None) -> bool:
    return bool(output_dir) and str(output_dir).startswith("/")


def stored_path(output_dir: str | None, path: str) -> str:
    prefix = f"{output_dir}/"
    return path[len(prefix) :] if _cuts(output_dir) and path.startswith(prefix) and len(path) > len(prefix) else path


def full_path(output_dir: str | None, stored: str) -> str:
    return f"{output_dir}/{stored}" if _cuts(output_dir) and not stored.startswith("/") else stored


def manifest_key(digest: str | None) -> bytes | None:
    return bytes.fromhex(digest) if digest is not None and _SHA256_HEX.fullmatch(digest) else None


def manifest_hex(stored: Any) -> str | None:
    return None if stored is None else bytes(stored).hex()
