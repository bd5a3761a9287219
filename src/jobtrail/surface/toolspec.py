"""How a tool is declared, once, for both adapters: the MCP server and the command line.

A tool is a method of a `ToolArea` (a few related tools over one JobService), marked with
`@tool(title, description, hints)`. Its typed parameters (see params.py) are the tool's
arguments; its return annotation is the result model. server.py publishes each as an MCP tool
and cli.py turns the same parameters into flags, so an argument and its flag cannot drift.

Nothing here imports the MCP SDK or the service: building the CLI's parser reads these
declarations and must stay quick.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

if TYPE_CHECKING:
    from jobtrail.service.facade import JobService

    # The service, or the function that builds it on first use (`jobtrail serve` answers tools/list before).
    ServiceSource: TypeAlias = JobService | Callable[[], JobService]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Hints:
    """MCP tool annotations, kept apart from the SDK's type so that declaring a tool stays light."""

    read_only: bool
    destructive: bool | None = None
    idempotent: bool = False
    open_world: bool = True


# Reads only jobtrail's own state (the ledger, local files).
READ_ONLY = Hints(read_only=True, idempotent=True, open_world=False)
# Reads, and may ask the Hub (prices, config.json).
READS_HUB = Hints(read_only=True, idempotent=True, open_world=True)
# Starts a job here or on HF Jobs: every call is a new one.
STARTS_JOB = Hints(read_only=False, destructive=False, idempotent=False, open_world=True)
# Stops a job; stopping it twice is the same as once.
STOPS_JOB = Hints(read_only=False, destructive=True, idempotent=True, open_world=False)


@dataclass(frozen=True)
class ToolInfo:
    title: str
    description: str
    hints: Hints


def tool(title: str, description: str, hints: Hints) -> Callable[[F], F]:
    """Mark a ToolArea method as a tool; its name is the tool's name."""

    def declare(method: F) -> F:
        method.__tool__ = ToolInfo(title, description, hints)  # type: ignore[attr-defined]
        return method

    return declare


class ToolArea:
    """A few related tools; each call goes to the service this area was given."""

    def __init__(self, service: ServiceSource) -> None:
        self._service = service

    @property
    def service(self) -> JobService:
        return service_of(self._service)


def service_of(source: ServiceSource) -> JobService:
    """The service itself, built first when `source` is the function that builds it."""
    return source() if callable(source) else source


@dataclass(frozen=True)
class ToolSpec:
    """One tool as both adapters read it: metadata, parameters (annotations evaluated) and result type."""

    name: str
    info: ToolInfo
    parameters: tuple[inspect.Parameter, ...]
    result_type: type


def tools_of(area: type[ToolArea]) -> tuple[ToolSpec, ...]:
    """The tools an area declares, in the order they are written."""
    specs = []
    for name, member in vars(area).items():
        info = getattr(member, "__tool__", None)
        if isinstance(info, ToolInfo):
            signature = inspect.signature(member, eval_str=True)
            _, *parameters = signature.parameters.values()  # the first is `self`
            specs.append(ToolSpec(name, info, tuple(parameters), signature.return_annotation))
    return tuple(specs)


def tool_spec(area: type[ToolArea], name: str) -> ToolSpec:
    return next(spec for spec in tools_of(area) if spec.name == name)


def unknown_arguments(
    tool_name: str,
    given: Mapping[str, object],
    valid: Iterable[str],
    misplaced: Callable[[str, object], str | None] | None = None,
) -> str | None:
    """The refusal of a call that names arguments the tool does not have, or None when all are real.

    Each unknown name gets the closest real one when there is a close one: an agent that wrote
    `hyperparams` meant `hyperparameters`, and running with the default instead would hide that.
    `misplaced(name, value)` says where a name that belongs inside another argument goes (submit's
    `max_steps=3` is `hyperparameters={"max_steps": 3}`, not the merely similar `smoke_steps`).
    """
    valid = list(valid)
    unknown = [name for name in given if name not in valid]
    if not unknown:
        return None
    if not valid:
        return f"{tool_name} takes no arguments; got {', '.join(repr(name) for name in unknown)}."
    noun = "argument" if len(unknown) == 1 else "arguments"
    lines = [f"Unknown {noun} {', '.join(repr(name) for name in unknown)}."]
    for name in unknown:
        closest = _closest(name, valid)
        elsewhere = misplaced(name, given[name]) if misplaced else None
        if elsewhere:
            lines.append(elsewhere)
        elif closest:
            lines.append(
                f"Did you mean {closest!r}?" if len(unknown) == 1 else f"Did you mean {closest!r} (for {name!r})?"
            )
    lines.append(f"Valid arguments: {', '.join(valid)}. Nothing was run.")
    return " ".join(lines)


def _closest(name: str, valid: list[str]) -> str | None:
    lowered = {real.lower(): real for real in valid}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None
