"""The CLI is built from the tools' declarations: every argument has its flag, with the same default and choices."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from jobtrail.app import build_service
from jobtrail.ledger.store import GROUP_COLUMNS
from jobtrail.methods import METHODS
from jobtrail.models import JobStatus
from jobtrail.outcomes import evals
from jobtrail.requests import ConvertRequest, EstimateRequest, EvaluateRequest, SubmitOptions
from jobtrail.surface import cli
from jobtrail.surface.server import build_server
from support.mcp_client import list_tools

# Tools whose subcommand is named otherwise than the tool.
COMMAND_NAMES = {"estimate_cost": "estimate"}


def _input_schemas(tmp_path, monkeypatch) -> dict[str, dict]:
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return {t.name: t.input_schema for t in list_tools(build_server(build_service()))}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _actions(command: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in command._actions}


def _choices(prop: dict) -> list | None:
    for schema in [prop, *prop.get("anyOf", [])]:
        if "enum" in schema:
            return schema["enum"]
        if "enum" in schema.get("items", {}):
            return schema["items"]["enum"]
    return None


def test_every_tool_argument_has_a_flag_with_the_tools_default_and_choices(tmp_path, monkeypatch):
    schemas = _input_schemas(tmp_path, monkeypatch)
    commands = _subcommands()
    for tool, schema in schemas.items():
        command = commands[COMMAND_NAMES.get(tool, tool.replace("_", "-"))]
        actions = _actions(command)
        required = set(schema.get("required", []))
        for name, prop in schema["properties"].items():
            action = actions[name]
            where = f"{tool}.{name}"
            if name in required:
                assert action.required or not action.option_strings, where
                continue
            assert not action.required, where
            assert action.default == prop["default"], where
            if prop.get("type") == "boolean":
                flag = ("--no-" if prop["default"] else "--") + name.replace("_", "-")
                assert action.option_strings == [flag], where
            elif {"type": "boolean"} in prop.get("anyOf", []):  # an optional bool: either way, or left out
                flag = name.replace("_", "-")
                assert action.option_strings == [f"--{flag}", f"--no-{flag}"], where
            else:
                assert action.option_strings == ["--" + name.replace("_", "-")], where
            choices = _choices(prop)
            assert (list(action.choices) if action.choices else None) == choices, where


def test_defaults_and_choices_come_from_the_layer_that_owns_them(tmp_path, monkeypatch):
    schemas = _input_schemas(tmp_path, monkeypatch)
    assert schemas["submit"]["properties"]["method"]["enum"] == list(METHODS)
    assert _choices(schemas["validate_dataset"]["properties"]["method"]) == list(METHODS)
    assert schemas["estimate_cost"]["properties"]["method"]["enum"] == list(METHODS)
    # the ledger groups by every name the tool offers, and by no other
    assert schemas["report"]["properties"]["group_by"]["enum"] == list(GROUP_COLUMNS)
    assert _choices(schemas["ps"]["properties"]["status"]) == [s.value for s in JobStatus]
    # the evaluator's metrics, and the job's defaults when it is not told
    assert _choices(schemas["evaluate"]["properties"]["metrics"]) == list(evals.EVAL_METRICS)
    assert evals.Evaluation("base").max_new_tokens == schemas["evaluate"]["properties"]["max_new_tokens"]["default"]
    assert evals.Evaluation("base").temperature == schemas["evaluate"]["properties"]["temperature"]["default"]


@pytest.mark.parametrize(
    ("tool", "record"),
    [
        ("estimate_cost", EstimateRequest),
        ("evaluate", EvaluateRequest),
        ("convert_gguf", ConvertRequest),
        ("submit", SubmitOptions),
    ],
)
def test_a_tools_defaults_are_its_records(tmp_path, monkeypatch, tool, record):
    """The record the tool hands the service declares the defaults; the tool's schema (so the CLI) shows them."""
    properties = _input_schemas(tmp_path, monkeypatch)[tool]["properties"]
    fields = dataclasses.fields(record)
    assert fields and all(field.name in properties for field in fields)
    if record is not SubmitOptions:  # submit's other arguments are the JobSpec's
        assert list(properties) == [field.name for field in fields]
    for field in fields:
        default = list(field.default) if isinstance(field.default, tuple) else field.default
        if field.default is dataclasses.MISSING:
            assert "default" not in properties[field.name], field.name
        else:
            assert properties[field.name]["default"] == default, field.name


def test_cli_refuses_what_the_tool_would_refuse(capsys):
    for argv, message in [
        (["logs", "jt-x", "--tail", "0"], "greater than or equal to 1"),
        (["ps", "--limit", "501"], "less than or equal to 500"),
        (["submit", "--method", "ppo", "--model", "m", "--dataset", "d"], "invalid choice: 'ppo'"),
        (["submit", "--method", "sft", "--model", "m", "--dataset", "d", "--secrets", '{"A": 1}'], "valid string"),
        (["retry", "jt-x", "--changes", "[1]"], "must be a JSON object"),
        (["evaluate", "data.jsonl"], "one of the arguments --job-id --model is required"),
        (["evaluate", "data.jsonl", "--job-id", "jt-x", "--model", "m"], "not allowed with argument"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2, argv
        assert message in capsys.readouterr().err, argv


def test_tool_commands_run_the_tools(tmp_path, monkeypatch, capsys, tiny_model, chat_dataset):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    assert cli.main(["report", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["days"] == 7 and report["group_by"] == "termination_reason" and report["rows"] == []
    assert (
        cli.main(
            [
                "estimate",
                str(tiny_model),
                "--dataset",
                str(chat_dataset),
                "--flavor",
                "a10g-large",
                "--no-gradient-checkpointing",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["fits"]["a10g-large"] is True
    assert cli.main(["validate-dataset", str(chat_dataset), "--method", "sft"]) == 0
    assert "READY" in capsys.readouterr().out
    assert cli.main(["inspect", "jt-missing0"]) == 2
    assert "Fix:" in capsys.readouterr().err
    assert cli.main(["retry", "jt-missing0", "--set", "max_steps=5"]) == 2
    assert cli.main(["retry", "jt-missing0", "--set", "max_steps"]) == 2
    assert "is not NAME=VALUE" in capsys.readouterr().err
