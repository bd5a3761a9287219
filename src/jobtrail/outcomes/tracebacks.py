"""Python tracebacks read back from a log tail, and how far training got before them. Pure.

A log tail is whatever the backend kept: it may start in the middle of a traceback, carry prefixes
(`[rank0]: `, timestamps, colours: see `lines`), interleave the tracebacks of several ranks, or chain
several exceptions ("The above exception was the direct cause ..."), as Python, IPython or rich (in a
box) print them. `last_chain` returns the exceptions of the traceback that ended the job: each process's
lines are read on their own, a launcher's own traceback (torchrun's ChildFailedError, accelerate's
CalledProcessError) only reports its child's and is passed over for it, and so is a rank's collective
error that only says another rank died first.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from jobtrail.outcomes import events
from jobtrail.outcomes.lines import clean, source

_TRACEBACK_HEAD = "Traceback (most recent call last):"
_CHAIN_MARKERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_FRAME = re.compile(
    # Indented as Python prints it, or not (a paste that starts at a frame line loses its indentation).
    r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<function>\S+)'
    # IPython and Jupyter (Colab, Kaggle: where many fine-tuning runs live) print a frame as `/path/x.py in f(args)`
    # or, since IPython 8, `File /path/x.py:123, in Class.f(args)`; Colab renders the path as a markdown link
    # (`[/path/x.py](https://localhost:8080/#) in f(args)`). A module's top level is `/path/x.py in <module>` (no
    # arguments), or since IPython 8 `File /path/x.py:123` alone.
    r"|^(?:File )?\[?(?P<ipath>(?:/|[A-Za-z]:\\|~)[^\s:\]]+\.py)(?:\]\([^)\s]*\))?(?::\d+)?,? "
    r"in (?P<ifunction>[\w.<>]+)(?:\(|\s*$)"
    r"|^File (?P<mpath>(?:/|[A-Za-z]:\\|~)[^\s:]+\.py):\d+\s*$"
)
# IPython's header: `TypeError                                 Traceback (most recent call last)`.
_IPYTHON_HEAD = re.compile(r"^\w+\s{2,}Traceback \(most recent call last\)")
# rich's traceback (typer's, and any program that installs rich.traceback) draws its frames in a box headed `Traceback
# (most recent call last)`, each as `path:line in function` (or `in function:line` for a file not on disk), a long one
# folded over the box's next lines; the exception follows the box, its message wrapped at the console's width.
_BOX_HEAD = re.compile(r"^\s*╭─+ ?Traceback \(most recent call last\) ?─+╮")
_BOX_LINE = re.compile(r"^\s*│ ?(?P<inner>.*?)\s*│\s*$")
_RICH_FRAME = re.compile(
    r"^(?P<path>(?:/|[A-Za-z]:\\|~|\.{1,2}/)\S*?\.py):\s?\d+\s?in (?P<function>\S+)$|^in (?P<function2>\S+):\d+$"
)
_RICH_PATH = re.compile(r"^(?:/|[A-Za-z]:\\|~|\.{1,2}/)\S*$")
# `pkg.module.SomeError: message` at the start of a line. The class name must look like an
# exception's (warnings are printed the same way but end nothing), unless a module qualifies
# it and a message follows (huggingface_hub.errors.OfflineModeIsEnabled: ...).
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:\w*(?:Error|Exception|Exit|Interrupt|Timeout|Failure)|gaierror|timeout)"
    r"|(?:[a-z_]\w*\.)+[A-Z]\w*(?=:))"
    r"(?::\s?(?P<message>.*))?$"
)
# A module-qualified exception type alone on its line, without message or frames (`huggingface_hub.utils._errors.
# RepositoryNotFoundError`, as a launcher or a `print(type(e))` leaves it): an exception all the same.
_BARE = re.compile(r"^(?:[a-z_]\w*\.)+[A-Z]\w*(?:Error|Exception)\s*$")
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


# A launcher's traceback reports its child's failure; the child's own traceback says why.
_LAUNCHER_TYPES = {"ChildFailedError", "SignalException", "CalledProcessError"}
# Errors one rank raises because another died first: the peer's traceback, if the tail has it, is the cause. A
# collective's watchdog timeout is one: the ranks still alive wait in the collective for the one that died.
_COLLATERAL = re.compile(
    r"Connection (?:closed|reset) by (?:peer|remote peer)|Broken pipe|NCCL communicator was aborted"
    r"|Watchdog caught collective operation timeout"
    r"|ProcessGroupNCCL.*(?:aborted|abort)|\bremote process exited\b|Socket Timeout|recvValue failed",
    re.IGNORECASE,
)


@dataclass
class _Reading:
    """One process's traceback being read: its frames so far, and whether the next exception continues a chain."""

    frames: list[Frame]
    linked: bool = False
    chain: int | None = None  # the chain (index in `chains`) a linked exception joins
    folded: str = ""  # the start of a rich frame's line that the box folded onto its next line

    def read_box(self, inner: str) -> None:
        """One line inside rich's box: a frame, or a piece of one the box folded."""
        text, self.folded = self.folded + inner, ""
        if frame := _RICH_FRAME.match(text):
            self.frames.append(Frame(frame["path"] or "", frame["function"] or frame["function2"]))
        elif _RICH_PATH.match(text):
            self.folded = text


