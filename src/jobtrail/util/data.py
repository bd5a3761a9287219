"""JSON files: the bundled tables in jobtrail/data/ (facts re-derived from installed packages by tests),
and a model directory's config files."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parents[1]
DATA_DIR = PACKAGE_DIR / "data"


def data_path(name: str) -> Path:
    return DATA_DIR / name


def shipped_dir(name: str, marker: str) -> Path | None:
    """A folder the wheel ships inside the package (scripts/, references/), else the source checkout's top-level
    one: the first that holds the file `marker`; None when neither does."""
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parents[1] / name):
        if (candidate / marker).is_file():
            return candidate
    return None


@cache
def load_table(name: str) -> Any:
    return json.loads(data_path(name).read_text())


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`; None when the file is missing, unreadable or holds something else."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
        return None
    return data if isinstance(data, dict) else None
