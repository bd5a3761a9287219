"""The JSON schemas tools/list publishes: what clients and agents use of pydantic's schemas, nothing more.

Every agent session pays for tools/list in tokens before its first call. pydantic's schemas carry a `title`
for every field (the field's name again); its output schemas carry the result models' docstrings, field
descriptions and defaults, and every nested record in full. No client shows an output schema to a model:
Claude Code passes the model the input schema and, of a result, only its structured content (AGENT_UX.md).
Clients use an output schema to validate structured content: for that, each result field keeps its name,
type, nullability and enum, and a record nested in it is typed `object` (its fields are in the content).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.utilities.func_metadata import StrictJsonSchema
from pydantic import BaseModel
from pydantic_core import core_schema

_DEFINITIONS = "#/$defs/"
# Keywords whose value maps names to schemas: their keys are field or definition names, never keywords.
_NAMED = frozenset({"properties", "$defs", "patternProperties"})
# Keywords whose value is data (a default, the allowed values, field names), never a schema to walk into.
_DATA = frozenset({"default", "enum", "const", "examples", "required"})
# What an output schema says for people and code generators, not for validation.
_PROSE = frozenset({"title", "description", "default", "examples", "readOnly"})


def published_output(result_type: type[BaseModel]) -> dict[str, Any]:
    """A result model's outputSchema: lean, `summary` first.

    The SDK would derive it in pydantic's validation mode, which leaves out computed fields such as `summary`;
    the serialization mode describes what the structured content really holds. The SDK still validates each
    result against the model itself, where `summary` is ignored as input.
    """
    generator = type(f"{result_type.__name__}Shallow", (_RecordsShallow,), {"root": result_type})
    schema = result_type.model_json_schema(mode="serialization", schema_generator=generator)
    properties = schema["properties"]
    schema["properties"] = {"summary": properties.pop("summary"), **properties}
    return lean_output(schema)


class _RecordsShallow(StrictJsonSchema):
    """pydantic's schema of the model `root`, every record nested in it `{"type": "object"}` from the start:
    what lean_output keeps of them, without generating each of their fields first (most of a start's work)."""

    root: type[BaseModel]

    def model_schema(self, schema: core_schema.ModelSchema) -> dict[str, Any]:
        return super().model_schema(schema) if schema["cls"] is self.root else {"type": "object"}


def lean_input(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema without pydantic's titles; descriptions, defaults and limits are what an agent reads."""
    lean: dict[str, Any] = _without(schema, frozenset({"title"}), nullable_types=False)
    return lean


def lean_output(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema that accepts the same structured content: each field typed, no prose, records shallow.

    A nullable scalar `anyOf` is written as one `type` list (`{"type": ["string", "null"]}`), which accepts
    exactly the same values.
    """
    definitions = schema.get("$defs", {})
    fields = {key: value for key, value in schema.items() if key != "$defs"}
    lean: dict[str, Any] = _without(_shallow(fields, definitions), _PROSE, nullable_types=True)
    return lean


def _shallow(schema: Any, definitions: dict[str, Any]) -> Any:
    """Every reference resolved: to a record, as `{"type": "object"}`; to anything else (an enum), inlined."""
    if isinstance(schema, list):
        return [_shallow(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = definitions[schema["$ref"].removeprefix(_DEFINITIONS)]
        resolved = {"type": "object"} if target.get("type") == "object" else _shallow(target, definitions)
        siblings = {key: value for key, value in schema.items() if key != "$ref"}
        return {**_shallow(siblings, definitions), **resolved}
    return {
        key: {name: _shallow(part, definitions) for name, part in value.items()}
        if key in _NAMED and isinstance(value, dict)
        else value
        if key in _DATA
        else _shallow(value, definitions)
        for key, value in schema.items()
    }


def _without(schema: Any, dropped: frozenset[str], nullable_types: bool) -> Any:
    """`schema` without the `dropped` keywords nor `additionalProperties: true` (JSON Schema's default)."""
    if isinstance(schema, list):
        return [_without(item, dropped, nullable_types) for item in schema]
    if not isinstance(schema, dict):
        return schema
    lean: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _NAMED and isinstance(value, dict):
            lean[key] = {name: _without(part, dropped, nullable_types) for name, part in value.items()}
        elif key in dropped or (key == "additionalProperties" and value is True):
            continue
        else:
            lean[key] = value if key in _DATA else _without(value, dropped, nullable_types)
    branches = lean.get("anyOf")
    if nullable_types and len(lean) == 1 and branches and all(_bare_type(branch) for branch in branches):
        types = list(dict.fromkeys(branch["type"] for branch in branches))  # JSON Schema wants them unique
        return {"type": types if len(types) > 1 else types[0]}
    return lean


def _bare_type(branch: Any) -> bool:
    return isinstance(branch, dict) and branch.keys() == {"type"} and isinstance(branch["type"], str)
