"""SKILL.md, README.md and references/ tell the workflow as the server really has it: every tool they call
exists, every argument they name is one of its arguments, every default they print is its default, every
page is served as a resource, and every termination reason has its troubleshooting section."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from jobtrail.app import build_service
from jobtrail.models import TerminationReason
from jobtrail.surface.server import build_server
from support.mcp_client import in_session
from support.toolcalls import ToolCall, bad_calls, calls_in, top_level_parts

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "references").glob("*.md"))
DOCS = [ROOT / "SKILL.md", ROOT / "README.md", *PAGES]
# Functions the docs show that are not tools: a GRPO reward function's signature.
NOT_TOOLS = {"score"}
_CODE = re.compile(r"```(\w*)\n(.*?)```|`([^`\n]+)`", re.S)


def code_spans(text: str) -> list[str]:
    """Where the docs write tool calls: inline code and untagged blocks (a ```sql or ```bash block is not MCP)."""
    return [inline or block for lang, block, inline in _CODE.findall(text) if inline or not lang]


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JOBTRAIL_HOME", str(tmp_path_factory.mktemp("home")))
        server = build_server(build_service())

    async def go(client: Client) -> dict[str, Any]:
        listed = (await client.list_tools()).tools
        uris = [str(r.uri) for r in (await client.list_resources()).resources]
        pages = {uri: (await client.read_resource(uri)).contents[0] for uri in uris if "references/" in uri}
        return {"tools": {t.name: t for t in listed}, "uris": uris, "pages": pages}

    return in_session(server, go)


def doc_calls(path: Path) -> list[ToolCall]:
    return [call for span in code_spans(path.read_text()) for call in calls_in(span)]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_call_in_the_docs_names_a_real_tool_and_real_arguments(path: Path, tools) -> None:
    arguments = {name: list(t.input_schema.get("properties", {})) for name, t in tools["tools"].items()}
    calls = doc_calls(path)
    assert calls, f"{path.name} shows no tool call"
    assert not bad_calls(calls, arguments, NOT_TOOLS), "\n".join(bad_calls(calls, arguments, NOT_TOOLS))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_defaults_the_docs_print_are_the_tools_defaults(path: Path, tools) -> None:
    """A signature the docs print (`logs(job_id, tail=50, cursor=None, attempt=None)`: the required arguments
    bare, and a None among the values or every argument with two or more values) says defaults: each must be
    the tool's."""
    wrong = []
    for call in doc_calls(path):
        tool = tools["tools"].get(call.name)
        if tool is None:
            continue
        properties = tool.input_schema.get("properties", {})
        parts = dict(_argument(part) for part in top_level_parts(call.text[len(call.name) + 1 : -1]))
        printed = {key: _literal(value) for key, value in parts.items() if value is not None}
        required = tool.input_schema.get("required", [])
        bare = all(key in parts and parts[key] is None for key in required)  # a signature names them only
        complete = set(parts) == set(properties) and len(printed) >= 2
        if not bare or (not complete and None not in printed.values()):
            continue  # an example call with values, not a signature
        for key, value in printed.items():
            actual = properties.get(key, {}).get("default", "(required)")
            if key in properties and value is not _UNREADABLE and value != actual:
                wrong.append(f"{call.text}: {key} defaults to {actual!r}, not {value!r}")
    assert not wrong, "\n".join(wrong)


def test_every_tool_is_in_skill_and_readme_and_every_page_is_served(tools) -> None:
    skill, readme = (ROOT / "SKILL.md").read_text(), (ROOT / "README.md").read_text()
    for name in tools["tools"]:
        assert f"{name}(" in skill, f"SKILL.md does not mention {name}"
        assert f"`{name}(" in readme, f"README.md does not document {name}"
    for page in PAGES:
        uri = f"jobtrail://references/{page.stem}"
        assert uri in tools["uris"], f"{page.name} is not served"
        assert tools["pages"][uri].text == page.read_text(), f"{uri} does not serve {page.name}"
        assert f"`{page.stem}`" in skill, f"SKILL.md's list of reference pages lacks {page.stem}"


def test_troubleshooting_has_a_section_for_every_termination_reason() -> None:
    text = (ROOT / "references" / "troubleshooting.md").read_text()
    sections = set(re.findall(r"^## `(\w+)`$", text, re.M))
    assert sections == {reason.value for reason in TerminationReason}, sections ^ {r.value for r in TerminationReason}
    jobs = (ROOT / "references" / "jobs.md").read_text()
    for reason in TerminationReason:
        assert f"| `{reason.value}` |" in jobs, f"jobs.md's reason table lacks {reason.value}"


_UNREADABLE = object()


def _literal(text: str) -> Any:
    """A default as the docs print it (Python or JSON spelling), or _UNREADABLE."""
    try:
        return ast.literal_eval({"true": "True", "false": "False", "null": "None"}.get(text, text))
    except (ValueError, SyntaxError):
        return _UNREADABLE


def _argument(part: str) -> tuple[str, str | None]:
    """("tail", "50") for `tail=50`, ("job_id", None) for a bare `job_id`."""
    key, equals, value = part.partition("=")
    return key.strip(), value.strip() if equals else None
