"""A real stdio server subprocess, and jobs that outlive the server that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from support.jobs import TINY_SFT
from support.waiting import wait_for, wait_until_terminal

HYPER = {**TINY_SFT, "max_steps": 12}


def _params(home) -> StdioServerParameters:
    env = {**os.environ, "JOBTRAIL_HOME": str(home)}
    return StdioServerParameters(command=sys.executable, args=["-m", "jobtrail", "serve"], env=env)


async def _session(home, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async with Client(_params(home)) as client:
        out: list[Any] = [sorted(t.name for t in (await client.list_tools()).tools)]
        for tool, arguments in calls:
            out.append(await client.call_tool(tool, arguments))
        return out


def test_stdio_server_answers_and_a_job_survives_its_restart(tmp_path, tiny_model, chat_dataset):
    home = tmp_path / "home"
    submit = {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "hyperparameters": HYPER}
    tools, listed, submitted = anyio.run(_session, home, [("ps", {}), ("submit", submit)])
    assert {"submit", "ps", "inspect", "logs", "cancel"} <= set(tools)
    assert listed.structured_content["jobs"] == []
    job_id = submitted.structured_content["job_id"]
    assert job_id, submitted.content
    # The first server process has exited; a second one finds the job and sees it through.

    def inspect() -> dict[str, Any]:
        [_, inspected] = anyio.run(_session, home, [("inspect", {"job_id": job_id})])
        return inspected.structured_content

    data = wait_until_terminal(inspect, 180, "the job to finish across server restarts", interval=1.0)
    assert data["status"] == "succeeded", data
    assert data["progress"]["step"] == 12


def test_a_job_whose_processes_vanished_becomes_lost(tmp_path, tiny_model, chat_dataset):
    service = build_service(tmp_path / "home")
    spec = JobSpec(
        method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters={**HYPER, "max_steps": 100000}
    )
    job_id = service.submit(spec).job_id
    placement = wait_for(lambda: service.inspect(job_id).attempts[0].placement, 30, "placement")
    os.kill(placement.pid, signal.SIGKILL)
    os.killpg(placement.pgid, signal.SIGKILL)
    restarted = build_service(tmp_path / "home")  # a fresh process's view: new ledger handle, new backend
    data = wait_for(lambda: (r := restarted.inspect(job_id)).status == "failed" and r, 30, "the job to be marked lost")
    assert data.termination_reason == "lost"


def test_cli_mirrors_the_tools(tmp_path, tiny_model, chat_dataset):
    env = {**os.environ, "JOBTRAIL_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobtrail", *args], env=env, text=True, capture_output=True, timeout=60
        )

    job = ["--method", "sft", "--model", str(tiny_model), "--dataset", str(chat_dataset)]
    dry = cli("submit", *job, "--set", "max_steps=2", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert '"status": "dry_run"' in dry.stdout
    table = cli("ps")
    assert table.returncode == 0 and "No jobs yet" in table.stdout
    missing = cli("inspect", "jt-missing0")
    assert missing.returncode == 2 and "Fix:" in missing.stderr and "Traceback" not in missing.stderr
    rejected = cli("submit", "--method", "sft", "--model", str(tiny_model), "--dataset", str(tmp_path / "nope.jsonl"))
    assert rejected.returncode == 1 and "dataset.missing" in rejected.stdout
    outside = cli("submit", "--method", "sft", "--model", str(tiny_model), "--dataset", "/nope.jsonl")
    assert outside.returncode == 2 and "JOBTRAIL_DATA_ROOTS" in outside.stderr  # refused, before anything is read
    checked = cli("preflight", *job, "--set", "max_lenght=64")
    assert checked.returncode == 1 and "Did you mean 'max_length'" in checked.stdout and "```" not in checked.stdout
    clean = cli("preflight", "--method", "sft", "--model", str(tiny_model), "--dataset", str(chat_dataset))
    assert clean.returncode == 0 and "would be accepted" in clean.stdout


def test_streamable_http_transport(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "JOBTRAIL_HOME": str(tmp_path / "home")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jobtrail", "serve", "--http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def accepting() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(accepting, 30, "the HTTP server to listen")

        async def go():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                return names, await client.call_tool("ps", {})

        names, listed = anyio.run(go)
        assert {"submit", "ps", "inspect", "logs", "cancel"} <= names
        assert listed.structured_content["jobs"] == []
    finally:
        server.terminate()
        server.wait(timeout=30)
