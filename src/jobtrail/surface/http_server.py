"""`jobtrail serve --http`: the MCP server over streamable HTTP, closed to strangers.

Through this server an agent starts jobs and reads local files (a dataset, a model directory), so:
- on loopback (127.0.0.1, ::1, localhost) the SDK's Host/Origin checks stay on: a web page the user
  visits cannot reach the server by rebinding a DNS name to 127.0.0.1;
- on any other address (0.0.0.0, a LAN address, and also 127.0.0.2 and the rest of 127/8, where the
  SDK checks nothing) the server refuses to start unless JOBTRAIL_AUTH_TOKEN is set;
- on such an address it also refuses to start unless JOBTRAIL_DATA_ROOTS names the folders clients may read
  (preflight/data_roots.py; the defaults, the working directory and the home, are for a server of one's own);
- with a token set, on any address, every request must carry `Authorization: Bearer <token>`; any
  other gets 401 (the comparison takes constant time).
Behind a reverse proxy, serve on 127.0.0.1 and let the proxy forward with Host 127.0.0.1:PORT (nginx's
default, $proxy_host); the README shows a configuration.

Connections are dropped before they can pile up, whoever opens them (the checks above run only once a request
has come in whole):
- a connection must deliver a whole request (head and body) within REQUEST_TIMEOUT_S of connecting, or of the
  response before it; an idle kept-alive one closes after IDLE_TIMEOUT_S (uvicorn's timeout_keep_alive);
- at most MAX_CONNECTIONS at once: one more is closed as it connects, before a byte is read; requests beyond
  MAX_CONNECTIONS at once get 503 (uvicorn's limit_concurrency); a request head is at most MAX_HEAD_BYTES (h11's
  max incomplete event size: 400 beyond);
- at most MAX_SESSIONS MCP sessions at once (503 beyond), each closed after SESSION_IDLE_TIMEOUT_S without a
  request (the MCP SDK's max_sessions and session_idle_timeout).
uvicorn has no request-read timeout and no cap on open connections (its timeout_keep_alive starts only after a
response, and limit_concurrency answers only a request that has arrived): _guarded_h11 adds both by hand.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from jobtrail.errors import InvalidRequestError
from jobtrail.util.roots import DATA_ROOTS_ENV, data_roots

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_VARIABLE = "JOBTRAIL_AUTH_TOKEN"
LOOPBACK = ("127.0.0.1", "::1", "localhost")  # exactly those the SDK guards with Host/Origin checks
MIN_TOKEN_CHARS = 16
REQUEST_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 5
MAX_CONNECTIONS = 64
MAX_HEAD_BYTES = 16 * 1024
MAX_SESSIONS = 32
SESSION_IDLE_TIMEOUT_S = 30 * 60
_MAKE_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def auth_token(host: str) -> str | None:
    """The bearer token every request must carry (None: loopback without a token), or a refusal to serve: beyond
    loopback, without a token or without data roots chosen for what clients may read."""
    token = os.environ.get(TOKEN_VARIABLE) or None
    if token is None and host not in LOOPBACK:
        raise InvalidRequestError(
            f"Not serving on {host}: it is not loopback, and without {TOKEN_VARIABLE} anyone who reaches it could "
            "start jobs and read this machine's files.",
            fix=f"Set {TOKEN_VARIABLE} (e.g. `export {TOKEN_VARIABLE}=$({_MAKE_TOKEN})`) and have clients send "
            "'Authorization: Bearer <token>', or serve on 127.0.0.1 behind a reverse proxy (README).",
        )
    if token is not None and (len(token) < MIN_TOKEN_CHARS or token != token.strip()):
        raise InvalidRequestError(
            f"{TOKEN_VARIABLE} is too weak: at least {MIN_TOKEN_CHARS} characters, no surrounding spaces.",
            fix=f"export {TOKEN_VARIABLE}=$({_MAKE_TOKEN})",
        )
    if host not in LOOPBACK and not data_roots().explicit:
        raise InvalidRequestError(
            f"Not serving on {host}: it is not loopback, and {DATA_ROOTS_ENV} is not set, so its clients could read "
            "data from the server's working directory and its whole home.",
            fix=f"Set {DATA_ROOTS_ENV} to the folders clients may read data, models and reward files from (absolute, "
            f"separated by {os.pathsep!r}), e.g. `export {DATA_ROOTS_ENV}=/srv/datasets`.",
        )
    return token


def serve_http(server: MCPServer, host: str, port: int, token: str | None) -> None:
    """Serve at http://HOST:PORT/mcp until interrupted; port 0 takes a free port (the line on stderr names it)."""
    import uvicorn

    app: Any = server.streamable_http_app(  # Host/Origin checks for a loopback host
        host=host, max_sessions=MAX_SESSIONS, session_idle_timeout=SESSION_IDLE_TIMEOUT_S
    )
    if token is not None:
        app = BearerAuth(app, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(128)  # connections made from now on wait for the server, never refused
    bound = listener.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    guard = "bearer token required" if token else "loopback only, Host/Origin checked"
    print(f"jobtrail: serving MCP at http://{shown}:{bound}/mcp ({guard})", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        http=_guarded_h11(),
        timeout_keep_alive=IDLE_TIMEOUT_S,
        limit_concurrency=MAX_CONNECTIONS,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )
    uvicorn.Server(config).run(sockets=[listener])


def _guarded_h11() -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a request-read timeout and a cap on open connections (the module's docstring
    says why by hand). Built when serving: uvicorn is imported only then."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(H11Protocol):
        _reading: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]  # uvicorn declares a Transport
            if len(self.connections) > MAX_CONNECTIONS:
                transport.close()
                return
            self._await_request()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
                self._stop_waiting()  # the request is in whole (or the connection is done with)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_request()  # the next request on a kept-alive connection has as long

        def _await_request(self) -> None:
            self._stop_waiting()
            self._reading = self.loop.call_later(REQUEST_TIMEOUT_S, self.transport.close)

        def _stop_waiting(self) -> None:
            if self._reading is not None:
                self._reading.cancel()
                self._reading = None

    return GuardedH11


class BearerAuth:
    """ASGI middleware: a request without the right `Authorization: Bearer` header gets 401, nothing else."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._authorized(scope):
            await self.app(scope, receive, send)  # lifespan events, and authorized requests
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        from starlette.responses import JSONResponse

        refusal = JSONResponse(
            {"error": "unauthorized", "error_description": "Send 'Authorization: Bearer <JOBTRAIL_AUTH_TOKEN>'."},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="jobtrail"'},
        )
        await refusal(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._expected)
        return False
