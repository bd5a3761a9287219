"""Soak bench: concurrent MCP clients drive real stdio servers sharing one ledger while jobs and servers are
killed, then the ledger is audited.

Each client owns a `jobtrail serve` subprocess and loops over a mix of calls: submit (small local SFT jobs
on the offline tiny model, some with max_retries), ps, inspect, logs, cancel, and malformed calls (unknown
arguments, wrong types, oversized or NUL strings, unknown job ids, empty lists) that must be refused.
Meanwhile a chaos task SIGKILLs a random client's server (the client reconnects to a fresh one) and a
running job's process group or supervisor. Afterwards one fresh server settles the queue and the bench
prints calls made, outcomes and errors by kind, jobs lost (a job id a submit returned that the ledger
does not hold; must be 0), job statuses, PRAGMA integrity_check, and p50/p99 latency. Exits 1 on a lost
job, an unexpected error or a damaged ledger.

Usage: python bench/soak.py [--clients N] [--duration S] [--seed S] [--workdir DIR]
(the default, 3 clients for 100 s, takes under 3 minutes on a 2-core machine)
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from jobtrail.demo.tinymodel import build_tiny_model, write_chat_dataset
from jobtrail.ledger.codec import unpacked

TERMINAL = ("succeeded", "failed", "cancelled")
CALL_TIMEOUT_S = 60  # a call that takes longer counts as a timeout (a tool never should)
TINY_JOB = {"max_steps": 4, "save_steps": 2, "logging_steps": 1, "per_device_train_batch_size": 2, "max_length": 64}
SERVER_TAG = "JOBTRAIL_SOAK_SERVER"  # in each server's environment, so the chaos task can find its pid


@dataclass
class Tally:
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # ok, refused (as expected), error:<kind>
    latencies: dict[str, list[float]] = field(default_factory=dict)  # seconds, by tool
    submitted: set[str] = field(default_factory=set)
    restarts: int = 0
    job_kills: int = 0


def malformed_calls(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """Calls that must be refused with a structured error, never crash or hang the server."""
    return [
        ("submit", {"method": "sft", "model": "m", "dataset": "d.jsonl", "hyperparams": {}}),
        ("submit", {"method": "nope", "model": "m", "dataset": "d.jsonl"}),
        ("inspect", {"job_id": "jt-" + "z" * rng.randint(300, 200_000)}),
        ("logs", {"job_id": "jt-nothere0", "tail": -5}),
        ("validate_dataset", {"dataset": "/tmp/x\x00.jsonl"}),
        ("convert_gguf", {"source": "/nope", "quantizations": []}),
        ("cancel", {"job_id": "jt-nothere0"}),
        ("ps", {"limit": "many"}),
    ]


class Soak:
    def __init__(self, workdir: Path, clients: int, duration: float, seed: int) -> None:
        self.workdir, self.clients, self.duration = workdir, clients, duration
        self.rng = random.Random(seed)
        self.home = workdir / "home"
        self.tally = Tally()
        self.deadline = 0.0
        self.model = self.dataset = ""
        self.env: dict[str, str] = {}
        self.tag = f"{os.getpid()}-"  # this bench's servers, not another's

    def prepare(self) -> None:
        self.model = str(build_tiny_model(self.workdir / "tiny-model"))
        self.dataset = str(write_chat_dataset(self.workdir / "chat.jsonl"))
        self.env = {
            **os.environ,
            "JOBTRAIL_HOME": str(self.home),
            "JOBTRAIL_DATA_ROOTS": str(self.workdir),  # the tiny model and data the clients submit
            "JOBTRAIL_MAX_CONCURRENT": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(self.workdir / "hf-home"),
            "TRACKIO_DIR": str(self.workdir / "trackio"),
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",
        }

    # --- clients ------------------------------------------------------------------------

    def server(self, tag: str) -> Any:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "jobtrail", "serve"], env={**self.env, SERVER_TAG: self.tag + tag}
        )
        errlog = (self.workdir / "servers.log").open("a")
        return stdio_client(params, errlog=errlog)

    async def client(self, number: int) -> None:
        generation = 0
        while time.monotonic() < self.deadline:
            generation += 1
            try:
                async with Client(self.server(f"{number}-{generation}")) as session:
                    while time.monotonic() < self.deadline:
                        await self.one_call(session)
            except Exception:  # noqa: BLE001 - the server was killed under the session: reconnect
                self.tally.outcomes["error:server_gone"] += 1

    async def one_call(self, session: Client) -> None:
        tool, arguments, must_refuse = self.next_call()
        self.tally.calls += 1
        started = time.perf_counter()
        try:
            with anyio.fail_after(CALL_TIMEOUT_S):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            self.tally.outcomes["error:timeout"] += 1
            return
        self.tally.latencies.setdefault(tool, []).append(time.perf_counter() - started)
        text = " ".join(getattr(c, "text", "") for c in result.content)
        if must_refuse:
            self.tally.outcomes["refused" if result.is_error and len(text) < 2000 else f"error:{tool}_not_refused"] += 1
        elif result.is_error:
            kind = "internal" if "internal error" in text else "refused_valid_call"
            self.tally.outcomes[f"error:{kind}:{tool}"] += 1
        else:
            self.tally.outcomes["ok"] += 1
            if tool == "submit" and (result.structured_content or {}).get("job_id"):
                self.tally.submitted.add(result.structured_content["job_id"])
        await anyio.sleep(self.rng.uniform(0.0, 0.2))

    def next_call(self) -> tuple[str, dict[str, Any], bool]:
        jobs = sorted(self.tally.submitted)
        roll = self.rng.random()
        if roll < 0.06 or not jobs:
            spec = {"method": "sft", "model": self.model, "dataset": self.dataset, "hyperparameters": TINY_JOB}
            if self.rng.random() < 0.3:
                spec["max_retries"] = 1
            return "submit", spec, False
        if roll < 0.30:
            return "ps", {"limit": self.rng.choice([5, 20, 100])}, False
        if roll < 0.50:
            return "inspect", {"job_id": self.rng.choice(jobs)}, False
        if roll < 0.70:
            return "logs", {"job_id": self.rng.choice(jobs), "tail": self.rng.choice([5, 50, 500])}, False
        if roll < 0.78:
            return "cancel", {"job_id": self.rng.choice(jobs)}, False
        tool, arguments = self.rng.choice(malformed_calls(self.rng))
        return tool, arguments, True

    # --- chaos --------------------------------------------------------------------------

    async def chaos(self) -> None:
        while time.monotonic() < self.deadline:
            await anyio.sleep(self.rng.uniform(6, 14))
            if self.rng.random() < 0.5 and self.kill_a_server():
                self.tally.restarts += 1
            if self.kill_a_job():
                self.tally.job_kills += 1

    def kill_a_server(self) -> bool:
        pids = [pid for pid, tag in _tagged_processes() if tag.startswith(self.tag)]
        if not pids:
            return False
        _kill(self.rng.choice(pids), signal.SIGKILL)
        return True

    def kill_a_job(self) -> bool:
        """SIGKILL a running job: its process group (the job) or its supervisor (then the job is lost)."""
        rows = _query(self.home, "SELECT placement FROM attempts WHERE status = 'running'")
        placements = [unpacked(row[0]) for row in rows if row[0]]
        targets = [p for p in placements if p.get("pid")]
        if not targets:
            return False
        chosen = self.rng.choice(targets)
        if chosen.get("pgid") and self.rng.random() < 0.6:
            try:
                os.killpg(chosen["pgid"], signal.SIGKILL)
            except OSError:
                return False
            return True
        return _kill(chosen["pid"], signal.SIGKILL)

    # --- settle and audit -----------------------------------------------------------------

    async def settle(self, limit_s: float = 60) -> dict[str, str]:
        """One fresh server refreshes until every job has ended (cancelling what still runs after limit_s/2);
        then each submitted job's status as inspect tells it ("missing" when it does not know the job)."""
        async with Client(self.server("settle")) as session:
            cancelled_rest = False
            give_up = time.monotonic() + limit_s
            while time.monotonic() < give_up:
                listed = (await session.call_tool("ps", {"limit": 500})).structured_content or {}
                live = [j["job_id"] for j in listed.get("jobs", []) if j["status"] not in TERMINAL]
                if not live:
                    break
                if not cancelled_rest and time.monotonic() > give_up - limit_s / 2:
                    for job in live:
                        await session.call_tool("cancel", {"job_id": job})
                    cancelled_rest = True
                await anyio.sleep(1)
            statuses = {}
            for job in sorted(self.tally.submitted):
                found = await session.call_tool("inspect", {"job_id": job})
                statuses[job] = "missing" if found.is_error else (found.structured_content or {}).get("status", "?")
        return statuses

    async def run(self) -> None:
        self.deadline = time.monotonic() + self.duration
        async with anyio.create_task_group() as group:
            for number in range(self.clients):
                group.start_soon(self.client, number)
            group.start_soon(self.chaos)


