"""Closed inputs: every tool's schema forbids unknown arguments, and a call with one is refused naming the
closest real argument, before anything runs (a misspelled submit argument never trains with defaults)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from jobtrail.app import build_service
from jobtrail.surface.server import build_server
from jobtrail.surface.toolspec import unknown_arguments
from support.mcp_client import in_session


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_server(build_service())


def _calls(server, calls: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[Any], list[Any]]:
    async def go(client: Client) -> tuple[dict[str, Any], list[Any], list[Any]]:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        results = [await client.call_tool(name, args) for name, args in calls]
        jobs = (await client.call_tool("ps", {})).structured_content["jobs"]
        return tools, results, jobs

    return in_session(server, go)


def _text(result) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def _required(name: str, tiny_model, chat_dataset) -> dict[str, Any]:
    """Valid values for a tool's required arguments, so only the unknown argument is wrong."""
    return {
        "submit": {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset)},
        "validate_dataset": {"dataset": str(chat_dataset)},
        "estimate_cost": {"model": str(tiny_model)},
        "evaluate": {"dataset": str(chat_dataset), "model": str(tiny_model)},
        "convert_gguf": {"source": str(tiny_model)},
    }.get(name, {"job_id": "jt-nosuchjob"} if name in ("inspect", "logs", "cancel", "retry") else {})


def test_every_tool_schema_forbids_unknown_arguments(server):
    tools, _, _ = _calls(server, [])
    assert len(tools) >= 12
    for tool in tools.values():
        assert tool.input_schema.get("additionalProperties") is False, tool.name


def test_a_misspelled_argument_of_every_tool_is_refused_with_the_real_name(server, tiny_model, chat_dataset):
    tools, _, _ = _calls(server, [])
    calls, expected = [], []
    for tool in tools.values():
        for real in tool.input_schema.get("properties", {}):
            typo = real[:-1] if len(real) > 4 else real + "s"  # a dropped or added letter, as agents write
            calls.append((tool.name, {**_required(tool.name, tiny_model, chat_dataset), typo: 1}))
            expected.append((typo, real))
    _, results, jobs = _calls(server, calls)
    for (name, args), result, (typo, real) in zip(calls, results, expected, strict=True):
        text = _text(result)
        assert result.is_error, (name, args, text)
        assert f"Unknown argument '{typo}'" in text and f"Did you mean '{real}'?" in text, (name, text)
        assert "Traceback" not in text
    assert jobs == []  # not one call ran, submit included (no dry_run was passed)


def test_the_agents_real_mistakes(server, tiny_model, chat_dataset):
    model, data = str(tiny_model), str(chat_dataset)
    calls = [
        (
            "submit",
            {"method": "sft", "model": model, "dataset": data, "hyperparams": {"max_steps": 2}, "dry_run": True},
        ),
        ("ps", {"bogus": 1}),
        ("estimate_cost", {"model": model, "config": {"lora_r": 8}}),
        ("hardware", {"verbose": True}),
    ]
    _, [submit, ps, estimate, hardware], jobs = _calls(server, calls)
    text = _text(submit)
    assert submit.is_error and submit.structured_content is None
    assert "Unknown argument 'hyperparams'. Did you mean 'hyperparameters'?" in text
    assert "method, model, dataset" in text  # the valid arguments, in the tool's order
    assert ps.is_error and "Unknown argument 'bogus'" in _text(ps) and "status, limit" in _text(ps)
    assert "Did you mean" not in _text(ps)  # nothing is close: no guess
    assert estimate.is_error and "Unknown argument 'config'" in _text(estimate)
    assert hardware.is_error and "hardware takes no arguments" in _text(hardware)
    assert jobs == []


def test_unknown_arguments_names_each_one():
    valid = ["job_id", "tail", "cursor"]
    assert unknown_arguments("logs", {"job_id": "jt-1", "tail": 5}, valid) is None
    message = unknown_arguments("logs", {"jobid": "jt-1", "lines": 5}, valid)
    assert message is not None
    assert "Unknown arguments 'jobid', 'lines'." in message and "Did you mean 'job_id' (for 'jobid')?" in message
    assert "Valid arguments: job_id, tail, cursor." in message


