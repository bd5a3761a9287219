"""Reading a local attempt's log and events as the supervisor's pump (logpump.py) leaves them.

A cursor is a position in everything the job printed. The log is a list of pieces, each a span of cursors:
the head (job.log from 0), the marker (where the middle was dropped: one line, whatever the span), and the
tail (the rotating parts while the job runs; the end of job.log once it has ended). A read never crosses
a piece, so each is read as one plain file; the next read starts in the next piece.

Reads are bounded (MAX_LOG_CHUNK, TAIL_BYTES), so answering `logs` costs the same for a log of a kilobyte
or of a gigabyte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from jobtrail.backends import logpump
from jobtrail.models import LogChunk

MAX_LOG_CHUNK = 1 << 20
TAIL_BYTES = 4 << 20  # how far back from the end the last lines are looked for
_RETRIES = 3  # a part may be removed between listing it and opening it: the layout is then final


@dataclass(frozen=True)
class _Piece:
    start: int  # the cursor of its first byte
    end: int  # the cursor just past it
    path: Path | None  # None: the marker, one line standing for [start, end)
    at: int = 0  # where `start` is in the file
    closed: bool = True  # nothing more will be appended to it
    marker: bytes = b""


class _Moved(Exception):
    """A part went away while it was being read (the pump joined the log); read the layout again."""


def read(workdir: Path, offset: int, max_lines: int | None, finished: bool) -> LogChunk:
    """Whole lines from `offset` on, within one piece (see the module docstring)."""
    for _ in range(_RETRIES):
        try:
            return _read(_pieces(workdir, finished), offset, max_lines)
        except _Moved:
            continue
    return LogChunk(lines=[], offset=offset)


def tail(workdir: Path, count: int, finished: bool) -> LogChunk:
    """The last `count` lines (looked for within TAIL_BYTES of the end); the offset is where the next one starts."""
    for _ in range(_RETRIES):
        try:
            return _tail(_pieces(workdir, finished), count)
        except _Moved:
            continue
    return LogChunk(lines=[], offset=0)


def read_events(workdir: Path, offset: int, finished: bool) -> LogChunk:
    """Lines from job.events, the uncapped channel of event lines; an attempt started by a supervisor that kept
    none (before the pump) has all of them in job.log, which was never capped then."""
    path = workdir / logpump.EVENTS
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return read(workdir, offset, None, finished)
    return _read([_Piece(0, size, path, closed=finished)], offset, None)


def _pieces(workdir: Path, finished: bool) -> list[_Piece]:
    log = workdir / logpump.LOG
    layout = logpump.read_layout(workdir)
    try:
        size = log.stat().st_size
    except FileNotFoundError:
        return []
    if layout is None:
        return [_Piece(0, size, log, closed=finished)]
    head = layout["head"]
    pieces = [_Piece(0, head, log)]
    if layout.get("final"):
        resume, marker = layout["resume"], layout["marker"]
        if resume > head:
            with open(log, "rb") as f:
                f.seek(head)
                pieces.append(_Piece(head, resume, None, marker=f.read(marker)))
        return [*pieces, _Piece(resume, resume + size - head - marker, log, at=head + marker)]
    prefix = logpump.PART_PREFIX
    starts = sorted(int(name[len(prefix) :]) for name in os.listdir(workdir) if name.startswith(prefix))
    first = starts[0] if starts else head
    if first > head:
        text = logpump.marker_line(first - head, None, head, layout.get("max_bytes"))
        pieces.append(_Piece(head, first, None, marker=text))
    for i, start in enumerate(starts):
        try:
            part_size = (workdir / logpump.part_name(start)).stat().st_size
        except FileNotFoundError as exc:
            raise _Moved from exc
        last = i == len(starts) - 1
        pieces.append(_Piece(start, start + part_size, workdir / logpump.part_name(start), closed=finished or not last))
    return pieces


def _read(pieces: list[_Piece], offset: int, max_lines: int | None) -> LogChunk:
    end = pieces[-1].end if pieces else 0
    piece = next((p for p in pieces if p.start <= offset < p.end), None)
    if piece is None:
        return LogChunk(lines=[], offset=offset, end=end)
    if piece.path is None:  # a cursor anywhere in the dropped part reads the marker, then goes on after it
        return LogChunk(lines=[_text(piece.marker).rstrip("\n")], offset=piece.end, end=end)
    data = _bytes(piece, offset, min(MAX_LOG_CHUNK, piece.end - offset))
    take = _complete_prefix(data, final=piece.closed and offset + len(data) >= piece.end)
    if max_lines is not None:
        take = _first_lines(data, take, max_lines)
    if take == 0:
        return LogChunk(lines=[], offset=offset, end=end)
    return LogChunk(lines=_lines(data[:take]), offset=offset + take, end=end)


def _tail(pieces: list[_Piece], count: int) -> LogChunk:
    if not pieces:
        return LogChunk(lines=[], offset=0, end=0)
    end, budget = pieces[-1].end, TAIL_BYTES
    lines: list[str] = []
    after: int | None = None  # where the line after the last one returned starts
    for piece in reversed(pieces):
        if piece.path is None:
            lines.insert(0, _text(piece.marker).rstrip("\n"))
            after = piece.end if after is None else after
        else:
            start = max(piece.start, piece.end - budget)
            data = _bytes(piece, start, piece.end - start)
            budget -= len(data)
            skip = 0 if start == piece.start else data.find(b"\n") + 1 or len(data)  # a line cut by the window
            take = max(_complete_prefix(data, final=piece.closed), skip)
            after = start + take if after is None else after
            lines[:0] = _lines(data[skip:take]) if take > skip else []
        if len(lines) >= count or budget <= 0:
            break
    return LogChunk(lines=lines[-count:], offset=after if after is not None else end, end=end)


def _bytes(piece: _Piece, offset: int, size: int) -> bytes:
    assert piece.path is not None
    try:
        with open(piece.path, "rb") as f:
            f.seek(piece.at + offset - piece.start)
            return f.read(size)
    except FileNotFoundError as exc:
        raise _Moved from exc


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _lines(data: bytes) -> list[str]:
    lines = _text(data).split("\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def _first_lines(data: bytes, take: int, max_lines: int) -> int:
    """Shorten `take` to end right after the first `max_lines` lines, counted in bytes."""
    end = 0
    for _ in range(max_lines):
        newline = data.find(b"\n", end, take)
        if newline < 0:
            return take
        end = newline + 1
    return end


def _complete_prefix(data: bytes, final: bool) -> int:
    """How many bytes of `data` to hand out: whole lines only, unless nothing more will come."""
    if final:
        return len(data)
    cut = data.rfind(b"\n")
    if cut >= 0:
        return cut + 1
    # A line longer than a whole chunk is handed out in pieces rather than never.
    return len(data) if len(data) >= MAX_LOG_CHUNK else 0
