"""jobtrail's dataset_mapping language, the one implementation: rendered jobs inline this file and
apply it to every row; the server loads it (preflight/dataset/mapping.py) to validate a mapping and
try it on the rows it reads, so what was validated is exactly what trains.

render.py inlines this file into the training scripts (like _runtime.py, standard library only and
without `from __future__` imports).
"""

from typing import Any

# A dataset_mapping is declarative JSON: it travels in the job's CONFIG (and so in the ledger's
# config snapshot), the job applies it row by row, and the server's validate_dataset runs this
# same function on the rows it reads, so what was validated is exactly what trains. Kinds:
#
#   {"kind": "rename", "columns": {"question": "prompt", "answer": "completion"}, "drop": ["id"]}
#       renames columns (values untouched) and drops the listed ones; other columns stay.
#       "drop" is optional; "columns" may be empty when only dropping.
#   {"kind": "sharegpt", "column": "conversations", "role_key": "from", "content_key": "value",
#    "roles": {"human": "user", "gpt": "assistant", "system": "system"}}
#       a list of turns → "messages": [{"role", "content"}]; a turn whose role is not in "roles"
#       is an error (never guessed). role_key, content_key and roles default to the values shown
#       (roles: SHAREGPT_ROLES).
#   {"kind": "alpaca", "instruction": "instruction", "input": "input", "output": "output"}
#       → conversational "prompt": [{"role": "user", "content": instruction + "\n\n" + input}]
#       and "completion": [{"role": "assistant", "content": output}]; "input": null when the data
#       has no input column (an empty input adds nothing). Column names default to those shown.

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
}
MAPPING_KEYS = {
    "rename": {"kind", "columns", "drop"},
    "sharegpt": {"kind", "column", "role_key", "content_key", "roles"},
    "alpaca": {"kind", "instruction", "input", "output"},
}


def mapping_problems(mapping: Any) -> list[str]:
    """What is wrong with a dataset_mapping's shape (empty when it is well formed)."""
    if not isinstance(mapping, dict):
        return [f"dataset_mapping must be a JSON object, got {type(mapping).__name__}"]
    kind = mapping.get("kind")
    if "kind" not in mapping:
        return [
            f'dataset_mapping has no "kind" (one of {", ".join(MAPPING_KEYS)}); renaming columns is '
            '{"kind": "rename", "columns": {"<column in the data>": "<name the method reads>"}}'
        ]
    if not isinstance(kind, str) or kind not in MAPPING_KEYS:
        return [f"dataset_mapping kind {kind!r} is unknown; use one of {', '.join(MAPPING_KEYS)}"]
    problems = [
        f"dataset_mapping key {key!r} is unknown for kind {kind!r} (allowed: {', '.join(sorted(MAPPING_KEYS[kind]))})"
        for key in sorted(set(mapping) - MAPPING_KEYS[kind], key=str)
    ]
    if kind == "rename":
        problems += _rename_problems(mapping.get("columns", {}), mapping.get("drop", []))
    elif kind == "sharegpt":
        problems += _names_problems(mapping, required=("column",), optional=("role_key", "content_key"))
        roles = mapping.get("roles", SHAREGPT_ROLES)
        if not isinstance(roles, dict) or not roles:
            problems.append('dataset_mapping.roles must map the data\'s roles to chat roles, e.g. {"gpt": "assistant"}')
        else:
            problems += [
                f"dataset_mapping.roles maps {source!r} to {target!r}; use one of {', '.join(CHAT_ROLES)}"
                for source, target in roles.items()
                if target not in CHAT_ROLES
            ]
    else:
        problems += _names_problems(mapping, required=(), optional=("instruction", "output"))
        if mapping.get("input") is not None:
            problems += _names_problems(mapping, required=(), optional=("input",))
    return problems


def _rename_problems(columns: Any, drop: Any) -> list[str]:
    if not isinstance(columns, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in columns.items()
    ):
        return ['dataset_mapping.columns must map old column names to new ones, e.g. {"question": "prompt"}']
    if not isinstance(drop, list) or not all(isinstance(name, str) for name in drop):
        return ["dataset_mapping.drop must be a list of column names"]
    problems = []
    if not columns and not drop:
        problems.append("dataset_mapping renames and drops nothing")
    if len(set(columns.values())) != len(columns):
        problems.append("dataset_mapping.columns gives two columns the same new name")
    problems += [f"dataset_mapping both renames and drops {name!r}" for name in drop if name in columns]
    return problems