def test_a_hyperparameter_given_beside_hyperparameters_is_refused_with_the_exact_entry(
    server, tiny_model, chat_dataset
):
    """submit(max_steps=3) once got "Did you mean 'smoke_steps'?": a different argument, close only in spelling."""
    job = {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset)}
    calls = [
        ("submit", {**job, "max_steps": 3}),
        ("submit", {**job, "lr": 1e-4, "hyperparams": {}}),
        ("submit", {**job, "hf_token": "hf_" + "x" * 34}),
    ]
    _, [steps, lr, token], jobs = _calls(server, calls)
    text = _text(steps)
    assert steps.is_error and "Unknown argument 'max_steps'." in text
    assert """'max_steps' is a hyperparameter, not an argument: pass hyperparameters={"max_steps": 3}.""" in text
    assert "smoke_steps'?" not in text
    text = _text(lr)
    assert """'lr' is the hyperparameter 'learning_rate', not an argument: pass hyperparameters""" in text
    assert """{"learning_rate": 0.0001}""" in text and "Did you mean 'hyperparameters' (for 'hyperparams')?" in text
    text = _text(token)
    assert token.is_error and "Unknown argument 'hf_token'." in text and "hf_x" not in text  # never echoed
    assert jobs == []


def test_a_retry_change_given_as_an_argument_is_answered_with_the_call_that_works(server, tiny_model, chat_dataset):
    """retry(job_id, lr=...) was refused naming the closest argument: it names the call with `changes`, and that
    call, sent as written, retries the job (its learning_rate replaces the lr the job was submitted with)."""
    hyperparameters = {"max_steps": 400, "lr": 1e-3}
    job = {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "hyperparameters": hyperparameters}

    async def go(client: Client) -> tuple[Any, ...]:
        job_id = (await client.call_tool("submit", job)).structured_content["job_id"]
        await client.call_tool("cancel", {"job_id": job_id})
        refused = await client.call_tool("retry", {"job_id": job_id, "lr": 1e-4, "timeout": "2h"})
        text = _text(refused)
        call = text[text.index("call retry(") + len("call ") : text.index("}).") + 2]
        changes = json.loads(call[call.index("changes=") + len("changes=") : -1])
        retried = await client.call_tool("retry", {"job_id": job_id, "changes": changes})
        attempts = (await client.call_tool("inspect", {"job_id": job_id})).structured_content["attempts"]
        await client.call_tool("cancel", {"job_id": job_id})
        return job_id, refused, text, call, retried, attempts

    job_id, refused, text, call, retried, attempts = in_session(server, go)
    assert refused.is_error and "Unknown arguments 'lr', 'timeout'." in text
    expected = f'retry(job_id="{job_id}", changes={{"learning_rate": 0.0001, "timeout": "2h"}})'
    assert f"'lr' is the hyperparameter 'learning_rate', not an argument of retry: call {expected}." in text
    assert "'timeout' is a change, not an argument of retry: it goes in changes too (the call above)." in text
    assert call == expected
    assert not retried.is_error and retried.structured_content["retried"], _text(retried)
    assert retried.structured_content["changes"] == {"learning_rate": 1e-4, "timeout": "2h"}
    assert attempts[-1]["number"] == 2


def test_a_value_the_schema_refuses_is_explained_argument_by_argument_without_pydantic_noise(server):
    """The SDK's refusal was pydantic's report: "1 validation error for psArguments ... [type=literal_error,
    input_value=...] For further information visit https://errors.pydantic.dev/...", and for days=NaN "should be
    less than or equal to 36500"."""
    job = {"model": "m", "dataset": "d.jsonl", "dry_run": True}
    token = "hf_" + "k" * 34
    calls = [
        ("ps", {"status": "Running"}),
        ("report", {"days": "nan"}),
        ("submit", {**job, "method": "SFT", "backend": "hf_jobs", "timeout": [1]}),
        ("submit", {**job, "method": "sft", "secrets": {"HF": 5}, "idempotency_key": token + "\n"}),
    ]
    _, [ps, report, submit, secret], jobs = _calls(server, calls)
    texts = [_text(result) for result in (ps, report, submit, secret)]
    for result, text in zip((ps, report, submit, secret), texts, strict=True):
        assert result.is_error and text.endswith("Nothing was run."), text
        assert "pydantic" not in text and "type=" not in text and "validation error" not in text, text
    assert texts[0].startswith("Invalid argument for ps:\n- status=\"Running\": Input should be 'queued'")
    assert "Did you mean 'running'?" in texts[0]
    assert 'days="nan": is NaN or infinite' in texts[1] and "36500" not in texts[1]
    assert "Did you mean 'sft'?" in texts[2] and "Did you mean 'hf-jobs'?" in texts[2]
    assert "- timeout=[1]: Input should be a valid string or a valid integer." in texts[2]  # one line, no union tags
    assert "- secrets.HF: Input should be a valid string." in texts[3] and "kkkk" not in texts[3]  # never echoed
    assert jobs == []
