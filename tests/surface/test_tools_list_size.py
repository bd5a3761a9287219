"""tools/list stays small (every agent session pays for it in tokens before its first call), and what it leaves
out of pydantic's schemas is prose and nested detail only: every result field is still published, typed.

The structured content the schemas describe is checked elsewhere: the SDK's client validates each result against
its published output schema (test_summaries calls every tool in realistic states).
"""

from __future__ import annotations

import anyio
import pytest
from mcp.server.mcpserver.utilities.func_metadata import StrictJsonSchema
from mcp.types import ListToolsResult

from jobtrail.app import build_service
from jobtrail.surface.schemas import lean_output, published_output
from jobtrail.surface.server import AREAS, _is_structured, build_server
from jobtrail.surface.toolspec import tools_of

LIMIT_BYTES = 40 * 1024


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_server(build_service())


def test_tools_list_stays_under_40_kb(server):
    tools = anyio.run(server.list_tools)
    wire = ListToolsResult(tools=tools).model_dump_json(by_alias=True, exclude_none=True).encode()
    shares = sorted((len(tool.model_dump_json(by_alias=True, exclude_none=True)), tool.name) for tool in tools)
    assert len(wire) < LIMIT_BYTES, f"tools/list is {len(wire)} bytes; the largest tools: {shares[-4:]}"


def test_each_output_schema_publishes_every_result_field_typed_without_prose():
    results = [spec.result_type for area in AREAS for spec in tools_of(area) if _is_structured(spec.result_type)]
    assert results
    for result in results:
        published = published_output(result)
        fields = {field.serialization_alias or name for name, field in result.model_fields.items()}
        assert set(published["properties"]) == fields | set(result.model_computed_fields), result.__name__
        assert all(part for part in published["properties"].values()), f"{result.__name__} has an untyped field"
        assert not {"$defs", "title", "description", "default"} & set(_keywords(published)), result.__name__
        # The shallow generator writes what trimming pydantic's whole schema would: nothing more, nothing less.
        whole = result.model_json_schema(mode="serialization", schema_generator=StrictJsonSchema)
        whole["properties"] = {"summary": whole["properties"].pop("summary"), **whole["properties"]}
        assert published == lean_output(whole), result.__name__


def _keywords(schema: object) -> list[str]:
    """Every keyword used in `schema` (the keys of a `properties` map are field names, not keywords)."""
    if isinstance(schema, list):
        return [key for item in schema for key in _keywords(item)]
    if not isinstance(schema, dict):
        return []
    found = list(schema)
    for key, value in schema.items():
        parts = value.values() if key == "properties" else [value]
        found += [keyword for part in parts for keyword in _keywords(part)]
    return found
