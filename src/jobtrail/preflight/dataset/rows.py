"""Row-level problems: each row checked by content for the data format a method reads. Pure.

A row's problems are errors (the job would fail or learn nothing from it) or warnings (it would
run, but probably not as meant). For messages, only the first structural problem is reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from jobtrail.preflight.dataset.mapping import job_runtime
from jobtrail.results.dataset import Severity
from jobtrail.util.values import type_name


class Issue(NamedTuple):
    column: str | None
    problem: str
    severity: Severity = "error"


def _check_text(row: dict[str, Any], column: str) -> list[Issue]:
    value = row.get(column)
    if value is None and column in row:
        return [Issue(column, f"'{column}' is null")]
    if value is None:
        return [Issue(column, f"column '{column}' is missing; found: {', '.join(map(repr, row)) or 'no columns'}")]
    if not isinstance(value, str):
        return [Issue(column, f"'{column}' is {type_name(value)}, expected a string")]
    if not value.strip():
        return [Issue(column, f"'{column}' is empty", "warning")]
    return []


def _check_messages(value: Any, column: str, *, need_assistant: bool) -> list[Issue]:
    """Shape, roles and content of one list of messages; the first structural problem only."""
    if value is None:
        return [Issue(column, f"'{column}' is missing or null")]
    if not isinstance(value, list):
        return [Issue(column, f"'{column}' is {type_name(value)}, expected a list of {{role, content}} messages")]
    if not value:
        return [Issue(column, f"'{column}' has no messages")]
    roles: list[tuple[int, str]] = []
    warnings: list[Issue] = []
    for i, message in enumerate(value):
        problem = _message_problem(message, f"{column}[{i}]")
        if problem:
            return [Issue(column, problem)]
        roles.append((i, message["role"]))
        content = message.get("content")
        if message["role"] == "assistant" and isinstance(content, str) and not content.strip():
            warnings.append(Issue(column, f"{column}[{i}] (assistant) is empty", "warning"))
    if need_assistant and all(role != "assistant" for _, role in roles):
        return [Issue(column, f"'{column}' has no assistant turn to learn from")]
    order = _turn_order_problem(column, roles)
    return ([Issue(column, order)] if order else []) + warnings


def _message_problem(message: Any, where: str) -> str | None:
    if not isinstance(message, dict):
        return f"{where} is {type_name(message)}, expected {{role, content}}"
    role = message.get("role")
    if role is None:
        hint = " (it has 'from'/'value': ShareGPT turns, which need a dataset_mapping)" if "from" in message else ""
        return f"{where} has no 'role'{hint}"
    chat_roles = job_runtime().CHAT_ROLES
    if role not in chat_roles:
        return f"{where}.role {role!r} is not a chat role (use {', '.join(chat_roles)})"
    content = message.get("content")
    if content is None and not (role == "assistant" and message.get("tool_calls")):
        return f"{where} ({role}) has no 'content'"
    if content is not None and not isinstance(content, str | list):
        return f"{where}.content is {type_name(content)}, expected a string"
    return None


def _turn_order_problem(column: str, roles: list[tuple[int, str]]) -> str | None:
    """System turns come first; then user and assistant alternate (tool results follow the assistant)."""
    previous: tuple[int, str] | None = None
    for i, role in roles:
        if role in ("system", "developer"):
            if previous is not None and previous[1] not in ("system", "developer"):
                return f"{column}[{i}] is a {role} message after the conversation started"
        elif role == "tool":
            if previous is None or previous[1] not in ("assistant", "tool"):
                return f"{column}[{i}] is a tool result that does not follow an assistant turn"
        elif previous is not None and previous[1] == role:
            return f"turns do not alternate: {column}[{previous[0]}] and {column}[{i}] are both {role!r}"
        previous = (i, role)
    return None


def _check_prompt_completion(row: dict[str, Any]) -> list[Issue]:
    prompt, completion = row.get("prompt"), row.get("completion")
    if not (isinstance(prompt, list) or isinstance(completion, list)):
        return _check_text(row, "prompt") + _check_text(row, "completion")
    if isinstance(prompt, str) or isinstance(completion, str):
        mixed = "one of 'prompt'/'completion' is a string, the other a list of messages; both must be the same kind"
        return [Issue(None, mixed)]
    issues = _check_messages(prompt, "prompt", need_assistant=False)
    issues += _check_messages(completion, "completion", need_assistant=True)
    # No issues means the completion passed the message checks: a non-empty list of messages.
    if not issues and isinstance(completion, list) and completion[0].get("role") != "assistant":
        problem = f"completion[0] is {completion[0]['role']!r}; the completion must start with the assistant's reply"
        issues.append(Issue("completion", problem))
    return issues


def _check_pair(row: dict[str, Any], columns: tuple[str, ...]) -> list[Issue]:
    keys = ("prompt", "chosen", "rejected") if "prompt" in columns else ("chosen", "rejected")
    lists = [k for k in keys if isinstance(row.get(k), list)]
    if lists and len(lists) != len(keys) and all(row.get(k) is not None for k in keys):
        problem = f"{', '.join(lists)} are lists of messages but the other columns are not; all must be the same kind"
        return [Issue(None, problem)]
    if lists:
        explicit = "prompt" in keys
        issues = _check_messages(row.get("prompt"), "prompt", need_assistant=False) if explicit else []
        for key in ("chosen", "rejected"):
            issues += _check_messages(row.get(key), key, need_assistant=True)
    else:
        issues = [issue for key in keys for issue in _check_text(row, key)]
    if not any(i.severity == "error" for i in issues) and row.get("chosen") == row.get("rejected"):
        identical = "'chosen' and 'rejected' are identical, so the pair teaches nothing"
        issues.append(Issue("rejected", identical, "warning"))
    return issues


def _check_prompt(row: dict[str, Any]) -> list[Issue]:
    if isinstance(row.get("prompt"), list):
        return _check_messages(row["prompt"], "prompt", need_assistant=False)
    return _check_text(row, "prompt")


def _check_label(row: dict[str, Any]) -> list[Issue]:
    label = row.get("label")
    if isinstance(label, bool):
        return []
    if label is None:
        return [Issue("label", f"'label' is {'null' if 'label' in row else 'missing'}; KTO needs true or false")]
    return [Issue("label", f"'label' is {label!r} ({type_name(label)}); KTO needs true or false")]


def row_checker(method: str, columns: tuple[str, ...]) -> Callable[[dict[str, Any]], list[Issue]]:
    """The check every row of a view gets for `method`, chosen from the view's columns."""
    if method == "sft":
        if "messages" in columns:
            return lambda row: _check_messages(row.get("messages"), "messages", need_assistant=True)
        if "prompt" in columns and "completion" in columns:
            return _check_prompt_completion
        return lambda row: _check_text(row, "text")
    if method == "grpo":
        return _check_prompt
    if method == "kto" and "label" in columns and "completion" in columns:
        return lambda row: _check_prompt_completion(row) + _check_label(row)
    return lambda row: _check_pair(row, columns)
