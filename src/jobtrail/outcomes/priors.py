"""What an exception's type alone most often means, for a log that no rule reads. Pure.

The rules name a failure by its words (`families`, `libraries`, `generic`) or by its type and where it was raised
(`causes`). A fresh log often shows an exception in words no rule knows yet; its type still says something: in the
real-log corpus a ValueError raised before training is most often a rejected setting, a ConnectionError the network.
`PRIORS` holds, for each exception type that says enough, the reason it most often meant and how often, counted over
the labelled dev logs; `classify` offers it as a best guess, saying so, only when no rule decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.causes import fatal_chain
from jobtrail.outcomes.tracebacks import Progress, last_chain, progress, reported


@dataclass(frozen=True)
class Prior:
    reason: R
    count: int  # dev logs whose root exception is of this type and whose label is `reason`
    total: int  # dev logs whose root exception is of this type


# Derived by bench/exception_priors.py over tests/outcomes/real_logs/dev/ (rerun it, with --check, after logs are added
# there: a test fails while this table and the corpus disagree). Its rule: the root exception of a log's fatal chain,
# raised before any training step (the only case the corpus has), counted by its type's name; a type is listed when
# at least 5 logs have it and one reason labels more than half of them; and that reason must be one a program's own
# exception can stand for (config_error, dependency_error, bad_input, auth_error, infra_transient): what happens to a
# job from outside (memory, disk, a NaN, a signal) leaves words of its own, which the rules read before any guess.
# 644 dev logs (rounds 1-16), 421 with a root exception before training. A table, one row a type: rows alike by design.
PRIORS: dict[str, Prior] = {
    "ValueError": Prior(R.CONFIG_ERROR, 44, 60),
    "ImportError": Prior(R.DEPENDENCY_ERROR, 33, 33),
    "TypeError": Prior(R.CONFIG_ERROR, 25, 30),
    "AttributeError": Prior(R.CONFIG_ERROR, 8, 11),
    "NotImplementedError": Prior(R.DEPENDENCY_ERROR, 5, 9),
    "ConnectionError": Prior(R.INFRA_TRANSIENT, 8, 8),
    "HfHubHTTPError": Prior(R.INFRA_TRANSIENT, 6, 8),
    "AssertionError": Prior(R.CONFIG_ERROR, 5, 7),
    "CalledProcessError": Prior(R.DEPENDENCY_ERROR, 4, 6),
    "ModuleNotFoundError": Prior(R.DEPENDENCY_ERROR, 6, 6),
    "ArrowInvalid": Prior(R.BAD_INPUT, 5, 5),
    "JSONDecodeError": Prior(R.BAD_INPUT, 5, 5),
    "ReadTimeoutError": Prior(R.INFRA_TRANSIENT, 5, 5),
    "SafetensorError": Prior(R.BAD_INPUT, 3, 5),
}


@dataclass(frozen=True)
class Raised:
    """An exception the log shows: its type's name, the line as logged, and where it is."""

    name: str
    line: str
    index: int


def raised(lines: list[str]) -> Raised | None:
    """The root of the fatal traceback's chain, or else (no traceback at all) the newest exception reported within a
    line (`tracebacks.reported`); None when there is neither, or the traceback was one training went on after
    (handled)."""
    chain = fatal_chain(lines)
    if chain:
        return Raised(chain[0].name, lines[chain[0].index].strip(), chain[0].index)
    if last_chain(lines):
        return None
    within = reported(lines)
    return Raised(within.name, lines[within.index].strip(), within.index) if within else None


def raised_before_training(lines: list[str]) -> Raised | None:
    """`raised`, when no training step came before it: the case the priors were counted in."""
    found = raised(lines)
    return found if found is not None and progress(lines[: found.index]) is Progress.NONE else None


def guess(lines: list[str]) -> tuple[Raised, Prior] | None:
    """The exception raised before training and the reason its type most often means, when the table knows it."""
    found = raised_before_training(lines)
    prior = PRIORS.get(found.name) if found else None
    return (found, prior) if found and prior else None
