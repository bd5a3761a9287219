"""The CLI speaks its own language: `jobtrail wait` exits by how the job stands (0 only for a usable success), the
calls a result proposes are printed as `jobtrail ...` commands its own parser accepts, and every example its
`--help` gives parses."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from jobtrail.app import build_service
from jobtrail.models import TerminationReason as R
from jobtrail.outcomes import events
from jobtrail.surface import cli
from jobtrail.surface.cli_calls import parse_call
from jobtrail.surface.cli_flags import tool_arguments
from jobtrail.surface.tools_data import PlanningTools
from jobtrail.surface.tools_jobs import JobTools
from jobtrail.surface.toolspec import tool_spec
from support.records import add_ended_run, add_queued_run
from support.toolcalls import calls_in

README = Path(cli.__file__).resolve().parents[3] / "README.md"
TOOLS = {command.tool for command in cli.TOOL_COMMANDS}
BLOCKING_ALERT = {"code": "nothing_learned", "step": 4, "message": "No logged step moved the weights.", "fix": "x"}
ADVICE_ALERT = {"code": "loss_spike", "step": 2, "message": "The loss jumped.", "fix": "y"}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _alert(service: Any, attempt_id: str, alert: dict[str, Any]) -> None:
    line = events.PREFIX + json.dumps({"event": "alert", "time": time.time(), **alert})
    digest = events.digest([line])
    service.ledger.ingest(attempt_id, from_offset=0, to_offset=1, events=digest.events, fields={}, checkpoints=[])


@pytest.fixture
def service(tmp_path, monkeypatch):
    """The service the CLI's commands build (the same JOBTRAIL_HOME), to write ledger records into."""
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_service()


# --- jobtrail wait's exit status ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "alert", "status"),
    [
        (R.SUCCEEDED, None, 0),
        (R.SUCCEEDED, ADVICE_ALERT, 0),  # advice leaves the result usable
        (R.SUCCEEDED, BLOCKING_ALERT, 4),
        (R.OOM, None, 1),
        (R.CONFIG_ERROR, None, 1),
        (R.DIVERGED, None, 1),
        (R.TIMEOUT, None, 1),
        (R.CANCELLED, None, 3),
        (R.BUDGET, None, 3),  # a spending cap cancels
    ],
)
def test_wait_exits_by_how_the_job_ended(service, capsys, reason, alert, status) -> None:
    add_ended_run(service.ledger, "jt-ended01", reason, started_at=time.time() - 10)
    if alert:
        _alert(service, "jt-ended01/1", alert)
    assert cli.main(["wait", "jt-ended01", "--timeout-s", "0"]) == status
    assert "jt-ended01" in capsys.readouterr().out
    assert dict(cli.WAIT_EXIT_STATUS)[status]  # a documented code


def test_wait_exits_5_while_the_job_has_not_ended_and_2_when_refused(service, capsys) -> None:
    add_ended_run(service.ledger, "jt-parent1", R.SUCCEEDED, started_at=time.time() - 10)
    _alert(service, "jt-parent1/1", BLOCKING_ALERT)
    add_queued_run(service.ledger, "jt-follow1", spec={"after": "jt-parent1"})  # held behind the blocking alert
    assert cli.main(["wait", "jt-follow1", "--timeout-s", "0"]) == 5
    assert "still queued" in capsys.readouterr().out
    assert cli.main(["wait", "jt-nosuch01", "--timeout-s", "0"]) == 2


def test_wait_help_and_the_readme_list_every_exit_status() -> None:
    shown = " ".join(_subcommands()["wait"].format_help().split())
    readme = README.read_text()
    for status, meaning in cli.WAIT_EXIT_STATUS:
        assert f"{status} {meaning}" in shown, status
        assert f"| {status} | {meaning} |" in readme, status


# --- next steps as commands -----------------------------------------------------------------------------------


