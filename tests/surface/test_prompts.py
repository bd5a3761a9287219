"""The prompts through a real MCP client over stdio (`jobtrail serve`): a wrong argument is answered as the tools
answer it (an MCP error that names the fix, with a did-you-mean), never "Internal server error"; the plans they
render call real tools with real arguments, and describe smoke runs, idempotency keys, after=, evaluate,
convert_gguf, alerts and job kinds."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from jobtrail.methods import METHODS
from jobtrail.results.endings import BLOCKING, NEVER
from support.toolcalls import bad_calls, calls_in

FINE_TUNE = {"model": "Qwen/Qwen2.5-0.5B", "dataset": "data.jsonl"}
MISTAKES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("fine_tune", {"model": "m"}, ["Missing argument for the fine_tune prompt", "- dataset: Local"]),
    ("fine_tune", {}, ["Missing arguments", "- model:", "- dataset:"]),
    ("fine_tune", {**FINE_TUNE, "method": "SFT"}, ['method="SFT"', "Did you mean 'sft'?"]),
    ("fine_tune", {**FINE_TUNE, "method": "ppo"}, ['method="ppo"', ", ".join(f"'{m}'" for m in METHODS[:-1])]),
    ("fine_tune", {**FINE_TUNE, "backend": "hf_jobs"}, ["Did you mean 'hf-jobs'?"]),
    ("fine_tune", {**FINE_TUNE, "modle": "m"}, ["Unknown argument 'modle'. Did you mean 'model'?"]),
    ("diagnose_failed_job", {"jobid": "jt-1"}, ["Did you mean 'job_id'?", "Valid arguments: job_id"]),
    ("compare_runs", {"job_id": "jt-1"}, ["- other_job_id: The job to compare it with"]),
    ("fine_tun", FINE_TUNE, ["No prompt 'fine_tun'. Did you mean 'fine_tune'?", "compare_runs"]),
]


def _params(home: Path) -> StdioServerParameters:
    env = {**os.environ, "JOBTRAIL_HOME": str(home)}
    return StdioServerParameters(command=sys.executable, args=["-m", "jobtrail", "serve"], env=env)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What one stdio session answers: the tools' arguments, each prompt as rendered, each mistake's error."""
    home = tmp_path_factory.mktemp("prompts") / "home"

    async def go() -> dict[str, Any]:
        seen: dict[str, Any] = {"errors": []}
        async with Client(_params(home)) as client:
            tools = (await client.list_tools()).tools
            seen["tools"] = {t.name: list(t.input_schema.get("properties", {})) for t in tools}
            seen["prompts"] = {p.name: p for p in (await client.list_prompts()).prompts}
            rendered = {}
            for backend in ("local", "hf-jobs"):
                got = await client.get_prompt("fine_tune", {**FINE_TUNE, "method": "dpo", "backend": backend})
                rendered[f"fine_tune {backend}"] = got.messages[0].content.text
            got = await client.get_prompt("diagnose_failed_job", {"job_id": "jt-4f9k2m7q"})
            rendered["diagnose_failed_job"] = got.messages[0].content.text
            got = await client.get_prompt("compare_runs", {"job_id": "jt-1", "other_job_id": "jt-2"})
            rendered["compare_runs"] = got.messages[0].content.text
            seen["rendered"] = rendered
            for name, arguments, _ in MISTAKES:
                try:
                    await client.get_prompt(name, arguments)
                except MCPError as exc:
                    seen["errors"].append(exc)
                else:
                    seen["errors"].append(None)
        return seen

    return anyio.run(go)


@pytest.mark.parametrize("index", range(len(MISTAKES)), ids=lambda i: f"{MISTAKES[i][0]}-{sorted(MISTAKES[i][1])}")
def test_a_wrong_prompt_argument_is_an_mcp_error_that_says_what_to_fix(served, index) -> None:
    error = served["errors"][index]
    assert isinstance(error, MCPError), MISTAKES[index]
    assert error.code == INVALID_PARAMS and "Internal server error" not in error.message
    for words in MISTAKES[index][2]:
        assert words in error.message, (words, error.message)


def test_the_prompts_list_their_arguments_with_the_tools_descriptions(served) -> None:
    fine_tune = {a.name: a for a in served["prompts"]["fine_tune"].arguments}
    assert [(a, fine_tune[a].required) for a in fine_tune] == [
        ("model", True),
        ("dataset", True),
        ("method", False),
        ("backend", False),
    ]
    assert "Hub id" in (fine_tune["model"].description or "")


def test_every_call_a_prompt_renders_is_a_real_tool_with_real_arguments(served) -> None:
    for name, text in served["rendered"].items():
        calls = calls_in(text)
        assert calls, name
        assert not bad_calls(calls, served["tools"]), (name, bad_calls(calls, served["tools"]))


def test_fine_tune_plans_a_smoke_run_an_idempotent_submit_and_what_follows(served) -> None:
    local, remote = served["rendered"]["fine_tune local"], served["rendered"]["fine_tune hf-jobs"]
    calls = {call.name: call for call in calls_in(local) if "smoke_steps" in call.arguments}
    assert set(calls["submit"].arguments) >= {"smoke_steps", "idempotency_key", "method", "model", "dataset"}
    assert 'method="dpo"' in calls["submit"].text and "already_submitted=true" in local
    followers = [c for c in calls_in(local) if c.name in ("evaluate", "convert_gguf") and "after" in c.arguments]
    assert {c.name for c in followers} == {"evaluate", "convert_gguf"}
    assert 'wait(job_id="<job_id>", timeout_s=55)' in local and "diagnose_failed_job" in local
    assert "max_cost_usd=" in remote and "pass flavor= and timeout= on hf-jobs" in remote
    assert "on this machine it costs nothing" in local and "flavor=" not in local


def test_diagnose_failed_job_reads_alerts_and_knows_job_kinds(served) -> None:
    text = served["rendered"]["diagnose_failed_job"]
    assert "`alerts`" in text and all(code in text for code in BLOCKING)
    assert '"evaluate" for an evaluation' in text and '"convert_gguf" for a' in text
    for kind in ("- training:", "- evaluation:", "- conversion:"):
        assert kind in text
    assert "pre_tokenizer=" in text and "next_steps" in text
    assert all(reason.value in text for reason in NEVER)
