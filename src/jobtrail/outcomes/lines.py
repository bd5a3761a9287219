"""Log lines without what the tools that relayed them put in front. Pure.

A line a job printed reaches us wrapped: ANSI colours from a logger, a timestamp from the backend or
`kubectl logs --timestamps`, `[rank0]: ` from torchrun, `[default0]:` from its --tee, `0: ` from
`srun -l`, `[1,0]<stderr>:` from mpirun, `(VllmWorkerProcess pid=123) ERROR 05-01 10:00:00 file.py:12] `
from vLLM's workers, `trainer-1  | ` from docker compose. The parsers downstream (tracebacks, patterns)
read what the job wrote, so `clean` takes these off, and `source` keeps the one that tells apart the
processes whose lines interleave (a traceback is one process's lines, never a mix of two ranks').
`split` reads a pasted notebook's outputs, which the .ipynb file keeps as JSON strings, as the lines they print.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# Prefixes that say which process wrote the line (kept by `source`).
_PROCESS = re.compile(
    r"^(?:"
    r"\[(?:rank|default)\d+\]:\s?"  # torchrun: `[rank0]: ` (its log prefix) and `[default0]:` (--tee)
    r"|\[\d+,\d+\]<std(?:out|err)>:\s?"  # mpirun --tag-output
    r"|\((?:[A-Za-z_]\w*)\s+pid=\d+(?:,\s*ip=[\d.:a-f]+)?\)\s"  # vLLM and Ray workers
    r"|rank\d+:\s"  # accelerate/DeepSpeed loggers' `rank0: `
    r"|\d{1,4}:\s(?=\S|\s+File )"  # srun -l labels each line with its task number
    r"|[\w.-]+\s+\|\s"  # docker compose: `service-1  | ` (v2), `service  | ` (v1)
    r")"
)
# What a reader of the log put around it: pytest's `E   ` before the lines of a failure it reports, a markdown
# code span around a line pasted into a thread (`` `RuntimeError: ...` ``), and a markdown quote (`> RuntimeError: ...`;
# not `>>> `, Python's prompt). None tells processes apart.
_QUOTING = re.compile(r"^E {3,}(?=\S)|^`([^`]+)`\s*$|^>(?!>) ?(?=\S)")
# Two processes writing the same exception line at once, their writes interleaved: the type twice, then both
# separators (`KeyErrorKeyError: : 'x'`). Read as the one line each of them meant.
_INTERLEAVED = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?:(?P=type))+(?::\s?){2,}")
# Timestamps and log-level headers that carry no content of their own.
_STAMP = re.compile(
    r"^(?:"
    r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s?(?:\|\s)?"  # ISO-ish
    r"|\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s"  # a clock alone
    # vLLM's logger after its worker prefix: `ERROR 05-01 10:00:00 file.py:12] ` (also INFO/WARNING/DEBUG)
    r"|(?:ERROR|WARNING|INFO|DEBUG|CRITICAL)\s+\d\d-\d\d\s\d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./-]+:\d+\]?\]\s?"
    r"|\d+(?:\.\d+)?s\t\d+\t"  # Kaggle's log viewer: seconds since the start, then the line's number, tab-separated
    r")"
)
# An exception's type as `print(type(e), e)` and datasets' loader write it (`<class 'pyarrow.lib.ArrowInvalid'>: ...`).
_CLASS_REPR = re.compile(r"<class '(?P<type>[\w.]+)'>:\s?")
_MAX_PREFIXES = 4  # a line is rarely wrapped more than thrice (stamp, rank, stamp); this bounds the loop


def _unquoted(match: re.Match[str]) -> str:
    return match.group(1) or ""


def clean(line: str) -> str:
    """The line as the job wrote it: colours, timestamps and process prefixes taken off, indentation kept."""
    text = _ANSI.sub("", line).rstrip("\r\n")
    for _ in range(_MAX_PREFIXES):
        stripped = _PROCESS.sub("", _STAMP.sub("", _QUOTING.sub(_unquoted, text, count=1), count=1), count=1)
        if stripped == text:
            break
        text = stripped
    return _INTERLEAVED.sub(r"\g<type>: ", _CLASS_REPR.sub(r"\g<type>: ", text), count=1)


def source(line: str) -> str | None:
    """Which process wrote the line, when a prefix says so (`[rank1]: ` → "[rank1]:"), else None."""
    text = _ANSI.sub("", line)
    for _ in range(_MAX_PREFIXES):
        if match := _PROCESS.match(text):
            return match.group(0).strip()
        stripped = _STAMP.sub("", text, count=1)
        if stripped == text:
            return None
        text = stripped
    return None


# A notebook's output as the .ipynb file stores it (a cell's traceback or stream pasted from the JSON): each printed
# line a JSON string, its newline and its colour codes escaped (`\n`, `\u001b[31m`), several strings to a physical line
# or one to each. Told by a colour code's escaped ESC, by two strings of which the first ends in an escaped newline, or
# by a line that is one such string (not a bytes repr such as `b"...\n"` at the end of a message).
_ESCAPED_OUTPUT = re.compile(r'\\(?:u001[bB]|x1[bB]|033)\[|\\n"\s*,\s*"|^\s*"(?:[^"\\]|\\.)*\\n"\s*\]?\s*,?\s*$')
_STRING_EDGES = re.compile(r'^\s*\[?\s*"|(?<!\\)"\s*\]?\s*,?\s*$')
_STRING_BREAK = re.compile(r'(?<!\\)"\s*,\s*"')
_ESCAPE = re.compile(r'\\(?:u(?P<code>[0-9a-fA-F]{4})|x(?P<byte>[0-9a-fA-F]{2})|(?P<esc>033)|(?P<char>["\\/nrt]))')
_ESCAPED = {"n": "\n", "r": "\r", "t": "\t"}


def _unescaped(match: re.Match[str]) -> str:
    if code := match["code"] or match["byte"]:
        return chr(int(code, 16))
    if match["esc"]:
        return "\x1b"
    return _ESCAPED.get(match["char"], match["char"])


def split(text: str) -> list[str]:
    """The text's lines, a notebook's JSON-escaped output unfolded into the lines it prints (`clean` then takes the
    colours off)."""
    found: list[str] = []
    for line in text.splitlines():
        if not _ESCAPED_OUTPUT.search(line):
            found.append(line)
            continue
        strings = _STRING_BREAK.sub("\n", _STRING_EDGES.sub("", line))
        found.extend(_ESCAPE.sub(_unescaped, strings).splitlines())
    return found
