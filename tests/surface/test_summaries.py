"""Every tool's structured content alone, as Claude Code passes it to the model, says the answer and the next call.

Claude Code and VS Code drop the text blocks of a result that has structured content (anthropics/claude-code#79944),
so `summary` must state the answer (status, reason, numbers) and the exact next calls. Each tool is called through
the SDK's in-memory client in realistic states: a tiny job that succeeds, a rejected and a dry-run submission, a
job that fails (timeout), a refused and an accepted retry, a cancel, and the planning and task tools.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from jobtrail.app import build_service
from jobtrail.surface.server import build_server
from support.jobs import FOUR_STEP_SFT
from support.mcp_client import call_tool, list_tools
from support.toolcalls import bad_calls, calls_in
from support.waiting import wait_for, wait_until_terminal

# Python a next step may name beside the tool calls (loading a LoRA adapter), which is not a tool.
NOT_TOOLS = {"merge_and_unload"}
# Tools whose result has no structured content, and why; every other tool is checked here.
WITHOUT_STRUCTURED_CONTENT = {"plot": "an image: clients drop images beside structured content"}


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_server(build_service())


class Agent:
    """Calls tools as a client does and keeps only what Claude Code shows the model: the structured content."""

    def __init__(self, server) -> None:
        self.server = server
        self.tools = {t.name: t for t in list_tools(server)}
        self.arguments = {name: list(t.input_schema.get("properties", {})) for name, t in self.tools.items()}
        self.called: set[str] = set()

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = call_tool(self.server, tool, arguments)
        assert not result.is_error, result.content
        data = result.structured_content
        assert data is not None and next(iter(data)) == "summary", data
        assert result.content[0].text.startswith(data["summary"]), "the text must start with the same summary"
        self.called.add(tool)
        return data

    def summary(self, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
        data = self.call(tool, **arguments)
        return data["summary"], data

    def next_part(self, summary: str) -> str:
        """The summary's 'Next:' part; every call there must be a real tool with real argument names."""
        assert "\nNext:" in summary, f"no next call in:\n{summary}"
        part = summary.split("\nNext:", 1)[1]
        calls = calls_in(part)
        assert calls, f"no call in the next part of:\n{summary}"
        assert not bad_calls(calls, self.arguments, NOT_TOOLS), bad_calls(calls, self.arguments, NOT_TOOLS)
        return part


def test_every_published_output_schema_lists_summary_first(server):
    for tool in list_tools(server):
        if tool.name in WITHOUT_STRUCTURED_CONTENT:
            assert tool.output_schema is None, f"{tool.name} publishes an output schema beside its image"
            continue
        schema = tool.output_schema
        assert schema is not None, f"{tool.name} has no output schema: give it a ToolResult"
        assert next(iter(schema["properties"])) == "summary", tool.name
        assert "summary" in schema["required"] and schema["properties"]["summary"]["type"] == "string", tool.name


