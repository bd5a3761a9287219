"""How fast the MCP server starts, next to a one-tool server on the same SDK, and what tools/list weighs.

Figures, medians over --runs with the two servers interleaved (so load falls on both alike; this machine is
shared, so the load average is printed beside them):
  import              `import jobtrail.surface.server` in a fresh interpreter, and the SDK's own import for scale.
                      Target < 500 ms.
  start -> tools/list `jobtrail serve` started over stdio until tools/list is answered (mcp Client). Target < 800 ms.
  round trip          start -> initialize -> tools/list -> one cheap call (jobtrail's ps, the minimal server's ping)
                      answered, with the mcp Client; and through the MCP Inspector's CLI when it is installed
                      (`make test` installs it under .tools/). Target: within 1.15x of the minimal server.
  tools/list bytes    the response on the wire, and each tool's share (input and output schema). Target < 40 KB.

Usage: python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = [sys.executable, str(ROOT / "bench" / "minimal_server.py")]
JOBTRAIL = [sys.executable, "-m", "jobtrail", "serve"]
INSPECTOR = ROOT / ".tools" / "node_modules" / ".bin" / "mcp-inspector"
# A cheap call of each server: no argument, an answer from its own state.
CHEAP_CALL = {"minimal": "ping", "jobtrail": "ps"}


def child_env(home: str) -> dict[str, str]:
    """The servers' environment: an installed package has its bytecode compiled, so the warm-up run may write it."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "JOBTRAIL_HOME": home}


def import_ms(module: str, env: dict[str, str]) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout) * 1000


async def client_ms(command: list[str], env: dict[str, str], call: str | None) -> float:
    """Start the server, list its tools (and make one call): milliseconds until the last answer came."""
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    started = time.perf_counter()
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        assert tools, "the server listed no tools"
        if call is not None:
            result = await client.call_tool(call, {})
            assert not result.is_error, result.content
        return (time.perf_counter() - started) * 1000


def inspector_ms(command: list[str], env: dict[str, str], *method: str) -> float:
    started = time.perf_counter()
    subprocess.run([str(INSPECTOR), "--cli", *command, *method], env=env, capture_output=True, check=True)
    return (time.perf_counter() - started) * 1000


def tools_list_wire(env: dict[str, str]) -> tuple[int, list[dict]]:
    """The tools/list response as the server writes it on stdout: its bytes, and the tools it lists."""
    server = subprocess.Popen(
        JOBTRAIL, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert server.stdin is not None and server.stdout is not None
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ):
        server.stdin.write(json.dumps(message).encode() + b"\n")
    server.stdin.flush()
    line = next(line for line in server.stdout if json.loads(line).get("id") == 2)
    server.stdin.close()
    server.wait(timeout=30)
    return len(line), json.loads(line)["result"]["tools"]


def size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()) if value else 0


def paired(runs: int, measure: Callable[[str], float]) -> dict[str, float]:
    """Each server measured once per round, alternately; the median of each."""
    times: dict[str, list[float]] = {"minimal": [], "jobtrail": []}
    for _ in range(runs):
        for name in times:
            times[name].append(measure(name))
    return {name: statistics.median(values) for name, values in times.items()}


def report(label: str, medians: dict[str, float]) -> None:
    ratio = medians["jobtrail"] / medians["minimal"]
    print(f"{label}: jobtrail {medians['jobtrail']:.0f} ms, minimal {medians['minimal']:.0f} ms, {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    commands = {"minimal": MINIMAL, "jobtrail": JOBTRAIL}
    with tempfile.TemporaryDirectory() as home:
        env = child_env(home)
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; medians of {runs} runs")
        for command in commands.values():  # warm the page cache and bytecode, as a user's second start would be
            anyio.run(client_ms, command, env, None)
        server = statistics.median(import_ms("jobtrail.surface.server", env) for _ in range(runs))
        sdk = statistics.median(import_ms("mcp.server.mcpserver", env) for _ in range(runs))
        print(f"import jobtrail.surface.server: {server:.0f} ms (the SDK alone: {sdk:.0f} ms; target < 500 ms)")
        listed = paired(runs, lambda name: anyio.run(client_ms, commands[name], env, None))
        report("start -> tools/list answered (target jobtrail < 800 ms)", listed)
        called = paired(runs, lambda name: anyio.run(client_ms, commands[name], env, CHEAP_CALL[name]))
        report("round trip, mcp Client: start, initialize, tools/list, one call (target <= 1.15x)", called)
        if INSPECTOR.exists():
            inspected = paired(runs, lambda name: inspector_ms(commands[name], env, "--method", "tools/list"))
            report("round trip, MCP Inspector CLI --method tools/list (target <= 1.15x)", inspected)
            calls = paired(
                runs,
                lambda name: inspector_ms(
                    commands[name], env, "--method", "tools/call", "--tool-name", CHEAP_CALL[name]
                ),
            )
            report("round trip, MCP Inspector CLI --method tools/call (target <= 1.15x)", calls)
        else:
            print(f"MCP Inspector CLI: not installed at {INSPECTOR.relative_to(ROOT)} (make test installs it)")
        wire, tools = tools_list_wire(env)
        print(f"tools/list on the wire: {wire} bytes, {len(tools)} tools (target < 40960)")
        for tool in sorted(tools, key=size, reverse=True):
            print(
                f"  {tool['name']:<17} {size(tool):>6} bytes: input schema {size(tool.get('inputSchema')):>5}, "
                f"output schema {size(tool.get('outputSchema')):>5}"
            )
        print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
