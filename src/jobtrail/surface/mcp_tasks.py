"""MCP tasks: a long call answered at once with a task the client follows to the job's end.

Per the specification (2025-11-25, basic/utilities/tasks) and the extension that carries tasks on
(`io.modelcontextprotocol/tasks`, SEP-2663, for 2026-07-28 clients); what a task says is service/job_tasks.py's.
- submit, evaluate, convert_gguf and wait declare `execution.taskSupport: "optional"`: a client without tasks keeps
  the plain call. A task-augmented call (params.task, with its ttl) runs the plain call (a submit's preflight; a
  wait's look at its job), then answers a CreateTaskResult whose task follows the job the call started or named:
  one task per job, tool and client context, also when the same idempotency key is sent again. Its `_meta` carries
  the call's own text as the model's immediate response.
- tasks/get: the task's state; tasks/result: blocks until the task ends (or the client cancels the request), then
  answers what `inspect` says of the job (summary first) with the creating tool's own fields where inspect has none
  or types them otherwise, so that it matches the tool's outputSchema, as a tool result must; tasks/list pages the
  context's tasks; tasks/cancel cancels the job (a wait task: stops the following only).
- A client context is its bearer token on HTTP with JOBTRAIL_AUTH_TOKEN: a task is visible to that token alone. Over
  stdio, and HTTP on loopback without a token, there is no authorization context: tasks belong to this machine's
  user (whose ledger they are; ps shows the same jobs), their ids are unguessable.
- While the client stays connected, a task it created sends notifications/tasks/status when its status changes, and
  notifications/progress (the step; `_meta` io.modelcontextprotocol/related-task) on the progress token of the
  creating call, until the task ends. After a restart the client polls: the ledger holds every task.

Written by hand, since the SDK (mcp 2.3) has the task types but dispatches none of their methods: the tasks/*
handlers (bound through its Extension interface as MethodBindings) and the task-augmented tools/call. At 2025-11-25
the SDK validates a tools/call result as a CallToolResult below the Extension's interceptor, which would drop a
CreateTaskResult, so that call is answered by a server middleware (TaskCalls), above that check; the 2026-07-28
form (`resultType: "task"`) passes the check and comes from the interceptor. The `tasks` capability of 2025-11-25
is added to the initialize result by that middleware (the SDK derives capabilities from its own handlers only).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    CancelTaskRequestParams,
    CancelTaskResult,
    CreateTaskResult,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    GetTaskResult,
    ListTasksResult,
    PaginatedRequestParams,
    ProgressNotification,
    ProgressNotificationParams,
    RequestParams,
    Task,
    TaskStatusNotification,
    TaskStatusNotificationParams,
    Tool as MCPTool,
    ToolExecution,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from jobtrail.errors import JobtrailError
from jobtrail.results.jobs import InspectResult
from jobtrail.surface.schemas import published_output
from jobtrail.surface.tools_jobs import JobTools
from jobtrail.surface.tools_tasks import TaskTools
from jobtrail.surface.tools_watch import WatchTools
from jobtrail.surface.toolspec import service_of, tools_of

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from jobtrail.service.job_tasks import JobTasks, Outcome, TaskState
    from jobtrail.surface.toolspec import ServiceSource

log = logging.getLogger("jobtrail.surface.mcp_tasks")
T = TypeVar("T")

IDENTIFIER = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
TASK_TOOLS = ("submit", "evaluate", "convert_gguf", "wait")
# Answered as a task at 2026-07-28, where the server decides: the calls that start a job (wait answers in 55 s).
STARTS_JOBS = ("submit", "evaluate", "convert_gguf")
TASKS_VERSION = "2025-11-25"  # the handshake version whose core has tasks
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
RESULT_POLL_S = 1.0  # tasks/result looks at the job this often while it blocks


def with_task_support(tool: MCPTool) -> MCPTool:
    """The tool as tools/list publishes it: the task tools with `execution.taskSupport: "optional"`."""
    if tool.name not in TASK_TOOLS:
        return tool
    return tool.model_copy(update={"execution": ToolExecution(task_support="optional")})


class TaskDesk:
    """The task store's surface: the client context of a request, and the wire shapes of task states and results."""

    def __init__(self, service: ServiceSource) -> None:
        self._source = service
        self._tasks: JobTasks | None = None
        self._followed: set[str] = set()
        self._lock = threading.Lock()

    @property
    def tasks(self) -> JobTasks:
        if self._tasks is None:  # built with the service, on first use: importing the server stays light
            from jobtrail.service.job_tasks import JobTasks

            self._tasks = JobTasks(service_of(self._source))
        return self._tasks

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker thread (the service blocks), its refusals as JSON-RPC errors."""
        from jobtrail.service.job_tasks import BadCursor, TaskEnded, TaskNotFound

        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args))
        except (TaskNotFound, TaskEnded, BadCursor) as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        except JobtrailError as exc:
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None

    async def open(
        self, ctx: ServerRequestContext[Any, Any], tool: str, ttl: int | None, call: dict[str, Any]
    ) -> TaskState:
        return await self.run(self.tasks.open, owner_of(ctx), tool, ttl, call)

    def follow(self, ctx: ServerRequestContext[Any, Any], state: TaskState) -> None:
        """Tell this client of the task's changes while it stays connected (once per task and server)."""
        with self._lock:
            if state.terminal or state.task_id in self._followed:
                return
            self._followed.add(state.task_id)
        token = (ctx.meta or {}).get("progress_token")
        follower = _Follower(self.tasks, owner_of(ctx), state, ctx.session, anyio.lowlevel.current_token(), token)
        threading.Thread(target=follower.run, name=f"jobtrail-task-{state.task_id}", daemon=True).start()

    @staticmethod
    def result(outcome: Outcome) -> dict[str, Any]:
        """tasks/result: the tool result the task ends with, tied to its task."""
        related = {RELATED_TASK: {"taskId": outcome.task_id}}
        if outcome.answer is not None:
            return {**outcome.answer, "_meta": {**(outcome.answer.get("_meta") or {}), **related}}
        receipt = cast(InspectResult, outcome.receipt)
        structured = shaped(outcome.tool, receipt.model_dump(mode="json"), outcome.own or {})
        return {
            "content": [{"type": "text", "text": receipt.to_markdown()}],
            "structuredContent": structured,
            "_meta": related,
        }


