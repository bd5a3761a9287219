"""Hiding secret values in log lines, in every form a program can print them. Standard library only.

A job prints a secret raw (`print(token)`), inside a JSON document (`json.dumps`, which escapes
quotes, backslashes and control characters, and non-ASCII too unless ensure_ascii=False), or as
Python shows it (`repr`, an exception message, a dict, `ascii`, a bytes repr); the same value then
reads differently in each. `forms()` lists them all, each applied once or twice (a repr inside a
JSON event is common), and `Redactor` hides every one.

An event line (`JOBTRAIL {json}`) must still parse afterwards, or the attempt's receipt loses its
steps and checkpoints: its JSON is decoded, the secret hidden in the decoded strings, and the event
written again. Other lines are redacted as text.

Besides the secrets a job was given, every value of the server's environment that looks like a credential
(`credential_values`: by its name, or a URL with a password in it) is hidden too, whether or not the job was
given it: a job that finds one some other way and prints it shows nobody.

The local runner's supervisor loads this file by path (it runs isolated, where jobtrail may not be
importable), so it imports nothing from jobtrail.
"""

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote

REDACTED = "[REDACTED]"
# Shorter values cannot be told from ordinary text: hiding a 1-character secret rewrites every
# matching character of the log, events included. Secrets are refused below this length.
MIN_SECRET_LENGTH = 8
EVENT_PREFIX = "JOBTRAIL "
# Parts of a name that say its value is a credential (JOBTRAIL_AUTH_TOKEN, WANDB_API_KEY, PGPASSWORD ...).
_CREDENTIAL_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH", re.IGNORECASE)
# scheme://user:password@host: the password (JOBTRAIL_LEDGER_URL, a proxy with a login).
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:([^\s/@]+)@")


def _inner(quoted: str, opening: int = 1) -> str:
    """The text between a quoted literal's quotes."""
    return quoted[opening:-1]


_ENCODINGS: tuple[Callable[[str], str], ...] = (
    lambda v: _inner(json.dumps(v)),
    lambda v: _inner(json.dumps(v, ensure_ascii=False)),
    lambda v: _inner(repr(v)),
    lambda v: _inner(ascii(v)),
    lambda v: _inner(repr(v.encode("utf-8", "surrogateescape")), 2),
)
_LAYERS = 2  # a repr inside a JSON event is common; deeper nesting is not


def forms(value: str) -> set[str]:
    """`value` as each encoding (and each pair of them) writes it; for a value with line breaks, also
    each of its lines long enough to hide on its own, since logs are read a line at a time."""
    found = {value}
    layer = {value}
    for _ in range(_LAYERS):
        layer = {encode(text) for text in layer for encode in _ENCODINGS} - found
        found |= layer
    pieces = {piece for text in found for piece in text.splitlines() if piece != text}
    return found | {piece for piece in pieces if len(piece) >= MIN_SECRET_LENGTH}


def looks_like_credential_name(name: str) -> bool:
    return _CREDENTIAL_NAME.search(name) is not None


def credential_values(environ: Mapping[str, str]) -> list[str]:
    """The values of `environ` that look like credentials: by the variable's name, or a URL's password (the
    whole URL and the password alone, as written and percent-decoded). An absolute path is where a credential
    is kept, not one (XAUTHORITY, SSH_AUTH_SOCK, GOOGLE_APPLICATION_CREDENTIALS), and hiding it would rewrite
    every traceback that names the file."""
    found: list[str] = []
    for name, value in environ.items():
        passwords = _URL_PASSWORD.findall(value)
        if passwords:
            found += [value, *passwords, *(unquote(p) for p in passwords)]
        elif looks_like_credential_name(name) and not value.startswith(("/", "~/")):
            found.append(value)
    return found


class Redactor:
    """Hides every form of the given values; values shorter than MIN_SECRET_LENGTH are ignored
    (they are refused where secrets are named, and hiding them would wreck the log)."""

    def __init__(self, values: Iterable[str]) -> None:
        every = {form for value in values if len(value) >= MIN_SECRET_LENGTH for form in forms(value)}
        # Longest first: a form that contains another is hidden whole.
        self._forms = sorted(every, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._forms)

    def longest(self) -> int:
        return len(self._forms[0]) if self._forms else 0

    def __call__(self, line: str) -> str:
        if not any(form in line for form in self._forms):
            return line
        at = line.find(EVENT_PREFIX)
        if at >= 0:
            redacted = self._event_line(line, at)
            if redacted is not None:
                return redacted
        return self.text(line)

    def text(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def _event_line(self, line: str, at: int) -> str | None:
        """The event with its strings redacted, written again; None when it is not one event."""
        start = at + len(EVENT_PREFIX)
        try:
            event = json.loads(line[start:])
        except ValueError:
            return None
        rewritten = self.text(line[:start]) + json.dumps(self._value(event), separators=(",", ":"))
        # A form can only survive across two strings of the JSON (a key and its value, say).
        return None if any(form in rewritten for form in self._forms) else rewritten

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._value(item) for item in value]
        if isinstance(value, dict):
            return {self.text(key): self._value(item) for key, item in value.items()}
        return value
