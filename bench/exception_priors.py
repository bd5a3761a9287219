"""The table of what an exception's type alone most often means (src/jobtrail/outcomes/priors.py), derived from the
labelled dev logs of the real-log corpus (tests/outcomes/real_logs/dev/).

For each dev log: the root exception of its fatal chain (or, without a traceback, the newest exception written within
a line), when it was raised before any training step (`priors.raised_before_training`), counted by its type's name
against the log's label. A type enters the table when at least MIN_LOGS logs have it and one reason labels more than
half of them, and that reason is one a program's own exception can stand for (GUESSABLE). `Error` and `Exception` are
not types that say anything (a bare `Error: ...` line, the base class), so they are left out.

Usage: python bench/exception_priors.py [--check]
Prints the counts of every type and the table as it belongs in priors.py; with --check, exits 1 when the table in
priors.py is not the one the corpus gives (after logs are added to dev/, paste the printed table there).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict

import diagnosis

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes import priors
from jobtrail.outcomes.classify import TAIL_LINES
from jobtrail.outcomes.lines import split

MIN_LOGS = 5
GUESSABLE = {R.CONFIG_ERROR, R.DEPENDENCY_ERROR, R.BAD_INPUT, R.AUTH_ERROR, R.INFRA_TRANSIENT}
SAYS_NOTHING = {"Error", "Exception"}


def counts(logs: list[diagnosis.RealLog]) -> dict[str, Counter[str]]:
    """Each root exception type's labels, over the logs."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for log in logs:
        raised = priors.raised_before_training(split(log.text)[-TAIL_LINES:])
        if raised is not None:
            found[raised.name][log.expected] += 1
    return found


def derive(found: dict[str, Counter[str]]) -> dict[str, priors.Prior]:
    table = {}
    for name, labels in found.items():
        total = sum(labels.values())
        reason, count = labels.most_common(1)[0]
        if name in SAYS_NOTHING or total < MIN_LOGS or 2 * count <= total or R(reason) not in GUESSABLE:
            continue
        table[name] = priors.Prior(R(reason), count, total)
    return dict(sorted(table.items(), key=lambda item: (-item[1].total, item[0])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when priors.PRIORS differs from the derivation")
    args = parser.parse_args(argv)
    logs = diagnosis.load("dev")
    found = counts(logs)
    print(f"{len(logs)} dev logs, {sum(sum(c.values()) for c in found.values())} with a root exception before training")
    for name, labels in sorted(found.items(), key=lambda item: -sum(item[1].values())):
        print(f"  {name:32} {sum(labels.values()):3}  {dict(labels.most_common())}")
    table = derive(found)
    print("\nPRIORS: dict[str, Prior] = {")
    for name, prior in table.items():
        print(f'    "{name}": Prior(R.{prior.reason.name}, {prior.count}, {prior.total}),')
    print("}")
    if args.check and table != priors.PRIORS:
        print("\npriors.PRIORS differs from this derivation: paste the table above into priors.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
