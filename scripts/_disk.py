"""jobtrail job-side runtime: a full disk, as the job sees it. Standard library only; inlined before _runtime.py.

_runtime.py's failure rules ask `says_out_of_space` of every exception in a failure's chain, and its termination
event for a full disk carries `disk_full_message` with the path, what is free there (`free_bytes`) and what the next
checkpoint needs, which the server's retry policy compares with the space free when a retry is asked for.
"""

import errno
import os
import re
import shutil
from pathlib import Path

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_WORDS = re.compile(
    r"No space left on device|\[Errno (?:28|122)\]|os error (?:28|122)\b|\bStorageFull\b|[Dd]isk quota exceeded"
)
# torch.save's writer drops the errno: a write cut short reads as a position mismatch, which a full disk leaves and,
# more rarely, a process out of memory while writing. The space left where the job writes decides.
_SHORT_WRITE = re.compile(r"unexpected pos \d+ vs \d+|PytorchStreamWriter failed writing file")


def says_out_of_space(exc: BaseException) -> bool | None:
    """True: the exception says the disk is full (its errno, or a library's words for it); None: a short write,
    which only the space left can tell from another cause; False: neither."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return True
    text = str(exc)
    if _FULL_WORDS.search(text):
        return True
    return None if _SHORT_WRITE.search(text) else False


def written_path(chain: list[BaseException], phase: str | None, writing: Path | None) -> Path | None:
    """The file whose write failed, where an exception of the chain names it; else what the job was writing: the
    Hub cache while it loads the model or the data (`phase`), else `writing` (its checkpoint, or its output)."""
    named = next((e.filename for e in chain if isinstance(e, OSError) and e.filename), None)
    if named:
        return Path(os.fsdecode(named))
    if phase in ("model", "data"):
        return Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser()
    return writing


def free_bytes(path: Path | None) -> int | None:
    """Free bytes on the disk holding `path` (its nearest existing folder); None where it cannot be told."""
    while path is not None and not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free if path is not None else None
    except OSError:
        return None


def disk_full_message(path: Path | None, free: int | None, needed: int | None, described: str) -> str:
    """'No space left on device writing PATH (F free there; a checkpoint of this run takes N): <the exception>'."""
    said = [f"{disk_size(free)} free there" if free is not None else ""]
    said.append(f"a checkpoint of this run takes {disk_size(needed)}" if needed else "")
    details = "; ".join(part for part in said if part)
    where = f" writing {path}" if path else ""
    return f"No space left on device{where}{f' ({details})' if details else ''}: {described}"


def disk_size(n: int) -> str:
    value, unit = float(n), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            break
        value /= 1000
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