def chains(lines: list[str]) -> list[list[RaisedError]]:
    """Every traceback's exceptions, innermost cause first, in the order their fatal lines appear."""
    clean_lines = [clean(line) for line in lines]
    sources = [source(line) for line in lines]
    found: list[list[RaisedError]] = []
    readings: dict[str | None, _Reading] = {}
    for index, line in enumerate(clean_lines):
        reading = readings.setdefault(sources[index], _Reading([]))
        if line.startswith(_TRACEBACK_HEAD) or _IPYTHON_HEAD.match(line) or _BOX_HEAD.match(line):
            reading.frames = []
        elif box := _BOX_LINE.match(line):
            reading.read_box(box["inner"])
        elif line.strip() in _CHAIN_MARKERS:
            reading.linked = True
        elif frame := _FRAME.match(line):
            path = frame["path"] or frame["ipath"] or frame["mpath"]
            reading.frames.append(Frame(path, frame["function"] or frame["ifunction"] or "<module>"))
        elif (match := _EXCEPTION.match(line)) and (
            match["message"] is not None or reading.frames or _BARE.match(line)
        ):
            own = [line if sources[i] == sources[index] else None for i, line in enumerate(clean_lines)]
            error = RaisedError(match["type"], _message(own, index), index, tuple(reading.frames))
            if reading.linked and reading.chain is not None:
                found[reading.chain].append(error)
            else:
                found.append([error])
                reading.chain = len(found) - 1
            reading.frames, reading.linked = [], False
    return found


def last_chain(lines: list[str]) -> list[RaisedError]:
    """The chain of the traceback that ended the job ([] if none): the last one, passing over launchers'
    reports of a child's failure and ranks' collective errors when another traceback holds the cause. An exception
    quoted inside another's message (a worker's, a remote task's) joins the chain as that one's cause."""
    found = chains(lines)
    workers = [chain for chain in found if chain[-1].name not in _LAUNCHER_TYPES] or found
    causes = [chain for chain in workers if not any(_line_of(e, _COLLATERAL) for e in chain)] or workers
    return [inner for error in causes[-1] for inner in (*_quoted(error), error)] if causes else []


# An exception a wrapper quotes in its own message, when the process that raised it printed no traceback of its own
# here: a remote or worker process's failure re-raised by its caller (vLLM's `Worker failed with error '...'`, Ray's
# `RayTaskError(ValueError)`, an executor's `ValueError('...')` in repr, `... failed: KeyError: 'x'`). Its type, where
# the wrapper says it, and its message are the cause; the wrapper's type says only that it came from elsewhere.
_QUOTED = (
    re.compile(r"\bRayTaskError\((?P<type>\w+)\)(?::.*?\b(?P=type): (?P<message>.+))?"),
    re.compile(r"(?<![\w.])(?P<type>[A-Z]\w*(?:Error|Exception))\((?P<q>['\"])(?P<message>.+)(?P=q)\)"),
    re.compile(
        r"(?i:\b(?:failed|died|crashed|exited|error(?:ed)?)\b.{0,30}?\b(?:with|error|exception|:))\s*"
        r"(?P<type>[A-Z]\w*(?:Error|Exception)): (?P<message>.+)"
    ),
    re.compile(
        r"(?i:\b(?:failed|died|crashed) with (?:an? )?(?:error|exception)):? (?P<q>['\"])(?P<message>.+?)(?P=q)"
    ),
)


