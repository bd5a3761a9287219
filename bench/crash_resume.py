"""Crash-and-resume bench: SIGKILL a local SFT job at N random moments and audit every resume.

Runs tests/support/crash_harness.py (tests/service/test_crash_resume.py runs it with 20 trials)
on the offline tiny model: an uninterrupted reference run, N killed attempts in one output
directory with decoy checkpoints planted along the way, and a last attempt to completion. Exits 1
on any violation or when the final loss curve strays from the reference by more than the
harness's tolerance.

Usage: python bench/crash_resume.py [--trials N] [--seed S] [--workdir DIR]
(each trial is one job start, ~5 s of imports on a 2-core machine; 100 trials took 11 minutes)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# The harness lives with the tests (tests/support), which are not an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from jobtrail.demo.tinymodel import build_tiny_model, write_chat_dataset
from support.crash_harness import LOSS_TOLERANCE, max_steps_for, render_job, run_uninterrupted, run_with_kills


def offline_env(root: Path) -> dict[str, str]:
    """The jobs' environment: offline, caches under `root` (as tests/conftest.py make_job_env)."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(root / "hf-home"),
        "TOKENIZERS_PARALLELISM": "false",
    }


def bench(workdir: Path, trials: int, seed: int) -> bool:
    """Run the harness in `workdir`, print what it found; True when it passed."""
    model = build_tiny_model(workdir / "tiny-model")
    dataset = write_chat_dataset(workdir / "chat.jsonl")
    env = offline_env(workdir)
    max_steps = max_steps_for(trials)
    started = time.monotonic()
    reference = run_uninterrupted(render_job(workdir / "uninterrupted", model, dataset, env, max_steps=max_steps))
    crashed = render_job(workdir / "crashed", model, dataset, env, max_steps=max_steps)
    report = run_with_kills(crashed, reference, trials, seed)
    within = report.max_abs_dloss <= LOSS_TOLERANCE
    print(f"trials: {report.trials} (seed {seed}, {max_steps} steps, {time.monotonic() - started:.0f}s)")
    print(f"kills by trigger: {dict(report.kills_by_trigger)}")
    print(f"kills inside a save: {report.kills_in_save} ({report.partial_dirs_left} left a partial directory)")
    print(
        f"resumes checked: {report.resumes_checked}; decoys planted: "
        f"{report.decoys_partial} partial, {report.decoys_corrupt} corrupt"
    )
    print(
        f"max |Δloss| vs uninterrupted: {report.max_abs_dloss:.3g} final curve, "
        f"{report.max_abs_dloss_any_attempt:.3g} any attempt (tolerance {LOSS_TOLERANCE:g}: "
        f"{'within' if within else 'EXCEEDED'})"
    )
    print(f"violations: {len(report.violations)}")
    for violation in report.violations:
        print(f"  {violation}")
    return within and not report.violations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temporary directory)")
    args = parser.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        passed = bench(args.workdir.resolve(), args.trials, args.seed)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            passed = bench(Path(tmp), args.trials, args.seed)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
