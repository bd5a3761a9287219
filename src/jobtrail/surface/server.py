"""The MCP server: the tools of each area (tools_*.py), published typed and annotated, plus references.

Each tool returns markdown text for the agent to read first and structured content with the
stable field names of its result model. Anticipated failures become ToolErrors that say what
to fix; nothing else (no traceback) reaches the client.
"""

from __future__ import annotations

import base64
import functools
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.types import CallToolResult, GetPromptResult, ImageContent, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, ValidationError, create_model

from jobtrail import __version__
from jobtrail.errors import InvalidRequestError, JobtrailError
from jobtrail.models import ToolResult
from jobtrail.results.watch import ImageResult, ProgressSink
from jobtrail.surface import invalid_arguments
from jobtrail.surface.mcp_tasks import task_support, with_task_support
from jobtrail.surface.prompts import add_prompts, known_prompt
from jobtrail.surface.reporting import reporting_to
from jobtrail.surface.resources import ResourceUpdates, add_job_resources
from jobtrail.surface.schemas import lean_input, published_output
from jobtrail.surface.tools_data import PlanningTools
from jobtrail.surface.tools_jobs import JobTools
from jobtrail.surface.tools_tasks import TaskTools
from jobtrail.surface.tools_watch import WatchTools
from jobtrail.surface.toolspec import Hints, ToolArea, ToolSpec, tools_of, unknown_arguments
from jobtrail.util.data import shipped_dir
from jobtrail.util.hub import one_line_error

if TYPE_CHECKING:
    from mcp.types import Tool as MCPTool

    from jobtrail.service.change_feed import ChangeFeed
    from jobtrail.surface.toolspec import ServiceSource

log = logging.getLogger("jobtrail.surface.server")
F = TypeVar("F", bound=Callable[..., Any])
# The keyword that hands a tool function the request's Context; no tool has an argument of that name.
_CONTEXT = "mcp_context"
REFERENCE_INDEX = "jobs.md"  # a page every installation ships: where it is, the others are

INSTRUCTIONS = """jobtrail runs fine-tuning jobs (TRL) on this machine or on Hugging Face Jobs.
Typical flow: submit(dry_run=true) to see findings and the script's sha256 → submit → wait(job_id) again
while it is not terminal (metrics / plot for the curves) → report the termination_reason, the loss and the
checkpoint path.
Every job has a receipt: inspect(job_id) shows config sha256, data manifest, environment,
placement, checkpoints and why it ended."""

AREAS: tuple[type[ToolArea], ...] = (JobTools, WatchTools, PlanningTools, TaskTools)


class Renderable(Protocol):
    """A result model: markdown for the text content, JSON for the structured content."""

    def to_markdown(self) -> str: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


def build_server(service: ServiceSource, feed: ChangeFeed | None = None) -> MCPServer:
    """The server over `service`, or over the function that builds it on first use: its tools are declared from
    their signatures and result models alone, so it answers tools/list without the service. With `feed` (what
    `serve`'s poller fills), its job resources can be subscribed to (resources.py)."""
    tools: list[Tool] = [ClosedTool.of(spec, area(service)) for area in AREAS for spec in tools_of(area)]
    bus = InMemorySubscriptionBus()
    updates = ResourceUpdates(feed, service, bus) if feed is not None else None
    server = _Server(
        name="jobtrail",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=tools,
        subscriptions=bus,
        lifespan=updates.lifespan if updates else None,
        **task_support(service),
    )
    add_references(server)
    add_job_resources(server, service, updates)
    add_prompts(server)
    return server


class _Server(MCPServer):
    """The SDK's server, but prompts/get of a name it lacks is refused with the closest name (prompts.known_prompt),
    and a malformed line on stdio gets its JSON-RPC error (stdio_errors.py: the SDK drops it silently)."""

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        known_prompt(name, [prompt.name for prompt in await self.list_prompts()])
        return await super().get_prompt(name, arguments, context)

    async def list_tools(self) -> list[MCPTool]:
        return [with_task_support(tool) for tool in await super().list_tools()]

    async def run_stdio_async(self) -> None:
        from mcp.server.stdio import stdio_server

        from jobtrail.surface.stdio_errors import AnswersMalformed

        async with stdio_server() as (read_stream, write_stream):
            options = self._lowlevel_server.create_initialization_options()
            await self._lowlevel_server.run(AnswersMalformed(read_stream, write_stream), write_stream, options)