def _quoted(error: RaisedError) -> tuple[RaisedError, ...]:
    """The exception `error`'s first line quotes, as an exception of that type (the wrapper's, where it names none)
    whose first line stands for the wrapper's line in the log (same index), or nothing."""
    message = error.lines[0].partition(":")[2]
    for pattern in _QUOTED:
        if found := pattern.search(message):
            kind = found["type"] if "type" in found.re.groupindex and found["type"] else error.name
            text = found["message"] or message.strip()
            if kind == "KeyError" and "q" in found.re.groupindex and found["q"]:
                text = f"{found['q']}{text}{found['q']}"  # str(KeyError) is the key's repr, quotes and all
            return (RaisedError(kind, (f"{kind}: {text}", *error.lines[1:]), error.index, error.frames),)
    return ()


# An exception a program reports within a line of its own words (it caught it, logged it and gave up): as `Type:
# message` after them (`Error in training: KeyError: 'x'`, a sentence in another language before it) or as its repr
# (`The error was ValueError('...')`, a logger's `%r`). The traceback reader takes only those that start a line. Not
# a source line raising one (a traceback cut after its frames): the message there is the code's, not what was raised.
_WITHIN = re.compile(
    r"(?:^|[^\w.])(?<!raise )(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))"
    r"(?::\s(?P<message>.*)|\((?P<q>['\"])(?P<quoted>.*?)(?P=q)\))"
)


def reported(lines: list[str]) -> RaisedError | None:
    """The newest exception a line reports within its own words, as one of that type without frames whose line is
    `Type: message` (its index the logged line's), or None."""
    for index in range(len(lines) - 1, -1, -1):
        if found := _WITHIN.search(clean(lines[index])):
            text = found["quoted"] if found["message"] is None else found["message"]
            if found["type"].endswith("KeyError") and found["q"]:
                text = f"{found['q']}{text}{found['q']}"  # str(KeyError) is the key's repr, quotes and all
            return RaisedError(found["type"], (f"{found['type']}: {text}",), index, ())
    return None


# The line a frame was running, as IPython marks it (`---> 10 from x import y`; Python prints it under its `File` line),
# and an import statement.
_IPYTHON_CURRENT = re.compile(r"^\s*-+>\s*\d+\s(?P<code>.*)$")
_IMPORT = re.compile(r"^\s*(?:from\s+[A-Za-z_][\w.]*\s+import\s|import\s+[A-Za-z_][\w.]*)")


def importing(lines: list[str], chain: list[RaisedError]) -> bool:
    """Was the chain raised while the job's code imported a package: an installed package's code raised it, and one of
    its tracebacks (a chained one cut before its exception line too, where a paste ends) starts at an import statement
    (the outermost frame, the job's own code, is where Python and IPython start a traceback)?"""
    raiser = chain[0].frames[-1] if chain and chain[0].frames else None
    if raiser is None or not raiser.is_library:
        return False
    clean_lines = [clean(line) for line in lines]
    heads = [i for i in range(chain[0].index, -1, -1) if _is_head(clean_lines[i])][:1]
    heads += [i for i in range(chain[0].index, len(lines)) if _is_head(clean_lines[i])]
    return any(_IMPORT.match(_outermost(clean_lines[head + 1 :])) for head in heads)


def _is_head(line: str) -> bool:
    return line.startswith(_TRACEBACK_HEAD) or _IPYTHON_HEAD.match(line) is not None or line.strip() in _CHAIN_MARKERS


def _outermost(lines: list[str]) -> str:
    """The line the first frame after a traceback's head was running, or "" (none before the next head)."""
    for index, line in enumerate(lines):
        if _is_head(line):
            return ""
        if current := _IPYTHON_CURRENT.match(line):
            return current["code"]
        if (frame := _FRAME.match(line)) and frame["path"]:
            return lines[index + 1] if index + 1 < len(lines) else ""
    return ""


def _line_of(error: RaisedError, pattern: re.Pattern[str]) -> bool:
    return any(pattern.search(line) for line in error.lines)


