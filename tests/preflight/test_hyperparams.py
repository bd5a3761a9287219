"""Hyperparameter names and values: types, choices, ranges, conversions, and fixes that keep the value."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jobtrail.errors import InvalidRequestError
from jobtrail.methods import METHODS
from jobtrail.methods.hyperparameters import JOB_DEFAULTS, PEFT_DEFAULTS, field_type, judge_value, takes_kind
from jobtrail.methods.registry import method_spec
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight import rules
from jobtrail.preflight.aliases import _ALIASES
from jobtrail.preflight.facts import Facts, with_launcher
from jobtrail.preflight.hyperparams import (
    CONFLICT,
    MANAGED,
    RENAMED,
    changes_by_field,
    check_names,
    known_names,
    read_names,
    with_changes,
)
from jobtrail.preflight.plan import PlanEnv, job_values, plan
from jobtrail.templates.configs import build_config
from jobtrail.util.timefmt import parse_duration
from support.jobs import load_script_module


def _env(tmp_path: Path) -> PlanEnv:
    return PlanEnv(job_python=sys.executable, llama_cpp_cache=tmp_path / "cache")


def _facts(spec: JobSpec) -> Facts:
    """The facts a plan gives the rules: the job's effective hyperparameters (nothing gathered)."""
    return Facts(values=job_values(spec))


def _one(method: str, hyperparameters: dict[str, Any]) -> Finding:
    [finding] = check_names(method, hyperparameters)
    return finding


# --- values: numeric strings, counts, probabilities, choices ------------------------------------


def test_numeric_strings_are_converted_with_an_info_and_the_config_holds_numbers(tmp_path, tiny_model, chat_dataset):
    given = {"lora_r": "8", "learning_rate": "2e-4", "per_device_train_batch_size": "2", "bf16": "false"}
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=given)
    planned = plan(spec, _env(tmp_path))
    converted = [f for f in planned.findings if f.code == "hyperparameters.converted"]
    assert len(converted) == 4 and all(f.severity == "info" for f in converted)
    assert not planned.blocked, rules.blocking(planned.findings)
    assert planned.config is not None
    args = planned.config["training_args"]
    assert args["learning_rate"] == 2e-4 and isinstance(args["learning_rate"], float)
    assert args["per_device_train_batch_size"] == 2 and args["bf16"] is False
    assert planned.config["peft"]["r"] == 8
    assert "'2e-4'" not in planned.script and '"2e-4"' not in planned.script


# Values of the wrong type or out of range, each with the words its refusal must say.
@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("num_train_epochs", "three", "a number"),
        ("per_device_train_batch_size", 0, "at least 1"),
        ("gradient_accumulation_steps", -2, "at least 1"),
        ("max_steps", -5, "or -1"),
        ("lora_r", 0, "at least 1"),
        ("lora_dropout", 1.5, "[0, 1)"),
        ("lora_dropout", 1, "[0, 1)"),  # a dropout of 1 holds every gradient at 0
        ("learning_rate", 3, "(0, 1)"),
        ("learning_rate", 0, "(0, 1)"),
        ("num_train_epochs", 0, "above 0"),
        ("bf16", "yes please", "true or false"),
        ("per_device_train_batch_size", True, "whole number"),
    ],
)
def test_values_the_field_cannot_take_are_refused_with_what_it_takes(name, value, words):
    finding = _one("sft", {name: value})
    assert finding.severity == "error" and finding.code in ("hyperparameters.value", "hyperparameters.range")
    assert name in finding.fix and words in finding.fix


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "learning_rate takes a number, not null."),  # what a client sends for NaN; never Python's None
        ("inf", "learning_rate must be a finite number, not 'inf'."),  # a number, though not one it can take
        (float("nan"), "learning_rate must be a finite number, not nan."),
        (True, "learning_rate takes a number, not true."),
    ],
)
def test_a_refused_value_is_shown_as_the_agent_wrote_it_and_a_non_finite_one_is_called_so(value, message):
    finding = _one("sft", {"learning_rate": value})
    assert finding.severity == "error" and finding.message == message, finding.message


@pytest.mark.parametrize(
    ("method", "name", "value", "choice"),
    [
        ("sft", "lr_scheduler_type", "cosinee", "cosine_with_restarts"),
        ("sft", "optim", "adam", "adamw_torch"),
        ("sft", "eval_strategy", "sometimes", "epoch"),
        ("sft", "save_strategy", "often", "steps"),
        ("sft", "report_to", "weights-and-biases", "wandb"),
        ("sft", "report_to", ["tensorboard", "wb"], "wandb"),
        ("grpo", "loss_type", "ppo", "dr_grpo"),
        ("dpo", "loss_type", "sigmoidd", "sigmoid"),
        ("kto", "loss_type", "dpo", "apo_zero_unpaired"),
        ("sft", "peft", "full", "none"),
        ("grpo", "reward_funcs", ["format", "accuracy"], "exact_match"),
    ],
)
def test_unknown_choices_are_refused_with_the_valid_ones(method, name, value, choice):
    finding = _one(method, {name: value})
    assert finding.severity == "error" and choice in finding.fix


