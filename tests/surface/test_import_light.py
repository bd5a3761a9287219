"""Importing the server must not import the training stack (it must start in well under 1 s)."""

from __future__ import annotations

import os
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


def test_a_sqlite_ledger_never_imports_the_postgresql_driver(tmp_path):
    """psycopg is imported only when JOBTRAIL_LEDGER_URL asks for PostgreSQL: a server built without it never
    loads the driver (nor needs it installed)."""
    code = "import sys; from jobtrail.app import build_service; build_service(); print('psycopg' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "JOBTRAIL_LEDGER_URL"}
    env["JOBTRAIL_HOME"] = str(tmp_path / "home")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=env)
    assert out.stdout.strip() == "False"
    assert (tmp_path / "home" / "ledger.sqlite").exists()
