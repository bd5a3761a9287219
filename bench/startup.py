"""Server start → `tools/list` answered, over a real stdio subprocess. Target: < 1 s.

Usage: python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def once(home: str) -> float:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "jobtrail", "serve"], env={**os.environ, "JOBTRAIL_HOME": home}
    )
    started = time.perf_counter()
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        elapsed = time.perf_counter() - started
    assert tools, "the server listed no tools"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        anyio.run(once, home)  # warm the page cache, as a user's second start would be
        times = [anyio.run(once, home) for _ in range(args.runs)]
    print(
        f"server start -> tools/list answered: median {statistics.median(times) * 1000:.0f} ms, "
        f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {args.runs} runs (target < 1000 ms)"
    )


if __name__ == "__main__":
    main()