class TasksExtension(Extension):
    """tasks/* for both eras, and the 2026-07-28 task answer to tools/call."""

    identifier = IDENTIFIER

    def __init__(self, desk: TaskDesk) -> None:
        self.desk = desk

    def methods(self) -> Sequence[MethodBinding]:
        legacy = frozenset({TASKS_VERSION})
        return (
            MethodBinding("tasks/get", GetTaskRequestParams, self._get),
            MethodBinding("tasks/cancel", CancelTaskRequestParams, self._cancel),
            MethodBinding("tasks/result", GetTaskPayloadRequestParams, self._result, protocol_versions=legacy),
            MethodBinding("tasks/list", PaginatedRequestParams, self._list, protocol_versions=legacy),
            MethodBinding(
                "tasks/update", UpdateTaskParams, self._update, protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS)
            ),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """2026-07-28: a call that starts a job, from a client that declared the extension, answers a task."""
        result = await call_next(ctx)
        if not (modern(ctx) and params.name in STARTS_JOBS and _declares_extension(ctx.meta)):
            return result
        call = (
            result.model_dump(by_alias=True, mode="json", exclude_none=True)
            if isinstance(result, BaseModel)
            else result
        )
        if not isinstance(call, dict) or call.get("resultType", "complete") != "complete":
            return result  # input required first: the client answers it on this request
        from jobtrail.service.job_tasks import started_job

        if started_job(call) is None:
            return result  # nothing runs on (a dry run, a refusal): the answer itself, no task to follow
        state = await self.desk.open(ctx, params.name, None, call)
        return {"resultType": "task", **modern_task(state)}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> HandlerResult:
        state = await self.desk.run(self.desk.tasks.state, owner_of(ctx), params.task_id)
        if not modern(ctx):
            return GetTaskResult(**dict(task_model(state)))
        detailed = modern_task(state)
        if state.terminal:
            outcome = await self.desk.run(self.desk.tasks.outcome, owner_of(ctx), params.task_id)
            if outcome is not None and detailed["status"] == "completed":
                detailed["result"] = self.desk.result(outcome)
        return {"resultType": "complete", **detailed}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> HandlerResult:
        """2025-11-25 refuses to cancel an ended task; the extension acknowledges any cancel of a known task."""
        if not modern(ctx):
            state = await self.desk.run(self.desk.tasks.cancel, owner_of(ctx), params.task_id)
            return CancelTaskResult(**dict(task_model(state)))
        state = await self.desk.run(self.desk.tasks.state, owner_of(ctx), params.task_id)
        if not state.terminal:
            await self.desk.run(self.desk.tasks.cancel, owner_of(ctx), params.task_id)
        return {"resultType": "complete"}

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: GetTaskPayloadRequestParams) -> HandlerResult:
        """The task's result, once it ended: until then this blocks, for as long as the client keeps the request."""
        owner = owner_of(ctx)
        while True:
            outcome = await self.desk.run(self.desk.tasks.outcome, owner, params.task_id)
            if outcome is not None:
                return self.desk.result(outcome)
            await anyio.sleep(RESULT_POLL_S)

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams) -> HandlerResult:
        states, cursor = await self.desk.run(self.desk.tasks.page, owner_of(ctx), params.cursor)
        return ListTasksResult(tasks=[task_model(s) for s in states], next_cursor=cursor)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> HandlerResult:
        """No jobtrail task ever asks for input: an update of a known task is acknowledged and changes nothing."""
        await self.desk.run(self.desk.tasks.state, owner_of(ctx), params.task_id)
        return {"resultType": "complete"}


