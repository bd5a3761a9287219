"""bench/step_overhead.py drives the job's real callbacks through a short run and prints every figure (no timing
is asserted: speed targets are the bench's to report, not a test's)."""

from __future__ import annotations

import re

from support.benches import run_bench

SMOKE_TIMEOUT_S = 300  # ~15 s on an idle 2-core machine: importing TRL and trackio, then 50 steps
STEPS = 50
FIGURE = re.compile(r"^([A-Za-z_.]+) (\d+(?:\.\d+)?)$")
PIECES = ("jobtrail.JobtrailCallback_us", "jobtrail.TrackioCallback_us", "transformers.DefaultFlowCallback_us")
TOTALS = ("jobtrail_us", "jobtrail_mean_us", "jobtrail_late_us", "transformers_us", "other_threads_cpu_us")


def test_the_bench_drives_the_jobs_callbacks_and_prints_microseconds_per_step() -> None:
    done = run_bench("step_overhead.py", "--steps", str(STEPS), timeout_s=SMOKE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = {}
    for line in done.stdout.splitlines():
        found = FIGURE.match(line)
        assert found, f"not a figure: {line!r}"
        figures[found[1]] = float(found[2])
    for name in (*PIECES, *TOTALS):
        assert name in figures, name
    assert all(figures[name] > 0 for name in (*PIECES, "jobtrail_us", "jobtrail_late_us"))
    # The callbacks did what a job's do: a step event per step in the log, every step handed to trackio.
    assert figures["steps"] == figures["step_events"] == figures["trackio_last_step"] == STEPS
    assert "us/step" in done.stderr
