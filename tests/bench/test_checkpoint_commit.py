"""bench/checkpoint_commit.py writes a small checkpoint the three ways and prints every figure; each commit it
made through the job's callback verified (the bench checks that itself). No timing is asserted."""

from __future__ import annotations

import re
from pathlib import Path

from support.benches import run_bench

SMOKE_TIMEOUT_S = 300  # ~20 s on an idle 2-core machine: importing TRL, then 2 rounds of a 48 MB checkpoint
FIGURE = re.compile(r"^([a-z_]+) (\d+(?:\.\d+)?)$")
SECONDS = ("bare_write_s", "inline_blocked_s", "jobtrail_blocked_s", "jobtrail_hooks_s", "jobtrail_committed_s")
RATIOS = ("inline_ratio", "jobtrail_blocked_ratio", "jobtrail_committed_ratio")


def test_the_bench_commits_through_the_job_and_prints_seconds_gb_and_ratios(tmp_path: Path) -> None:
    done = run_bench(
        "checkpoint_commit.py", "--mb", "16", "--rounds", "2", "--workdir", str(tmp_path), timeout_s=SMOKE_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = {}
    for line in done.stdout.splitlines():
        found = FIGURE.match(line)
        assert found, f"not a figure: {line!r}"
        figures[found[1]] = float(found[2])
    assert all(figures[name] > 0 for name in (*SECONDS, *RATIOS, "commit_s_per_gb"))
    assert 0.045 < figures["gb"] < 0.06  # 16 MB of weights, twice that of AdamW state, and the small files
    assert figures["jobtrail_committed_s"] > figures["jobtrail_blocked_s"] > figures["jobtrail_hooks_s"]
    assert figures["rounds"] == 2
    # The job's commits are on disk, the newest kept as the job's retention says; the bare ones are gone.
    kept = sorted(p.name for p in (tmp_path / "out").iterdir() if p.name.startswith("checkpoint-"))
    assert kept == ["checkpoint-1", "checkpoint-2"] and not any((tmp_path / "bare").iterdir())
