"""A call whose arguments fail the tool's schema, refused in words an agent can act on.

The SDK's own refusal is pydantic's report ("1 validation error for psArguments ... [type=literal_error,
input_value=...] For further information visit https://errors.pydantic.dev/..."): it names the problem but
not the fix, and for NaN it says "should be less than or equal to 36500", which is beside the point. Here
each wrong argument gets one line, `name=<excerpt>: problem`, a NaN or infinity is called what it is, a
choice written in another case or with '_' for '-' gets the value it most likely means (named, never
applied), and the refusal ends with what to do and that nothing ran.

An unknown argument that belongs inside another one is said where it goes (misplaced): submit(max_steps=3) is
hyperparameters={"max_steps": 3}; retry(job_id, lr=1e-4) is the call retry(job_id=..., changes={"learning_rate":
0.0001}), written out whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from pydantic import ValidationError

from jobtrail.methods import METHODS
from jobtrail.methods.hyperparameters import not_finite

EXCERPT = 60  # characters of a rejected value quoted back: enough to recognise it, never a whole input
_QUOTED = re.compile(r"'([^']*)'")
# The tags pydantic puts in an error's location for the member of a union that refused it ("int",
# "function-after[_no_nul(), constrained-str]"): type names, not arguments, so the refusal leaves them out.
_UNION_MEMBER = re.compile(r"^(int|float|str|bool|none|list|dict|constrained-[a-z]+|[a-z-]+\[.*\])$")
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")
SECRET_ARGUMENTS = ("secrets",)  # its values are never quoted back, whatever they hold


def explain(tool: str, error: ValidationError) -> str:
    problems = _merged([_line(problem) for problem in error.errors()])
    noun = "argument" if len(problems) == 1 else "arguments"
    return "\n".join(
        [
            f"Invalid {noun} for {tool}:",
            *(f"- {line}" for line in problems),
            f"Fix: call {tool} again with each value corrected as said. Nothing was run.",
        ]
    )


def _merged(lines: list[tuple[str, str]]) -> list[str]:
    """One line per value: a value no member of a union took (timeout: a string or a number of seconds) gets its
    members' problems on one line, "should be a valid string or a valid integer"."""
    problems: dict[str, list[str]] = {}
    for shown, message in lines:
        problems.setdefault(shown, []).append(message)
    return [f"{shown}: {_sentence(_either(messages))}" for shown, messages in problems.items()]


def _sentence(text: str) -> str:
    return text if text.endswith(("?", ".")) else f"{text}."


def _either(messages: list[str]) -> str:
    first, *rest = messages
    return " or ".join([first, *(m.removeprefix("Input should be ") for m in rest if m != first)])


def _line(problem: Any) -> tuple[str, str]:
    """(the argument and its value, the problem) of one pydantic error."""
    loc = [str(part) for part in problem["loc"] if not _UNION_MEMBER.match(str(part))]
    name = ".".join(loc) or "arguments"
    given = problem.get("input")
    shown = name if loc[:1] and loc[0] in SECRET_ARGUMENTS else f"{name}={_excerpt(given)}"
    if not_finite(given):
        return shown, "is NaN or infinite, not a number this argument can take"
    message = str(problem["msg"]).removeprefix("Value error, ")
    if problem["type"] == "literal_error":
        meant = _meant_choice(given, _QUOTED.findall(str(problem.get("ctx", {}).get("expected", ""))))
        if meant is not None:
            message += f". Did you mean {meant!r}?"
    return shown, message


def _meant_choice(given: Any, choices: list[str]) -> str | None:
    """The choice `given` spells in another case or with '_' for '-' ('Running', 'hf_jobs'): a sure match only."""
    if not isinstance(given, str):
        return None
    key = given.strip().lower().replace("_", "-")
    found = [choice for choice in choices if choice.lower().replace("_", "-") == key]
    return found[0] if len(found) == 1 else None


def _excerpt(value: Any) -> str:
    """The value as the agent wrote it (JSON), cut short, with anything like a Hugging Face token masked."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    text = _HF_TOKEN.sub("hf_***", text if len(text) <= EXCERPT else f"{text[:EXCERPT]}... ({len(text)} characters)")
    return text


Misplaced = Callable[[str, object], str | None]


def misplaced(tool: str, arguments: Mapping[str, Any], properties: Collection[str]) -> Misplaced | None:
    """Where an unknown argument that belongs inside another one goes, for unknown_arguments: submit's hyperparameter
    given beside `hyperparameters` is an entry of it (submit(max_steps=3)); retry's, or one of its job fields, beside
    `changes` is an entry of changes, said as the whole call (retry(job_id, learning_rate=1e-4)). None for a tool
    that has neither."""
    if "hyperparameters" in properties:
        return _inside_hyperparameters(arguments)
    if "changes" in properties:
        return _inside_changes(tool, arguments, properties)
    return None


def _inside_hyperparameters(arguments: Mapping[str, Any]) -> Misplaced:
    method = _method(arguments)

    def inside(name: str, value: object) -> str | None:
        meant = _hyperparameter(method, name, value)
        if meant is None:
            return None
        field, given = meant
        what = f"is the hyperparameter {field!r}" if field != name else "is a hyperparameter"
        return f"{name!r} {what}, not an argument: pass hyperparameters={{{json.dumps(field)}: {_in_call(given)}}}."

    return inside


def _inside_changes(tool: str, arguments: Mapping[str, Any], properties: Collection[str]) -> Misplaced:
    """A retry's change given as an argument of its own: the call with every such change inside `changes`."""
    # Imported when a call names an unknown argument: the server starts without the retry policy.
    from jobtrail.outcomes.retry import JOB_KEYS

    def change(name: str, value: object) -> tuple[str, object] | None:
        return (name, value) if name in JOB_KEYS else _hyperparameter("sft", name, value)

    given = arguments.get("changes")
    changes = dict(given) if isinstance(given, Mapping) else {}
    for name, value in arguments.items():
        if name not in properties and (found := change(name, value)) is not None:
            changes[found[0]] = found[1]
    job = arguments.get("job_id")
    entries = ", ".join(f"{json.dumps(name)}: {_in_call(value)}" for name, value in changes.items())
    call = f"{tool}(job_id={_in_call(job) if isinstance(job, str) else '<job id>'}, changes={{{entries}}})"

    said: list[str] = []  # the call is written out once, on the first such argument's line

    def inside(name: str, value: object) -> str | None:
        found = change(name, value)
        if found is None:
            return None
        what = f"the hyperparameter {found[0]!r}" if found[0] != name else "a change"
        where = "it goes in changes too (the call above)" if said else f"call {call}"
        said.append(name)
        return f"{name!r} is {what}, not an argument of {tool}: {where}."

    return inside


def _method(arguments: Mapping[str, Any]) -> str:
    method = arguments.get("method")
    return method if method in METHODS else "sft"  # the names are the same TRL fields for nearly every method


def _hyperparameter(method: str, name: str, value: object) -> tuple[str, object] | None:
    # Imported when a call names an unknown argument: the server starts without the hyperparameter tables.
    from jobtrail.preflight.hyperparams import meant_hyperparameter

    return meant_hyperparameter(method, name, value)


def _in_call(value: object) -> str:
    """The value as JSON for a suggested call; a long one is elided, never quoted whole."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else "..."
