"""A careless agent's max_cost_usd, and a person's garbage JOBTRAIL_*_USD: structured errors that say what to write."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import anyio
import pytest
from mcp import Client

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.surface.server import build_server


def _submit(server, calls: list[Any]) -> list[Any]:
    async def go():
        async with Client(server) as client:
            return [await client.call_tool("submit", arguments) for arguments in calls]

    return anyio.run(go)


def _text(result) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_max_cost_usd_takes_a_number_or_its_text_and_refuses_the_rest_saying_why(
    tmp_path, monkeypatch, tiny_model, chat_dataset
):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    job = {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "dry_run": True}
    wrong = [-5, 0, "twenty", 1e9, "inf", True]
    results = _submit(
        build_server(build_service()),
        [{**job, "max_cost_usd": "20"}, *[{**job, "max_cost_usd": value} for value in wrong]],
    )
    accepted, *refused = results
    assert not accepted.is_error and accepted.structured_content["max_cost_usd"] == 20.0
    for value, result in zip(wrong, refused, strict=True):
        text = _text(result)
        assert result.is_error and "max_cost_usd" in text, (value, text)
        assert "Traceback" not in text


@pytest.mark.parametrize("name", ["JOBTRAIL_MAX_COST_USD", "JOBTRAIL_DAILY_BUDGET_USD"])
@pytest.mark.parametrize("garbage", ["lots", "-1", "0", "nan", "1e12"])
def test_a_garbage_setting_stops_the_server_at_start_with_the_fix(tmp_path, monkeypatch, name, garbage):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(name, garbage)
    with pytest.raises(InvalidRequestError) as refused:
        build_service()
    assert name in refused.value.message and f"Set {name} to a positive amount in US dollars" in refused.value.fix


def test_the_cli_says_so_in_one_line(tmp_path):
    env = {**os.environ, "JOBTRAIL_HOME": str(tmp_path / "home"), "JOBTRAIL_DAILY_BUDGET_USD": "$$$"}
    done = subprocess.run([sys.executable, "-m", "jobtrail", "ps"], env=env, text=True, capture_output=True, timeout=60)
    assert done.returncode == 2 and "JOBTRAIL_DAILY_BUDGET_USD" in done.stderr and "Traceback" not in done.stderr
