"""An HF Jobs attempt's log as the server copies it from the job's log stream: capped like a local job's, its
events kept apart.

HF Jobs has one stream for everything a job prints. The follower (hf_jobs.py) writes each line it receives
the way a local job's pump does (logpump.py): to job.log through the same CappedLog (its head, a rolling tail,
the middle dropped and marked at JOBTRAIL_LOG_MAX_BYTES), and its event, if it has one, to job.events, never
capped. The same reader (joblog.py) then answers `logs` and ingestion, with byte cursors, in bounded reads.

A follower starts again after a dropped stream, and in each new server process; the stream replays the job's
log from its first line. What was copied already is known from the files alone: the cursor where the copy ends
(CappedLog.reopen). Lines are skipped until their bytes reach it; redaction is the same in every process (the
same secrets), so the bytes match. An event is written before its line reaches the log, so a process that
stopped between the two wrote that event already: the first event after a reopen is dropped when it is the
same line as job.events' last (every event carries its time, so two never are). One follower at a time copies
an attempt's log (follower_lock): servers sharing a home would otherwise both append to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from jobtrail.backends import logpump
from jobtrail.util.redaction import Redactor

LAST_EVENT_BYTES = 1 << 16  # how far back from job.events' end its last line is looked for
LOCK = "job.log.lock"


class StreamCopy:
    """One follower's writer: feed() each stream the job's log is read from, close() once the job has ended."""

    def __init__(self, workdir: Path, max_bytes: int, redact: Redactor) -> None:
        self.redact = redact
        # job.events first: a reader that finds job.log without it reads the events from job.log (joblog.py).
        events = workdir / logpump.EVENTS
        self.events_fd = os.open(events, os.O_WRONLY | os.O_CREAT | os.O_APPEND, logpump.PRIVATE_FILE)
        self.unconfirmed: bytes | None = _last_line(events)
        self.log = logpump.CappedLog.reopen(workdir, max_bytes)

    def feed(self, stream: Iterable[str]) -> None:
        """Copy the lines of a stream that replays the log from its first line: those past what is copied."""
        skip = self.log.written
        for line in stream:
            data = (self.redact(line.rstrip("\n")) + "\n").encode("utf-8", "replace")
            if skip >= len(data):
                skip -= len(data)
                continue
            data, skip = data[skip:], 0  # the rest of a line a stopped process copied in part
            at = data.find(logpump.EVENT_MARK)
            if at >= 0 and data[at:] != self.unconfirmed:
                logpump.write_all(self.events_fd, data[at:])
            self.unconfirmed = None  # only the first line after the copy's end may have its event written
            self.log.write(data)

    def close(self) -> None:
        """The job has ended and its whole log is copied: job.log becomes one file (head, marker, tail)."""
        try:
            self.log.close()
        finally:
            os.close(self.events_fd)

    def abandon(self) -> None:
        """Stop copying and leave the log unfinished: a later follower goes on from the files."""
        try:
            self.log.detach()
        finally:
            os.close(self.events_fd)


@contextlib.contextmanager
def follower_lock(workdir: Path) -> Iterator[bool]:
    """Whether this process may copy the attempt's log now (an exclusive lock, released when it stops)."""
    fd = os.open(workdir / LOCK, os.O_WRONLY | os.O_CREAT, logpump.PRIVATE_FILE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def finished(workdir: Path) -> bool:
    """Whether a follower already closed this copy (it then marks it complete; it may have stopped first)."""
    layout = logpump.read_layout(workdir)
    return bool(layout and layout.get("final"))


def _last_line(path: Path) -> bytes | None:
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - LAST_EVENT_BYTES))
        tail = f.read()
    if not tail.endswith(b"\n"):
        return None
    return tail[tail.rfind(b"\n", 0, len(tail) - 1) + 1 :]