def test_valid_values_pass_without_findings():
    ok = {
        "lr_scheduler_type": "cosine",
        "optim": "adamw_torch",
        "report_to": ["tensorboard"],
        "warmup_steps": 0.1,
        "max_steps": -1,
        "num_train_epochs": 2,
        "lora_target_modules": ["q_proj", "v_proj"],
        "peft": "none",
    }
    assert check_names("sft", ok) == []
    assert check_names("dpo", {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, 0.5]}) == []


def test_a_whole_float_for_a_count_is_read_as_an_integer():
    assert judge_value("sft", "per_device_train_batch_size", 4.0).value == 4
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl", hyperparameters={"per_device_train_batch_size": 4.0})
    assert job_values(spec).training_args["per_device_train_batch_size"] == 4


def test_the_rules_judge_converted_values():
    # GRPO's batch arithmetic sees numbers, not strings (it divided "8" by 4 before).
    spec = JobSpec(
        method="grpo",
        model="/m",
        dataset="/d.jsonl",
        hyperparameters={"per_device_train_batch_size": "4", "num_generations": "4", "reward_funcs": ["format"]},
    )
    assert rules.blocking(rules.judge(spec, _facts(spec), rules.CONFIG_CHECKS)[0]) == []


def test_a_type_error_while_building_the_trl_config_is_a_config_error():
    runtime = load_script_module("_runtime")
    for exc in (TypeError("'<=' not supported between instances of 'str' and 'int'"), ValueError("bad value")):
        with pytest.raises(type(exc)) as info, runtime.phase("config"):
            raise exc
        assert runtime.classify_exception(info.value) == "config_error"


# --- names: aliases first, then close spellings that take the value -------------------------------


# Names people write for a field, by the field they are read as, with a value that field takes: it is kept.
ALIASES: dict[str, tuple[Any, list[str]]] = {
    "learning_rate": (1e-3, ["lr", "learning-rate", "Learning_Rate"]),
    "num_train_epochs": (3, ["epochs", "num_epochs", "n_epochs", "max_epochs"]),
    "per_device_train_batch_size": (4, ["batch", "batch_size", "bs", "train_batch_size", "micro_batch_size"]),
    "gradient_accumulation_steps": (4, ["grad_accum", "gradient_accumulation", "accumulation_steps"]),
    "lora_r": (8, ["lora_rank", "rank", "r"]),
    "lora_alpha": (16, ["alpha"]),
    "lora_dropout": (0.1, ["lora-dropout"]),
    "max_length": (512, ["max_seq_length", "seq_len", "max_len", "cutoff_len", "context_length"]),
    "weight_decay": (0.01, ["wd"]),
    "lr_scheduler_type": ("cosine", ["scheduler"]),
    "optim": ("adamw_torch", ["optimizer"]),
    "eval_split_ratio": (0.1, ["val_split", "test_size"]),
}


@pytest.mark.parametrize(
    ("name", "value", "field"), [(name, value, field) for field, (value, names) in ALIASES.items() for name in names]
)
def test_names_people_write_are_read_as_the_field_with_their_value(name, value, field):
    read = read_names("sft", {name: value})
    assert read.values == {field: value}
    [finding] = read.findings
    assert (finding.code, finding.severity) == (RENAMED, "info") and f"read as {field}=" in finding.message
    assert check_names("sft", read.values) == []  # nothing left to refuse


def test_a_close_spelling_is_no_plain_intent_and_is_refused_with_the_rename():
    """learning_rte may be learning_rate mistyped, or another field: the agent says which."""
    assert read_names("sft", {"learning_rte": 1e-3}).values == {"learning_rte": 1e-3}
    assert _one("sft", {"learning_rte": 1e-3}).fix == "Rename learning_rte to learning_rate (0.001)."


@pytest.mark.parametrize(
    ("name", "value", "read"),
    [
        ("warmup", 0.1, {"warmup_steps": 0.1}),  # below 1: a fraction of the run
        ("warmup", 100, {"warmup_steps": 100}),
        ("warmup_ratio", 0.05, {"warmup_steps": 0.05}),
        ("warmup_pct", 10, {"warmup_steps": 0.1}),  # a percentage becomes a fraction
        ("num_warmup_steps", 30, {"warmup_steps": 30}),
    ],
)
def test_warmup_goes_where_its_value_means(name, value, read):
    assert read_names("sft", {name: value}).values == read


