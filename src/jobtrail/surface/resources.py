"""Job resources: a job's receipt and its metric series as JSON, for clients that read resources, and the
notifications that say when to read them again.

They hold what the inspect and metrics tools return as structured content (the same models), so a
resource and a tool call never disagree.

A client subscribes to a job's resources (resources/subscribe; at the 2026-07-28 protocol, a subscriptions/listen
stream naming their URIs) and is sent notifications/resources/updated with the URI whenever the job changes state,
commits a checkpoint, raises an alert, is held or ends (what changed is in its _meta, CHANGE_META). The changes come
from the change feed that `serve`'s poller fills (service/change_feed.py); ResourceUpdates hands each to the
server's event loop and sends it there, so the poller never waits on a client. The SDK serves subscriptions/listen
itself (its SubscriptionBus, which this publishes to) and sends the notification (Connection.send_resource_updated);
resources/subscribe's handlers, and who subscribed to what, are this module's: the SDK keeps no subscriptions for
the handshake-era protocol.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams
from pydantic import BaseModel

from jobtrail.errors import JobtrailError
from jobtrail.service.change_feed import ChangeFeed, JobChange
from jobtrail.surface.toolspec import service_of

if TYPE_CHECKING:
    from mcp.server.connection import Connection
    from mcp.server.context import ServerRequestContext

    from jobtrail.surface.toolspec import ServiceSource

log = logging.getLogger("jobtrail.surface.resources")
RECEIPT_URI = "jobtrail://jobs/{job_id}"
METRICS_URI = "jobtrail://jobs/{job_id}/metrics"
_JOB_URI = re.compile(r"jobtrail://jobs/(?P<job_id>[^/?#]+)(?:/metrics)?")
UPDATES = "jobtrail.resource_updates"  # the lifespan context's key: the scope a request's client belongs to
BACKLOG = 1000  # changes waiting for the event loop; a loop that far behind drops the next (each says "read again")
SEND_WAIT_S = 5.0  # one notification to one client, at most: a client that stopped reading delays no other
# A handshake-era notification's _meta says what changed, so a client need not read the resource to know; a
# subscriptions/listen stream's frames carry the SDK's own _meta (the subscription id) and only the URI.
CHANGE_META = "jobtrail/change"


def add_job_resources(server: MCPServer, service: ServiceSource, updates: ResourceUpdates | None = None) -> None:
    for uri, name, title, description, read in (
        (
            RECEIPT_URI,
            "job_receipt",
            "A job's receipt",
            "The job's status, termination_reason, progress and every attempt's receipt (placement, config and "
            "script sha256, data manifest, environment, checkpoints, metrics): inspect(job_id)'s structured content. "
            "Subscribe to be told when it changes state, commits a checkpoint, raises an alert or ends.",
            lambda job_id: service_of(service).inspect(job_id),
        ),
        (
            METRICS_URI,
            "job_metrics",
            "A job's metric series",
            "Every metric the job's steps logged as {name: [[step, value], ...]}, attempts joined, with last values "
            "and trends: metrics(job_id)'s structured content.",
            lambda job_id: service_of(service).metrics(job_id),
        ),
    ):
        server.resource(uri, name=name, title=title, description=description, mime_type="application/json")(
            _as_json(read)
        )
    if updates is not None:
        updates.serve(server)


def _as_json(read: Callable[[str], BaseModel]) -> Callable[[str], str]:
    """The resource function for a job id: what `read` returns for it, as JSON."""

    def job_resource(job_id: str) -> str:
        try:
            return read(job_id).model_dump_json(indent=2)
        except JobtrailError as exc:  # an unknown job id: the message says what to do
            raise ResourceError(str(exc)) from exc

    return job_resource


def job_uris(job_id: str) -> tuple[str, str]:
    return RECEIPT_URI.format(job_id=job_id), METRICS_URI.format(job_id=job_id)


class ResourceUpdates:
    """notifications/resources/updated for the job resources: `lifespan` runs the delivery on the server's event
    loop, `serve` registers resources/subscribe and resources/unsubscribe."""

    def __init__(self, feed: ChangeFeed, service: ServiceSource, bus: SubscriptionBus) -> None:
        self._feed = feed
        self._service = service
        self._bus = bus  # the server's (MCPServer(subscriptions=bus)): its subscriptions/listen streams read it
        self._scopes: list[_Scope] = []

    def serve(self, server: MCPServer) -> None:
        # MCPServer declares no resources/subscribe of its own and has no public way to add a request handler.
        lowlevel = server._lowlevel_server
        lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, self._subscribe)
        lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, self._unsubscribe)

    @asynccontextmanager
    async def lifespan(self, _server: MCPServer) -> AsyncIterator[dict[str, Any]]:
        """The server's lifespan (one per stdio connection, one for every HTTP session): changes are delivered on
        its event loop until it ends."""
        send, receive = anyio.create_memory_object_stream[JobChange](BACKLOG)
        scope = _Scope(anyio.lowlevel.current_token(), send)
        self._scopes.append(scope)
        stop = self._feed.subscribe(scope.hand_over)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._deliver, scope, receive)
                yield {UPDATES: scope}
                tasks.cancel_scope.cancel()
        finally:
            stop()
            self._scopes.remove(scope)
            send.close()

    async def _deliver(self, scope: _Scope, receive: MemoryObjectReceiveStream[JobChange]) -> None:
        async with receive:
            async for change in receive:
                meta = {
                    CHANGE_META: {"change": change.change.value, "attempt": change.attempt, "detail": change.detail}
                }
                for uri in job_uris(change.job_id):
                    for connection in scope.subscribers(uri):
                        with anyio.move_on_after(SEND_WAIT_S):
                            # Never raises: a client that went away drops it.
                            await connection.send_resource_updated(uri, meta=meta)
                    if scope is self._scopes[0]:  # one scope publishes: the listen streams are the whole server's
                        await self._bus.publish(ResourceUpdated(uri=uri))

    async def _subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        uri = str(params.uri)
        await self._check(uri)
        scope: _Scope = ctx.lifespan_context[UPDATES]
        scope.add(_client(ctx), uri)
        return EmptyResult()

    async def _unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        scope: _Scope = ctx.lifespan_context[UPDATES]
        scope.remove(_client(ctx), str(params.uri))
        return EmptyResult()

    async def _check(self, uri: str) -> None:
        """Refuse a URI that never changes, or names no job (read in a worker thread: the ledger is not async)."""
        match = _JOB_URI.fullmatch(uri)
        if match is None:
            raise MCPError(
                INVALID_PARAMS,
                f"{uri} never changes: only a job's resources can be subscribed to "
                "(jobtrail://jobs/{job_id} and jobtrail://jobs/{job_id}/metrics).",
                data={"uri": uri},
            )
        job_id = match["job_id"]
        if not await anyio.to_thread.run_sync(self._known, job_id):
            raise MCPError(
                INVALID_PARAMS,
                f"No job {job_id!r}: subscribe to a job id that submit returned or ps lists, e.g. "
                f"jobtrail://jobs/jt-4f9k2m7q.",
                data={"uri": uri},
            )

    def _known(self, job_id: str) -> bool:
        return service_of(self._service).ledger.get_run(job_id) is not None


def _client(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The client a request came from. Each request gets a ServerSession of its own, a proxy over the client's
    connection: the connection is what stays, and what a notification goes out on."""
    connection: Connection = ctx.session._connection
    return connection


