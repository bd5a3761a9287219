"""Running a script of bench/ as its tests do: this interpreter, this checkout's src/ first on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = ROOT / "bench"


def run_bench(script: str, *args: str, timeout_s: float, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """bench/`script` run to its end with `args`, its output captured as text."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": path},
        cwd=cwd,
    )
