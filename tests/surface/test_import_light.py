"""Importing the server must not import the training stack (it must start in well under 1 s), nor what the service
plans with: the server declares its tools from their signatures and result models, and `jobtrail serve` builds the
service on first use."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from jobtrail import app

HEAVY = ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "matplotlib")
# What the service plans and judges with: the planner, the estimator, the templates, the classifier, the ledger.
PLANNING = ("jobtrail.preflight", "jobtrail.estimate", "jobtrail.templates", "jobtrail.outcomes", "jobtrail.ledger")


def _loaded(code: str, env: dict[str, str] | None = None) -> list[str]:
    """The modules `code` leaves imported (it prints them, one per line), in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env)
    return out.stdout.split()


def _under(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


def test_server_import_pulls_in_no_training_libraries():
    code = (
        "import sys, jobtrail.surface.server, jobtrail.app, jobtrail.surface.cli;"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""


def test_the_server_module_imports_nothing_the_service_plans_with():
    modules = _loaded("import sys, jobtrail.surface.server; print(*sys.modules, sep='\\n')")
    assert "jobtrail.surface.server" in modules
    assert _under(modules, PLANNING) == []
    assert "jobtrail.service.facade" not in modules


def test_serve_answers_tools_list_before_building_the_service_and_builds_it_on_the_first_call(tmp_path):
    """What `jobtrail serve` does (cli._serve): settings read and checked, the server built over the function that
    builds the service, tools/list answered; then one tool call, which builds the service."""
    code = """
import sys, anyio
from mcp import Client
from jobtrail.app import on_first_use, settings
from jobtrail.surface.server import build_server

server = build_server(on_first_use(settings()))

async def session(tools_only):
    async with Client(server) as client:
        assert len((await client.list_tools()).tools) == 16
        if not tools_only:
            assert not (await client.call_tool("ps", {})).is_error

anyio.run(session, True)
print(*sys.modules, sep="\\n")
print("---")
anyio.run(session, False)
print(*sys.modules, sep="\\n")
"""
    env = {k: v for k, v in os.environ.items() if k != "JOBTRAIL_LEDGER_URL"}
    env["JOBTRAIL_HOME"] = str(tmp_path / "home")
    modules = _loaded(code, env)
    listed, called = modules[: modules.index("---")], modules[modules.index("---") + 1 :]
    # Reading the settings checks the spending caps (outcomes/budget.py, pure) and names the ledger's setting.
    assert sorted(_under(listed, PLANNING)) == [
        "jobtrail.ledger",
        "jobtrail.ledger.connection",
        "jobtrail.outcomes",
        "jobtrail.outcomes.budget",
    ]
    assert "jobtrail.service.facade" not in listed
    assert {"jobtrail.service.facade", "jobtrail.preflight.plan", "jobtrail.outcomes.classify"} <= set(called)


def test_the_service_on_first_use_is_built_once_whoever_asks_first(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    service = app.on_first_use(app.settings())
    built: list[object] = []
    threads = [threading.Thread(target=lambda: built.append(service())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(built) == 4 and all(one is built[0] for one in built)
    assert service() is built[0]


def test_a_sqlite_ledger_never_imports_the_postgresql_driver(tmp_path):
    """psycopg is imported only when JOBTRAIL_LEDGER_URL asks for PostgreSQL: a server built without it never
    loads the driver (nor needs it installed)."""
    code = "import sys; from jobtrail.app import build_service; build_service(); print('psycopg' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "JOBTRAIL_LEDGER_URL"}
    env["JOBTRAIL_HOME"] = str(tmp_path / "home")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=env)
    assert out.stdout.strip() == "False"
    assert (tmp_path / "home" / "ledger.sqlite").exists()