def test_an_alias_beside_its_field_with_another_value_is_refused_naming_both(tmp_path, tiny_model, chat_dataset):
    both = JobSpec(
        method="sft",
        model=str(tiny_model),
        dataset=str(chat_dataset),
        hyperparameters={"lr": 1e-4, "learning_rate": 2e-4},
    )
    planned = plan(both, _env(tmp_path))
    [conflict] = rules.blocking(planned.findings)
    assert conflict.code == CONFLICT and "lr=0.0001 and learning_rate=0.0002" in conflict.message
    assert planned.config is None  # which value the job would run with is not plain: nothing is built
    assert 'hyperparameters={"learning_rate": 0.0002}' in (conflict.fix or "")
    fixed = plan(both.model_copy(update={"hyperparameters": {"learning_rate": 2e-4}}), _env(tmp_path))
    assert not fixed.blocked
    # The same value twice ("2e-4" is 2e-4) is one value: read once.
    assert read_names("sft", {"lr": "2e-4", "learning_rate": 2e-4}).values == {"learning_rate": "2e-4"}
    assert [f.code for f in read_names("sft", {"bs": 2, "batch": 3}).findings] == [RENAMED, CONFLICT]


def test_a_plan_reads_the_names_people_write_into_the_config(tmp_path, tiny_model, chat_dataset):
    """{"batch": 2} was answered "Remove it", and every alias refused: now each is its field, said by an info."""
    given = {"batch": 1, "lr": "1e-3", "epochs": 2, "seq_len": 128, "warmup": 0.1, "grad_accum": 2}
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=given)
    planned = plan(spec, _env(tmp_path))
    assert not planned.blocked, rules.blocking(planned.findings)
    args = planned.config["training_args"]
    assert (args["per_device_train_batch_size"], args["learning_rate"], args["num_train_epochs"]) == (1, 1e-3, 2)
    assert (args["max_length"], args["warmup_steps"], args["gradient_accumulation_steps"]) == (128, 0.1, 2)
    assert "batch" not in args and "lr" not in args
    assert sum(f.code == RENAMED for f in planned.findings) == 6


def test_a_retry_change_replaces_its_field_under_whichever_name_the_job_gave_it():
    assert with_changes("sft", {"lr": 1e-4, "batch": 2}, {"learning_rate": 5e-5}) == {"batch": 2, "learning_rate": 5e-5}
    assert with_changes("sft", {"learning_rate": 1e-4}, {"lr": 5e-5}) == {"lr": 5e-5}
    assert with_changes("sft", {"max_steps": 10}, {"epochs": 2}) == {"max_steps": 10, "epochs": 2}
    # The retry policy weighs the field changed: an OOM's retry needs per_device_train_batch_size, however written.
    assert changes_by_field("sft", {"batch_size": 1, "timeout": "2h"}) == {
        "per_device_train_batch_size": 1,
        "timeout": "2h",
    }
    assert changes_by_field("sft", {"lr": 1e-4, "learning_rate": 2e-4}) == {"lr": 1e-4, "learning_rate": 2e-4}
    assert changes_by_field("convert_gguf", {"bs": 1}) == {"bs": 1}


@pytest.mark.parametrize(("name", "value"), [("batch_size", "big"), ("lora_rank", "eight"), ("seq_len", "long")])
def test_fuzzy_matching_never_suggests_a_field_that_cannot_take_the_value(name, value):
    finding = _one("sft", {name: value})
    assert finding.fix is not None
    assert "auto_find_batch_size" not in finding.fix and "local_rank" not in finding.fix
    if finding.fix.startswith("Rename"):
        target = finding.fix.split(" to ")[1].split(" ")[0]
        assert takes_kind("sft", target, value)


def test_harmful_suggestions_of_before_are_gone():
    assert "auto_find_batch_size" not in (_one("sft", {"batch_size": 4}).fix or "")
    assert "local_rank" not in (_one("sft", {"lora_rank": 8}).fix or "")
    for name in ("lr", "epochs", "grad_accum"):
        assert not (_one("sft", {name: 1}).fix or "").startswith("Remove")


def test_a_managed_name_is_never_suggested():
    for name in ("output-dir", "outputdir", "hub_model", "save_total", "push_to_hubb"):
        finding = _one("sft", {name: "x"})
        assert not any(f" to {managed} " in (finding.fix or "") for managed in MANAGED)