def test_every_tool_summary_states_the_answer_and_the_next_call(server, tiny_model, chat_dataset, tmp_path, hub):
    hub.inject.fail(r"^/api/jobs/hardware", status=503, times=None)  # no live prices: the bundled snapshot
    agent = Agent(server)
    model, data = str(tiny_model), str(chat_dataset)

    # --- planning: data, hardware, estimate -----------------------------------------------------------
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"question": f"{i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(12)))
    summary, report = agent.summary("validate_dataset", dataset=str(qa), method="sft")
    assert "12 rows" in summary and "sft" in summary and "NEEDS_MAPPING" in summary
    mapping = json.dumps(report["methods"]["sft"]["mapping"], ensure_ascii=False)
    assert f'submit(method="sft", model=..., dataset="{qa}", dataset_mapping={mapping})' in agent.next_part(summary)

    summary, hw = agent.summary("hardware")
    assert f"{len(hw['flavors'])} flavors (bundled price list of {hw['snapshot_date']})" in summary
    assert "cheapest GPU" in summary and "estimate_cost(" in agent.next_part(summary)

    summary, est = agent.summary("estimate_cost", model=model, dataset=data, flavor="a10g-large")
    assert summary.startswith("Fits a10g-large (24 GB)") and f"{est['memory']['total_gb']:.1f} GB needed" in summary
    assert f"timeout {est['recommended_timeout']}" in summary
    # The submit it estimated, with the data it was given: a local model and data train here (an HF job cannot read
    # them, and preflight refuses them there), and the summary says how to train on a10g-large instead.
    call = f'submit(method="sft", model="{model}", dataset="{data}", backend="local")'
    assert call in agent.next_part(summary) and "upload the model and data to the Hub" in summary

    # --- submit: refused, dry run, accepted -------------------------------------------------------------
    missing = str(tmp_path / "nope.jsonl")
    summary, refused = agent.summary("submit", method="sft", model=model, dataset=missing)
    assert refused["status"] == "rejected" and summary.startswith("Not submitted: 1 problem must be fixed first.")
    [error] = [f for f in refused["findings"] if f["severity"] == "error"]
    assert f"✗ {error['code']}" in summary and f"Fix: {error['fix']}" in summary
    # The same submit with the one value the agent must choose left blank: where its data really is.
    assert f'submit(method="sft", model="{model}", dataset=..., dry_run=true)' in agent.next_part(summary)

    summary, dry = agent.summary("submit", method="sft", model=model, dataset=data, dry_run=True)
    assert summary.startswith("Dry run, nothing submitted: the job would be accepted")
    assert dry["script_sha256"][:12] in summary
    assert f'submit(method="sft", model="{model}", dataset="{data}"): starts it' in agent.next_part(summary)
    # A warning is part of the answer: the summary (all Claude Code shows of a result) names it and its fix.
    summary, warned = agent.summary(
        "submit",
        method="sft",
        model=model,
        dataset=data,
        dry_run=True,
        hyperparameters={"max_steps": 3, "logging_steps": 10},  # given: kept and warned (a default is fitted)
    )
    [warning] = [f for f in warned["findings"] if f["code"] == "config.no_step_logged"]
    assert f"{warning['message']}" in summary and f"Fix: {warning['fix']}" in summary

    summary, submitted = agent.summary("submit", method="sft", model=model, dataset=data, hyperparameters=FOUR_STEP_SFT)
    job = submitted["job_id"]
    assert summary.startswith(f"Submitted **{job}** ({submitted['status']}) on local.")
    assert f'wait(job_id="{job}")' in agent.next_part(summary)

    summary, live = agent.summary("inspect", job_id=job)
    if live["status"] not in ("succeeded", "failed", "cancelled"):  # it may already be done on a fast machine
        assert f"**{job}**: {live['status']}" in summary and f'cancel(job_id="{job}")' in agent.next_part(summary)

    done = wait_until_terminal(lambda: agent.call("inspect", job_id=job), 240, "the tiny job")
    summary = done["summary"]
    assert done["status"] == "succeeded", summary
    assert summary.startswith(f"**{job}**: succeeded; sft of ")  # never "succeeded (succeeded)"
    loss = done["progress"]
    assert f"Step 4/4; loss {loss['first_loss']:.4f} → {loss['last_loss']:.4f}" in summary
    assert "Last committed checkpoint:" in summary
    after = agent.next_part(summary)
    assert f'evaluate(job_id="{job}", dataset=' in after and f'convert_gguf(source="{job}"' in after
    assert f'init_from="{job}"' in after

    summary, waited = agent.summary("wait", job_id=job, timeout_s=5)
    assert waited["terminal"] and summary.startswith(f"**{job}**: succeeded at step 4/4.")
    assert f'inspect(job_id="{job}")' in agent.next_part(summary) and f'plot(job_id="{job}")' in summary
    summary, series = agent.summary("metrics", job_id=job)
    first, last = series["series"]["loss"][0][1], series["series"]["loss"][-1][1]
    assert len(series["series"]["loss"]) == 4 and f"loss {first:.4g} → {last:.4g}" in summary
    assert f'plot(job_id="{job}")' in agent.next_part(summary)

    summary, _ = agent.summary("logs", job_id=job, tail=2)
    assert summary.startswith(f"Logs of {job} attempt 1 (2 lines, succeeded") and "\n```" not in summary
    assert f'inspect(job_id="{job}")' in agent.next_part(summary)
    summary, head = agent.summary("logs", job_id=job, tail=1, cursor=0)
    assert f'logs(job_id="{job}", cursor={head["cursor"]})' in agent.next_part(summary)

    # --- a failed job: retry refused with the fix, retried with it, cancelled --------------------------
    endless = {**FOUR_STEP_SFT, "max_steps": 100000, "save_steps": 100000}
    failing = agent.call("submit", method="sft", model=model, dataset=data, hyperparameters=endless, timeout=2)
    failed_job = failing["job_id"]
    summary, waiting = agent.summary("wait", job_id=failed_job, timeout_s=1)
    assert summary.startswith(f"**{failed_job}**: ") and waiting["status"] in summary
    assert f'job_id="{failed_job}"' in agent.next_part(summary)
    failed = wait_until_terminal(lambda: agent.call("inspect", job_id=failed_job), 120, "the timeout")
    summary = failed["summary"]
    assert failed["termination_reason"] == "timeout", summary
    assert (
        summary.startswith(f"**{failed_job}**: failed (timeout)") and f"Why: {failed['termination_message']}" in summary
    )
    after = agent.next_part(summary)
    assert f'job_id="{failed_job}"' in after and "timeout" in after  # the evidence, and the fix's longer timeout

    summary, refused_retry = agent.summary("retry", job_id=failed_job)
    assert not refused_retry["retried"] and summary.startswith("Not retried:")
    assert f"Fix: {refused_retry['fix']}" in summary and "timeout" in refused_retry["fix"]
    assert f'retry(job_id="{failed_job}", changes=' in agent.next_part(summary)

    summary, retried = agent.summary("retry", job_id=failed_job, changes={"timeout": "10m"})
    assert retried["retried"] and summary.startswith(f"**{failed_job}** attempt 2 {retried['status']}")
    assert f'wait(job_id="{failed_job}")' in agent.next_part(summary)

    summary, cancelled = agent.summary("cancel", job_id=failed_job)
    assert cancelled["status"] == "cancelled" and summary.startswith(f"**{failed_job}**: cancelled")
    assert f'retry(job_id="{failed_job}")' in agent.next_part(summary)

    summary, release = agent.summary("release", job_id=failed_job)  # nothing holds it: nothing to release
    assert not release["released"] and summary.startswith(f"Not released: {failed_job} is not held (it is cancelled)")
    assert f'retry(job_id="{failed_job}")' in agent.next_part(summary)  # what its ending calls for

    summary, _ = agent.summary("ps")
    assert summary.startswith("2 jobs, newest first: 1 cancelled, 1 succeeded."), summary
    assert f'inspect(job_id="{failed_job}")' in agent.next_part(summary)

    summary, _ = agent.summary("report", days=1)
    assert re.match(r"3 attempts ended in the last 1 days: [\d.]+ GPU-hours, \$[\d.]+\. Not succeeded: 2 ", summary)
    assert "timeout 1" in summary and "cancelled 1" in summary
    assert 'ps(status="failed")' in agent.next_part(summary)

    # --- tasks: an evaluation, a refused and an accepted conversion ------------------------------------
    summary, evaluation = agent.summary("evaluate", job_id=job, dataset=data)
    eval_job = evaluation["job_id"]
    assert summary.startswith(f"Evaluation **{eval_job}** ({evaluation['status']}) of {job} [final] on local.")
    assert f'wait(job_id="{eval_job}")' in agent.next_part(summary)
    agent.call("cancel", job_id=eval_job)

    summary, bad = agent.summary("convert_gguf", source=job, quantizations=["Q9_Z"])
    assert bad["job_id"] is None and summary.startswith("Not converted: 1 problem must be fixed first.")
    assert "gguf.quantization_unknown" in summary and "Fix:" in summary
    assert "apply each Fix above" in summary.split("\nNext:", 1)[1]  # no call: the Fix names the value

    summary, conversion = agent.summary("convert_gguf", source=job, quantizations=["Q8_0"], pre_tokenizer="qwen2")
    convert_job = conversion["job_id"]
    assert convert_job and summary.startswith(f"Conversion **{convert_job}** ({conversion['status']}):")
    assert "F16 + Q8_0" in summary and f'wait(job_id="{convert_job}")' in agent.next_part(summary)
    agent.call("cancel", job_id=convert_job)
    wait_for(lambda: agent.call("inspect", job_id=convert_job)["status"] == "cancelled", 30, "the conversion to stop")

    expected = {name for name in agent.tools if name not in WITHOUT_STRUCTURED_CONTENT}
    assert agent.called >= expected, f"no summary check for {sorted(expected - agent.called)}: add one here"
