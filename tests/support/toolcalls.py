"""Find the tool calls a text proposes (`inspect(job_id="jt-1")`, `submit(..., dry_run=true)`) and check them
against the tools a server really publishes: the tool exists and every argument named is one of its arguments.

Summaries and the docs (SKILL.md, references/) tell an agent what to call; a renamed tool or argument must
fail a test, not an agent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

_CALL = re.compile(r"(?<![\w.])([a-z][a-z0-9_]*)\(")
_KEY = re.compile(r"\s*([A-Za-z_]\w*)\s*=(?!=)")
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: tuple[str, ...]  # the names given as name=value at the top level; `...` and positionals are skipped
    text: str


def calls_in(text: str) -> list[ToolCall]:
    """Every `name(...)` with balanced brackets in `text`, with the argument names it passes."""
    found = []
    for match in _CALL.finditer(text):
        end = _closing(text, match.end())
        if end is None:
            continue
        inside = text[match.end() : end]
        keys = tuple(m.group(1) for part in top_level_parts(inside) if (m := _KEY.match(part)))
        found.append(ToolCall(match.group(1), keys, text[match.start() : end + 1]))
    return found


def bad_calls(
    calls: Iterable[ToolCall], tools: Mapping[str, Iterable[str]], not_tools: Iterable[str] = ()
) -> list[str]:
    """What is wrong with these calls, given each tool's argument names; names in `not_tools` are not tool calls
    (a Python function in an example), everything else must be a real tool."""
    problems = []
    skip = set(not_tools)
    for call in calls:
        if call.name in skip:
            continue
        if call.name not in tools:
            problems.append(f"{call.text}: no tool {call.name!r}")
            continue
        valid = set(tools[call.name])
        problems += [f"{call.text}: {call.name} has no argument {key!r}" for key in call.arguments if key not in valid]
    return problems


def _unquoted(text: str, start: int, depth: int) -> Iterator[tuple[int, int]]:
    """(index, bracket depth after it) of each character of `text` from `start` outside quoted strings (the
    quotes too are skipped); `depth` is the bracket depth at `start`."""
    quote = ""
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        else:
            depth += (ch in _OPEN) - (ch in _CLOSE)
            yield i, depth


def _closing(text: str, start: int) -> int | None:
    """The index of the bracket closing the one before `start`, skipping quoted strings; None when unbalanced."""
    for i, depth in _unquoted(text, start, 1):
        if depth == 0:
            return i
        if text[i] == "\n" and text[i + 1 : i + 2] == "\n":
            return None  # a call never spans a blank line: this bracket is prose
    return None


def top_level_parts(inside: str) -> list[str]:
    """The comma-separated parts of an argument list, commas inside brackets or quotes kept."""
    parts, begin = [], 0
    for i, depth in _unquoted(inside, 0, 0):
        if inside[i] == "," and depth == 0:
            parts.append(inside[begin:i])
            begin = i + 1
    parts.append(inside[begin:])
    return parts