# --- timeout bounds ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [10**30, float("inf"), float("nan"), "8d", "200h", 10**9])
def test_a_timeout_beyond_a_week_or_not_a_number_is_refused_with_a_fix(bad):
    with pytest.raises(InvalidRequestError) as info:
        parse_duration(bad)
    assert info.value.fix


def test_a_week_is_the_longest_timeout():
    assert parse_duration("7d") == 7 * 86400 and parse_duration("1h") == 3600


# --- every method, every name, any value --------------------------------------------------------

_VALUES = st.one_of(
    st.integers(min_value=-3, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(["2e-4", "8", "0", "-1", "true", "False", "0.5", "1e3", "three", "cosine", "adamw_torch", "none"]),
    st.lists(st.sampled_from(["q_proj", "v_proj", "format", "wandb", "sigmoid", "x"]), max_size=3),
)


def _names(method: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(sorted(known_names(method))),
        st.sampled_from(sorted(_ALIASES)),
        st.text(min_size=1, max_size=16),
    )


def _holds(config: dict[str, Any], name: str) -> Any:
    """Where `name`'s value sits in the rendered CONFIG."""
    peft = {v: k for k, v in {"method": "peft", "r": "lora_r", "alpha": "lora_alpha"}.items()}
    peft |= {"lora_dropout": "dropout", "lora_target_modules": "target_modules"}
    if name in peft:
        return config["peft"][peft[name]]
    if name == "checkpoint_retention":
        return config["checkpoint_retention"]
    if name == "dataset_split":
        return config["dataset"]["split"]
    if name == "stall_alert_minutes":
        return config["stall_alert_minutes"]
    if name == "eval_split_ratio":  # no slice (None) unless a ratio is given
        return (config["eval"] or {}).get("split_ratio")
    if name == "num_processes":  # the launcher's (preflight chose it from the value); never TRL's
        assert name not in config["training_args"]
        return config["launcher"]["num_processes"]
    return config["training_args"][name]


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_value_is_refused_with_a_fix_or_rendered_with_its_fields_type(method, data):
    name = data.draw(_names(method))
    value = data.draw(_VALUES)
    spec = JobSpec(method=method, model="/m", dataset="/d.jsonl", hyperparameters={name: value})
    values = job_values(spec)
    findings, config_ok = rules.judge(spec, Facts(values=values), rules.CONFIG_CHECKS)
    known = known_names(method)
    for finding in rules.blocking(findings):
        assert finding.fix, finding
        if finding.fix.startswith("Rename"):
            target = finding.fix.split(" to ")[1].split(" ")[0]
            assert target in known and target not in MANAGED
    if not config_ok:
        return
    assert name in known
    config = build_config(spec, values, "/out", launcher=with_launcher(Facts(values=values)).launcher)
    ftype = field_type(method, name)
    assert ftype is not None
    held = values.inputs[name] if name in method_spec(method).inputs else _holds(config, name)
    assert ftype.admits_kind(held), (name, value, held)
    assert not isinstance(held, str) or "str" in ftype.kinds or "any" in ftype.kinds


def test_own_knobs_and_method_inputs_all_have_types():
    for method in METHODS:
        for name, default in {**PEFT_DEFAULTS, **JOB_DEFAULTS, **method_spec(method).inputs}.items():
            ftype = field_type(method, name)
            assert (
                ftype is not None and ftype.admits_kind(default) and judge_value(method, name, default).problem is None
            )


def test_a_fix_names_the_default_the_job_would_get() -> None:
    """jobtrail's own default (sft micro-batch 2), not TRL's (8), which the job never uses."""
    verdict = judge_value("sft", "per_device_train_batch_size", 0)
    assert verdict.fix and "(default 2)" in verdict.fix
    assert method_spec("sft").defaults["per_device_train_batch_size"] == 2


def test_a_value_out_of_range_is_refused_but_still_builds_a_config_that_force_can_run():
    finding = _one("sft", {"learning_rate": 1e20})
    assert (finding.code, finding.severity) == ("hyperparameters.range", "error")
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl", hyperparameters={"learning_rate": 1e20})
    assert rules.judge(spec, _facts(spec))[1] is True
    typo = spec.model_copy(update={"hyperparameters": {"learning_rate": "fast"}})
    assert rules.judge(typo, _facts(typo))[1] is False  # a value the field cannot even hold builds nothing


def test_the_watching_knobs_are_jobtrails_own():
    assert check_names("sft", {"eval_split_ratio": 0.1, "stall_alert_minutes": 5, "eval_steps": 20}) == []
    for value in (0.5, 0.0, -0.1):
        (finding,) = check_names("sft", {"eval_split_ratio": value})
        assert finding.code == "hyperparameters.range" and "(0, 0.5)" in finding.fix
    assert check_names("grpo", {"stall_alert_minutes": None}) == []
