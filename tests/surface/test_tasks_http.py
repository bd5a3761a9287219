"""MCP tasks over streamable HTTP with a bearer token (a real `jobtrail serve --http`, raw JSON-RPC): a task belongs
to the token that created it, in any session of that token and across restarts; under another token, or over
stdio (no authorization context), it does not exist."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from support.rpc_stdio import StdioPeer

TOKEN_A = "first-token-of-the-tasks-test-0123456789"
TOKEN_B = "second-token-of-the-tasks-test-987654321"
START_TIMEOUT_S = 120


@contextmanager
def _serving(home: Path, token: str) -> Iterator[str]:
    """`jobtrail serve --http` on a free loopback port with `token`; yields its URL."""
    env = {**os.environ, "JOBTRAIL_HOME": str(home), "JOBTRAIL_AUTH_TOKEN": token}
    command = [sys.executable, "-m", "jobtrail", "serve", "--http", "--host", "127.0.0.1", "--port", "0"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    stderr = proc.stderr
    assert stderr is not None
    threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True).start()
    try:
        while not (found := re.search(r"serving MCP at (http://\S+/mcp)", lines.get(timeout=START_TIMEOUT_S))):
            pass
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class HttpSession:
    """One MCP session over streamable HTTP, initialized at 2025-11-25, every request with the bearer token."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.http, self.next_id = url, httpx2.Client(timeout=60), 0
        self.headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
        }
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        self.initialized = self.request("initialize", init)
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _post(self, message: dict[str, Any]) -> httpx2.Response:
        answer = self.http.post(self.url, content=json.dumps(message), headers=self.headers)
        session = answer.headers.get("mcp-session-id")
        if session:
            self.headers["Mcp-Session-Id"] = session
        return answer

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        answer = self._post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert answer.status_code == 200, answer.text
        if answer.headers["content-type"].startswith("text/event-stream"):
            messages = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
        else:
            messages = [answer.json()]
        reply: dict[str, Any] = next(m for m in messages if m.get("id") == self.next_id)
        return reply

    def close(self) -> None:
        self.http.close()


def test_a_task_belongs_to_the_token_that_created_it(tmp_path):
    home = tmp_path / "home"
    with _serving(home, TOKEN_A) as url:
        first = HttpSession(url, TOKEN_A)
        assert first.initialized["result"]["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
        created = first.request(
            "tools/call", {"name": "wait", "arguments": {"job_id": "jt-missing0"}, "task": {"ttl": 3_600_000}}
        )
        task_id = created["result"]["task"]["taskId"]
        assert created["result"]["task"]["status"] == "failed"
        another_session = HttpSession(url, TOKEN_A)  # the same token: the same context
        assert another_session.request("tasks/get", {"taskId": task_id})["result"]["status"] == "failed"
        first.close()
        another_session.close()
    with _serving(home, TOKEN_B) as url:
        stranger = HttpSession(url, TOKEN_B)
        assert stranger.request("tasks/get", {"taskId": task_id})["error"]["code"] == -32602
        assert stranger.request("tasks/result", {"taskId": task_id})["error"]["code"] == -32602
        assert stranger.request("tasks/list", {})["result"]["tasks"] == []
        stranger.close()
    with StdioPeer(home) as local:
        assert local.request("tasks/list", {})["tasks"] == []
    with _serving(home, TOKEN_A) as url:
        again = HttpSession(url, TOKEN_A)
        listed = again.request("tasks/list", {})["result"]["tasks"]
        assert [t["taskId"] for t in listed] == [task_id]
        assert again.request("tasks/result", {"taskId": task_id})["result"]["isError"] is True
        again.close()
