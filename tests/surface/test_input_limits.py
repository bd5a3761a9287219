"""Every argument is bounded (params.py, once): the schemas publish the limits, and an oversized value, a
NUL or an empty list is refused at once with a short excerpt, never echoed whole, never an internal error."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest
from mcp import Client

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.requests import ConvertRequest
from jobtrail.surface import params
from jobtrail.surface.server import build_server
from support.mcp_client import in_session, list_tools

TEN_MB = 10 * 1024 * 1024
SHORT_REFUSAL = 1000  # characters: an excerpt of the input at most, whatever its size


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_service()


def _calls(service, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[Any, float]]:
    async def go(client: Client) -> list[tuple[Any, float]]:
        answers = []
        for tool, arguments in calls:
            started = time.monotonic()
            result = await client.call_tool(tool, arguments)
            answers.append((result, time.monotonic() - started))
        return answers

    return in_session(build_server(service), go)


def _text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def _walk(schema: Any):
    """Every sub-schema of a JSON schema (properties, anyOf members, items, additionalProperties)."""
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _walk(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _walk(value)


def test_every_string_list_and_object_argument_publishes_its_limit(service):
    unbounded = []
    for tool in list_tools(build_server(service)):
        for name, schema in tool.input_schema.get("properties", {}).items():
            for part in _walk(schema):
                kind = part.get("type")
                if kind == "string" and "enum" not in part and "const" not in part:
                    if "maxLength" not in part or "pattern" not in part:
                        unbounded.append(f"{tool.name}.{name} (string)")
                elif kind == "array" and "maxItems" not in part:
                    unbounded.append(f"{tool.name}.{name} (array)")
                elif kind == "object" and "maxProperties" not in part and part is not tool.input_schema:
                    unbounded.append(f"{tool.name}.{name} (object)")
    assert unbounded == []


def test_huge_input_nul_and_empty_list_are_refused_quickly_with_a_short_excerpt(service):
    huge_path = "/tmp/" + "a" * TEN_MB
    answers = _calls(
        service,
        [
            ("validate_dataset", {"dataset": huge_path}),
            ("submit", {"method": "sft", "model": huge_path, "dataset": "x.jsonl", "dry_run": True}),
            ("inspect", {"job_id": "jt-" + "z" * TEN_MB}),
            ("validate_dataset", {"dataset": "/tmp/data\x00.jsonl"}),
            ("submit", {"method": "sft", "model": "m", "dataset": "d.jsonl", "output": "out\x00", "dry_run": True}),
            ("submit", {"method": "sft", "model": "m", "dataset": "d", "hyperparameters": {"x": "a" * 100_000}}),
            ("convert_gguf", {"source": "/tmp/model", "quantizations": []}),
            ("evaluate", {"dataset": "d.jsonl", "model": "m", "metrics": []}),
            ("convert_gguf", {"source": "/tmp/model", "quantizations": ["Q8_0"] * 1000}),
        ],
    )
    texts = [_text(result) for result, _ in answers]
    for (result, seconds), text in zip(answers, texts, strict=True):
        assert result.is_error, text
        assert len(text) < SHORT_REFUSAL, text[:300]
        assert seconds < 10, (seconds, text[:200])
        assert "internal error" not in text and "Traceback" not in text
    assert all("at most 4096 characters" in t for t in texts[:2]), texts[:2]
    assert "at most 256 characters" in texts[2]
    assert all("NUL character" in t for t in texts[3:5]), texts[3:5]
    assert "at most 65536 are accepted" in texts[5]
    assert all("at least 1 item" in t for t in texts[6:8]), texts[6:8]
    assert "at most 64 items" in texts[8]
    assert service.ps().jobs == []  # nothing was started by any of them


def test_the_service_refuses_an_empty_quantization_list_too(service):
    with pytest.raises(InvalidRequestError) as refused:
        service.convert_gguf(ConvertRequest("/tmp/model", quantizations=[]))
    assert "Q8_0" in refused.value.fix or "leave it out" in refused.value.fix


def test_the_cli_checks_its_flags_with_the_same_limits(tmp_path):
    too_long = "/tmp/" + "b" * (params.MAX_PATH + 10)
    done = subprocess.run(
        [sys.executable, "-m", "jobtrail", "validate-dataset", too_long],
        env={"JOBTRAIL_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "at most 4096 characters" in done.stderr and len(done.stderr) < SHORT_REFUSAL, done.stderr[:500]


def test_an_unexpected_failure_quotes_only_an_excerpt_of_its_message():
    from mcp.server.mcpserver.exceptions import ToolError

    from jobtrail.surface.server import agent_errors

    @agent_errors
    def tool() -> None:
        raise OSError(f"[Errno 36] File name too long: '{'/tmp/' + 'a' * 100_000}'")

    with pytest.raises(ToolError) as refused:
        tool()
    assert "internal error (OSError: [Errno 36] File name too long" in str(refused.value)
    assert len(str(refused.value)) < SHORT_REFUSAL


def test_an_empty_path_is_refused_never_read_as_the_servers_working_directory(service):
    """dataset="" read the server's working directory (validate_dataset judged a JSON file of jobtrail's own source
    tree) and model="" reported "Model /<server cwd> has no readable config.json"; output="" was silently the
    default."""
    answers = _calls(
        service,
        [
            ("validate_dataset", {"dataset": ""}),
            ("submit", {"method": "sft", "model": " ", "dataset": "d.jsonl", "dry_run": True}),
            ("submit", {"method": "sft", "model": "m", "dataset": "d.jsonl", "output": "", "dry_run": True}),
            ("estimate_cost", {"model": "m", "dataset": ""}),
            ("convert_gguf", {"source": ""}),
        ],
    )
    for (result, _), argument in zip(answers, ("dataset", "model", "output", "dataset", "source"), strict=True):
        text = _text(result)
        assert result.is_error and f"- {argument}=" in text and "is empty: give a path or Hub id" in text, text
    assert service.ps().jobs == []