class UpdateTaskParams(RequestParams):
    """tasks/update (the extension's; the SDK has no type for it)."""

    task_id: str
    input_responses: dict[str, Any] | None = None


class TaskCalls:
    """Server middleware for 2025-11-25: the `tasks` capability in the initialize result, and a task-augmented
    tools/call answered with a CreateTaskResult."""

    def __init__(self, desk: TaskDesk) -> None:
        self.desk = desk

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            return _with_capability(await call_next(ctx))
        params = ctx.params or {}
        requested = params.get("task")
        if ctx.method != "tools/call" or ctx.protocol_version != TASKS_VERSION or not isinstance(requested, Mapping):
            return await call_next(ctx)
        tool = params.get("name")
        if tool not in TASK_TOOLS:
            raise MCPError(
                code=METHOD_NOT_FOUND,
                message=f"{tool!r} does not run as a task (no execution.taskSupport); call it without `task`. "
                f"Tools that do: {', '.join(TASK_TOOLS)}.",
            )
        if tool == "wait":  # the task does the waiting: the call only looks at the job
            arguments = params.get("arguments")
            params = {**params, "arguments": {**(arguments if isinstance(arguments, Mapping) else {}), "timeout_s": 0}}
            ctx = dataclasses.replace(ctx, params=params)
        call = await call_next(ctx)
        if not isinstance(call, dict):
            return call
        ttl = requested.get("ttl")
        state = await self.desk.open(
            ctx, str(tool), ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None, call
        )
        self.desk.follow(ctx, state)
        texts = [block.get("text") for block in call.get("content") or [] if block.get("type") == "text"]
        ending = "tasks/result returns its receipt when the job ends." if state.job_id else "It has ended."
        immediate = f"{texts[0] if texts else ''}\n\nRunning as task {state.task_id}: {ending}".strip()
        return CreateTaskResult(task=task_model(state), _meta={IMMEDIATE_RESPONSE: immediate})


