"""Preflight uses what it knows of the data: its rows against eval_split_ratio and smoke_steps, the steps they make
against logging_steps, a dataset too small to learn from, and a job's id given as the dataset (issue 27 item 3).

Plans are made on the tiny model and chat data (64 rows: with the defaults, 2 a micro-batch x 4 accumulated = 8 steps);
each fix a finding proposes is applied and planned again, and must pass.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec
from jobtrail.preflight.plan import PlanEnv, plan
from jobtrail.requests import SubmitOptions
from support.jobs import run_jobs, succeeded


def _env(tmp_path: Path) -> PlanEnv:
    return PlanEnv(job_python=sys.executable, llama_cpp_cache=tmp_path / "cache")


def _spec(model: Path, data: Path, **fields: Any) -> JobSpec:
    return JobSpec(method="sft", model=str(model), dataset=str(data), **fields)


def _rows(tmp_path: Path, chat_dataset: Path, n: int) -> Path:
    """The first `n` rows of the chat data, as a file of their own."""
    path = tmp_path / f"rows-{n}.jsonl"
    path.write_text("".join(chat_dataset.read_text().splitlines(keepends=True)[:n]))
    return path


def _found(planned: Any, code: str) -> Any:
    [finding] = [f for f in planned.findings if f.code == code]
    return finding


def _codes(planned: Any) -> list[str]:
    return [f.code for f in planned.findings]


def _fixed(fix: str) -> dict[str, Any]:
    """The hyperparameters a fix says to pass, read from its text as an agent would send them."""
    start = fix.index("hyperparameters=") + len("hyperparameters=")
    value, _ = json.JSONDecoder().raw_decode(fix[start:])
    assert isinstance(value, dict)
    return value


def test_the_demo_data_with_the_defaults_logs_its_loss(tmp_path, tiny_model, chat_dataset, job_env):
    """8 steps, fewer than the default logging_steps=10, logged no loss at all: the default is fitted to the run
    (an info finding says so), and the job, run for real, logs a loss at every step."""
    planned = plan(_spec(tiny_model, chat_dataset, output=str(tmp_path / "out")), _env(tmp_path))
    fitted = _found(planned, "config.logging_steps")
    assert fitted.severity == "info" and "8 steps" in fitted.message and "64 rows / 8 a step" in fitted.message
    assert not planned.blocked and planned.config["training_args"]["logging_steps"] == 1
    script = tmp_path / "job.py"
    script.write_text(planned.script)
    [run] = run_jobs((script, job_env))
    losses = [e["loss"] for e in succeeded(run).named("step") if "loss" in e]
    assert len(losses) == 8, run.describe()


def test_a_logging_steps_the_caller_gave_is_kept_and_warned_with_the_value_to_use(tmp_path, tiny_model, chat_dataset):
    given = plan(_spec(tiny_model, chat_dataset, hyperparameters={"logging_steps": 20}), _env(tmp_path))
    warned = _found(given, "config.no_step_logged")
    assert warned.severity == "warning" and "8 steps" in warned.message and "logging_steps=20" in warned.message
    assert given.config["training_args"]["logging_steps"] == 20  # the caller's choice stands
    assert _fixed(warned.fix) == {"logging_steps": 1}
    again = plan(_spec(tiny_model, chat_dataset, hyperparameters=_fixed(warned.fix)), _env(tmp_path))
    assert "config.no_step_logged" not in _codes(again) and "config.logging_steps" not in _codes(again)
    # Epochs count: three epochs of 8 steps reach a log every 20.
    longer = plan(_spec(tiny_model, chat_dataset, hyperparameters={"logging_steps": 20, "epochs": 3}), _env(tmp_path))
    assert "config.no_step_logged" not in _codes(longer)
    # max_steps is the count when given; a fraction of the run always logs.
    short = plan(_spec(tiny_model, chat_dataset, hyperparameters={"max_steps": 3}), _env(tmp_path))
    assert "3 steps (max_steps=3)" in _found(short, "config.logging_steps").message
    fraction = plan(_spec(tiny_model, chat_dataset, hyperparameters={"logging_steps": 0.5}), _env(tmp_path))
    assert {"config.no_step_logged", "config.logging_steps"}.isdisjoint(_codes(fraction))


def test_a_held_out_slice_that_leaves_no_row_to_train_on_is_refused(tmp_path, tiny_model, chat_dataset):
    one = _rows(tmp_path, chat_dataset, 1)
    refused = plan(_spec(tiny_model, one, hyperparameters={"eval_split_ratio": 0.4}), _env(tmp_path))
    finding = _found(refused, "dataset.nothing_to_train")
    assert refused.blocked and finding.severity == "error"
    assert "holds out 1 of the data's 1 row" in finding.message
    assert _fixed(finding.fix) == {"eval_split_ratio": None}
    fixed = plan(_spec(tiny_model, one, hyperparameters=_fixed(finding.fix)), _env(tmp_path))
    assert not fixed.blocked, fixed.findings
    two = plan(
        _spec(tiny_model, _rows(tmp_path, chat_dataset, 2), hyperparameters={"eval_split_ratio": 0.4}), _env(tmp_path)
    )
    assert "dataset.nothing_to_train" not in _codes(two) and not two.blocked


def test_a_dataset_of_a_few_rows_is_warned(tmp_path, tiny_model, chat_dataset):
    few = plan(_spec(tiny_model, _rows(tmp_path, chat_dataset, 3)), _env(tmp_path))
    warned = _found(few, "dataset.few_rows")
    assert warned.severity == "warning" and "3 rows" in warned.message and not few.blocked
    assert "dataset.few_rows" not in _codes(plan(_spec(tiny_model, _rows(tmp_path, chat_dataset, 10)), _env(tmp_path)))


def test_smoke_steps_as_many_as_the_steps_the_rows_make_are_refused(tmp_path, tiny_model, chat_dataset):
    with pytest.raises(InvalidRequestError) as info:
        plan(_spec(tiny_model, chat_dataset, smoke_steps=8), _env(tmp_path))
    assert "smoke_steps=8 is not fewer than the job's 8 steps" in info.value.message
    assert "smoke_steps below 8" in (info.value.fix or "")
    smoke = plan(_spec(tiny_model, chat_dataset, smoke_steps=2), replace(_env(tmp_path), home=tmp_path / "home"))
    assert smoke.smoke is not None and smoke.smoke.config["training_args"]["max_steps"] == 2


def test_a_job_id_given_as_the_dataset_is_refused_at_once_naming_its_model_and_data(tmp_path, tiny_model, chat_dataset):
    from jobtrail.app import build_service

    service = build_service(tmp_path / "home")
    job_id = service.submit(_spec(tiny_model, chat_dataset, hyperparameters={"max_steps": 400})).job_id
    assert job_id is not None
    try:
        with pytest.raises(InvalidRequestError) as info:
            service.submit(_spec(tiny_model, Path(job_id.upper())))  # ids have no case
        assert f"names {job_id}, a sft job of {tiny_model} on {chat_dataset}" in info.value.message
        fix = info.value.fix or ""
        assert f'model="{job_id}"' in fix and f'dataset="{chat_dataset}"' in fix
        # The call the fix names is accepted: a dry run of it plans a job on the job's final model (a stand-in now).
        meant = JobSpec(method="sft", model=job_id, dataset=str(chat_dataset))
        assert service.submit(meant, SubmitOptions(dry_run=True)).status == "dry_run"
    finally:
        service.cancel(job_id)
    with pytest.raises(InvalidRequestError) as ended:  # cancelled: it has no final model to train from
        service.submit(_spec(tiny_model, Path(job_id)))
    assert ended.value.fix == f'To train on its data, pass dataset="{chat_dataset}".'
    with pytest.raises(InvalidRequestError) as unknown:
        service.submit(_spec(tiny_model, Path("jt-00000000")))
    assert "no job has it" in unknown.value.message
    # validate_dataset, which has no ledger, says it is a job id instead of asking the Hub for it.
    report = service.validate_dataset("jt-00000000", "sft")
    assert [f.code for f in report.findings] == ["dataset.job_id"]


def test_a_list_field_written_as_a_comma_string_becomes_the_list(tmp_path, tiny_model, chat_dataset):
    """PEFT reads one string as one regex: "q_proj,v_proj" matched no module and the job ended `unknown`."""
    planned = plan(
        _spec(tiny_model, chat_dataset, hyperparameters={"lora_target_modules": "q_proj,v_proj"}), _env(tmp_path)
    )
    converted = _found(planned, "hyperparameters.converted")
    assert converted.severity == "info" and "one regex" in converted.message
    assert planned.config["peft"]["target_modules"] == ["q_proj", "v_proj"] and not planned.blocked
    # A regex with a comma stays the regex it is.
    regex = r"model\.layers\.[0-9]{1,2}\.self_attn\.(q|v)_proj"
    kept = plan(_spec(tiny_model, chat_dataset, hyperparameters={"lora_target_modules": regex}), _env(tmp_path))
    assert kept.config["peft"]["target_modules"] == regex and "lora.targets" not in _codes(kept)
