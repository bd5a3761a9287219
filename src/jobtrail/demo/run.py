"""`jobtrail demo`: a real LoRA SFT job on a tiny model built offline, driven through the MCP
tool surface exactly as an agent would drive it (submit → logs → inspect), then the receipt.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from jobtrail.app import build_service, home
from jobtrail.errors import JobtrailError
from jobtrail.results.endings import verdict

if TYPE_CHECKING:
    from mcp import Client

DEADLINE_S = 900


def prepare(root: Path) -> tuple[Path, Path]:
    from jobtrail.demo.tinymodel import build_tiny_model, write_chat_dataset

    demo = root / "demo"
    model = build_tiny_model(demo / "tiny-qwen2")
    dataset = demo / "chat.jsonl"
    if not dataset.exists():
        write_chat_dataset(dataset)
    return model, dataset


def run_demo(*, prepare_only: bool, steps: int, as_json: bool) -> int:
    root = home()
    started = time.monotonic()
    model, dataset = prepare(root)
    if prepare_only:
        if as_json:
            print(json.dumps({"model": str(model), "dataset": str(dataset)}))
        else:
            print(f"model: {model}\ndataset: {dataset}")
        return 0
    if not as_json:
        print(f"Tiny model and data ready in {time.monotonic() - started:.1f}s under {root / 'demo'}")
    receipt = anyio.run(_drive, model, dataset, steps, as_json)
    print(json.dumps(receipt, indent=2) if as_json else _receipt_text(receipt))
    return 0 if receipt["status"] == "succeeded" else 1


async def _drive(model: Path, dataset: Path, steps: int, quiet: bool) -> dict[str, Any]:
    from mcp import Client

    from jobtrail.surface.server import build_server

    server = build_server(build_service())
    async with Client(server) as client:
        submitted = await _call(
            client,
            "submit",
            {
                "method": "sft",
                "model": str(model),
                "dataset": str(dataset),
                "timeout": "15m",
                "hyperparameters": {
                    "max_steps": steps,
                    "logging_steps": 1,
                    "save_steps": max(1, steps // 3),
                    "per_device_train_batch_size": 4,
                    "gradient_accumulation_steps": 1,
                    "learning_rate": 5e-3,
                    "max_length": 128,
                },
            },
        )
        job_id = submitted["job_id"]
        if job_id is None:
            raise JobtrailError("The demo job was not submitted: " + json.dumps(submitted["findings"]))
        if not quiet:
            print(f"Submitted {job_id}; following its log:")
        cursor: int | None = None
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            since: dict[str, int] = {"cursor": cursor} if cursor is not None else {}
            page = await _call(client, "logs", {"job_id": job_id, "tail": 200, **since})
            cursor = page["cursor"]
            if not quiet:
                _print_progress(page["lines"])
            if page["finished"]:
                break
            await anyio.sleep(0.5)
        return await _call(client, "inspect", {"job_id": job_id})


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise JobtrailError(" ".join(getattr(c, "text", "") for c in result.content))
    content: dict[str, Any] = result.structured_content  # the tool's output schema is an object
    return content


def _print_progress(lines: list[str]) -> None:
    from jobtrail.outcomes.events import parse_line

    for line in lines:
        event = parse_line(line)
        if event and event["event"] == "step":
            print(f"  step {event['step']:>3}  loss {event.get('loss', float('nan')):.4f}")
        elif event and event["event"] in ("checkpoint", "termination", "resume", "artifact"):
            shown = {k: v for k, v in event.items() if k not in ("time",)}
            print(f"  {json.dumps(shown)}")


def _receipt_text(r: dict[str, Any]) -> str:
    attempt = r["attempts"][-1]
    committed = [c for c in r["checkpoints"] if c["state"] == "committed" and not c["path"].endswith("/final")]
    manifest = attempt.get("data_manifest") or {}
    progress = r["progress"]
    placement = attempt.get("placement")
    lines = [
        "",
        f"Receipt for {r['job_id']}",
        f"  status              {verdict(r['status'], r['termination_reason'], r.get('alerts') or [])}",
        f"  steps               {progress['step']}",
        f"  loss                {progress['first_loss']:.4f} → {progress['last_loss']:.4f}"
        if progress["first_loss"] is not None
        else "  loss                -",
        f"  last checkpoint     {committed[-1]['path'] if committed else '-'}",
        f"  final model         {attempt['output_dir']}/final",
        f"  config sha256       {attempt['config_sha256']}",
        f"  script sha256       {attempt['script_sha256']}",
        f"  data manifest       {manifest.get('source')} rows={manifest.get('rows')} sha256={manifest.get('sha256')}",
        f"  placement           {placement['backend']} host={placement['host']} pid={placement['pid']}"
        if placement
        else "  placement           -",
        f"  duration            {attempt['duration_s']:.1f}s" if attempt.get("duration_s") else "",
        f"  trackio             project {r['trackio']['project']}, run {r['trackio']['run']}"
        if r.get("trackio")
        else "",
        "",
        f"More: jobtrail inspect {r['job_id']}   ·   jobtrail logs {r['job_id']}"
        + (f"   ·   {r['trackio']['open']}" if r.get("trackio") else ""),
    ]
    return "\n".join(line for line in lines if line is not None)
