"""MCP tasks over stdio, as raw JSON-RPC to a real `jobtrail serve` (the SDK's client sends no task-augmented call):
a task follows a real local SFT job on the tiny model from working to its receipt, is cancelled with its job,
outlives a killed server, is one task for one idempotency key; a client without tasks keeps the plain call."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from support.jobs import TINY_SFT
from support.rpc_stdio import RpcError, StdioPeer
from support.waiting import wait_for

RELATED = "io.modelcontextprotocol/related-task"


def _submit(tiny_model, chat_dataset, **hyper: Any) -> dict[str, Any]:
    return {
        "method": "sft",
        "model": str(tiny_model),
        "dataset": str(chat_dataset),
        "hyperparameters": {**TINY_SFT, **hyper},
    }


def _schemas(peer: StdioPeer) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool.get("outputSchema", {}) for tool in peer.request("tools/list")["tools"]}


def _status(peer: StdioPeer, task_id: str) -> dict[str, Any]:
    return peer.request("tasks/get", {"taskId": task_id})


def test_a_submit_task_goes_from_working_to_completed_with_the_receipt(tmp_path, tiny_model, chat_dataset):
    with StdioPeer(tmp_path / "home") as peer:
        capability = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        assert peer.initialized["capabilities"]["tasks"] == capability
        listed = {tool["name"]: tool.get("execution") for tool in peer.request("tools/list")["tools"]}
        assert {name for name, execution in listed.items() if execution} == {
            "submit",
            "evaluate",
            "convert_gguf",
            "wait",
        }
        assert listed["submit"] == {"taskSupport": "optional"} and listed["ps"] is None

        created = peer.call(
            "submit",
            _submit(tiny_model, chat_dataset, max_steps=40, save_steps=20),
            task={"ttl": 60_000},
            _meta={"progressToken": "follow-1"},
        )
        task = created["task"]
        assert task["status"] == "working" and task["taskId"].startswith("task-")
        assert task["ttl"] == 3_600_000  # a minute is raised to the hour a task is kept at least
        assert 1_000 <= task["pollInterval"] <= 60_000
        immediate = created["_meta"]["io.modelcontextprotocol/model-immediate-response"]
        job_id = immediate.split("**")[1]
        assert job_id.startswith("jt-") and task["taskId"] in immediate

        running = wait_for(
            lambda: (
                (s := _status(peer, task["taskId"]))["status"] == "working"
                and "running: step" in s.get("statusMessage", "")
                and s
            ),
            120,
            "the task to report the job's steps",
        )
        assert running["statusMessage"].startswith(f"{job_id} running: step ") and "/40" in running["statusMessage"]
        assert "createdAt" in running and "lastUpdatedAt" in running and running["pollInterval"] >= 5_000

        result = peer.request("tasks/result", {"taskId": task["taskId"]}, timeout=240)  # blocks until the end
        assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
        assert not result.get("isError")
        content = result["structuredContent"]
        assert next(iter(content)) == "summary" and content["summary"].startswith(f"**{job_id}**: succeeded")
        assert content["status"] == "succeeded" and content["termination_reason"] == "succeeded"
        assert content["attempts"][0]["checkpoints"] or content["checkpoints"]  # inspect's receipt
        assert content["findings"] is not None and content["script_sha256"]  # submit's own fields
        jsonschema.validate(content, _schemas(peer)["submit"])
        assert result["content"][0]["text"].startswith(f"**{job_id}**: succeeded")

        ended = _status(peer, task["taskId"])
        assert ended["status"] == "completed" and "pollInterval" not in ended
        assert ended["statusMessage"].startswith(f"{job_id}: succeeded")

        # While connected, the client was told: each step on its progress token, tied to the task, then the end.
        status = peer.notified(
            lambda n: n["method"] == "notifications/tasks/status" and n["params"]["status"] == "completed",
            30,
            "the task's completed status notification",
        )
        assert status["params"]["taskId"] == task["taskId"] and RELATED not in status["params"].get("_meta", {})
        progress = [
            n for n in peer.notifications if n["method"] == "notifications/progress" and n["params"].get("_meta")
        ]
        assert progress, peer.notifications
        assert all(
            n["params"]["progressToken"] == "follow-1" and n["params"]["_meta"][RELATED]["taskId"] == task["taskId"]
            for n in progress
        )
        steps = [n["params"]["progress"] for n in progress]
        assert steps == sorted(set(steps)) and all(n["params"]["total"] == 40 for n in progress)
        assert peer.notifications.index(progress[-1]) < peer.notifications.index(status)  # none after the end

        # A wait task on the ended job: completed at once, its result shaped as wait's.
        waited = peer.call("wait", {"job_id": job_id, "timeout_s": 30}, task={})
        assert waited["task"]["status"] == "completed"
        wait_result = peer.request("tasks/result", {"taskId": waited["task"]["taskId"]}, timeout=30)
        assert wait_result["structuredContent"]["terminal"] is True
        jsonschema.validate(wait_result["structuredContent"], _schemas(peer)["wait"])

        listed_tasks = peer.request("tasks/list", {})["tasks"]
        assert [t["taskId"] for t in listed_tasks] == [waited["task"]["taskId"], task["taskId"]]


def test_tasks_cancel_stops_the_running_job(tmp_path, tiny_model, chat_dataset):
    with StdioPeer(tmp_path / "home") as peer:
        created = peer.call("submit", _submit(tiny_model, chat_dataset, max_steps=100_000, save_steps=10_000), task={})
        task_id = created["task"]["taskId"]
        wait_for(
            lambda: "running: step" in _status(peer, task_id).get("statusMessage", ""), 120, "the job to be training"
        )
        cancelled = peer.request("tasks/cancel", {"taskId": task_id}, timeout=60)
        assert cancelled["status"] == "cancelled" and cancelled["taskId"] == task_id
        job_id = cancelled["statusMessage"].split(": ", 1)[1].split(":")[0]
        inspected = peer.call("inspect", {"job_id": job_id})["structuredContent"]
        assert inspected["status"] == "cancelled" and inspected["termination_reason"] == "cancelled"
        assert _status(peer, task_id)["status"] == "cancelled"
        result = peer.request("tasks/result", {"taskId": task_id}, timeout=30)
        assert result["structuredContent"]["status"] == "cancelled"
        with pytest.raises(RpcError) as again:
            peer.request("tasks/cancel", {"taskId": task_id})
        assert again.value.code == -32602 and "terminal status 'cancelled'" in again.value.message


def test_a_task_outlives_a_killed_server_and_one_idempotency_key_is_one_task(tmp_path, tiny_model, chat_dataset):
    home = tmp_path / "home"
    arguments = {**_submit(tiny_model, chat_dataset, max_steps=12), "idempotency_key": "nightly-42"}
    first = StdioPeer(home)
    try:
        task = first.call("submit", arguments, task={"ttl": 86_400_000})["task"]
        assert task["ttl"] == 86_400_000
        again = first.call("submit", arguments, task={})["task"]
        assert again["taskId"] == task["taskId"]
        plain = first.call("submit", arguments)  # no task asked: the plain result, the same job
        assert plain["structuredContent"]["already_submitted"] is True and "task" not in plain
    finally:
        first.kill()
    with StdioPeer(home) as second:
        assert _status(second, task["taskId"])["status"] in ("working", "completed")
        result = second.request("tasks/result", {"taskId": task["taskId"]}, timeout=240)
        assert result["structuredContent"]["status"] == "succeeded"
        assert result["structuredContent"]["job_id"] == plain["structuredContent"]["job_id"]
        assert [t["taskId"] for t in second.request("tasks/list", {})["tasks"]] == [task["taskId"]]


def test_a_call_that_starts_no_job_is_a_task_that_ended_with_its_answer(tmp_path, tiny_model, chat_dataset):
    with StdioPeer(tmp_path / "home") as peer:
        dry = peer.call("submit", {**_submit(tiny_model, chat_dataset), "dry_run": True}, task={})["task"]
        assert dry["status"] == "completed" and "pollInterval" not in dry
        answer = peer.request("tasks/result", {"taskId": dry["taskId"]})
        assert answer["structuredContent"]["status"] == "dry_run" and answer["_meta"][RELATED]["taskId"]
        refused = peer.call("wait", {"job_id": "jt-missing0"}, task={})["task"]
        assert refused["status"] == "failed" and "No job with id 'jt-missing0'" in refused["statusMessage"]
        assert peer.request("tasks/result", {"taskId": refused["taskId"]})["isError"] is True
        with pytest.raises(RpcError) as not_a_task_tool:
            peer.call("ps", {}, task={})
        assert not_a_task_tool.value.code == -32601
        with pytest.raises(RpcError) as unknown:
            peer.request("tasks/get", {"taskId": "task-unknown"})
        assert unknown.value.code == -32602
        with pytest.raises(RpcError) as bad_cursor:
            peer.request("tasks/list", {"cursor": "not-a-cursor"})
        assert bad_cursor.value.code == -32602


def test_a_client_of_an_earlier_protocol_keeps_the_plain_call(tmp_path):
    with StdioPeer(tmp_path / "home", protocol_version="2025-06-18") as peer:
        assert "tasks" not in peer.initialized["capabilities"]
        answer = peer.call("wait", {"job_id": "jt-missing0", "timeout_s": 0}, task={})  # `task` is not known there
        assert answer["isError"] is True and "task" not in answer
        with pytest.raises(RpcError) as listed:
            peer.request("tasks/list", {})
        assert listed.value.code == -32601


def test_the_tasks_extension_at_2026_07_28_answers_a_job_as_a_task(tmp_path, tiny_model, chat_dataset):
    declared = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    with StdioPeer(tmp_path / "home", protocol_version="2026-07-28", capabilities=declared) as peer:
        created = peer.call("submit", _submit(tiny_model, chat_dataset, max_steps=4, save_steps=2))
        assert created["resultType"] == "task" and created["status"] == "working"
        assert created["ttlMs"] == 7 * 24 * 3_600_000 and created["pollIntervalMs"] >= 1_000
        dry = peer.call("submit", {**_submit(tiny_model, chat_dataset), "dry_run": True})
        assert dry["resultType"] == "complete" and dry["structuredContent"]["status"] == "dry_run"  # nothing to follow
        ended = wait_for(
            lambda: (t := peer.request("tasks/get", {"taskId": created["taskId"]}))["status"] != "working" and t,
            180,
            "the task to end",
            interval=1.0,
        )
        assert ended["status"] == "completed" and ended["resultType"] == "complete"
        assert ended["result"]["structuredContent"]["status"] == "succeeded"
        assert ended["result"]["_meta"][RELATED] == {"taskId": created["taskId"]}
        acknowledged = peer.request("tasks/cancel", {"taskId": created["taskId"]})  # ended: acknowledged, no change
        assert acknowledged["resultType"] == "complete" and "status" not in acknowledged
        assert peer.request("tasks/get", {"taskId": created["taskId"]})["status"] == "completed"
        with pytest.raises(RpcError) as listed:
            peer.request("tasks/list", {})  # not in the extension
        assert listed.value.code == -32601
    with StdioPeer(tmp_path / "home", protocol_version="2026-07-28") as undeclared:
        plain = undeclared.call("submit", {**_submit(tiny_model, chat_dataset), "dry_run": True})
        assert plain["resultType"] == "complete" and "taskId" not in plain


def test_a_task_result_carries_what_each_tool_s_output_schema_requires():
    """Every field a task tool's outputSchema requires is in the task's result: inspect has it, typed alike, or the
    tool's own result gives it."""
    from jobtrail.results.jobs import InspectResult
    from jobtrail.surface.mcp_tasks import TASK_TOOLS, _own_fields, _types
    from jobtrail.surface.schemas import published_output
    from jobtrail.surface.server import AREAS
    from jobtrail.surface.toolspec import tools_of

    receipt = published_output(InspectResult)["properties"]
    results = {spec.name: spec.result_type for area in AREAS for spec in tools_of(area)}
    for tool in TASK_TOOLS:
        schema = published_output(results[tool])
        own = _own_fields(tool)
        for field in schema["required"]:
            from_receipt = field in receipt and _types(receipt[field]) <= _types(schema["properties"][field])
            assert field in own or from_receipt, (tool, field)
        assert ("after" in own) == (tool != "wait") and ("attempts" in own) == (tool == "wait")