class _Follower:
    """Notifications of one task to the client that created it, from a thread, until the task ends or the client
    leaves: notifications/tasks/status on each change of status, notifications/progress at each new step."""

    def __init__(
        self,
        tasks: JobTasks,
        owner: str,
        state: TaskState,
        session: ServerSession,
        loop: anyio.lowlevel.EventLoopToken,
        progress_token: str | int | None,
    ) -> None:
        self.tasks, self.owner, self.state, self.session, self.loop = tasks, owner, state, session, loop
        self.progress_token = progress_token

    def run(self) -> None:
        last_step = None
        while True:
            time.sleep((self.state.poll_ms or 5_000) / 1000)  # the job's own pace (job_tasks.poll_interval_ms)
            try:
                state = self.tasks.state(self.owner, self.state.task_id)
            except JobtrailError:
                return  # the task is gone (expired, deleted)
            try:
                if self.progress_token is not None and state.step is not None and state.step != last_step:
                    last_step = state.step
                    if not state.terminal:
                        self._send(self._progress(state))
                if state.status != self.state.status:
                    self._send(TaskStatusNotification(params=TaskStatusNotificationParams(**dict(task_model(state)))))
            except Exception:  # the client left, or the server is stopping: nothing more to tell
                log.debug("stopped following task %s", state.task_id, exc_info=True)
                return
            self.state = state
            if state.terminal:
                return

    def _progress(self, state: TaskState) -> ProgressNotification:
        return ProgressNotification(
            params=ProgressNotificationParams(
                progress_token=cast(str | int, self.progress_token),
                progress=float(state.step or 0),
                total=float(state.max_steps) if state.max_steps else None,
                message=state.message,
                _meta={RELATED_TASK: {"taskId": state.task_id}},
            )
        )

    def _send(self, notification: BaseModel) -> None:
        # The session's standalone channel: the creating request has been answered. TaskStatusNotification is not
        # in the SDK's ServerNotification union (types only), so it goes through untyped.
        anyio.from_thread.run(self.session.send_notification, cast(Any, notification), token=self.loop)


def owner_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The client context a task belongs to: its bearer token's digest on HTTP with a token, else this machine's
    user ("local": stdio, and HTTP on loopback without a token)."""
    headers = getattr(ctx.request, "headers", None)
    header = headers.get("authorization") if headers is not None else None
    if isinstance(header, str) and header.lower().startswith("bearer "):
        return "bearer:" + hashlib.sha256(header[7:].strip().encode()).hexdigest()[:32]
    return "local"


def modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def task_model(state: TaskState) -> Task:
    """A task as 2025-11-25 writes it."""
    return Task(
        task_id=state.task_id,
        status=state.status,
        status_message=state.message or None,
        created_at=_iso(state.created_at),
        last_updated_at=_iso(state.updated_at),
        ttl=state.ttl_ms,
        poll_interval=state.poll_ms,
    )


def modern_task(state: TaskState) -> dict[str, Any]:
    """A task as the extension writes it (ttlMs, pollIntervalMs). An error result is `completed` there: `failed` is
    for a JSON-RPC error, which no jobtrail task ends with."""
    status = "completed" if state.status == "failed" else state.status
    task: dict[str, Any] = {
        "taskId": state.task_id,
        "status": status,
        "statusMessage": state.message or None,
        "createdAt": _iso(state.created_at),
        "lastUpdatedAt": _iso(state.updated_at),
        "ttlMs": state.ttl_ms,
        "pollIntervalMs": state.poll_ms,
    }
    return {key: value for key, value in task.items() if value is not None or key == "ttlMs"}


def shaped(tool: str, receipt: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """inspect's receipt (summary first), with the tool's own fields where the receipt has none or types them
    otherwise (a submit's findings and sha256s; its `after` as the job id; a wait's attempt count)."""
    merged = dict(receipt)
    merged.update({key: own[key] for key in _own_fields(tool) if key in own})
    return merged


@functools.cache
def _own_fields(tool: str) -> frozenset[str]:
    results = {spec.name: spec.result_type for area in (JobTools, WatchTools, TaskTools) for spec in tools_of(area)}
    own = published_output(results[tool])["properties"]
    receipt = published_output(InspectResult)["properties"]
    return frozenset(key for key in own if key not in receipt or not _types(receipt[key]) <= _types(own[key]))


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind or ())


def _with_capability(result: HandlerResult) -> HandlerResult:
    """The initialize result with the 2025-11-25 `tasks` capability, when that is the version agreed."""
    if isinstance(result, dict) and result.get("protocolVersion") == TASKS_VERSION:
        capabilities = result.get("capabilities")
        if isinstance(capabilities, dict):
            return {**result, "capabilities": {**capabilities, "tasks": CAPABILITY}}
    return result


def _declares_extension(meta: Mapping[str, Any] | None) -> bool:
    capabilities = (meta or {}).get(CLIENT_CAPABILITIES)
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and IDENTIFIER in extensions


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_support(service: ServiceSource) -> dict[str, Any]:
    """The MCPServer arguments that serve tasks over `service`: the extension and the 2025-11-25 middleware."""
    desk = TaskDesk(service)
    return {"extensions": [TasksExtension(desk)], "middleware": [TaskCalls(desk)]}
