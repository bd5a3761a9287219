"""dataset_mapping on the server side: validating a mapping, showing it as `datasets` code, and
applying it to rows.

The mapping language has ONE implementation, scripts/_mapping.py `apply_mapping`, which every
rendered job inlines; `job_runtime()` loads that same file here (the server's one loader of it),
so a mapping that validates READY is exactly the transformation the job applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from jobtrail.errors import InvalidRequestError
from jobtrail.results.dataset import RowProblem, as_json
from jobtrail.templates.runtime import runtime_module


def job_runtime() -> ModuleType:
    """scripts/_mapping.py as a module: the same source every rendered job inlines."""
    return runtime_module("_mapping")


def validate_mapping(mapping: Any) -> None:
    """Raise InvalidRequestError (with the fix) unless `mapping` is a well-formed dataset_mapping."""
    problems = job_runtime().mapping_problems(mapping)
    if problems:
        raise InvalidRequestError(
            "dataset_mapping is invalid: " + "; ".join(problems) + ".",
            fix='Use a mapping validate_dataset proposes, e.g. {"kind": "rename", "columns": {"question": "prompt", '
            '"answer": "completion"}}; kinds: rename, sharegpt, alpaca.',
        )


def mapping_python(mapping: dict[str, Any]) -> str:
    """Equivalent `datasets` code for a (well-formed) dataset_mapping, for people and agents to read."""
    rt = job_runtime()
    kind = mapping["kind"]
    header = f"# dataset_mapping={as_json(mapping)}\n"
    if kind == "rename":
        code = ""
        if mapping.get("columns"):
            code += f"dataset = dataset.rename_columns({mapping['columns']!r})\n"
        if mapping.get("drop"):
            code += f"dataset = dataset.remove_columns({mapping['drop']!r})\n"
        return header + code
    consumed = rt.mapping_source_columns(mapping)
    if kind == "sharegpt":
        role_key, content_key = mapping.get("role_key", "from"), mapping.get("content_key", "value")
        return header + (
            f"ROLES = {mapping.get('roles', rt.SHAREGPT_ROLES)!r}\n\n\n"
            "def to_messages(row):\n"
            f"    turns = row[{mapping['column']!r}]\n"
            '    return {"messages": [\n'
            f'        {{"role": ROLES[t[{role_key!r}]], "content": t[{content_key!r}]}} for t in turns\n'
            "    ]}\n\n\n"
            f"dataset = dataset.map(to_messages, remove_columns={consumed!r})\n"
        )
    names = {key: mapping.get(key, key) for key in ("instruction", "input", "output")}
    add_input = (
        f'    if row[{names["input"]!r}]:\n        text += "\\n\\n" + row[{names["input"]!r}]\n'
        if names["input"] is not None
        else ""
    )
    return header + (
        "def to_prompt_completion(row):\n"
        f"    text = row[{names['instruction']!r}]\n"
        f"{add_input}"
        "    return {\n"
        '        "prompt": [{"role": "user", "content": text}],\n'
        f'        "completion": [{{"role": "assistant", "content": row[{names["output"]!r}]}}],\n'
        "    }\n\n\n"
        f"dataset = dataset.map(to_prompt_completion, remove_columns={consumed!r})\n"
    )


@dataclass
class MappedRows:
    """Rows as one method would see them (after its mapping), with their source numbers."""

    rows: list[dict[str, Any]]
    numbers: list[int]
    problems: list[RowProblem]


def map_rows(
    rows: list[dict[str, Any]], numbers: list[int], mapping: dict[str, Any] | None, *, proposed: bool = False
) -> MappedRows:
    """`rows` after `mapping` (None: as they are); a row the mapping fails on becomes a RowProblem.

    proposed: the mapping is validate_dataset's own proposal, not one the user passed, so a row's
    problem is told as the data's (a missing column), never as "dataset_mapping fails".
    """
    if mapping is None:
        return MappedRows(rows, numbers, [])
    rt = job_runtime()
    view = MappedRows([], [], [])
    sources = rt.mapping_source_columns(mapping)
    column = sources[0] if mapping.get("kind") != "rename" else None
    prefix = "" if proposed else "dataset_mapping fails: "
    for number, row in zip(numbers, rows, strict=True):
        missing = [name for name in sources if name not in row]
        if missing:
            found = ", ".join(map(repr, row)) or "no columns"
            problem = f"{prefix}column {missing[0]!r} is missing; found: {found}"
            view.problems.append(RowProblem(row=number, column=missing[0], problem=problem))
            continue
        try:
            view.rows.append(rt.apply_mapping(row, mapping))
            view.numbers.append(number)
        except ValueError as exc:  # apply_mapping's one documented failure: it names the column
            view.problems.append(RowProblem(row=number, column=column, problem=f"{prefix}{exc}"))
    return view
