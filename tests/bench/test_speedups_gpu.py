"""bench/speedups_gpu.py keeps running: its CPU smoke trains the tiny shape padded and padding-free through
SFTTrainer, and the two losses agree step for step (the GPU figures come from the same code)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cpu_smoke_trains_padded_and_padding_free_to_the_same_losses(job_env: dict[str, str]):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "speedups_gpu.py"), "--cpu-smoke"],
        env={**job_env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"variant')]
    results = {result["variant"]: result for result in map(json.loads, lines)}
    assert set(results) == {"padded", "padding-free"}
    assert len(results["padded"]["losses"]) == 4
    assert results["padding-free"]["max_rel_loss_diff"] <= 1e-5
