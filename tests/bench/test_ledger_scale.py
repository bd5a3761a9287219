"""bench/ledger_scale.py --smoke: fills a SQLite ledger and a PostgreSQL one (started by the bench itself, as the
tests' own server is) with realistic attempts through the Ledger API and prints every figure, each parseable."""

from __future__ import annotations

import re

from support.benches import run_bench

SMOKE_TIMEOUT_S = 600  # ~20 s on an idle 2-core machine
FIGURE = re.compile(r"^(sqlite|postgresql) ([a-z0-9_.]+) (\d+(?:\.\d+)?)$")


def test_the_smoke_run_prints_bytes_per_attempt_and_latencies_for_both_engines():
    done = run_bench("ledger_scale.py", "--smoke", "--postgres", timeout_s=SMOKE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[tuple[str, str], float] = {}
    for line in done.stdout.splitlines():
        found = FIGURE.match(line)
        assert found, f"not a figure: {line!r}"
        figures[(found[1], found[2])] = float(found[3])
    for engine in ("sqlite", "postgresql"):
        assert figures[(engine, "attempts")] == 300
        assert 500 < figures[(engine, "bytes_per_attempt")] < 100_000
        assert figures[(engine, "bytes_per_attempt.event_packs")] > 0
        for tool in ("ps", "inspect", "report"):
            p50, p99 = figures[(engine, f"{tool}_p50_ms")], figures[(engine, f"{tool}_p99_ms")]
            assert 0 < p50 <= p99
