"""The MCP Inspector's CLI mode (installed by `make test` under .tools/) lists the tools and calls ps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

INSPECTOR = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "mcp-inspector"


def _inspector(home: Path, *args: str) -> dict:
    assert INSPECTOR.exists(), "the MCP Inspector is missing: run `make test` (it installs it under .tools/)"
    command = [str(INSPECTOR), "--cli", sys.executable, "-m", "jobtrail", "serve", *args]
    out = subprocess.run(
        command, env={**os.environ, "JOBTRAIL_HOME": str(home)}, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_inspector_lists_the_tools_and_calls_ps(tmp_path):
    listed = _inspector(tmp_path, "--method", "tools/list")
    assert {"submit", "ps", "inspect", "logs", "cancel"} <= {t["name"] for t in listed["tools"]}
    called = _inspector(tmp_path, "--method", "tools/call", "--tool-name", "ps")
    assert called["structuredContent"]["jobs"] == []
    assert "No jobs yet" in called["content"][0]["text"]


def test_inspector_lists_the_prompts_and_the_job_resource_templates(tmp_path):
    prompts = _inspector(tmp_path, "--method", "prompts/list")
    assert {"fine_tune", "diagnose_failed_job", "compare_runs"} <= {p["name"] for p in prompts["prompts"]}
    listed = _inspector(tmp_path, "--method", "resources/templates/list")
    templates = {t["uriTemplate"]: t for t in listed["resourceTemplates"]}
    assert {"jobtrail://jobs/{job_id}", "jobtrail://jobs/{job_id}/metrics"} <= set(templates)
    assert all(t.get("description") for t in templates.values())