class _Scope:
    """One lifespan's clients (a stdio connection; every session of an HTTP server) and what each subscribed to."""

    def __init__(self, token: anyio.lowlevel.EventLoopToken, send: MemoryObjectSendStream[JobChange]) -> None:
        self._token = token
        self._send = send
        self._subscribed: dict[Connection, set[str]] = {}

    def hand_over(self, change: JobChange) -> None:
        """The feed's listener, on the poller's thread: the change goes to the event loop, which sends it."""
        try:
            anyio.from_thread.run_sync(self._send.send_nowait, change, token=self._token)
        except anyio.WouldBlock:
            log.warning("resource updates: %d changes wait already; %s not announced", BACKLOG, change)
        except (anyio.ClosedResourceError, anyio.RunFinishedError):
            pass  # the server is stopping

    def add(self, connection: Connection, uri: str) -> None:
        if connection not in self._subscribed:
            self._subscribed[connection] = set()
            connection.exit_stack.callback(self._subscribed.pop, connection, None)  # the client went away
        self._subscribed[connection].add(uri)

    def remove(self, connection: Connection, uri: str) -> None:
        self._subscribed.get(connection, set()).discard(uri)

    def subscribers(self, uri: str) -> list[Connection]:
        return [connection for connection, uris in self._subscribed.items() if uri in uris]
