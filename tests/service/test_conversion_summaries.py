"""What a conversion's summaries say of its files: each once, counted right, and a llama-quantize build (minutes)
only where one comes: never for F16 alone, never when the cache already holds one."""

from __future__ import annotations

import json
import stat

import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec, TerminationReason
from jobtrail.requests import ConvertRequest
from jobtrail.templates.llama_cpp import LLAMA_CPP_PYTHON_VERSION, builds_quantizer
from jobtrail.templates.runtime import runtime_module
from support.jobs import TINY_SFT
from support.records import add_ended_run

ENDLESS = {"max_steps": 100000, "save_steps": 100000}
BUILD = "llama-quantize"


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JOBTRAIL_LLAMA_CPP_CACHE", str(tmp_path / "llama-cache"))
    return build_service()


def _fake_build(cache_dir, version: str = LLAMA_CPP_PYTHON_VERSION) -> None:
    """A finished llama-quantize build in a cache, as the conversion job leaves one (its record beside it)."""
    directory = runtime_module("_llama_cpp").quantize_dir(cache_dir, version)
    directory.mkdir(parents=True)
    (directory / "build.json").write_text(json.dumps({"version": version}))
    tool = directory / "llama-quantize"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_a_conversion_names_each_file_once_and_a_build_only_where_one_comes(
    service, tmp_path, tiny_model, chat_dataset
):
    parent = service.submit(
        JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters={**TINY_SFT, **ENDLESS})
    ).job_id
    started = [parent]

    def convert(*quantizations: str):
        request = ConvertRequest(parent, quantizations=quantizations, after=parent, pre_tokenizer="qwen2")
        result = service.convert_gguf(request)
        assert result.job_id, result.summary
        started.append(result.job_id)
        return result

    try:
        twice = convert("f16", "q8_0", "Q8_0")
        assert twice.quantizations == ["Q8_0"] and "→ F16 + Q8_0 in" in twice.summary, twice.summary
        assert twice.builds_quantizer and f"builds {BUILD} first" in twice.summary
        f16 = convert("F16")
        assert f16.quantizations == [] and "→ F16 in" in f16.summary, f16.summary
        assert not f16.builds_quantizer and BUILD not in f16.summary
        _fake_build(tmp_path / "llama-cache" / LLAMA_CPP_PYTHON_VERSION)
        cached = convert("Q8_0")
        assert not cached.builds_quantizer and BUILD not in cached.summary, cached.summary
    finally:
        for job in reversed(started):
            service.cancel(job)


def test_a_build_is_known_here_only_for_the_pinned_release_and_never_for_a_job_that_runs_elsewhere(tmp_path):
    config = {"quantizations": ["Q4_K_M"], "llama_cpp": {"version": LLAMA_CPP_PYTHON_VERSION, "cache_dir": tmp_path}}
    assert builds_quantizer(config, runs_here=True)
    _fake_build(tmp_path, "0.0.1")  # another release's build
    assert builds_quantizer(config, runs_here=True)
    _fake_build(tmp_path)
    assert not builds_quantizer(config, runs_here=True)
    assert builds_quantizer(config, runs_here=False)  # a remote machine starts with an empty cache
    assert not builds_quantizer({**config, "quantizations": []}, runs_here=False)


def test_inspect_counts_one_gguf_file_as_one(service):
    add_ended_run(service.ledger, "jt-conv", TerminationReason.SUCCEEDED, method="convert_gguf")
    art = {"event": "artifact", "kind": "gguf", "quantization": "F16", "path": "/o/m-F16.gguf", "bytes": 10**6}
    service.ledger.ingest(
        "jt-conv/1", from_offset=0, to_offset=1, events=[{**art, "sha256": "0" * 64}], fields={}, checkpoints=[]
    )
    summary = service.inspect("jt-conv").to_markdown()
    assert "1 GGUF file (F16)" in summary, summary