class ClosedTool(Tool):
    """A tool whose arguments are closed: its input schema says `additionalProperties: false`, and a call
    naming an argument the tool does not have is refused with the closest real name.

    The SDK's argument model ignores unknown keys (pydantic's default), so `submit(hyperparams=...)`
    would train with the defaults; the check runs on the raw arguments, before that model drops them.
    """

    @classmethod
    def of(cls, spec: ToolSpec, area: ToolArea) -> ClosedTool:
        """The tool, each of its schemas generated once (the SDK's `from_function` would derive both twice)."""
        info = spec.info
        arguments = _closed_arguments(spec)
        structured = _is_structured(spec.result_type)
        return cls(
            fn=_tool_function(area, spec),
            name=spec.name,
            title=info.title,
            description=info.description,
            parameters=lean_input(arguments.model_json_schema(by_alias=True)),
            fn_metadata=FuncMetadata(
                arg_model=arguments,
                # The SDK validates each structured result against the model itself, not the published schema.
                output_model=spec.result_type if structured else None,
                output_schema=published_output(spec.result_type) if structured else None,
            ),
            is_async=False,
            context_kwarg=_CONTEXT,
            annotations=_annotations(info.hints),
        )

    async def run(self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False) -> Any:
        properties = self.parameters.get("properties", {})
        misplaced = invalid_arguments.misplaced(self.name, arguments, properties)
        refusal = unknown_arguments(self.name, arguments, properties, misplaced)
        if refusal:
            raise ToolError(refusal)
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and cause.title == self.fn_metadata.arg_model.__name__:
                raise ToolError(invalid_arguments.explain(self.name, cause)) from cause  # the SDK logs the names
            raise


def _is_structured(result_type: Any) -> bool:
    """A result with structured content and an output schema: every ToolResult but an image."""
    return (
        isinstance(result_type, type)
        and issubclass(result_type, ToolResult)
        and not issubclass(result_type, ImageResult)
    )


class _ClosedArguments(ArgModelBase):
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")


def _closed_arguments(spec: ToolSpec) -> type[ArgModelBase]:
    """The model the SDK validates a call's arguments with: the tool's parameters, no others."""
    fields: dict[str, Any] = {
        p.name: p.annotation if p.default is inspect.Parameter.empty else (p.annotation, p.default)
        for p in spec.parameters
    }
    return create_model(f"{spec.name}Arguments", __base__=_ClosedArguments, **fields)


def _tool_function(area: ToolArea, spec: ToolSpec) -> Callable[..., CallToolResult]:
    """The function the SDK calls with the validated arguments and the request's Context: a CallToolResult.

    The SDK runs it in a worker thread; its progress notifications go to the client through that Context
    (see reporting.py); an image result has no output schema.
    """
    method = getattr(area, spec.name)

    def call(**arguments: Any) -> CallToolResult:
        with reporting_to(_client_progress(arguments.pop(_CONTEXT))):
            return result(method(**arguments))

    call.__name__ = spec.name
    return agent_errors(call)


def _client_progress(context: Context[Any, Any]) -> ProgressSink:
    """Progress notifications to the client that made this call (none unless it asked, with a progress token).

    Called from the tool's worker thread: the notification is sent on the server's event loop, and a call the
    client cancelled stops here instead of waiting out its time.
    """

    def send(done: float, total: float, message: str) -> None:
        anyio.from_thread.check_cancelled()
        anyio.from_thread.run(context.report_progress, done, total, message)

    return send


def _annotations(hints: Hints) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=hints.read_only,
        destructive_hint=hints.destructive,
        idempotent_hint=hints.idempotent,
        open_world_hint=hints.open_world,
    )


def result(model: Renderable) -> CallToolResult:
    if isinstance(model, ImageResult):  # the picture and where it is saved; no structured content beside it
        png = base64.b64encode(Path(model.path).read_bytes()).decode("ascii")
        return CallToolResult(
            content=[
                ImageContent(type="image", data=png, mime_type="image/png"),
                TextContent(type="text", text=model.to_markdown()),
            ]
        )
    return CallToolResult(
        content=[TextContent(type="text", text=model.to_markdown())], structured_content=model.model_dump(mode="json")
    )


def agent_errors(fn: F) -> F:
    """Anticipated errors carry their fix; anything else is logged here and summarised there."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except JobtrailError as exc:
            raise ToolError(str(exc)) from exc
        except ToolError:
            raise
        except Exception as exc:
            log.exception("tool %s failed", fn.__name__)
            raise ToolError(
                f"jobtrail hit an internal error ({one_line_error(exc)}). "  # an excerpt: never a whole input
                "Nothing was lost: the ledger is unchanged. Retry once; if it repeats, report it with the server log."
            ) from exc

    return wrapper  # type: ignore[return-value]


def add_references(server: MCPServer) -> None:
    """Serve each references/*.md page as a resource, so agents can read them on demand."""
    root = shipped_dir("references", REFERENCE_INDEX)
    if root is None:
        raise InvalidRequestError(
            "The reference pages (references/) are missing from this installation.",
            fix="Reinstall jobtrail: pip install --force-reinstall jobtrail",
        )
    for page in sorted(root.glob("*.md")):
        _add_page(server, page)


def _add_page(server: MCPServer, page: Path) -> None:
    title = page.read_text().partition("\n")[0].lstrip("# ").strip() or page.stem
    description = f"jobtrail reference: {title}."

    @server.resource(
        f"jobtrail://references/{page.stem}",
        name=page.stem,
        title=title,
        description=description,
        mime_type="text/markdown",
    )
    def read() -> str:
        return page.read_text()
