"""jobtrail servers as separate processes sharing one ledger, as on several machines: each `jobtrail serve --http`
on a free loopback port (its poller running, as an agent's server runs), each called by a real MCP client.

`serving({"host-a": env_a, "host-b": env_b}, logs=...)` starts one server per host id (JOBTRAIL_HOST_ID), each with
its environment (JOBTRAIL_HOME, JOBTRAIL_LEDGER_URL ...), waits until each answers, and stops them all at the end,
also after a failure. Two servers of one host id are two servers on one machine.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from support.waiting import wait_for

START_TIMEOUT_S = 120  # importing the server under a loaded machine's two cores


@dataclass(frozen=True)
class Server:
    host_id: str
    url: str

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """One tool call in a fresh client session: the structured content an agent gets (an error fails here)."""

        async def go() -> Any:
            async with Client(self.url) as client:
                return await client.call_tool(tool, arguments)

        result = anyio.run(go)
        assert not result.is_error, (tool, arguments, result.content)
        content: dict[str, Any] = result.structured_content
        return content


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def _server(env: dict[str, str], host_id: str, log: Path) -> Iterator[Server]:
    port = _free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jobtrail", "serve", "--http", "--port", str(port)],
            env={**env, "JOBTRAIL_HOST_ID": host_id},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: process.poll() is not None or _accepting(port), START_TIMEOUT_S, f"the {host_id} server to listen"
        )
        assert process.poll() is None, f"the {host_id} server ended: {log.read_text(errors='replace')[-2000:]}"
        yield Server(host_id, f"http://127.0.0.1:{port}/mcp")
    finally:
        process.terminate()
        process.wait(timeout=60)


@contextmanager
def serving(servers: list[tuple[str, dict[str, str]]], logs: Path) -> Iterator[list[Server]]:
    """One server per (host id, environment); the n-th one's output goes to `logs`/server-<n>-<host id>.log."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(_server(env, host, logs / f"server-{n}-{host}.log"))
            for n, (host, env) in enumerate(servers)
        ]
