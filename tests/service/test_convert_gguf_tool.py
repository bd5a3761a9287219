"""convert_gguf through the MCP tool surface: a job's trained adapter becomes verified GGUF files."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.surface.server import build_server
from jobtrail.templates.llama_cpp import LLAMA_CPP_PYTHON_VERSION
from support.jobs import FIRST_BUILD_TIMEOUT_S, LLAMA_CPP_CACHE
from support.waiting import wait_for, wait_until_terminal


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 600)
def test_a_trained_job_converts_to_gguf_and_inspect_lists_the_files(tmp_path, chat_dataset, tiny256, monkeypatch):
    # The same llama.cpp cache as tests/test_gguf.py, so the quantizer is built once per machine.
    monkeypatch.setenv("JOBTRAIL_LLAMA_CPP_CACHE", str(LLAMA_CPP_CACHE.parent))
    service = build_service(tmp_path / "home")
    job = service.submit(
        JobSpec(
            method="sft",
            model=str(tiny256),
            dataset=str(chat_dataset),
            hyperparameters={"max_steps": 2, "max_length": 64, "logging_steps": 1},
        )
    )
    assert (
        wait_for(
            lambda: (r := service.inspect(job.job_id)).status != "running" and r.status != "queued" and r,
            180,
            "training",
        ).status
        == "succeeded"
    )
    server = build_server(service)

    async def call(arguments):
        async with Client(server) as client:
            return await client.call_tool("convert_gguf", arguments)

    refused = anyio.run(call, {"source": job.job_id, "quantizations": ["Q9_Z"]})
    assert refused.structured_content["job_id"] is None and "gguf.quantization_unknown" in refused.content[0].text
    # Written as llama-quantize does not (it matches case-insensitively), and twice: its spelling, once.
    started = anyio.run(call, {"source": job.job_id, "quantizations": ["q8_0", "Q8_0"], "pre_tokenizer": "qwen2"})
    conversion = started.structured_content
    assert conversion["job_id"] and conversion["source"].endswith("/output/final")
    assert conversion["quantizations"] == ["Q8_0"]
    done = wait_until_terminal(
        lambda: service.inspect(conversion["job_id"]), FIRST_BUILD_TIMEOUT_S + 300, "the conversion", interval=1.0
    )
    assert done.status == "succeeded", (done.termination_message, service.logs(conversion["job_id"], tail=30).lines)
    files = {a["quantization"]: a for a in done.artifacts if a.get("kind") == "gguf"}
    assert set(files) == {"F16", "Q8_0"}
    for art in files.values():
        assert Path(art["path"]).is_file() and len(art["sha256"]) == 64 and art["bytes"] > 0
    llama = [a for a in done.artifacts if a.get("kind") == "llama_cpp"]
    assert llama and llama[0]["version"] == LLAMA_CPP_PYTHON_VERSION
    assert "GGUF Q8_0" in done.to_markdown()
