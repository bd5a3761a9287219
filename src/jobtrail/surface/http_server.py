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
"""

from __future__ import annotations

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

    app: Any = server.streamable_http_app(host=host)  # Host/Origin checks for a loopback host
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
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[listener])


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