def _message(lines: list[str | None], start: int) -> tuple[str, ...]:
    """The exception line and what its process printed after it, up to the next traceback, chain marker or
    event (None: a line another process printed, skipped)."""
    taken = [str(lines[start])]
    for line in lines[start + 1 : start + _MESSAGE_LINES]:
        if line is None:
            continue
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
# checkpoint notice and the final summary, or a trainer's words for its end (transformers' `Training completed.`,
# a `<tool>: Training finished` banner, YOLO's `100 epochs completed in 2.1 hours.`, Lightning's `Trainer.fit` stopped,
# the final or merged model being saved).
_TRAINER_LINES: list[tuple[re.Pattern[str], Progress]] = [
    (re.compile(r"'train_runtime':"), Progress.FINISHED),
    (
        re.compile(
            r"(?i)^\s*(?:[\w .-]{1,40}: )?training (?:has )?(?:completed|complete|finished|done)\b(?! with error)"
            r"|\b\d+ epochs? completed in [\d.]+ (?:hours|minutes|seconds)\b"
            r"|`Trainer\.fit` stopped: `max_(?:epochs|steps)=\d+` reached"
            # Saving what training made, once it is done (AutoTrain's `Saving target model...` after its merge).
            r"|\bsaving (?:the )?(?:final|target|merged|trained|fine-?tuned) (?:model|adapter|weights)\b"
        ),
        Progress.FINISHED,
    ),
    (re.compile(r"^Saving model checkpoint to "), Progress.CHECKPOINT),
    (re.compile(r"^\{'loss': "), Progress.TRAINING),
    (re.compile(r"^\s*\d{1,3}%\|[^|]*\|\s*\d+/\d+ \["), Progress.TRAINING),
]


def progress(lines: list[str]) -> Progress:
    """The furthest stage the given lines show."""
    return max((_stage(raw) for raw in lines), default=Progress.NONE)


def stepped(lines: list[str]) -> bool:
    """Do the lines show a training step taken: a stage past NONE, other than a progress bar still at 0 (a step
    begun, and maybe the one that failed)?"""
    for raw in lines:
        stage = _stage(raw)
        at_zero = (bar := _BAR_COUNT.search(clean(raw).split("\r")[-1])) is not None and bar["n"] == "0"
        if stage > Progress.NONE and not (stage is Progress.TRAINING and at_zero):
            return True
    return False


def finished_at(lines: list[str]) -> int | None:
    """Where the lines first show training finished, if they do."""
    return next((index for index, raw in enumerate(lines) if _stage(raw) is Progress.FINISHED), None)


def _stage(raw: str) -> Progress:
    line = clean(raw).split("\r")[-1]
    event = events.parse_line(line)
    return _event_stage(event) if event else _trainer_stage(line)


def _event_stage(event: dict[str, Any]) -> Progress:
    kind = event["event"]
    if kind == "metrics" or (kind == "artifact" and event.get("kind") == "final_model"):
        return Progress.FINISHED
    if kind == "checkpoint" and event.get("state") in ("committed", "pushed"):
        return Progress.CHECKPOINT
    return Progress.TRAINING if kind == "step" else Progress.NONE


_BAR_COUNT = re.compile(r"^\s*\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)/\d+ \[")
_BAR_SLACK = 1  # tqdm redraws its bar when it closes, a step or so past the last drawing the log kept


def went_on(before: list[str], after: list[str]) -> bool:
    """Did training go on after a traceback (so that the traceback was handled, not fatal)? A new step is what
    says so: a step event, a logged loss, a checkpoint or the final summary. A progress bar is only its
    redrawing (tqdm closing as the exception unwinds, or another rank's bar) unless it counts past what was
    drawn before."""
    for raw in after:
        line = clean(raw).split("\r")[-1]
        event = events.parse_line(line)
        if event:
            if _event_stage(event) > Progress.NONE:
                return True
        elif _trainer_stage(line) > Progress.NONE and not _BAR_COUNT.search(line):
            return True
    after_counts = _bar_counts(after)
    if not after_counts:
        return False
    # With no bar before the traceback (a tail that starts inside it), the first bar after is where the bar stood
    # when it closed (tqdm redraws it as the exception unwinds, at whatever step it had reached): only a count
    # past that one is a step taken after the traceback.
    before_counts = _bar_counts(before)
    drawn_before = max(before_counts) if before_counts else after_counts[0]
    return max(after_counts) > drawn_before + _BAR_SLACK


def _bar_counts(lines: list[str]) -> list[int]:
    return [int(m["n"]) for raw in lines for part in clean(raw).split("\r") if (m := _BAR_COUNT.search(part))]


def _trainer_stage(line: str) -> Progress:
    return next((stage for pattern, stage in _TRAINER_LINES if pattern.search(line)), Progress.NONE)
