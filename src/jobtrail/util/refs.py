"""Telling a local path from a Hub id: 'data/train.jsonl' or './model' versus 'org/name'."""

from __future__ import annotations

import re
from pathlib import Path

DATA_EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# A jobtrail job id ('jt-4f9k2m7q'): no Hub model or dataset is named like this, so text of this shape meant a job.
JOB_ID = re.compile(r"jt-[0-9a-z]+", re.IGNORECASE)


def looks_local(ref: str) -> bool:
    """A path the user meant as a file or directory, as opposed to a Hub id like 'org/name'."""
    return (
        ref.startswith(("/", "./", "../", "~"))
        or ref.endswith(DATA_EXTENSIONS)
        or Path(ref).expanduser().exists()
        or not HUB_ID.match(ref)
    )
