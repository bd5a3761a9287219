"""Watching a real 60-step local job through a real stdio MCP client: progress with an ETA, a bounded wait
that reports progress and leaves the server free, the metric series, a plot, the job resources, the
prompts; and the CLI's wait, metrics and plot on the same job."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import ImageContent, TextContent

from support.jobs import TINY_SFT

STEPS = 60
HYPER = {**TINY_SFT, "max_steps": STEPS, "logging_steps": 1, "save_steps": 20}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _params(home: Path) -> StdioServerParameters:
    env = {**os.environ, "JOBTRAIL_HOME": str(home)}
    return StdioServerParameters(command=sys.executable, args=["-m", "jobtrail", "serve"], env=env)


async def _until(check, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll an async check until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await anyio.sleep(interval)


async def _watch(home: Path, model: Path, dataset: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {"notes": []}
    async with Client(_params(home)) as client:
        submit = {"method": "sft", "model": str(model), "dataset": str(dataset), "hyperparameters": HYPER}
        job_id = (await client.call_tool("submit", submit)).structured_content["job_id"]
        seen["job_id"] = job_id

        # A short wait reports progress, and while it waits the server answers other calls.
        reporting = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen["notes"].append((progress, total, message))
            reporting.set()

        async def short_wait() -> None:
            began = time.monotonic()
            seen["short"] = await client.call_tool(
                "wait", {"job_id": job_id, "timeout_s": 5}, progress_callback=on_progress
            )
            seen["short_s"] = time.monotonic() - began

        async with anyio.create_task_group() as group:
            group.start_soon(short_wait)
            with anyio.fail_after(30):
                await reporting.wait()
            began = time.monotonic()
            seen["ps_during_wait"] = (await client.call_tool("ps", {})).structured_content
            seen["ps_s"], seen["wait_pending"] = time.monotonic() - began, "short" not in seen

        # While it trains, inspect shows the rate and the ETA.
        async def eta_while_running() -> dict[str, Any] | None:
            data = (await client.call_tool("inspect", {"job_id": job_id})).structured_content
            assert data["status"] not in ("failed", "cancelled"), data
            running = data["status"] == "running" and data["progress"]["eta_seconds"] is not None
            # A sample taken while it writes a checkpoint reads phase "saving": wait for one between saves.
            return data if running and data["progress"]["phase"] == "training" else None

        seen["running"] = await _until(eta_while_running, 240, "an ETA while the job runs")

        # Later waits reach the end.
        async def waited_to_the_end() -> dict[str, Any] | None:
            data = (await client.call_tool("wait", {"job_id": job_id, "timeout_s": 55})).structured_content
            return data if data["terminal"] else None

        seen["final"] = await _until(waited_to_the_end, 300, "wait to reach the end", interval=0)
        seen["clamped"] = (await client.call_tool("wait", {"job_id": job_id, "timeout_s": 120})).structured_content
        seen["metrics"] = (await client.call_tool("metrics", {"job_id": job_id})).structured_content
        seen["since"] = (await client.call_tool("metrics", {"job_id": job_id, "since_step": 50})).structured_content
        seen["typo"] = await client.call_tool("metrics", {"job_id": job_id, "names": ["los"]})
        seen["first_attempt"] = (await client.call_tool("metrics", {"job_id": job_id, "attempt": 1})).structured_content
        seen["no_attempt"] = await client.call_tool("metrics", {"job_id": job_id, "attempt": 2})
        seen["plot"] = await client.call_tool("plot", {"job_id": job_id})
        seen["inspect"] = (await client.call_tool("inspect", {"job_id": job_id})).structured_content
        receipt = await client.read_resource(f"jobtrail://jobs/{job_id}")
        series = await client.read_resource(f"jobtrail://jobs/{job_id}/metrics")
        seen["receipt"] = json.loads(receipt.contents[0].text)
        seen["series_resource"] = json.loads(series.contents[0].text)
        seen["templates"] = (await client.list_resource_templates()).resource_templates
        seen["prompts"] = (await client.list_prompts()).prompts
        seen["prompt"] = await client.get_prompt("diagnose_failed_job", {"job_id": job_id})
        seen["capabilities"] = client.server_capabilities
    return seen


def test_a_60_step_job_watched_through_a_stdio_client(tmp_path, tiny_model, chat_dataset):
    home = tmp_path / "home"
    seen = anyio.run(_watch, home, tiny_model, chat_dataset)
    job_id = seen["job_id"]

    # wait(timeout_s=5) came back within a few seconds, not done, having reported progress; ps was answered
    # while it waited.
    short = seen["short"].structured_content
    assert seen["short_s"] < 15 and short["terminal"] is False and short["timed_out"] is True, short
    assert short["summary"].startswith(f"**{job_id}**: still") and f'wait(job_id="{job_id}")' in short["summary"]
    progress, total, message = seen["notes"][-1]
    assert total == 5 and 0 <= progress <= 5 and message, seen["notes"]
    assert seen["wait_pending"] and seen["ps_s"] < 3, (seen["ps_s"], seen["wait_pending"])
    [row] = seen["ps_during_wait"]["jobs"]
    assert row["job_id"] == job_id and row["progress"]["max_steps"] == STEPS and row["progress"]["phase"], row

    running = seen["running"]["progress"]
    assert running["phase"] == "training" and running["max_steps"] == STEPS
    assert running["steps_per_second"] > 0 and running["eta_seconds"] >= 0 and 0 < running["fraction"] <= 1

    final = seen["final"]
    assert final["status"] == "succeeded" and final["progress"]["step"] == STEPS, final
    assert final["progress"]["eta_seconds"] is None and f'inspect(job_id="{job_id}")' in final["summary"]
    clamped = seen["clamped"]
    assert clamped["terminal"] and "55" in clamped["note"] and clamped["waited_s"] < 5

    metrics = seen["metrics"]
    assert len(metrics["series"]["loss"]) >= 50
    assert {"loss", "learning_rate", "grad_norm", "tokens_per_second"} <= set(metrics["series"])
    assert metrics["last"]["loss"] == metrics["series"]["loss"][-1][1]
    assert metrics["trends"]["loss"] in ("falling", "stable", "noisy", "rising")
    assert metrics["summary"].startswith(f"**{job_id}** (succeeded, step {STEPS}): loss ")
    assert metrics["attempts"] == [{"attempt": 1, "first_step": 1, "last_step": STEPS, "resumed_from": None}]
    assert [step for step, _ in seen["since"]["series"]["loss"]] == list(range(51, STEPS + 1))
    assert seen["first_attempt"]["series"] == metrics["series"] and seen["first_attempt"]["attempt"] == 1
    assert seen["no_attempt"].is_error and "has no attempt 2" in seen["no_attempt"].content[0].text
    typo = seen["typo"]
    assert typo.is_error and "did you mean 'loss'" in typo.content[0].text and "grad_norm" in typo.content[0].text

    plot = seen["plot"]
    assert plot.structured_content is None and not plot.is_error
    [image] = [c for c in plot.content if isinstance(c, ImageContent)]
    [text] = [c for c in plot.content if isinstance(c, TextContent)]
    png = base64.b64decode(image.data)
    assert image.mime_type == "image/png" and png.startswith(PNG_SIGNATURE)
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert 400 <= width <= 3000 and 200 <= height <= 3000, (width, height)
    path = Path(text.text.split("Saved to ")[1].split()[0])
    assert path.read_bytes() == png and path.is_relative_to(home / "runs" / job_id)

    assert {k: v for k, v in seen["receipt"].items() if k != "summary"} == {
        k: v for k, v in seen["inspect"].items() if k != "summary"
    }
    assert seen["series_resource"]["series"]["loss"] == metrics["series"]["loss"]
    assert {t.uri_template for t in seen["templates"]} >= {
        "jobtrail://jobs/{job_id}",
        "jobtrail://jobs/{job_id}/metrics",
    }
    assert all(t.description for t in seen["templates"])
    prompts = {p.name: p for p in seen["prompts"]}
    assert {"fine_tune", "diagnose_failed_job", "compare_runs"} <= set(prompts)
    assert all(a.description for p in prompts.values() for a in p.arguments or [])
    assert f'inspect(job_id="{job_id}")' in seen["prompt"].messages[0].content.text
    capabilities = seen["capabilities"]
    assert capabilities.tools and capabilities.prompts and capabilities.resources

    # The CLI mirrors the three tools on the same ledger.
    env = {**os.environ, "JOBTRAIL_HOME": str(home)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jobtrail", *args]
        return subprocess.run(command, env=env, text=True, capture_output=True, timeout=120)

    waited = cli("wait", job_id, "--timeout-s", "2", "--json")
    assert waited.returncode == 0 and json.loads(waited.stdout)["status"] == "succeeded", waited.stderr
    listed = cli("metrics", job_id, "--names", "loss", "--since-step", "55", "--json")
    assert listed.returncode == 0, listed.stderr
    assert list(json.loads(listed.stdout)["series"]) == ["loss"]
    plotted = cli("plot", job_id, "--metrics", "loss", "grad_norm")
    assert plotted.returncode == 0, plotted.stderr
    assert Path(plotted.stdout.strip()).read_bytes().startswith(PNG_SIGNATURE)