def _tagged_processes() -> list[tuple[int, str]]:
    """(pid, tag) of every `jobtrail serve` process with SERVER_TAG in its environment (the jobs a server
    starts inherit its environment, but not its command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"jobtrail\0serve" not in (entry / "cmdline").read_bytes():
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(SERVER_TAG.encode() + b"="):
                found.append((int(entry.name), item.split(b"=", 1)[1].decode()))
    return found


def _kill(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except OSError:
        return False
    return True


def _query(home: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(home / "ledger.sqlite", timeout=30) as conn:
        return conn.execute(sql).fetchall()


def _percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else 0.0


def bench(workdir: Path, clients: int, duration: float, seed: int) -> bool:
    soak = Soak(workdir, clients, duration, seed)
    started = time.monotonic()
    soak.prepare()
    anyio.run(soak.run)
    statuses = anyio.run(soak.settle)
    tally = soak.tally
    held = {row[0] for row in _query(soak.home, "SELECT run_id FROM runs")}
    lost = sorted(job for job in tally.submitted if job not in held or statuses[job] == "missing")
    integrity = _query(soak.home, "PRAGMA integrity_check")[0][0]
    reasons = Counter(row[0] for row in _query(soak.home, "SELECT termination_reason FROM attempts"))
    errors = {kind: n for kind, n in tally.outcomes.items() if kind.startswith("error:")}
    unexpected = {kind: n for kind, n in errors.items() if kind not in ("error:server_gone",)}
    ms = sorted(t * 1000 for times in tally.latencies.values() for t in times)
    by_tool = ", ".join(
        f"{tool} {_percentile([t * 1000 for t in times], 50):.0f}/{_percentile([t * 1000 for t in times], 99):.0f}"
        for tool, times in sorted(tally.latencies.items())
    )
    print(f"soak: {clients} clients for {duration:.0f}s (seed {seed}), {time.monotonic() - started:.0f}s in all")
    print(f"calls made: {tally.calls}; outcomes: {dict(sorted(tally.outcomes.items()))}")
    print(f"errors by kind: {errors or 'none'} (server_gone: calls cut by a killed server, then reconnected)")
    print(f"servers killed and restarted: {tally.restarts}; jobs killed: {tally.job_kills}")
    print(f"jobs submitted: {len(tally.submitted)}; statuses after settling: {dict(Counter(statuses.values()))}")
    print(f"attempts by termination_reason: {dict(sorted((str(k), v) for k, v in reasons.items()))}")
    print(f"jobs lost: {len(lost)}{' ' + str(lost) if lost else ''}")
    print(f"ledger integrity_check: {integrity}")
    print(f"latency: p50 {_percentile(ms, 50):.0f} ms, p99 {_percentile(ms, 99):.0f} ms over {len(ms)} answered calls")
    print(f"p50/p99 ms by tool: {by_tool}")
    return not lost and integrity == "ok" and not unexpected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--duration", type=float, default=100, help="seconds of load (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temporary directory)")
    args = parser.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        passed = bench(args.workdir.resolve(), args.clients, args.duration, args.seed)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            passed = bench(Path(tmp), args.clients, args.duration, args.seed)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
