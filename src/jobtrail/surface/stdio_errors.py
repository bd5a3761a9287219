"""A malformed line on stdio gets its JSON-RPC error, as JSON-RPC 2.0 (section 5) asks: a line that is not JSON gets
-32700 (parse error), JSON that is no JSON-RPC message gets -32600 (invalid request); the id is the request's where it
has a usable one, else null.

Written by hand: the MCP SDK's stdio transport (mcp 2.x, server/stdio.py) hands such a line to the session as an
exception, and its dispatcher logs it at debug level and answers nothing, so a client that sent a broken request waits
for ever. The SDK has no hook for it; `AnswersMalformed` wraps the read stream the dispatcher reads (async iteration,
`last_context`: what jsonrpc_dispatcher.py uses of it), answers each exception on the write stream and passes every
message on unchanged.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError


class AnswersMalformed:
    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the SDK's ContextReceiveStream keeps it per message)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item  # type: ignore[no-any-return]
            await self._write.send(SessionMessage(answer(item)))

    def __aiter__(self) -> AnswersMalformed:
        return self

    async def __anext__(self) -> SessionMessage:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnswersMalformed:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()


def answer(exc: Exception) -> types.JSONRPCError:
    """The JSON-RPC error for a line the transport could not read as a message."""
    problems = exc.errors() if isinstance(exc, ValidationError) else []
    if not problems or any(p["type"] == "json_invalid" for p in problems):
        said = problems[0]["msg"] if problems else str(exc)
        error = types.ErrorData(code=types.PARSE_ERROR, message=f"Parse error: the line is not JSON ({said}).")
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=error)
    sent: dict[str, Any] = next((p["input"] for p in problems if isinstance(p.get("input"), dict)), {})
    given = sent.get("id")
    usable = given if isinstance(given, str) or (isinstance(given, int) and not isinstance(given, bool)) else None
    missing = sorted({str(p["loc"][-1]) for p in problems if p["type"] == "missing" and p["loc"]})
    detail = f" (missing: {', '.join(missing)})" if missing else ""
    error = types.ErrorData(
        code=types.INVALID_REQUEST,
        message=f"Invalid request: the JSON is not a JSON-RPC 2.0 request, notification or response{detail}.",
    )
    return types.JSONRPCError(jsonrpc="2.0", id=usable, error=error)
