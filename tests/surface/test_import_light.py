"""Importing the server must not import the training stack (it must start in well under 1 s)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "matplotlib")


def test_server_import_pulls_in_no_training_libraries():
    code = (
        "import sys, jobtrail.surface.server, jobtrail.app, jobtrail.surface.cli;"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""
