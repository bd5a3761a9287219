"""Tool calls as an agent writes them (`retry(job_id="jt-1", changes={"learning_rate": 1e-05})`), read so that the
CLI can print the command that does the same (`jobtrail retry jt-1 --changes '{"learning_rate": 1e-05}'`).

The service writes its next steps as tool calls, for MCP clients; a person (or an agent) at a shell needs the
command line. This module finds each call in a text and reads its arguments (JSON values, as the summaries write
them; `...` and a bare name stand for a value the reader fills in); cli.py turns each into its command, from the
same declaration the command's flags are built from.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

_OPEN, _CLOSE = "([{", ")]}"
_JSON_NAMES = {"true": True, "false": False, "null": None}


@dataclass(frozen=True)
class Call:
    """One call: the tool, its positional values, its named ones, and whether `...` stands for more (`submit(...,
    dry_run=true)`). A value the text leaves to the reader (`job_id=...`, `{...}`, a bare name: `inspect(job_id)`)
    is Ellipsis."""

    tool: str
    positional: tuple[Any, ...]
    named: dict[str, Any]
    etc: bool = False


def parse_call(source: str) -> Call | None:
    """The call `source` writes, or None when it is no call of plain values (Python code, an expression)."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    positional: list[Any] = []
    named: dict[str, Any] = {}
    etc = False
    try:
        for arg in node.args:
            if isinstance(arg, ast.Constant) and arg.value is ...:
                etc = True
            elif isinstance(arg, ast.Name) and arg.id not in _JSON_NAMES:
                named[arg.id] = ...
            else:
                positional.append(_value(arg))
        for keyword in node.keywords:
            if keyword.arg is None:  # **kwargs
                return None
            named[keyword.arg] = _value(keyword.value)
    except ValueError:
        return None
    return Call(node.func.id, tuple(positional), named, etc)


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):  # JSON's literals, or a name standing for a value (`inspect(job_id)`)
        return _JSON_NAMES.get(node.id, ...)
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(item) for item in node.elts]
    if isinstance(node, ast.Dict) and all(isinstance(key, ast.Constant) for key in node.keys):
        return {key.value: _value(value) for key, value in zip(node.keys, node.values, strict=True)}  # type: ignore[union-attr]
    if isinstance(node, ast.Set) and [_value(item) for item in node.elts] == [...]:  # `{...}`: an object to fill
        return ...
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        number = node.operand.value
        if isinstance(number, int | float) and not isinstance(number, bool):
            return -number
    raise ValueError(ast.dump(node))


def rewrite_calls(text: str, tools: Collection[str], translate: Callable[[Call], str | None]) -> str:
    """`text` with each call of one of `tools` replaced by `translate(call)`; a call it cannot translate stays."""
    if not tools:
        return text
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(tool) for tool in tools) + r")\(")
    out, done = [], 0
    for match in pattern.finditer(text):
        if match.start() < done:
            continue  # inside a call already replaced
        end = _closing(text, match.end())
        call = parse_call(text[match.start() : end + 1]) if end is not None else None
        command = translate(call) if call is not None else None
        if end is None or command is None:
            continue
        out += [text[done : match.start()], command]
        done = end + 1
    return "".join([*out, text[done:]])


def _closing(text: str, start: int) -> int | None:
    """The index of the bracket closing the one before `start`, quoted strings skipped; None when unbalanced."""
    for i, depth in _unquoted(text, start):
        if depth == 0:
            return i
    return None


def _unquoted(text: str, start: int) -> Iterator[tuple[int, int]]:
    """(index, bracket depth after it) of each character outside quoted strings, from depth 1 at `start`."""
    quote, escaped, depth = "", False, 1
    for i in range(start, len(text)):
        ch = text[i]
        if escaped:
            escaped = False
        elif quote:
            escaped = ch == "\\"
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        else:
            depth += (ch in _OPEN) - (ch in _CLOSE)
            yield i, depth
