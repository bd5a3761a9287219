"""Python tracebacks read back from a log tail, and how far training got before them. Pure.

A log tail is whatever the backend kept: it may start in the middle of a traceback, carry
`[rank0]: ` prefixes from torchrun, or chain several exceptions ("The above exception was the
direct cause ..."). `last_chain` returns the exceptions of the last traceback in the tail.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from jobtrail.outcomes import events

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_CHAIN_MARKERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line \d+, in (?P<function>\S+)')
# `pkg.module.SomeError: message` at the start of a line. The class name must look like an
# exception's (warnings are printed the same way but end nothing), unless a module qualifies
# it and a message follows (huggingface_hub.errors.OfflineModeIsEnabled: ...).
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:\w*(?:Error|Exception|Exit|Interrupt|Timeout|Failure)|gaierror|timeout)"
    r"|(?:[a-z_]\w*\.)+[A-Z]\w*(?=:))"
    r"(?::\s?(?P<message>.*))?$"
)
_MESSAGE_LINES = 30  # a message longer than this is cut: the type and first lines decide
# Third-party code, wherever it is installed (site-packages, or a source checkout of these).
_LIBRARY = re.compile(
    r"[\\/](?:site|dist)-packages[\\/]"
    r"|[\\/](?:trl|transformers|accelerate|peft|datasets|huggingface_hub|bitsandbytes|torch)[\\/]"
)


@dataclass(frozen=True)
class Frame:
    path: str
    function: str

    def in_package(self, package: str) -> bool:
        """True when the frame's file lies in `package` (a directory of that name on its path)."""
        return re.search(rf"(?:^|[\\/]){re.escape(package)}[\\/]", self.path) is not None

    @property
    def is_library(self) -> bool:
        return _LIBRARY.search(self.path) is not None


@dataclass(frozen=True)
class RaisedError:
    """One exception as printed: its qualified type, message lines and the frames above it."""

    type_name: str  # as printed: "huggingface_hub.errors.GatedRepoError" or "ValueError"
    lines: tuple[str, ...]  # the "Type: message" line, then the message's continuation lines
    index: int  # where the "Type: message" line is in the tail
    frames: tuple[Frame, ...]  # outermost call first, as Python prints them

    @property
    def name(self) -> str:
        return self.type_name.rsplit(".", 1)[-1]

    @property
    def module(self) -> str:
        """The package the type comes from ("" for builtins such as ValueError)."""
        return self.type_name.split(".", 1)[0] if "." in self.type_name else ""

    @property
    def innermost_library_frame(self) -> Frame | None:
        """The library frame closest to the raise: who raised it, when user code called in."""
        return next((f for f in reversed(self.frames) if f.is_library), None)

    def raised_in(self, package: str) -> bool:
        frame = self.innermost_library_frame
        return self.module == package or (frame is not None and frame.in_package(package))


def strip_prefix(line: str) -> str:
    return _RANK_PREFIX.sub("", line.rstrip("\r"))


def last_chain(lines: list[str]) -> list[RaisedError]:
    """The last traceback's exceptions, innermost cause first and the fatal one last ([] if none)."""
    clean = [strip_prefix(line) for line in lines]
    chains: list[list[RaisedError]] = []
    frames: list[Frame] = []
    linked = False
    for index, line in enumerate(clean):
        if line.startswith(_TRACEBACK_HEAD):
            frames = []
        elif line.strip() in _CHAIN_MARKERS:
            linked = True
        elif frame := _FRAME.match(line):
            frames.append(Frame(frame["path"], frame["function"]))
        elif (match := _EXCEPTION.match(line)) and (match["message"] is not None or frames):
            error = RaisedError(match["type"], _message(clean, index), index, tuple(frames))
            if linked and chains:
                chains[-1].append(error)
            else:
                chains.append([error])
            frames, linked = [], False
    return chains[-1] if chains else []


def _message(lines: list[str], start: int) -> tuple[str, ...]:
    """The exception line and what follows it up to the next traceback, chain marker or event."""
    taken = [lines[start]]
    for line in lines[start + 1 : start + _MESSAGE_LINES]:
        if line.startswith(_TRACEBACK_HEAD) or line.strip() in _CHAIN_MARKERS or events.PREFIX in line:
            break
        taken.append(line)
    while taken and not taken[-1].strip():
        taken.pop()
    return tuple(taken)


class Progress(enum.IntEnum):
    """How far training got, as the log shows it."""

    NONE = 0
    TRAINING = 1  # optimizer steps were logged
    CHECKPOINT = 2  # a checkpoint was saved (and, for jobtrail's own events, committed)
    FINISHED = 3  # training returned: its summary, metrics or final model are out


# The trainer's own output, for logs written without jobtrail's events: a `{'loss': ...}` log
# dict, the unlabelled training progress bar (data maps and downloads carry a label), the
# checkpoint notice and the final summary.
_TRAINER_LINES: list[tuple[re.Pattern[str], Progress]] = [
    (re.compile(r"'train_runtime':"), Progress.FINISHED),
    (re.compile(r"^Saving model checkpoint to "), Progress.CHECKPOINT),
    (re.compile(r"^\{'loss': "), Progress.TRAINING),
    (re.compile(r"^\s*\d{1,3}%\|[^|]*\|\s*\d+/\d+ \["), Progress.TRAINING),
]


def progress(lines: list[str]) -> Progress:
    """The furthest stage the given lines show."""
    reached = Progress.NONE
    for raw in lines:
        line = strip_prefix(raw)
        event = events.parse_line(line)
        stage = _event_stage(event) if event else _trainer_stage(line)
        reached = max(reached, stage)
    return reached


def _event_stage(event: dict[str, Any]) -> Progress:
    kind = event["event"]
    if kind == "metrics" or (kind == "artifact" and event.get("kind") == "final_model"):
        return Progress.FINISHED
    if kind == "checkpoint" and event.get("state") in ("committed", "pushed"):
        return Progress.CHECKPOINT
    return Progress.TRAINING if kind == "step" else Progress.NONE


def since_progress(lines: list[str]) -> list[str]:
    """The lines after the last sign of training progress: what came before it was not fatal."""
    last = max((i for i, line in enumerate(lines) if progress([line]) > Progress.NONE), default=-1)
    return lines[last + 1 :]


def _trainer_stage(line: str) -> Progress:
    return next((stage for pattern, stage in _TRAINER_LINES if pattern.search(line)), Progress.NONE)
