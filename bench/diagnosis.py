"""How well `jobtrail explain` names the cause of real failure logs pasted in public GitHub threads.

The corpus is tests/outcomes/real_logs/{dev,heldout}/<reason>--<slug>.log. Each file starts with
`# thread: <url>`, `# found: <what the thread concluded>`, optionally `#exit_code: N` / `#signal: N`
(only where the log itself states the process's exit status), then the log as the user pasted it.
dev/ holds the logs rules were written against (or whose misses were read); heldout/ a fresh set nobody
writing rules has seen, gathered anew each round (the README there keeps the rounds and their figures).

Usage: python bench/diagnosis.py [--half dev|heldout|both]
Always exits 0: this is a measurement, not a gate.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "outcomes" / "real_logs"
HALVES = ("dev", "heldout")


@dataclass(frozen=True)
class RealLog:
    path: Path
    half: str
    expected: str
    thread: str
    found: str
    exit_code: int | None
    signal: int | None
    text: str


def parse(path: Path, half: str) -> RealLog:
    lines = path.read_text(encoding="utf-8").splitlines()
    header: dict[str, str] = {}
    body_start = 0
    for i, line in enumerate(lines):
        key, sep, value = line.partition(":")
        name = key.lstrip("#").strip()
        if line.startswith("#") and sep and name in {"thread", "found", "exit_code", "signal"}:
            header[name] = value.strip()
            body_start = i + 1
            continue
        break
    return RealLog(
        path=path,
        half=half,
        expected=path.name.split("--", 1)[0],
        thread=header.get("thread", ""),
        found=header.get("found", ""),
        exit_code=int(header["exit_code"]) if "exit_code" in header else None,
        signal=int(header["signal"]) if "signal" in header else None,
        text="\n".join(lines[body_start:]) + "\n",
    )


def load(half: str = "both", corpus: Path = CORPUS) -> list[RealLog]:
    halves = HALVES if half == "both" else (half,)
    return [parse(p, h) for h in halves for p in sorted((corpus / h).glob("*.log"))]


def run(logs: list[RealLog]) -> list[tuple[RealLog, str, str]]:
    from jobtrail.outcomes.classify import explain

    results = []
    for log in logs:
        verdict = explain(log.text, log.exit_code, log.signal)
        results.append((log, str(verdict.reason.value), verdict.evidence or verdict.message))
    return results


def report(results: list[tuple[RealLog, str, str]], half: str) -> None:
    for h in HALVES if half == "both" else (half,):
        rows = [r for r in results if r[0].half == h]
        right = sum(1 for log, got, _ in rows if got == log.expected)
        if not rows:
            print(f"{h:8} no logs: each round gathers a fresh set (tests/outcomes/real_logs/README.md)")
            continue
        print(f"{h:8} {right}/{len(rows)} correct ({100.0 * right / len(rows):.1f}%)")
    print()
    halves = HALVES if half == "both" else (half,)
    totals: Counter[tuple[str, str]] = Counter()
    hits: Counter[tuple[str, str]] = Counter()
    for log, got, _ in results:
        totals[log.expected, log.half] += 1
        hits[log.expected, log.half] += got == log.expected
    reasons = sorted({reason for reason, _ in totals})
    print(f"{'reason':18}" + "".join(f" {h:>9}" for h in halves))
    for reason in reasons:
        cells = "".join(f" {f'{hits[reason, h]}/{totals[reason, h]}':>9}" for h in halves)
        print(f"{reason:18}{cells}")
    misses = [r for r in results if r[1] != r[0].expected]
    print(f"\nmisses ({len(misses)}):")
    for log, got, evidence in misses:
        shown = " ".join(evidence.split())[:160]
        print(f"  {log.half}/{log.path.name}: expected {log.expected}, got {got} -- {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("dev", "heldout", "both"), default="both")
    args = parser.parse_args(argv)
    try:
        results = run(load(args.half))
    except Exception as exc:  # noqa: BLE001 -- a measurement: report, never fail the caller
        print(f"could not run the classifier: {exc!r}", file=sys.stderr)
        return 0
    report(results, args.half)
    return 0


if __name__ == "__main__":
    sys.exit(main())
