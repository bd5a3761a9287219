"""The real-log corpus (failure logs pasted in public GitHub threads) is well-formed.

Only its shape is checked here; how well the classifier does on it is bench/diagnosis.py's job.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobtrail.models import TerminationReason

CORPUS = Path(__file__).parent / "real_logs"
HALVES = ("dev", "heldout")
THREAD = re.compile(r"^# thread: (https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+)$")
HEADER_LINE = re.compile(r"# (thread|found): |#(exit_code|signal): ")
REASONS = {r.value for r in TerminationReason} | {"disk_full"}


def _logs() -> list[Path]:
    return sorted(p for half in HALVES for p in (CORPUS / half).glob("*.log"))


def _header(path: Path) -> list[str]:
    """The leading `# name: value` lines, as bench/diagnosis.py reads them: a pasted log may itself start with
    lines beginning '#' (a root shell's prompt, a quoted line), which are log, not header."""
    lines = path.read_text(encoding="utf-8").splitlines()
    ends = next((i for i, line in enumerate(lines) if not HEADER_LINE.match(line)), len(lines))
    return lines[:ends]


def _thread(path: Path) -> str:
    match = THREAD.match(path.read_text(encoding="utf-8").splitlines()[0])
    assert match, f"{path.name}: the first line must be '# thread: <github issue or pull URL>'"
    return match.group(1)


def test_corpus_size() -> None:
    """At least 64 real logs; the held-out folder (a fresh set each round, README.md) is filled while it is
    gathered, so its size is bench/diagnosis.py's to report, not a bound here."""
    assert len(_logs()) >= 64


@pytest.mark.parametrize("path", _logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_log_header(path: Path) -> None:
    _thread(path)
    header = _header(path)
    found = [line for line in header if line.startswith("# found: ")]
    assert found and found[0].removeprefix("# found: ").strip(), f"{path.name}: no '# found:' line"
    for line in header[2:]:
        assert re.fullmatch(r"#(exit_code|signal): -?\d+", line), f"{path.name}: unexpected header {line!r}"
    body = path.read_text(encoding="utf-8").splitlines()[len(header) :]
    assert any(line.strip() for line in body), f"{path.name}: no log lines"


@pytest.mark.parametrize("path", _logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_filename_reason_is_known(path: Path) -> None:
    reason, sep, slug = path.stem.partition("--")
    assert sep and slug, f"{path.name}: expected <reason>--<slug>.log"
    assert reason in REASONS, f"{path.name}: {reason!r} is not a termination reason"


def test_one_log_per_thread() -> None:
    seen: dict[str, str] = {}
    for path in _logs():
        url = _thread(path)
        assert url not in seen, f"{path.name} and {seen[url]} share {url}"
        seen[url] = path.name


def test_no_real_looking_tokens() -> None:
    secret = re.compile(r"hf_[A-Za-z0-9]{30,}|ghp_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9]{30,}")
    for path in _logs():
        assert not secret.search(path.read_text(encoding="utf-8")), path.name
