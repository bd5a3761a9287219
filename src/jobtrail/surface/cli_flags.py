"""A tool's parameters as argparse arguments: the same names, choices, defaults, help and checks.

`--dataset-mapping` is the tool's `dataset_mapping`; a Literal gives the choices; a bool that
defaults to False is a switch (`--force`), one that defaults to True is turned off with
`--no-...`, one that defaults to None takes either; a list takes several values; a dict is read
as a JSON object. Every value is validated with the tool's own annotation (ranges included), so
the CLI refuses what the tool would refuse, in argparse's words (exit status 2).
"""

from __future__ import annotations

import argparse
import inspect
import json
import shlex
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from jobtrail.surface.toolspec import ToolSpec

EXAMPLE = "e.g. "  # where a description gives an example value, as JSON for a list or an object


@dataclass(frozen=True)
class Shape:
    """What argparse needs to know about one parameter's type."""

    base: Any  # the type once Annotated, None and list are taken off
    annotation: Any  # the whole annotation, to validate with
    description: str
    is_list: bool
    item: Any = None  # a list's element type, with its constraints, to validate each value with

    @property
    def choices(self) -> tuple[Any, ...] | None:
        return get_args(self.base) if get_origin(self.base) is Literal else None


def shape(annotation: Any) -> Shape:
    description = ""
    inner = annotation
    if get_origin(inner) is Annotated:
        inner, *metadata = get_args(inner)
        description = next((m.description for m in metadata if isinstance(m, FieldInfo) and m.description), "")
    inner = _bare(inner)
    members = [_bare(m) for m in get_args(inner) if m is not type(None)] if _is_union(inner) else [inner]
    # `str | int` (a timeout: '2h' or seconds) is text on a command line.
    base = str if str in members else members[0]
    is_list = get_origin(base) is list
    item = get_args(base)[0] if is_list else None
    if is_list:
        base = _bare(item)
    return Shape(base=base, annotation=annotation, description=description, is_list=is_list, item=item)


def _bare(annotation: Any) -> Any:
    """The type under any Annotated layers (params.py's bounded types: PathText, NameList ...)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def add_tool_arguments(
    parser: argparse.ArgumentParser,
    spec: ToolSpec,
    *,
    positional: Iterable[str] = (),
    one_of: Iterable[str] = (),
    skip: Iterable[str] = (),
) -> None:
    """One argument per tool parameter; `one_of` names flags of which exactly one must be given."""
    positional, one_of, skip = set(positional), set(one_of), set(skip)
    group = parser.add_mutually_exclusive_group(required=True) if one_of else None
    for parameter in spec.parameters:
        if parameter.name in skip:
            continue
        target = group if group is not None and parameter.name in one_of else parser
        add_argument(target, parameter, positional=parameter.name in positional)


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_argument(parser: Any, parameter: inspect.Parameter, *, positional: bool = False) -> None:
    info = shape(parameter.annotation)
    name, default = parameter.name, parameter.default
    flag = flag_of(name)
    help_text = _help(_cli_example(info, flag), default)
    if info.base is bool:
        if default is None:  # undecided unless asked: --flag or --no-flag
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif default is True:
            parser.add_argument("--no-" + flag[2:], dest=name, action="store_false", help=help_text)
        else:
            parser.add_argument(flag, dest=name, action="store_true", help=help_text)
        return
    kwargs: dict[str, Any] = {"type": _converter(info), "help": help_text}
    if info.choices is not None:
        kwargs["choices"] = info.choices
    if info.is_list:
        kwargs["nargs"] = "+"
    if positional:
        parser.add_argument(name, **kwargs)
    elif default is inspect.Parameter.empty:
        parser.add_argument(flag, dest=name, required=True, **kwargs)
    else:
        parser.add_argument(flag, dest=name, default=default, **kwargs)


def argument_words(parameter: inspect.Parameter, value: Any, *, positional: bool = False) -> list[str] | None:
    """The words that give `parameter` the value `value` on a command line: add_argument read backwards ([] when
    leaving the flag out gives that value; None when no words do). A value the reader fills in (Ellipsis) is
    written as the parameter's name in capitals."""
    info = shape(parameter.annotation)
    name, default = parameter.name, parameter.default
    flag = flag_of(name)
    if value is ...:
        placeholder = "{...}" if get_origin(info.base) is dict else name.upper()
        return [placeholder] if positional else [flag, placeholder]
    if info.base is bool:
        if value is default:
            return []
        return ([flag] if value else ["--no-" + flag[2:]]) if isinstance(value, bool) else None
    if value is None:
        return [] if default is None else None
    if info.is_list:
        words = [_word(item) for item in value] if isinstance(value, list) and value else None
    elif get_origin(info.base) is dict:
        words = [_json(value)] if isinstance(value, dict) else None
    else:
        words = [_word(value)]
    if words is None:
        return None
    return words if positional else [flag, *words]


def _word(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def _json(value: Any) -> str:
    """JSON, with `...` kept where the reader fills in a value."""
    if value is ...:
        return "..."
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(key)}: {_json(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_json(item) for item in value) + "]"
    return json.dumps(value)


def tool_arguments(args: argparse.Namespace, spec: ToolSpec) -> dict[str, Any]:
    """The parsed values of the tool's parameters (those this command has)."""
    return {p.name: getattr(args, p.name) for p in spec.parameters if hasattr(args, p.name)}


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg}); write it like '{{\"max_steps\": 10}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"max_steps\": 10}'")
    return value


def _converter(info: Shape) -> Callable[[str], Any]:
    """Text → the value the tool takes, checked against the tool's annotation."""
    if info.choices is not None:
        return str  # argparse checks the choices and names them in its message
    read: Callable[[str], Any] = json_object if get_origin(info.base) is dict else str
    adapter: TypeAdapter[Any] | None = None

    def convert(text: str) -> Any:
        nonlocal adapter
        adapter = adapter or TypeAdapter(info.item if info.is_list else info.annotation)  # built on first use
        try:
            return adapter.validate_python(read(text))
        except ValidationError as exc:
            raise argparse.ArgumentTypeError("; ".join(e["msg"] for e in exc.errors())) from None

    return convert


def _cli_example(info: Shape, flag: str) -> str:
    """The description with its example value (JSON after "e.g.", as the tool takes it) written as this flag takes
    it: `--names loss grad_norm`, `--changes '{"max_steps": 10}'`."""
    at = info.description.find(EXAMPLE)
    if at < 0 or not (info.is_list or get_origin(info.base) is dict):
        return info.description
    start = at + len(EXAMPLE)
    try:
        value, end = json.JSONDecoder().raw_decode(info.description, start)
    except json.JSONDecodeError:
        return info.description
    words = [_word(item) for item in value] if info.is_list else [info.description[start:end]]
    return f"{info.description[:start]}`{shlex.join([flag, *words])}`{info.description[end:]}"


def _help(description: str, default: Any) -> str:
    text = description.replace("%", "%%")  # argparse formats help with %
    if not any(default is nothing for nothing in (inspect.Parameter.empty, None, False)):
        shown = " ".join(default) if isinstance(default, list) else default
        text += f" (default: {shown})"
    return text


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)
