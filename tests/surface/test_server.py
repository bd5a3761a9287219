"""Every tool through the SDK's in-memory client, against a real ledger and real local jobs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from jobtrail.app import build_service
from jobtrail.surface.server import build_server
from support.jobs import FOUR_STEP_SFT
from support.mcp_client import call_tool as call, list_tools
from support.waiting import wait_for, wait_until_terminal

TOOLS = {
    "submit",
    "ps",
    "inspect",
    "logs",
    "cancel",
    "retry",
    "report",
    "validate_dataset",
    "hardware",
    "estimate_cost",
    "evaluate",
    "convert_gguf",
    "wait",
    "metrics",
    "plot",
}


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_server(build_service())


def test_tools_are_typed_titled_and_annotated(server):
    tools = {t.name: t for t in list_tools(server)}
    assert set(tools) >= TOOLS
    for name in TOOLS:
        tool = tools[name]
        assert tool.title and tool.description, name
        # plot's image would be dropped by clients that see structured content: it has no output schema.
        assert (tool.output_schema is None) == (name == "plot"), name
        assert tool.annotations is not None, name
    for name in ("ps", "inspect", "logs", "report", "validate_dataset"):
        assert tools[name].annotations.read_only_hint is True
    assert tools["cancel"].annotations.destructive_hint is True
    assert tools["submit"].annotations.read_only_hint is False
    props = tools["submit"].input_schema["properties"]
    for arg in (
        "method",
        "model",
        "dataset",
        "backend",
        "flavor",
        "timeout",
        "hyperparameters",
        "output",
        "dry_run",
        "force",
    ):
        assert arg in props, arg
    assert set(tools["submit"].input_schema["required"]) == {"method", "model", "dataset"}


def test_unknown_job_id_is_a_tool_error_with_the_fix(server):
    for tool in ("inspect", "logs", "cancel"):
        result = call(server, tool, {"job_id": "jt-nosuchjob"})
        assert result.is_error
        text = result.content[0].text
        assert "No job with id 'jt-nosuchjob'" in text and "ps" in text and "Traceback" not in text


def test_bad_method_is_refused_naming_the_valid_one(server, tiny_model, chat_dataset):
    result = call(server, "submit", {"method": "ppo", "model": str(tiny_model), "dataset": str(chat_dataset)})
    assert result.is_error
    assert "sft" in result.content[0].text


def test_missing_dataset_is_a_finding_that_blocks(server, tiny_model, tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    result = call(server, "submit", {"method": "sft", "model": str(tiny_model), "dataset": missing})
    assert not result.is_error
    data = result.structured_content
    assert data["status"] == "rejected" and data["job_id"] is None
    [finding] = [f for f in data["findings"] if f["severity"] == "error"]
    assert finding["code"] == "dataset.missing" and finding["fix"]
    assert "Not submitted: 1 problem" in result.content[0].text
    assert call(server, "ps", {}).structured_content["jobs"] == []


def test_unknown_hyperparameter_blocks_with_did_you_mean(server, tiny_model, chat_dataset):
    result = call(
        server,
        "submit",
        {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "hyperparameters": {"max_step": 3}},
    )
    data = result.structured_content
    assert data["status"] == "rejected"
    assert any("max_steps" in f["message"] for f in data["findings"])


def test_bad_timeout_is_a_tool_error_with_the_fix(server, tiny_model, chat_dataset):
    result = call(
        server, "submit", {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "timeout": "soon"}
    )
    assert result.is_error and "45m" in result.content[0].text


def test_dry_run_renders_without_running(server, tiny_model, chat_dataset):
    result = call(
        server, "submit", {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "dry_run": True}
    )
    data = result.structured_content
    assert data["status"] == "dry_run" and data["job_id"] is None
    # The script costs tokens: by default only its path and sha256 come back.
    assert data["script"] is None and "```python" not in result.content[0].text
    script = Path(data["script_path"]).read_text()
    assert script.startswith("# /// script") and hashlib.sha256(script.encode()).hexdigest() == data["script_sha256"]
    assert data["script_path"] in result.content[0].text
    asked = call(
        server,
        "submit",
        {
            "method": "sft",
            "model": str(tiny_model),
            "dataset": str(chat_dataset),
            "dry_run": True,
            "include_script": True,
        },
    )
    assert asked.structured_content["script"].startswith("# /// script") and "```python" in asked.content[0].text
    assert call(server, "ps", {}).structured_content["jobs"] == []


def _submit(server, model: Path, dataset: Path, **extra: Any) -> str:
    hyper = {**FOUR_STEP_SFT, **extra.pop("hyperparameters", {})}
    result = call(
        server,
        "submit",
        {"method": "sft", "model": str(model), "dataset": str(dataset), "hyperparameters": hyper, **extra},
    )
    assert not result.is_error, result.content
    data = result.structured_content
    assert data["job_id"] and data["status"] in ("queued", "starting", "running"), data
    return data["job_id"]


def _inspect(server, job_id: str) -> dict[str, Any]:
    result = call(server, "inspect", {"job_id": job_id})
    assert not result.is_error, result.content
    return result.structured_content


def test_real_sft_job_succeeds_with_steps_loss_checkpoint_and_receipt(server, tiny_model, chat_dataset):
    job_id = _submit(server, tiny_model, chat_dataset)
    data = wait_until_terminal(lambda: _inspect(server, job_id), 180, "the SFT job to end")
    assert data["status"] == "succeeded" and data["termination_reason"] == "succeeded", data
    assert data["progress"]["step"] == 4 and data["progress"]["steps_logged"] == 4
    assert data["progress"]["first_loss"] > 0
    committed = [c for c in data["checkpoints"] if c["state"] == "committed"]
    assert committed and all(Path(c["path"]).is_dir() for c in committed)
    [attempt] = data["attempts"]
    placement = attempt["placement"]
    assert placement["backend"] == "local" and placement["pid"] > 0 and placement["host"]
    assert attempt["data_manifest"]["rows"] > 0 and len(attempt["data_manifest"]["sha256"]) == 64
    assert attempt["environment"]["packages"]["trl"]
    assert len(attempt["config_sha256"]) == 64 and attempt["exit_code"] == 0
    assert Path(attempt["output_dir"], "final").is_dir()
    # Preflight turns nothing on for speed on a CPU, and every measure says why: only TRL's gradient
    # checkpointing and the test's own micro-batch (a user value) are on.
    speedups = {name: item for name, item in data["speedups"].items() if name != "device"}
    assert data["speedups"]["device"].startswith("CPU")
    assert {name: item["source"] for name, item in speedups.items() if item["on"]} == {
        "gradient_checkpointing": "default",
        "micro_batch": "user",
    }
    assert all(item["why"] and not item["sets"] for item in speedups.values())

    listed = call(server, "ps", {}).structured_content["jobs"]
    assert [j["job_id"] for j in listed] == [job_id] and listed[0]["status"] == "succeeded"
    assert call(server, "ps", {"status": "running"}).structured_content["jobs"] == []

    logs = call(server, "logs", {"job_id": job_id, "tail": 5}).structured_content
    assert len(logs["lines"]) == 5 and logs["finished"] is True
    head = call(server, "logs", {"job_id": job_id, "tail": 3, "cursor": 0}).structured_content
    assert len(head["lines"]) == 3 and head["cursor"] > 0
    nxt = call(server, "logs", {"job_id": job_id, "tail": 3, "cursor": head["cursor"]}).structured_content
    assert nxt["lines"] and nxt["lines"][0] not in head["lines"]


def test_cancel_ends_a_running_job_within_seconds(server, tiny_model, chat_dataset):
    job_id = _submit(server, tiny_model, chat_dataset, hyperparameters={"max_steps": 100000, "save_steps": 100000})
    wait_for(lambda: (_inspect(server, job_id)["progress"]["step"] or 0) >= 1, 120, "the first training step")
    result = call(server, "cancel", {"job_id": job_id})
    assert not result.is_error
    data = result.structured_content
    assert data["status"] == "cancelled" and data["termination_reason"] == "cancelled"
    again = call(server, "cancel", {"job_id": job_id}).structured_content
    assert again["status"] == "cancelled" and "already ended" in again["message"]


def test_too_short_timeout_ends_as_timeout(server, tiny_model, chat_dataset):
    job_id = _submit(server, tiny_model, chat_dataset, timeout=2, hyperparameters={"max_steps": 100000})
    data = wait_until_terminal(lambda: _inspect(server, job_id), 60, "the timeout")
    assert data["status"] == "failed" and data["termination_reason"] == "timeout"


def test_queue_respects_the_concurrency_limit(server, tiny_model, chat_dataset):
    first = _submit(server, tiny_model, chat_dataset, hyperparameters={"max_steps": 100000, "save_steps": 100000})
    second = _submit(server, tiny_model, chat_dataset)
    assert _inspect(server, second)["status"] == "queued"
    call(server, "cancel", {"job_id": first})
    wait_for(lambda: _inspect(server, second)["status"] != "queued", 30, "the queued job to start")
    queued_then_cancelled = _submit(server, tiny_model, chat_dataset)
    assert _inspect(server, queued_then_cancelled)["status"] == "queued"
    data = call(server, "cancel", {"job_id": queued_then_cancelled}).structured_content
    assert data["status"] == "cancelled"
    done = wait_until_terminal(lambda: _inspect(server, second), 180, "the second job to end")
    assert done["status"] == "succeeded"


def test_secret_reaches_the_job_but_no_output_or_ledger_byte(server, tiny_model, chat_dataset, tmp_path, monkeypatch):
    value = "hf_SECRETvalue_1234567890"
    monkeypatch.setenv("JT_TEST_SECRET", value)
    literal = call(
        server,
        "submit",
        {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "secrets": {"MY_TOKEN": value}},
    )
    assert literal.is_error and value not in literal.content[0].text and "$MY_TOKEN" in literal.content[0].text
    # The training job itself prints the secret it received (a careless user script would):
    # every output and the ledger must show it redacted.
    job_id = _submit(
        server, tiny_model, chat_dataset, secrets={"MY_TOKEN": "$JT_TEST_SECRET"}, hyperparameters={"run_name": "x"}
    )
    data = wait_until_terminal(lambda: _inspect(server, job_id), 180, "the job to end")
    assert data["status"] == "succeeded"
    workdir = Path(data["attempts"][0]["workdir"])
    log = (workdir / "job.log").read_text()
    assert value not in log  # the template never prints secrets
    assert value not in (workdir / "script.py").read_text()
    home = Path(os.environ["JOBTRAIL_HOME"])
    for path in home.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path


def test_validate_dataset_then_submit_with_the_proposed_mapping(server, tiny_model, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(f'{{"question": "what is {i} plus {i}?", "answer": "{2 * i}"}}\n' for i in range(24)))
    report = call(server, "validate_dataset", {"dataset": str(data), "method": "sft"})
    assert not report.is_error
    verdict = report.structured_content["methods"]["sft"]
    assert report.structured_content["rows"] == 24 and verdict["status"] == "NEEDS_MAPPING"
    assert "NEEDS_MAPPING" in report.content[0].text
    rejected = call(server, "submit", {"method": "sft", "model": str(tiny_model), "dataset": str(data)})
    assert rejected.structured_content["status"] == "rejected"
    job_id = _submit(server, tiny_model, data, dataset_mapping=verdict["mapping"])
    done = wait_until_terminal(lambda: _inspect(server, job_id), 180, "the mapped job")
    assert done["status"] == "succeeded"
    assert done["attempts"][0]["data_manifest"]["mapping"] == verdict["mapping"]


def test_hardware_and_estimate_cost_tools(server, tiny_model, chat_dataset, hub):
    hub.inject.fail(r"^/api/jobs/hardware", status=503, times=None)  # no live prices: the bundled snapshot answers
    hw = call(server, "hardware", {}).structured_content
    assert hw["source"] == "bundled" and hw["snapshot_date"]
    a10g = next(f for f in hw["flavors"] if f["name"] == "a10g-large")
    assert a10g["gpu"] == "A10G" and a10g["vram_gb"] == 24 and a10g["price_per_hour"] == 1.5 and a10g["bf16"]
    est = call(
        server, "estimate_cost", {"model": str(tiny_model), "dataset": str(chat_dataset), "flavor": "a10g-large"}
    )
    data = est.structured_content
    assert data["params"] > 0 and data["fits"]["a10g-large"] is True and data["recommended_flavor"]
    assert set(data["memory"]) >= {
        "weights_gb",
        "trainable_gb",
        "gradients_gb",
        "optimizer_gb",
        "activations_gb",
        "logits_gb",
        "overhead_gb",
        "total_gb",
    }
    assert data["recommended_timeout"] == "1h" and "Fits a10g-large" in est.content[0].text
    bad = call(
        server, "estimate_cost", {"model": str(tiny_model), "num_examples": 10, "avg_tokens": 5, "flavor": "a10g-lage"}
    )
    assert bad.is_error and "a10g-large" in bad.content[0].text
