"""Files and folders only their owner can read: everything under $JOBTRAIL_HOME (the ledger, scripts,
logs, the jobs' outputs) holds the user's data and sometimes their model, whatever the umask.

Modes are set explicitly (creation modes pass through the umask, and a file that already exists
keeps its mode), so a folder is 0700 and a file 0600 however the process was started.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Any

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents as 0700 folders, or make an existing `path` 0700; return it.

    Only folders jobtrail owns are passed here (its home and what is below it); folders above a
    missing one are left as they are.
    """
    missing = []
    current = path
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # created meanwhile by another process: made private all the same
            folder.mkdir(mode=PRIVATE_DIR)
        os.chmod(folder, PRIVATE_DIR)
    if path.stat().st_mode & 0o777 != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR)
    return path


def private_open(path: Path, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` for a file only its owner can read, new or not ("w", "a", "x", binary too)."""
    flags = os.O_WRONLY | os.O_CREAT
    if "a" in mode:
        flags |= os.O_APPEND
    elif "x" in mode:
        flags |= os.O_EXCL
    else:
        flags |= os.O_TRUNC
    descriptor = os.open(path, flags, PRIVATE_FILE)
    try:
        os.fchmod(descriptor, PRIVATE_FILE)
        return open(descriptor, mode, **kwargs)
    except BaseException:
        os.close(descriptor)
        raise


def write_private(path: Path, content: str | bytes) -> Path:
    """Write a whole file that only its owner can read; return its path."""
    if isinstance(content, bytes):
        with private_open(path, "wb") as f:
            f.write(content)
    else:
        with private_open(path, "w", encoding="utf-8") as f:
            f.write(content)
    return path


def make_private(path: Path) -> None:
    """Narrow an existing file (or folder) to its owner; a missing one is left alone."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(path, PRIVATE_DIR if path.is_dir() else PRIVATE_FILE)