def _proposals(service: Any) -> list[str]:
    """The text and structured next steps of real results: inspect and wait of a job ended each way there is
    (retried or not, a change proposed or not), the follower held behind a blocking alert, an evaluation."""
    texts: list[str] = []
    for n, reason in enumerate(R):
        job = f"jt-ended{n:02d}"
        hyper = {"per_device_train_batch_size": 4, "max_steps": 30}
        config = {"training_args": {"learning_rate": 2e-4}}
        add_ended_run(
            service.ledger, job, reason, spec={"hyperparameters": hyper}, started_at=time.time() - 10, config=config
        )
        for result in (service.inspect(job), service.wait(job, 0)):
            data = result.model_dump(mode="json")
            texts += [
                result.to_markdown(),
                *(s["call"] for s in data.get("next_steps", []) if s["kind"] == "tool" and s["call"]),
            ]
    add_ended_run(service.ledger, "jt-blocked1", R.SUCCEEDED, started_at=time.time() - 10)
    _alert(service, "jt-blocked1/1", BLOCKING_ALERT)
    add_queued_run(service.ledger, "jt-held0001", spec={"after": "jt-blocked1"})
    add_ended_run(service.ledger, "jt-eval0001", R.EVAL_FAILED, method="evaluate", started_at=time.time() - 10)
    for job in ("jt-blocked1", "jt-held0001", "jt-eval0001"):
        texts += [service.inspect(job).to_markdown(), service.wait(job, 0).to_markdown()]
    return texts


def _planning(service: Any, model: Path, data: Path) -> list[str]:
    """What checking data that needs a mapping proposes: validate_dataset, estimate_cost, a rejected dry run."""
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"a{i}"}) + "\n" for i in range(20)))
    planning, jobs = PlanningTools(service), JobTools(service)
    return [
        planning.validate_dataset(dataset=str(data), method="sft", model=str(model)).to_markdown(),
        planning.estimate_cost(model=str(model), dataset=str(data), max_steps=30).to_markdown(),
        jobs.submit(method="sft", model=str(model), dataset=str(data), dry_run=True).to_markdown(),
    ]


def test_every_proposed_call_becomes_a_command_the_cli_parses_to_the_same_arguments(
    service, tiny_model, tmp_path
) -> None:
    commands = _subcommands()
    checked = 0
    for text in [*_proposals(service), *_planning(service, tiny_model, tmp_path / "qa.jsonl")]:
        for found in calls_in(text):
            if found.name not in TOOLS:
                continue
            call = parse_call(found.text)
            assert call is not None, found.text
            command = cli.command_line(call)
            assert command is not None and command.startswith("jobtrail "), found.text
            if call.etc or ... in call.named.values():
                continue  # a call with blanks to fill in reads as one, but is no command to run as written
            words = shlex.split(command)[1:]
            args = commands[words[0]].parse_args(words[1:])
            spec = tool_spec(args.tool.area, call.tool)
            parsed = tool_arguments(args, spec)
            types = {q.name: q.annotation for q in spec.parameters}
            given = {name: TypeAdapter(types[name]).validate_python(value) for name, value in call.named.items()}
            assert {name: parsed[name] for name in given} == given, (found.text, command)
            checked += 1
    assert checked >= 20, checked  # retries with changes, logs, evaluate, convert_gguf, submit, wait ...


