"""A call whose arguments fail the tool's schema, refused in words an agent can act on.

The SDK's own refusal is pydantic's report ("1 validation error for psArguments ... [type=literal_error,
input_value=...] For further information visit https://errors.pydantic.dev/..."): it names the problem but
not the fix, and for NaN it says "should be less than or equal to 36500", which is beside the point. Here
each wrong argument gets one line, `name=<excerpt>: problem`, a NaN or infinity is called what it is, a
choice written in another case or with '_' for '-' gets the value it most likely means (named, never
applied), and the refusal ends with what to do and that nothing ran.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

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
