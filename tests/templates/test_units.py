"""Small pure pieces: durations, events, hyperparameter names, rendering, job ids."""

from __future__ import annotations

import ast
import json

import pytest

from bundled_tables import derive_trl_config_types
from jobtrail.errors import InvalidRequestError
from jobtrail.methods import METHODS
from jobtrail.methods.effective import effective
from jobtrail.methods.hyperparameters import TYPES_TABLE
from jobtrail.models import JobSpec, JobStatus, TerminationReason
from jobtrail.outcomes import events
from jobtrail.preflight import hyperparams
from jobtrail.preflight.plan import job_values
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import render_script
from jobtrail.templates.versions import environment_lock
from jobtrail.util.data import load_table
from jobtrail.util.digest import config_json, sha256_text
from jobtrail.util.timefmt import human_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"), [("45m", 2700), ("2h", 7200), ("1h30m", 5400), (90, 90), ("120", 120), ("1.5h", 5400)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "-5", "0", "5 parsecs", ""])
def test_parse_duration_refuses_with_a_fix(bad):
    with pytest.raises(InvalidRequestError) as info:
        parse_duration(bad)
    assert info.value.fix


def test_human_duration():
    assert human_duration(42) == "42s"
    assert human_duration(125) == "2m 05s"
    assert human_duration(7500) == "2h 05m"


def test_status_order_and_terminality():
    assert [s.rank for s in JobStatus] == sorted(s.rank for s in JobStatus)
    assert JobStatus.QUEUED.rank < JobStatus.RUNNING.rank < JobStatus.SUCCEEDED.rank
    assert {s for s in JobStatus if s.is_terminal} == {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
    assert TerminationReason.OOM.status is JobStatus.FAILED
    assert TerminationReason.CANCELLED.status is JobStatus.CANCELLED


def test_event_lines_are_parsed_and_folded():
    lines = [
        "plain output",
        'JOBTRAIL {"event":"environment","time":1,"python":"3.11","device":"cpu"}',
        'JOBTRAIL {"event":"step","time":2,"step":1,"loss":2.5,"learning_rate":0.001}',
        'JOBTRAIL {"event":"step","time":3,"step":2,"loss":2.1}',
        'JOBTRAIL {"event":"checkpoint","time":4,"state":"committed","step":2,"path":"/o/checkpoint-2",'
        '"manifest_sha256":"ab"}',
        "JOBTRAIL {not json",
    ]
    digest = events.digest(lines)
    assert [e["event"] for e in digest.events] == ["environment", "step", "step", "checkpoint"]
    assert digest.fields["environment"] == {"python": "3.11", "device": "cpu"}
    assert digest.fields["last_metrics"] == {"step": 2, "loss": 2.1}
    assert digest.checkpoints[0].state == "committed" and digest.checkpoints[0].step == 2


def test_bundled_trl_config_types_are_the_locked_trl():
    """The table is what the locked TRL and transformers say (tests/templates/test_versions.py holds the venv to
    the lock, so what is installed here is the lock): `make lock` regenerates it when they move."""
    bundled = load_table(TYPES_TABLE)
    locked = environment_lock()
    assert (bundled["trl_version"], bundled["transformers_version"]) == (
        locked.version_of("trl"),
        locked.version_of("transformers"),
    ), "the table is not the lock's: python tools/bundled_tables.py write"
    derived = derive_trl_config_types()
    assert bundled == derived, "regenerate: python tools/bundled_tables.py write"
    for method in METHODS:
        assert set(derived[method]) == set(hyperparams.trl_fields(method))


def test_unknown_hyperparameter_gets_a_did_you_mean():
    [finding] = hyperparams.check_names("sft", {"learning_rte": 1e-4})
    assert finding.severity == "error" and "learning_rate" in finding.message
    assert finding.fix == "Rename learning_rte to learning_rate (0.0001)."
    [old_name] = hyperparams.check_names("sft", {"max_seq_length": 512})
    assert "max_length" in old_name.message


def test_managed_names_are_refused_with_the_alternative():
    [finding] = hyperparams.check_names("sft", {"output_dir": "/x"})
    assert finding.code == "hyperparameters.managed" and "output=" in finding.fix


def test_rendered_script_is_self_contained_and_deterministic():
    spec = JobSpec(method="sft", model="/models/tiny", dataset="/data/chat.jsonl", hyperparameters={"max_steps": 3})
    config = build_config(spec, job_values(spec), "/out")
    first, second = render_script("sft", config), render_script("sft", config)
    assert first == second
    assert "import jobtrail" not in first and "from jobtrail" not in first and "from _runtime" not in first
    ast.parse(first)
    assert first.startswith("# /// script")
    assert (
        config_json(config) in first or json.dumps(config_json(config)) in first or repr(config_json(config)) in first
    )
    assert config["training_args"]["max_steps"] == 3 and config["peft"]["method"] == "lora"
    assert sha256_text(first) != sha256_text(render_script("sft", build_config(spec, job_values(spec), "/elsewhere")))


def test_effective_hyperparameters_sort_defaults_and_user_values_by_destination():
    given = {"learning_rate": 1e-3, "lora_r": 8, "reward_funcs": ["format"], "dataset_split": "x"}
    values = effective("grpo", given, eval_dataset=False)
    assert values.training_args["learning_rate"] == 1e-3 and values.training_args["num_generations"] == 4
    assert values.peft == {"method": "lora", "r": 8, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"}
    assert values.job == {
        "checkpoint_retention": 2,
        "dataset_split": "x",
        "eval_split_ratio": None,
        "stall_alert_minutes": 10,
        "num_processes": None,
    }
    assert values.inputs["reward_funcs"] == ["format"] and "reward_funcs" not in values.training_args
    # What the rules judge: TRL's own defaults where jobtrail sets none (sft sets no num_generations).
    sft = effective("sft", {}, eval_dataset=False)
    assert sft.judged["num_generations"] == 8 and "num_generations" not in sft.training_args


def test_evaluation_during_training_needs_something_to_evaluate_on():
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl", hyperparameters={"eval_split_ratio": 0.2, "seed": 7})
    config = build_config(spec, job_values(spec), "/out")
    assert config["eval"] == {"split_ratio": 0.2, "seed": 7, "dataset": None}
    assert (config["training_args"]["eval_strategy"], config["training_args"]["eval_steps"]) == ("steps", 0.1)
    assert config["stall_alert_minutes"] == 10
    held_out = spec.model_copy(update={"hyperparameters": {"eval_steps": 5}, "eval_dataset": "org/evals"})
    config = build_config(held_out, job_values(held_out), "/out")
    assert config["eval"] == {"split_ratio": None, "seed": 42, "dataset": {"source": "org/evals", "split": "test"}}
    assert (config["training_args"]["eval_strategy"], config["training_args"]["eval_steps"]) == ("steps", 5)
    # eval_strategy "no" keeps the eval_dataset for the base/final evaluations only; nothing: no evaluation.
    only_after = held_out.model_copy(update={"hyperparameters": {"eval_strategy": "no"}})
    assert build_config(only_after, job_values(only_after), "/out")["eval"] is None
    unwatched = spec.model_copy(update={"hyperparameters": {"stall_alert_minutes": None}})
    plain = build_config(unwatched, job_values(unwatched), "/out")
    assert plain["eval"] is None and "eval_strategy" not in plain["training_args"]
    assert plain["stall_alert_minutes"] is None
