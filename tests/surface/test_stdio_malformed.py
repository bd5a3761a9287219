"""A malformed JSON-RPC line on stdio gets its JSON-RPC error (issue 28 item 8), from a real `jobtrail serve` process:
-32700 for a line that is not JSON, -32600 (with the request's id where it has one) for JSON that is no JSON-RPC
message; the session goes on serving. The MCP SDK alone answers nothing to either."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ANSWER_TIMEOUT_S = 60  # the first answer waits for the server to start
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def test_malformed_lines_get_json_rpc_errors_and_the_session_goes_on(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JOBTRAIL_LEDGER_URL"} | {"JOBTRAIL_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobtrail", "serve"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    answers: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None and proc.stdin is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: [answers.put(line) for line in stdout], daemon=True).start()

    def send(line: str) -> dict[str, Any]:
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        answer: dict[str, Any] = json.loads(answers.get(timeout=ANSWER_TIMEOUT_S))
        return answer

    try:
        not_json = send('{"jsonrpc": "2.0", "id": 3, "method": "tools/list"')  # cut short
        assert not_json["id"] is None and not_json["error"]["code"] == -32700, not_json
        assert not_json["error"]["message"].startswith("Parse error: the line is not JSON")
        misspelt = send(json.dumps({"jsonrpc": "2.0", "id": 7, "mthod": "tools/list"}))
        assert misspelt["id"] == 7 and misspelt["error"]["code"] == -32600, misspelt
        assert "(missing: error, method, result)" in misspelt["error"]["message"]
        not_an_object = send("[1, 2]")
        assert not_an_object["id"] is None and not_an_object["error"]["code"] == -32600, not_an_object
        assert send(json.dumps(INITIALIZE))["result"]["serverInfo"]["name"] == "jobtrail"
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        listed = send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        assert {tool["name"] for tool in listed["result"]["tools"]} >= {"submit", "ps", "inspect"}
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