def test_the_cli_prints_commands_where_the_tools_print_calls(service, capsys) -> None:
    add_ended_run(
        service.ledger,
        "jt-oom00001",
        R.OOM,
        spec={"hyperparameters": {"per_device_train_batch_size": 4}},
        started_at=time.time() - 10,
        config={"training_args": {"learning_rate": 2e-4}},
    )
    assert cli.main(["inspect", "jt-oom00001"]) == 0
    text = capsys.readouterr().out
    assert "jobtrail retry jt-oom00001 --changes '{" in text
    assert not [c.text for c in calls_in(text) if c.name in TOOLS], text
    assert cli.main(["inspect", "jt-oom00001", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    fix, logs = data["next_steps"]
    assert fix["kind"] == "shell" and fix["call"].startswith("jobtrail retry jt-oom00001 --changes ")
    assert logs == {**logs, "kind": "shell", "call": "jobtrail logs jt-oom00001 --tail 100"}
    assert not [c.text for c in calls_in(data["summary"]) if c.name in TOOLS]
    # an error's fix is a command too
    assert cli.main(["retry", "jt-oom00001", "--changes", '{"learning_rat": 1e-5}']) != 0
    assert not [c.text for c in calls_in(capsys.readouterr().err) if c.name in TOOLS]


def test_placeholders_read_as_the_commands_blanks() -> None:
    for call, command in [
        ("submit(..., dry_run=true)", "jobtrail submit ... --dry-run"),
        ("wait(job_id=...)", "jobtrail wait JOB_ID"),
        ("inspect(job_id)", "jobtrail inspect JOB_ID"),
        ("retry(job_id=..., changes={...})", "jobtrail retry JOB_ID --changes '{...}'"),
        (
            'retry(job_id="jt-1", changes={"learning_rate": ...})',
            "jobtrail retry jt-1 --changes '{\"learning_rate\": ...}'",
        ),
        (
            'estimate_cost(model="m", max_steps=30, gradient_checkpointing=false)',
            "jobtrail estimate m --max-steps 30 --no-gradient-checkpointing",
        ),
        (
            'convert_gguf(source="jt-1", quantizations=["Q4_K_M", "Q8_0"])',
            "jobtrail convert-gguf jt-1 --quantizations Q4_K_M Q8_0",
        ),
    ]:
        parsed = parse_call(call)
        assert parsed is not None and cli.command_line(parsed) == command, call
    # Not a call of plain values, or not one any command makes: left as written.
    assert parse_call("model.evaluate(x + 1)") is None
    unknown = parse_call('retry(job_id="jt-1", learning_rate=1e-5)')
    assert unknown is not None and cli.command_line(unknown) is None
    assert cli.cli_text('PeftModel.from_pretrained(base) then inspect(job_id="jt-1").') == (
        "PeftModel.from_pretrained(base) then jobtrail inspect jt-1."
    )


# --- --help examples ------------------------------------------------------------------------------------------

_SPAN = re.compile(r"`(--[^`]+)`")
_BRACKET = re.compile(r"[\[{]")


def _filled(command: argparse.ArgumentParser, example: list[str]) -> list[str]:
    """`example` with a value for each argument the command requires that the example does not give."""
    argv = list(example)
    for action in command._actions:
        if action.option_strings and not action.required:
            continue
        value = action.choices[0] if action.choices else "x"
        argv = [str(value), *argv] if not action.option_strings else [*argv, action.option_strings[0], str(value)]
    for group in command._mutually_exclusive_groups:
        if group.required and not any(o in argv for a in group._group_actions for o in a.option_strings):
            argv += [group._group_actions[0].option_strings[0], "x"]
    return argv


def test_every_example_in_every_subcommands_help_parses() -> None:
    examples = 0
    for name, command in _subcommands().items():
        shown = command.format_help()
        assert not re.search(r"[\[{]\s*'", shown), f"{name} --help shows a Python literal, not JSON"
        for action in command._actions:
            help_text = (action.help or "").replace("%%", "%")
            for example in _SPAN.findall(help_text):
                words = shlex.split(example)
                args = command.parse_args(_filled(command, words))
                value = getattr(args, action.dest)
                assert value == (json.loads(words[1]) if len(words) == 2 and words[1][0] in "{[" else words[1:])
                examples += 1
            # Whatever else looks like JSON (an object's keys in prose) is JSON.
            rest, at = _SPAN.sub("", help_text), 0
            while found := _BRACKET.search(rest, at):
                _, at = json.JSONDecoder().raw_decode(rest, found.start())
    assert examples >= 8, examples  # hyperparameters, dataset_mapping, secrets, changes, names, metrics, quantizations
