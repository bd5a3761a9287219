"""after=, smoke_steps= and idempotency_key= as a careless agent passes them, through the MCP tools: each
mistake is refused with what to fix, nothing is submitted, and a number sent as text still works."""

from __future__ import annotations

from typing import Any

from mcp import Client

from jobtrail.app import build_service
from jobtrail.surface.server import build_server
from support.jobs import TINY_SFT
from support.mcp_client import in_session


def _text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_careless_pipeline_arguments_are_refused_with_the_fix(tmp_path, monkeypatch, tiny_model, chat_dataset):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    server = build_server(build_service())
    job = {
        "method": "sft",
        "model": str(tiny_model),
        "dataset": str(chat_dataset),
        "hyperparameters": TINY_SFT,  # max_steps 12
        "dry_run": True,
    }
    calls: list[tuple[str, dict[str, Any]]] = [
        ("submit", {**job, "after": "jt-doesnotexist"}),
        ("submit", {**job, "smoke_steps": "5"}),
        ("submit", {**job, "smoke_steps": 0}),
        ("submit", {**job, "smoke_steps": -1}),
        ("submit", {**job, "smoke_steps": 12}),
        ("submit", {**job, "smoke_steps": True}),
        ("submit", {**job, "idempotency_key": ""}),
        ("submit", {**job, "idempotency_key": "   "}),
        ("submit", {**job, "idempotency_key": "k" * 5000}),
        ("evaluate", {"dataset": str(chat_dataset), "model": str(tiny_model), "after": "jt-nosuchjob"}),
        ("convert_gguf", {"source": "jt-nosuchjob", "after": "jt-nosuchjob"}),
    ]

    async def go(client: Client) -> tuple[list[Any], list[Any]]:
        results = [await client.call_tool(name, args) for name, args in calls]
        return results, (await client.call_tool("ps", {})).structured_content["jobs"]

    results, jobs = in_session(server, go)
    texts = [_text(r) for r in results]
    missing, as_text, zero, negative, whole, yes, empty, blank, huge, evaluate, convert = zip(
        results, texts, strict=True
    )
    assert missing[0].is_error and "after='jt-doesnotexist' names no job" in missing[1] and "ps" in missing[1]
    assert not as_text[0].is_error and as_text[0].structured_content["smoke_steps"] == 5  # "5" read as 5
    for refused in (zero, negative):
        assert refused[0].is_error and "smoke_steps" in refused[1] and "greater than or equal to 1" in refused[1]
    assert whole[0].is_error and "smoke_steps=12 is not fewer than the job's max_steps (12)" in whole[1]
    assert "Pass smoke_steps below 12" in whole[1]
    assert yes[0].is_error and "is true/false, not a number of steps" in yes[1]
    assert empty[0].is_error and "idempotency_key" in empty[1] and "at least 1 character" in empty[1]
    assert blank[0].is_error and "is blank" in blank[1] and "UUID" in blank[1]
    assert huge[0].is_error and "idempotency_key" in huge[1] and "k" * 300 not in huge[1]
    assert evaluate[0].is_error and "after='jt-nosuchjob' names no job" in evaluate[1]
    assert convert[0].is_error and "after='jt-nosuchjob' names no job" in convert[1]
    assert all("Traceback" not in text for text in texts)
    assert jobs == []
