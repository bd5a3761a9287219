"""Judging the shape of the data, per method. Pure.

TRL's dataset formats (messages, text, prompt/completion, preference with an explicit or
implicit prompt, prompt-only, unpaired preference) are READY as they are; common other shapes
(ShareGPT, Alpaca, question/answer, renamed preference columns) are NEEDS_MAPPING, with the
declarative dataset_mapping that makes them fit; anything else is INCOMPATIBLE, with a fix.
The verdict here looks at column names and first values only; rows.py checks every row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from jobtrail.preflight.dataset.mapping import job_runtime
from jobtrail.results.dataset import MethodVerdict, as_json

# Column names other datasets use for what TRL calls prompt/completion/chosen/rejected/messages,
# in order of preference when several are present.
PROMPT_ALIASES = ("prompt", "question", "query", "instruction", "problem", "input")
COMPLETION_ALIASES = ("completion", "answer", "response", "output", "solution")
CHOSEN_ALIASES = ("chosen", "response_chosen", "chosen_response", "good", "preferred", "accepted", "better")
REJECTED_ALIASES = ("rejected", "response_rejected", "rejected_response", "bad", "dispreferred", "worse")
CONVERSATION_ALIASES = ("messages", "conversations", "conversation", "chat", "dialog", "dialogue", "turns")
ROLE_KEYS = ("role", "from", "speaker", "author")
CONTENT_KEYS = ("content", "value", "text", "message")


class Turns(NamedTuple):
    """A column holding conversations: which keys name the speaker and the text, roles seen."""

    column: str
    role_key: str
    content_key: str
    roles: frozenset[str]


@dataclass(frozen=True)
class Columns:
    """The columns of a view of the rows, and the first non-null value of each."""

    names: tuple[str, ...]
    first: dict[str, Any]
    rows: list[dict[str, Any]]

    @classmethod
    def of(cls, rows: list[dict[str, Any]]) -> Columns:
        names: dict[str, None] = {}
        first: dict[str, Any] = {}
        for row in rows:
            for key, value in row.items():
                names.setdefault(key)
                if value is not None and key not in first:
                    first[key] = value
        return cls(tuple(names), first, rows)

    def has(self, *names: str) -> bool:
        return all(name in self.names for name in names)

    def find(self, aliases: tuple[str, ...]) -> str | None:
        return next((name for name in aliases if name in self.names), None)

    def conversational(self, name: str | None) -> bool:
        value = self.first.get(name) if name else None
        return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "role" in value[0]

    def turns(self) -> Turns | None:
        for column in CONVERSATION_ALIASES:
            value = self.first.get(column)
            if not (isinstance(value, list) and value and isinstance(value[0], dict)):
                continue
            role_key = next((k for k in ROLE_KEYS if k in value[0]), None)
            content_key = next((k for k in CONTENT_KEYS if k in value[0]), None)
            if role_key and content_key:
                return Turns(column, role_key, content_key, self._roles(column, role_key))
        return None

    def _roles(self, column: str, role_key: str) -> frozenset[str]:
        seen: set[str] = set()
        for row in self.rows:
            turns = row.get(column)
            if isinstance(turns, list):
                seen.update(t[role_key] for t in turns if isinstance(t, dict) and isinstance(t.get(role_key), str))
            if len(seen) > 50:  # enough to build a mapping; the rest show up as row problems
                break
        return frozenset(seen)

    def unpaired(self) -> bool:
        """A completion per row with a 'label' (KTO's unpaired preference), under any column names."""
        return "label" in self.names and bool(self.find(PROMPT_ALIASES) and self.find(COMPLETION_ALIASES))

    def same_kind(self, a: str, b: str) -> bool:
        """Both plain text or both lists of messages (TRL needs one kind per row)."""
        return isinstance(self.first.get(a), list) == isinstance(self.first.get(b), list)

    def alpaca(self) -> dict[str, Any] | None:
        output = self.find(("output", "response"))
        if "instruction" not in self.names or output is None:
            return None
        context = self.find(("input", "context"))
        return {"kind": "alpaca", "instruction": "instruction", "input": context, "output": output}


def _canonical_role(role: str) -> str | None:
    """The chat role the job's sharegpt mapping gives `role` by default (SHAREGPT_ROLES: human → user,
    gpt → assistant, the chat roles themselves); any other name is never guessed (None)."""
    roles: dict[str, str] = job_runtime().SHAREGPT_ROLES
    return roles.get(role.lower())


def _ready(reason: str) -> MethodVerdict:
    return MethodVerdict(status="READY", reason=reason)


def incompatible(reason: str, fix: str) -> MethodVerdict:
    return MethodVerdict(status="INCOMPATIBLE", reason=reason, fix=fix)


def _needs(reason: str, mapping: dict[str, Any]) -> MethodVerdict:
    fix = f"dataset_mapping={as_json(mapping)}"
    return MethodVerdict(status="NEEDS_MAPPING", reason=reason, mapping=mapping, fix=fix)


def _rename(reason: str, columns: dict[str | None, str], drop: tuple[str, ...] = ()) -> MethodVerdict:
    renames = {old: new for old, new in columns.items() if old is not None and old != new}
    mapping: dict[str, Any] = {"kind": "rename", "columns": renames}
    if drop:
        mapping["drop"] = list(drop)
    return _needs(reason, mapping)


def _found(c: Columns) -> str:
    return ", ".join(repr(n) for n in c.names[:12]) or "no columns"


def _conversation_plan(t: Turns) -> MethodVerdict:
    roles = {role: _canonical_role(role) for role in sorted(t.roles)}
    unknown = [role for role, chat in roles.items() if chat is None]
    renamed = {role: chat for role, chat in roles.items() if chat is not None and chat != role}
    in_messages = (t.column, t.role_key, t.content_key) == ("messages", "role", "content")
    if in_messages and not renamed:  # as TRL reads it; a role that is not a chat role is a row error
        return _ready("conversations in 'messages' (role/content turns)")
    if unknown:
        return _unknown_roles(t, unknown, roles)
    if (t.role_key, t.content_key) == ("role", "content") and not renamed:
        return _rename(f"conversations are in {t.column!r}; TRL reads them from 'messages'", {t.column: "messages"})
    mapping = {
        "kind": "sharegpt",
        "column": t.column,
        "role_key": t.role_key,
        "content_key": t.content_key,
        "roles": {role: chat for role, chat in roles.items() if chat is not None},
    }
    if in_messages:  # TRL's turns, only the role names are ShareGPT's: the mapping renames them
        names = ", ".join(f"{role} → {chat}" for role, chat in renamed.items())
        return _needs(f"'messages' names roles the ShareGPT way; the mapping renames them ({names})", mapping)
    reason = f"ShareGPT-style turns in {t.column!r} ({t.role_key}/{t.content_key}) become 'messages' (role/content)"
    return _needs(reason, mapping)


def _unknown_roles(t: Turns, unknown: list[str], roles: dict[str, str | None]) -> MethodVerdict:
    """Roles that are not chat roles are never guessed: the user says what each one is."""
    chat_roles = job_runtime().CHAT_ROLES
    template = {
        "kind": "sharegpt",
        "column": t.column,
        "role_key": t.role_key,
        "content_key": t.content_key,
        "roles": {role: chat or "|".join(chat_roles) for role, chat in roles.items()},
    }
    return incompatible(
        f"{t.column!r} has role(s) {', '.join(map(repr, unknown))} that are not chat roles "
        f"({', '.join(chat_roles)}); jobtrail never guesses what a role means",
        f"Say which chat role each one is: pass dataset_mapping={as_json(template)} with one role per entry, "
        "or rewrite those turns with valid roles.",
    )


def _plan_sft(c: Columns) -> MethodVerdict:
    if c.unpaired():
        return incompatible(
            "rows carry a 'label' (unpaired preference), so SFT would also learn the completions marked bad",
            "Use method='kto', or keep only the rows with label == true: dataset.filter(lambda r: r['label']).",
        )
    turns = c.turns()
    if turns:
        return _conversation_plan(turns)
    if "messages" in c.names:
        return _ready("conversations in 'messages'")
    if c.has("prompt", "completion"):
        style = "conversational" if c.conversational("prompt") else "plain text"
        return _ready(f"prompt/completion rows ({style}); the loss covers the completion")
    if "text" in c.names:
        return _ready("plain text rows in 'text' (language modelling)")
    alpaca = c.alpaca()
    if alpaca:
        return _needs("Alpaca-style rows (instruction/input/output) become a conversational prompt/completion", alpaca)
    prompt, completion = c.find(PROMPT_ALIASES), c.find(COMPLETION_ALIASES)
    if prompt and completion and c.same_kind(prompt, completion):
        reason = f"{prompt!r}/{completion!r} are a prompt and its completion"
        return _rename(reason, {prompt: "prompt", completion: "completion"})
    chosen, rejected = c.find(CHOSEN_ALIASES), c.find(REJECTED_ALIASES)
    if chosen and rejected:
        return _sft_on_chosen(c, prompt, chosen, rejected)
    return incompatible(
        f"SFT needs 'messages', 'text', or 'prompt' + 'completion'; found {_found(c)}",
        'Write rows as {"messages": [{"role": "user", ...}, {"role": "assistant", ...}]} or {"prompt", "completion"}.',
    )


def _sft_on_chosen(c: Columns, prompt: str | None, chosen: str, rejected: str) -> MethodVerdict:
    reason = f"preference pairs: SFT can learn the chosen answers ({chosen!r}); {rejected!r} is dropped"
    if prompt:
        return _rename(reason, {prompt: "prompt", chosen: "completion"}, drop=(rejected,))
    target = "messages" if c.conversational(chosen) else "text"
    return _rename(reason, {chosen: target}, drop=(rejected,))


def _plan_pairs(method: str, c: Columns) -> MethodVerdict:
    prompt, chosen, rejected = c.find(PROMPT_ALIASES), c.find(CHOSEN_ALIASES), c.find(REJECTED_ALIASES)
    if (chosen, rejected) == ("chosen", "rejected") and prompt in (None, "prompt"):
        return _ready(f"preference pairs with an {'explicit' if prompt else 'implicit'} prompt")
    if chosen and rejected:
        return _rename(
            f"{chosen!r}/{rejected!r} are the preferred and dispreferred answers",
            {prompt: "prompt", chosen: "chosen", rejected: "rejected"},
        )
    if c.unpaired():
        return incompatible(
            f"one labelled completion per row (unpaired preference); "
            f"{method} needs a chosen and a rejected answer per row",
            "Use method='kto' for this data.",
        )
    return incompatible(
        f"{method} needs preference pairs: 'chosen' and 'rejected' (and optionally 'prompt'); found {_found(c)}",
        'Write rows as {"prompt": ..., "chosen": ..., "rejected": ...}.',
    )


def _plan_dpo(c: Columns) -> MethodVerdict:
    return _plan_pairs("DPO", c)


def _plan_reward(c: Columns) -> MethodVerdict:
    return _plan_pairs("reward modelling", c)


def _plan_grpo(c: Columns) -> MethodVerdict:
    if "prompt" in c.names:
        extra = [n for n in c.names if n not in ("prompt", "completion")]
        reason = "prompts in 'prompt'; GRPO generates the completions"
        if extra:
            reason += f"; {_reach(extra)}"
        if "completion" in c.names:
            reason += (
                "; 'completion' does not (TRL reserves the name: rename it, e.g. to 'solution', if a reward needs it)"
            )
        return _ready(reason)
    alpaca = c.alpaca()
    if alpaca:
        return _needs("Alpaca-style rows: the instruction (+ input) becomes the prompt", alpaca)
    prompt = c.find(PROMPT_ALIASES)
    if prompt:
        others = [n for n in c.names if n != prompt]
        tail = f"; {_reach(others)}" if others else ""
        return _rename(f"{prompt!r} holds the prompts{tail}", {prompt: "prompt"})
    return incompatible(
        f"GRPO needs a 'prompt' column (it generates the completions itself); found {_found(c)}",
        "Give each row a 'prompt' (a string, or the conversation up to the user's last turn as messages).",
    )


def _plan_kto(c: Columns) -> MethodVerdict:
    if c.has("prompt", "completion", "label"):
        return _ready("unpaired preference: a completion per row and a boolean 'label'")
    prompt, completion = c.find(PROMPT_ALIASES), c.find(COMPLETION_ALIASES)
    if prompt and completion and "label" in c.names:
        reason = f"{prompt!r}/{completion!r} with 'label' are unpaired preference rows"
        return _rename(reason, {prompt: "prompt", completion: "completion"})
    paired = _plan_pairs("KTO", c)
    if paired.status != "INCOMPATIBLE":  # KTO splits chosen/rejected pairs into labelled rows itself
        paired.reason += " (KTO splits each pair into a desirable and an undesirable row)"
        return paired
    return incompatible(
        f"KTO needs 'prompt', 'completion' and a boolean 'label' per row, or chosen/rejected pairs; found {_found(c)}",
        "Add a 'label' column: true for a desirable completion, false for an undesirable one.",
    )


PLANNERS: dict[str, Callable[[Columns], MethodVerdict]] = {
    "sft": _plan_sft,
    "dpo": _plan_dpo,
    "grpo": _plan_grpo,
    "reward": _plan_reward,
    "kto": _plan_kto,
}


def detect_format(c: Columns) -> str:
    """TRL's name for the data's shape, or the other shape it resembles."""
    if "messages" in c.names:
        return "messages"
    checks = [
        ("preference", c.has("prompt", "chosen", "rejected")),
        ("preference_implicit_prompt", c.has("chosen", "rejected")),
        ("unpaired_preference", c.has("prompt", "completion", "label")),
        ("prompt_completion", c.has("prompt", "completion")),
        ("text", "text" in c.names),
        ("sharegpt", c.turns() is not None),
        ("alpaca", c.alpaca() is not None),
        ("preference_renamed", bool(c.find(CHOSEN_ALIASES) and c.find(REJECTED_ALIASES))),
        ("prompt_only", "prompt" in c.names),
        ("question_answer", bool(c.find(PROMPT_ALIASES) and c.find(COMPLETION_ALIASES))),
        ("prompt_renamed", bool(c.find(PROMPT_ALIASES))),
    ]
    return next((name for name, hit in checks if hit), "unknown")


def _reach(columns: list[str]) -> str:
    names = ", ".join(map(repr, columns[:6])) + (" ..." if len(columns) > 6 else "")
    return f"{names} {'reaches' if len(columns) == 1 else 'reach'} the reward functions"
