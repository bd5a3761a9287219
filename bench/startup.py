"""How fast the MCP server starts, next to a one-tool server on the same SDK, and what tools/list weighs.

Figures, medians over --runs with the two servers interleaved (so load falls on both alike). This machine is
shared: the load average is printed beside the figures, and so is each server's CPU time until it answered
(read from /proc while it runs), which other processes' load moves far less than wall time.
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
SERVERS = {
    "minimal": [sys.executable, str(ROOT / "bench" / "minimal_server.py")],
    "jobtrail": [sys.executable, "-m", "jobtrail", "serve"],
}
# A cheap call of each server: no argument, an answer from its own state.
CHEAP_CALL = {"minimal": "ping", "jobtrail": "ps"}
INSPECTOR = ROOT / ".tools" / "node_modules" / ".bin" / "mcp-inspector"
HELLO = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}


def child_env(home: str) -> dict[str, str]:
    """The servers' environment: an installed package has its bytecode compiled, so the warm-up run may write it."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "JOBTRAIL_HOME": home}


def import_ms(module: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of importing `module` in a fresh interpreter."""
    code = (
        "import time; t, c = time.perf_counter(), time.process_time(); "
        f"import {module}; print(time.perf_counter() - t, time.process_time() - c)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    wall, cpu = (float(figure) * 1000 for figure in out.stdout.split())
    return wall, cpu


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


def served(command: list[str], env: dict[str, str], call: str | None = None) -> tuple[float, bytes]:
    """The server's CPU milliseconds until it answered tools/list (and the call), and its tools/list line as
    written on stdout. JSON-RPC by hand: nothing in this process competes with the server for the CPU."""
    pipe = subprocess.PIPE
    server = subprocess.Popen(command, env=env, stdin=pipe, stdout=pipe, stderr=subprocess.DEVNULL)
    assert server.stdin is not None and server.stdout is not None
    requests: list[dict] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    if call is not None:
        requests.append({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": call, "arguments": {}}})
    server.stdin.write(b"".join(json.dumps(request).encode() + b"\n" for request in requests))
    server.stdin.flush()
    answers = {}
    for line in server.stdout:
        answers[json.loads(line).get("id")] = line
        if requests[-1]["id"] in answers:
            break
    ticks = os.sysconf("SC_CLK_TCK")
    stat = Path(f"/proc/{server.pid}/stat").read_text().rpartition(")")[2].split()
    cpu = (int(stat[11]) + int(stat[12])) / ticks * 1000  # utime and stime, fields 14 and 15
    server.stdin.close()
    server.wait(timeout=30)
    return cpu, answers[2]


def inspector_ms(command: list[str], env: dict[str, str], *method: str) -> float:
    started = time.perf_counter()
    subprocess.run([str(INSPECTOR), "--cli", *command, *method], env=env, capture_output=True, check=True)
    return (time.perf_counter() - started) * 1000


def size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()) if value else 0


def paired(runs: int, measure: Callable[[str], float]) -> dict[str, float]:
    """Each server measured once per round, alternately; the median of each."""
    figures: dict[str, list[float]] = {name: [] for name in SERVERS}
    for _ in range(runs):
        for name in SERVERS:
            figures[name].append(measure(name))
    return {name: statistics.median(values) for name, values in figures.items()}


def report(label: str, medians: dict[str, float], unit: str = "ms") -> None:
    ratio = medians["jobtrail"] / medians["minimal"]
    print(f"{label}: jobtrail {medians['jobtrail']:.0f} {unit}, minimal {medians['minimal']:.0f} {unit}, {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as home:
        env = child_env(home)
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; medians of {runs} runs")
        for command in SERVERS.values():  # warm the page cache and bytecode, as a user's second start would be
            anyio.run(client_ms, command, env, None)
        for module, note in (("jobtrail.surface.server", "target < 500 ms"), ("mcp.server.mcpserver", "the SDK")):
            samples = [import_ms(module, env) for _ in range(runs)]
            wall, cpu = (statistics.median(figures) for figures in zip(*samples, strict=True))
            print(f"import {module}: {wall:.0f} ms ({cpu:.0f} ms CPU; {note})")
        listed = paired(runs, lambda name: anyio.run(client_ms, SERVERS[name], env, None))
        report("start -> tools/list answered (target jobtrail < 800 ms)", listed)
        report("  its server CPU until answered", paired(runs, lambda name: served(SERVERS[name], env)[0]), "ms CPU")
        called = paired(runs, lambda name: anyio.run(client_ms, SERVERS[name], env, CHEAP_CALL[name]))
        report("round trip, mcp Client: start, initialize, tools/list, one call (target <= 1.15x)", called)
        cpu = paired(runs, lambda name: served(SERVERS[name], env, CHEAP_CALL[name])[0])
        report("  its server CPU until answered", cpu, "ms CPU")
        if INSPECTOR.exists():
            listing = ("--method", "tools/list")
            inspected = paired(runs, lambda name: inspector_ms(SERVERS[name], env, *listing))
            report("round trip, MCP Inspector CLI --method tools/list (target <= 1.15x)", inspected)
            calling = ("--method", "tools/call", "--tool-name")
            calls = paired(runs, lambda name: inspector_ms(SERVERS[name], env, *calling, CHEAP_CALL[name]))
            report("round trip, MCP Inspector CLI --method tools/call (target <= 1.15x)", calls)
        else:
            print(f"MCP Inspector CLI: not installed at {INSPECTOR.relative_to(ROOT)} (make test installs it)")
        line = served(SERVERS["jobtrail"], env)[1]
        tools = json.loads(line)["result"]["tools"]
        print(f"tools/list on the wire: {len(line)} bytes, {len(tools)} tools (target < 40960)")
        for tool in sorted(tools, key=size, reverse=True):
            print(
                f"  {tool['name']:<17} {size(tool):>6} bytes: input schema {size(tool.get('inputSchema')):>5}, "
                f"output schema {size(tool.get('outputSchema')):>5}"
            )
        print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
