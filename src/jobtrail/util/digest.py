"""Fingerprints: the canonical JSON of a config snapshot and the sha256 of a text.

The renderer bakes the canonical JSON into a job's script and the ledger stores configs and scripts by these
sha256s, so both layers take them from here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def config_json(config: dict[str, Any]) -> str:
    """Canonical JSON of a job config: the immutable snapshot whose sha256 the ledger keeps."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
