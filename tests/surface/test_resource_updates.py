"""Subscribing to a job's resources: a real `jobtrail serve` over stdio tells its subscribers when a local SFT job on
the tiny model starts, commits a checkpoint and ends, at both protocol eras (resources/subscribe before 2026-07-28,
a subscriptions/listen stream since); and its webhook hears each job's end once, though two servers follow it."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import ResourceUpdatedNotification

from jobtrail.app import build_service
from support.jobs import TINY_SFT
from support.waiting import wait_for
from support.webhook_receiver import webhook_receiver

FAST = {**TINY_SFT, "report_to": "none"}
SECRET = "hook-signing-secret-0042"
TERMINAL = {"succeeded", "failed", "cancelled"}


def _server(home: Any, hook: str) -> StdioServerParameters:
    env = {
        **os.environ,
        "JOBTRAIL_HOME": str(home),
        "JOBTRAIL_WEBHOOK_URL": hook,
        "JOBTRAIL_WEBHOOK_SECRET": SECRET,
        "JOBTRAIL_WEBHOOK_EVENTS": "ended",
    }
    return StdioServerParameters(command=sys.executable, args=["-m", "jobtrail", "serve"], env=env)


@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")  # today's clients speak the handshake era
def test_subscribers_hear_a_job_start_commit_a_checkpoint_and_end(tmp_path, tiny_model, chat_dataset):
    home = tmp_path / "home"
    notes: list[ResourceUpdatedNotification] = []
    listen_seen: list[dict[str, Any]] = []
    jobs: dict[str, str] = {}

    async def scenario(hook_url: str) -> None:
        ended = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, ResourceUpdatedNotification):
                notes.append(message)
                if _change(message)["change"] == "ended":
                    ended.set()

        async with (
            Client(_server(home, hook_url), mode="legacy", message_handler=on_message) as legacy,
            Client(_server(home, hook_url)) as modern,
        ):
            assert legacy.server_capabilities.resources.subscribe
            assert modern.server_capabilities.resources.subscribe
            job = {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset)}
            # The job under test waits, queued, for a first one: it is subscribed to before it starts.
            first = await legacy.call_tool("submit", {**job, "hyperparameters": {**FAST, "max_steps": 1}})
            jobs["first"] = first.structured_content["job_id"]
            second = await legacy.call_tool(
                "submit", {**job, "hyperparameters": {**FAST, "max_steps": 4, "save_steps": 2}, "after": jobs["first"]}
            )
            jobs["second"] = job_id = second.structured_content["job_id"]
            assert second.structured_content["status"] == "queued", second.content
            uri = f"jobtrail://jobs/{job_id}"
            await legacy.subscribe_resource(uri)
            await legacy.subscribe_resource(f"{uri}/metrics")

            async def listened() -> None:
                """At 2026-07-28: a listen stream; after each event, read the receipt, until it has ended."""
                async with modern.listen(resource_subscriptions=[uri]) as stream:
                    async for event in stream:
                        assert event.uri == uri
                        listen_seen.append(json.loads((await modern.read_resource(uri)).contents[0].text))
                        if listen_seen[-1]["status"] in TERMINAL:
                            return

            with anyio.fail_after(420):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(listened)
                    await ended.wait()

    with webhook_receiver([500]) as hook:
        anyio.run(scenario, hook.url)

        # Handshake era: every change of the job, in order, on both of its resources, each saying what changed.
        receipt = [_change(n) for n in notes if n.params.uri == f"jobtrail://jobs/{jobs['second']}"]
        metrics = [_change(n) for n in notes if n.params.uri.endswith("/metrics")]
        assert receipt == metrics
        if receipt[0] == {"change": "state", "attempt": 1, "detail": "queued"}:
            receipt = receipt[1:]  # the poller's look found the new job after the subscription came
        kinds = [c["change"] for c in receipt]
        assert kinds[0] == "state" and receipt[0]["detail"] in ("starting", "running"), receipt  # it started
        assert "checkpoint" in kinds and kinds.index("checkpoint") > 0, receipt
        assert {"detail": "checkpoint-2", "change": "checkpoint", "attempt": 1} in receipt, receipt
        assert kinds[-1] == "ended" and receipt[-1]["detail"] == "succeeded", receipt
        assert kinds.count("ended") == 1
        # 2026-07-28: events while it ran (the stream coalesces those its reader has not taken yet), then its end.
        statuses = [seen["status"] for seen in listen_seen]
        assert len(statuses) >= 2 and statuses[-1] == "succeeded" and "succeeded" not in statuses[:-1], statuses

        # The webhook: each job's end told once (two servers follow the ledger; one claims each notice), signed;
        # the first POST was answered 500 and sent again.
        service = build_service(home)

        def delivered() -> bool:
            found = [service.ledger.deliveries(job_id) for job_id in jobs.values()]
            return all(d and d[0].state != "sending" for d in found)

        wait_for(delivered, 60, "both jobs' endings delivered")
        ended = [r for r in hook.received if r.payload["event"] == "ended"]
        assert len(ended) == 3 and {r.payload["job_id"] for r in ended} == set(jobs.values())
        assert sorted(hook.answered) == [200, 200, 500], hook.answered
        assert all(r.signed_by(SECRET) for r in ended)
        records = {job_id: service.ledger.deliveries(job_id) for job_id in jobs.values()}
        assert all(len(found) == 1 and found[0].sent and found[0].status_code == 200 for found in records.values())
        assert sorted(found[0].tries for found in records.values()) == [1, 2]


def _change(note: ResourceUpdatedNotification) -> dict[str, Any]:
    meta = note.params.meta or {}
    return dict(meta["jobtrail/change"])
