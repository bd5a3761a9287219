"""A raw JSON-RPC client of `jobtrail serve` over stdio: the messages exactly as a client writes them, for what the
SDK's client does not send (task-augmented calls, tasks/*) and the edge cases of a protocol.

Every read is bounded: a reply or a notification that does not come fails the test after its timeout.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODERN = ("2026-07-28",)  # the versions without a handshake


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = str(error.get("message"))


class StdioPeer:
    """One `jobtrail serve` process and the lines it writes; notifications are kept in order of arrival.

    A handshake version (2025-11-25 and before) initializes first; at 2026-07-28 there is no handshake and every
    request carries the envelope in its `_meta` (version, client info, the capabilities given)."""

    def __init__(
        self, home: Path, protocol_version: str = "2025-11-25", capabilities: dict[str, Any] | None = None
    ) -> None:
        env = {**os.environ, "JOBTRAIL_HOME": str(home)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jobtrail", "serve"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._next_id = 0
        self.envelope: dict[str, Any] = {}
        threading.Thread(target=self._read, daemon=True).start()
        if protocol_version in MODERN:
            self.envelope = {
                "io.modelcontextprotocol/protocolVersion": protocol_version,
                "io.modelcontextprotocol/clientInfo": {"name": "raw-test-client", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": capabilities or {},
            }
            return
        self.initialized = self.request(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "capabilities": {"tasks": {"list": {}, "cancel": {}}},
                "clientInfo": {"name": "raw-test-client", "version": "0"},
            },
        )
        self.notify("notifications/initialized", {})

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            if "id" in message and "method" not in message:
                self._replies.put(message)
            else:
                with self._lock:
                    self.notifications.append(message)

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
        params = dict(params or {})
        if self.envelope:
            params["_meta"] = {**self.envelope, **params.get("_meta", {})}
        self._write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._write({"jsonrpc": "2.0", "method": method, "params": params})

    def _write(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def reply(self, request_id: int, timeout: float = 60.0) -> dict[str, Any]:
        """The result of request `request_id` (replies to others that come first are kept for their turn)."""
        deadline = time.monotonic() + timeout
        held: list[dict[str, Any]] = []
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no reply to request {request_id} within {timeout}s")
                try:
                    message = self._replies.get(timeout=left)
                except queue.Empty:
                    continue
                if message["id"] != request_id:
                    held.append(message)
                    continue
                if "error" in message:
                    raise RpcError(message["error"])
                result: dict[str, Any] = message["result"]
                return result
        finally:
            for message in held:
                self._replies.put(message)

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        return self.reply(self.send(method, params), timeout)

    def call(self, tool: str, arguments: dict[str, Any], **params: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments, **params})

    def notified(self, check: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
        """The first notification `check` accepts, waiting at most `timeout` seconds for it."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = next((n for n in self.notifications if check(n)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.05)

    def kill(self) -> None:
        """Stop the server the hard way: no shutdown, nothing flushed."""
        self.process.kill()
        self.process.wait(timeout=10)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> StdioPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
