"""The bundled JSON tables in jobtrail/data/ (facts re-derived from installed packages by tests)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def data_path(name: str) -> Path:
    return DATA_DIR / name


@cache
def load_table(name: str) -> Any:
    return json.loads(data_path(name).read_text())
