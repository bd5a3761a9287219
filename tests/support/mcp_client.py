"""The MCP SDK's in-memory client, as tests drive a server built by build_server: a real client session (the
tools' JSON schemas, validation and structured content as an agent gets them) without a transport.

Each helper opens one session and closes it; `in_session` runs several calls in one session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from mcp import Client
from mcp.types import CallToolResult, Tool

T = TypeVar("T")


def in_session(server: Any, work: Callable[[Client], Awaitable[T]]) -> T:
    """`await work(client)` in one client session with `server`, from synchronous test code."""

    async def go() -> T:
        async with Client(server) as client:
            return await work(client)

    return anyio.run(go)


def call_tool(server: Any, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    return in_session(server, lambda client: client.call_tool(tool, arguments))


def list_tools(server: Any) -> list[Tool]:
    async def tools(client: Client) -> list[Tool]:
        return (await client.list_tools()).tools

    return in_session(server, tools)
