"""`jobtrail serve --http` as a real process: beyond loopback it refuses to start without JOBTRAIL_AUTH_TOKEN,
then answers 401 to a request without the token or with a wrong one and serves a real MCP client that sends
it; on loopback the Host/Origin checks stay on."""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TOKEN = "s3cr3t-token-for-the-http-test-0123456789"
START_TIMEOUT_S = 60
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _env(tmp_path: Path, token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JOBTRAIL_AUTH_TOKEN"}
    env["JOBTRAIL_HOME"] = str(tmp_path / "home")
    if token is not None:
        env["JOBTRAIL_AUTH_TOKEN"] = token
    return env


def _serve(host: str, env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "jobtrail", "serve", "--http", "--host", host, "--port", "0"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@contextmanager
def serving(host: str, env: dict[str, str]) -> Iterator[int]:
    """A server process on `host`; yields the port it bound (from the line it prints on stderr)."""
    proc = _serve(host, env)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    stderr = proc.stderr
    threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=START_TIMEOUT_S)  # raises queue.Empty if the server never says it serves
            found = re.search(r"serving MCP at http://\S+:(\d+)/mcp", line)
            if found:
                yield int(found.group(1))
                return
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _lan_address() -> str | None:
    """This machine's address on its default route, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.2", "::"])
def test_an_exposed_address_is_refused_without_a_token(tmp_path, host):
    done = subprocess.run(
        [sys.executable, "-m", "jobtrail", "serve", "--http", "--host", host, "--port", "0"],
        env=_env(tmp_path, None),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    assert done.returncode == 2, done.stderr
    assert f"Not serving on {host}" in done.stderr and "JOBTRAIL_AUTH_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "home").exists()  # nothing started


def test_a_weak_token_is_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "jobtrail", "serve", "--http", "--host", "0.0.0.0", "--port", "0"],
        env=_env(tmp_path, "short"),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    assert done.returncode == 2 and "too weak" in done.stderr, done.stderr


def test_with_a_token_every_request_needs_it(tmp_path):
    host = _lan_address() or "0.0.0.0"
    with serving(host, _env(tmp_path, TOKEN)) as port:
        target = _lan_address() or "127.0.0.1"
        url = f"http://{target}:{port}/mcp"
        body = json.dumps(INITIALIZE)
        with httpx2.Client(timeout=30) as http:
            for authorization in (None, "Bearer wrong-token-wrong-token-00", f"Basic {TOKEN}", f"Bearer {TOKEN}x"):
                headers = {**MCP_HEADERS, **({"Authorization": authorization} if authorization else {})}
                answer = http.post(url, content=body, headers=headers)
                assert answer.status_code == 401, (authorization, answer.status_code)
                assert answer.headers["WWW-Authenticate"].startswith("Bearer")
                assert TOKEN not in answer.text
            assert http.get(url).status_code == 401
            accepted = http.post(url, content=body, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"})
            assert accepted.status_code == 200, accepted.text

        async def use() -> tuple[set[str], dict]:
            client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
            async with client, Client(streamable_http_client(url, http_client=client)) as mcp:
                tools = {tool.name for tool in (await mcp.list_tools()).tools}
                listed = await mcp.call_tool("ps", {})
                return tools, listed.structured_content or {}

        tools, listed = anyio.run(use)
        assert {"submit", "ps", "validate_dataset"} <= tools
        assert listed["jobs"] == []


def test_loopback_serves_without_a_token_and_checks_host_and_origin(tmp_path):
    with serving("127.0.0.1", _env(tmp_path, None)) as port:
        url = f"http://127.0.0.1:{port}/mcp"
        body = json.dumps(INITIALIZE)
        with httpx2.Client(timeout=30) as http:
            assert http.post(url, content=body, headers=MCP_HEADERS).status_code == 200
            rebound = http.post(url, content=body, headers={**MCP_HEADERS, "Host": f"evil.example:{port}"})
            assert rebound.status_code == 421
            foreign = http.post(url, content=body, headers={**MCP_HEADERS, "Origin": "http://evil.example"})
            assert foreign.status_code == 403
