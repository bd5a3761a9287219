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


def sig(reason: R, message: str, *alternatives: str) -> Signature:
    """A signature matching any of the alternatives (case matters: they are the libraries' exact spelling)."""
    return Signature(reason, message, re.compile("|".join(alternatives)))
