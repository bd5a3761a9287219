"""One library's wording for one failure, and the reason it means. Pure.

Its own module so that the catalogues of wordings (`families`, `libraries`) can each build on it without importing
one another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jobtrail.models import TerminationReason as R


@dataclass(frozen=True)
class Signature:
    reason: R
    message: str
    pattern: re.Pattern[str]


# A regex's character class or escaped character (kept as written), or a backtick that nothing makes optional yet.
_BACKTICK = re.compile(r"\[(?:\\.|[^\]\\])*\]|\\.|`(?!\?)")


def pasted(pattern: str) -> str:
    """The pattern with each literal backtick optional: a line copied from a rendered page (a thread, a notebook's
    output as markdown) lost the backticks that markdown read as code spans (`Assertion srcIndex < ... failed`)."""
    return _BACKTICK.sub(lambda found: "`?" if found.group() == "`" else found.group(), pattern)


def sig(reason: R, message: str, *alternatives: str) -> Signature:
    """A signature matching any of the alternatives (case matters: they are the libraries' exact spelling), with or
    without the backticks they quote names in (`pasted`)."""
    return Signature(reason, message, re.compile("|".join(map(pasted, alternatives))))
