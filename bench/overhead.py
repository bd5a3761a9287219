"""Overhead of a local jobtrail job versus running the same rendered script directly.

Both run the identical script (same config, same tiny model, same data); jobtrail's time is
measured from `submit` to the moment `inspect` reports the terminal status. Target: <= 10%.

Usage: python bench/overhead.py [--steps N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jobtrail.app import build_service
from jobtrail.demo.run import prepare
from jobtrail.models import JobSpec


def hyper(steps: int) -> dict:
    return {
        "max_steps": steps,
        "logging_steps": 1,
        "save_steps": max(1, steps // 2),
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "max_length": 128,
        "learning_rate": 1e-3,
    }


def through_jobtrail(home: Path, model: Path, dataset: Path, steps: int) -> tuple[float, str]:
    service = build_service(home)
    spec = JobSpec(method="sft", model=str(model), dataset=str(dataset), hyperparameters=hyper(steps))
    started = time.perf_counter()
    submitted = service.submit(spec)
    assert submitted.job_id, submitted.findings
    while True:
        result = service.inspect(submitted.job_id)
        if result.status in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    assert result.status == "succeeded", result.termination_message
    return elapsed, result.attempts[-1].workdir or ""


def directly(script: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["HF_HOME"] = str(home / "hf")
        os.environ["JOBTRAIL_DATA_ROOTS"] = str(home)  # the model and data it makes there are its jobs' inputs
        model, dataset = prepare(home)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        managed, direct = [], []
        for _ in range(args.runs):
            elapsed, workdir = through_jobtrail(home, model, dataset, args.steps)
            managed.append(elapsed)
            # The same script again, by hand; its output dir already holds a finished run,
            # so give the direct run a clean copy of the script pointed at a fresh directory.
            script = Path(workdir) / "script.py"
            text = script.read_text()
            out_dir = str(Path(workdir).parent / "output")
            fresh = Path(tmp) / f"direct-{len(direct)}"
            fresh.mkdir()
            copy = fresh / "script.py"
            copy.write_text(text.replace(out_dir, str(fresh / "output")))
            direct.append(directly(copy, env))
    m, d = statistics.median(managed), statistics.median(direct)
    print(
        f"direct script: median {d:.2f}s; through jobtrail (submit -> succeeded): median {m:.2f}s; "
        f"overhead {100 * (m - d) / d:+.1f}% over {args.runs} runs of {args.steps} steps (target <= 10%)"
    )


if __name__ == "__main__":
    main()