def _names_problems(mapping: dict[str, Any], required: tuple[str, ...], optional: tuple[str, ...]) -> list[str]:
    return [
        f"dataset_mapping.{key} must be a column name (a non-empty string)"
        for key in (*required, *optional)
        if (key in required or key in mapping) and not (isinstance(mapping.get(key), str) and mapping[key])
    ]


def mapping_source_columns(mapping: dict[str, Any]) -> list[str]:
    """The columns a mapping consumes (they are replaced by what it produces)."""
    kind = mapping["kind"]
    if kind == "rename":
        return [*mapping.get("columns", {}), *mapping.get("drop", [])]
    if kind == "sharegpt":
        return [mapping["column"]]
    names = [mapping.get("instruction", "instruction"), mapping.get("input", "input"), mapping.get("output", "output")]
    return [name for name in names if name is not None]


def apply_mapping(row: dict[str, Any], mapping: dict[str, Any]) -> dict[str, Any]:
    """The row after `mapping` (see the kinds above); ValueError naming the column when it cannot."""
    problems = mapping_problems(mapping)
    if problems:
        raise ValueError("invalid dataset_mapping: " + "; ".join(problems))
    missing = [name for name in mapping_source_columns(mapping) if name not in row]
    if missing:
        raise ValueError(f"dataset_mapping needs column(s) {missing}; the row has {sorted(row)}")
    kind = mapping["kind"]
    if kind == "rename":
        produced = {new: row[old] for old, new in mapping.get("columns", {}).items()}
    elif kind == "sharegpt":
        produced = {"messages": _sharegpt_messages(row, mapping)}
    else:
        produced = _alpaca_prompt_completion(row, mapping)
    kept = {k: v for k, v in row.items() if k not in mapping_source_columns(mapping)}
    clash = sorted(set(kept) & set(produced))
    if clash:
        raise ValueError(f"dataset_mapping would overwrite existing column(s) {clash}; rename or drop them too")
    return {**kept, **produced}


def _sharegpt_messages(row: dict[str, Any], mapping: dict[str, Any]) -> list[dict[str, Any]]:
    column = mapping["column"]
    role_key, content_key = mapping.get("role_key", "from"), mapping.get("content_key", "value")
    roles = mapping.get("roles", SHAREGPT_ROLES)
    turns = row[column]
    if not isinstance(turns, list):
        raise ValueError(f"column {column!r} must hold a list of turns, got {type(turns).__name__}")
    messages = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ValueError(f"{column}[{i}] must be an object, got {type(turn).__name__}")
        role, content = turn.get(role_key), turn.get(content_key)
        if not isinstance(role, str) or role not in roles:
            raise ValueError(
                f"{column}[{i}].{role_key} is {role!r}, which dataset_mapping.roles does not map "
                f"(it maps {sorted(roles)})"
            )
        if not isinstance(content, str):
            raise ValueError(f"{column}[{i}].{content_key} must be a string, got {type(content).__name__}")
        messages.append({"role": roles[role], "content": content})
    return messages


def _alpaca_prompt_completion(row: dict[str, Any], mapping: dict[str, Any]) -> dict[str, Any]:
    names = {key: mapping.get(key, key) for key in ("instruction", "input", "output")}
    values: dict[str, Any] = {key: row[name] if name is not None else None for key, name in names.items()}
    for key in ("instruction", "output"):
        if not isinstance(values[key], str):
            raise ValueError(f"column {names[key]!r} must be a string, got {type(values[key]).__name__}")
    if values["input"] is not None and not isinstance(values["input"], str):
        raise ValueError(f"column {names['input']!r} must be a string or null, got {type(values['input']).__name__}")
    text = values["instruction"] + (f"\n\n{values['input']}" if values["input"] else "")
    return {
        "prompt": [{"role": "user", "content": text}],
        "completion": [{"role": "assistant", "content": values["output"]}],
    }
