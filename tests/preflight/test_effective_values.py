"""The effective hyperparameters are computed once per plan, and what the rules judged is what the config holds
(issue 26 item 1): a GRPO job with an eval_dataset is judged as the job that evaluates, which its config runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jobtrail.methods import METHODS
from jobtrail.methods.registry import SPECS, TRL_DEFAULTS
from jobtrail.methods.rules import RuleInput
from jobtrail.models import JobSpec, Speedups
from jobtrail.preflight.hyperparams import known_names
from jobtrail.preflight.plan import Plan, PlanEnv, plan
from jobtrail.templates.configs import trained_max_length, with_speedups

# The job that passed preflight and failed in TRL: 3 generations fill its generation batch (3 x 2), but its
# eval_dataset turns evaluation on, and TRL's eval batch of 8 holds no whole group of 3.
GRPO_EVALUATING = {"num_generations": 3, "per_device_train_batch_size": 3, "reward_funcs": ["format"]}


def _env(tmp_path: Path) -> PlanEnv:
    return PlanEnv(job_python=sys.executable, llama_cpp_cache=tmp_path / "cache")


def _grpo(model: Path, data: Path, **update: Any) -> JobSpec:
    spec = JobSpec(method="grpo", model=str(model), dataset=str(data), hyperparameters=GRPO_EVALUATING)
    return spec.model_copy(update=update)


def _errors(planned: Plan) -> list[str]:
    return [f.code for f in planned.findings if f.severity == "error"]


def test_a_grpo_job_with_an_eval_dataset_is_refused_for_its_eval_batch_as_with_a_split(
    tmp_path, tiny_model, chat_dataset
):
    with_data = plan(_grpo(tiny_model, chat_dataset, eval_dataset=str(chat_dataset)), _env(tmp_path))
    assert "grpo.eval_batch" in _errors(with_data) and with_data.config is None
    [finding] = [f for f in with_data.findings if f.code == "grpo.eval_batch"]
    assert finding.fix == "Set per_device_eval_batch_size=9."
    held_out = {**GRPO_EVALUATING, "eval_split_ratio": 0.1}
    with_split = plan(_grpo(tiny_model, chat_dataset, hyperparameters=held_out), _env(tmp_path))
    assert "grpo.eval_batch" in _errors(with_split)
    # The fix it names passes, and the config evaluates as judged.
    fixed = {**GRPO_EVALUATING, "per_device_eval_batch_size": 9}
    passing = plan(
        _grpo(tiny_model, chat_dataset, eval_dataset=str(chat_dataset), hyperparameters=fixed), _env(tmp_path)
    )
    assert "grpo.eval_batch" not in _errors(passing) and passing.config is not None
    assert passing.config["training_args"]["eval_strategy"] == "steps"
    # Without anything to evaluate on, the job does not evaluate, and TRL's eval batch is never used.
    assert "grpo.eval_batch" not in _errors(plan(_grpo(tiny_model, chat_dataset), _env(tmp_path)))


# Hyperparameters whose defaults and combinations change what the job runs: batches, evaluation, lengths, rates,
# adapters, method knobs; numbers also written as strings (the rules and the config read them as numbers).
def _number(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return values | values.map(str)


_HYPERPARAMETERS: dict[str, st.SearchStrategy[Any]] = {
    "per_device_train_batch_size": _number(st.integers(1, 8)),
    "gradient_accumulation_steps": _number(st.integers(1, 4)),
    "per_device_eval_batch_size": _number(st.integers(1, 9)),
    "num_generations": _number(st.integers(2, 8)),
    "eval_split_ratio": _number(st.sampled_from([0.1, 0.25])),
    "eval_strategy": st.sampled_from(["no", "steps", "epoch"]),
    "eval_steps": _number(st.sampled_from([5, 0.5])),
    "max_steps": _number(st.sampled_from([-1, 3, 20])),
    "logging_steps": _number(st.sampled_from([1, 5])),
    "learning_rate": _number(st.sampled_from([2e-4, 1e-5, 0.5])),
    "max_length": _number(st.sampled_from([64, 256, 2048])),
    "peft": st.sampled_from(["lora", "qlora", "none"]),
    "lora_r": _number(st.sampled_from([4, 16])),
    "beta": _number(st.sampled_from([0.05, 0.1])),
    "seed": _number(st.integers(0, 99)),
    "bf16": st.sampled_from([False, "false"]),
    "reward_funcs": st.sampled_from([["format"], "length", ["format", "length"]]),
}


def _judged_again(config: dict[str, Any], method: str) -> set[str]:
    """The method rules' error codes on the config as built: its training_args under TRL's own defaults, GRPO's
    reward knobs read back from its rewards block."""
    inputs: dict[str, Any] = {}
    if "rewards" in config:
        rewards = config["rewards"]
        inputs = {
            "reward_funcs": rewards["builtin"],
            "reward_format_regex": rewards["format_regex"],
            "reward_length_target": rewards["length_target"],
        }
    values = {**TRL_DEFAULTS, **inputs, **config["training_args"]}
    rule = RuleInput(method=method, values=values, given={})
    return {f.code for check in SPECS[method].checks for f in check(rule) if f.severity == "error"}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_what_the_rules_judged_is_exactly_the_configs_training_args(tmp_path_factory, tiny_model, chat_dataset, data):
    method = data.draw(st.sampled_from(METHODS), label="method")
    known = sorted(set(_HYPERPARAMETERS) & known_names(method))  # another method's knobs only build nothing
    names = data.draw(st.sets(st.sampled_from(known), max_size=6), label="names")
    hyperparameters = {name: data.draw(_HYPERPARAMETERS[name], label=name) for name in sorted(names)}
    if method == "grpo" and "reward_funcs" not in hyperparameters:
        hyperparameters["reward_funcs"] = ["format"]  # a GRPO job needs a reward to build at all
    eval_dataset = data.draw(st.sampled_from([None, str(chat_dataset)]), label="eval_dataset")
    # A remote job with no flavor or token: its facts come from this machine's files alone, no job Python is run.
    spec = JobSpec(
        method=method,
        model=str(tiny_model),
        dataset=str(chat_dataset),
        backend="hf-jobs",
        hyperparameters=hyperparameters,
        eval_dataset=eval_dataset,
    )
    planned = plan(spec, _env(tmp_path_factory.mktemp("plan")))
    if planned.config is None:
        return  # a value it cannot hold, or a method rule's error: nothing was built to compare
    judged = planned.facts.job_values  # the values every rule of this plan read
    args = dict(judged.training_args)
    if "max_length" in args:  # the default is capped at the model's positions (the dataset check measured so)
        args["max_length"] = trained_max_length(spec, args["max_length"], planned.facts.model.max_positions)
    chosen = Speedups.model_validate(planned.config["speedups"])
    assert planned.config["training_args"] == with_speedups(args, chosen)
    assert planned.config["peft"] == judged.peft
    # The config as built, judged afresh, raises no error the plan did not raise.
    assert _judged_again(planned.config, method) <= set(_errors(planned)), hyperparameters


@pytest.mark.parametrize("method", METHODS)
def test_a_config_holds_the_values_judged_for_every_method_with_and_without_evaluation(tmp_path, tiny_model, method):
    extra = {"reward_funcs": ["format"]} if method == "grpo" else {}
    for evaluation in ({}, {"eval_dataset": "org/evals"}, {"hyperparameters": {**extra, "eval_split_ratio": "0.2"}}):
        spec = JobSpec(method=method, model=str(tiny_model), dataset=str(tmp_path / "d.jsonl"), hyperparameters=extra)
        spec = spec.model_copy(update=evaluation)
        planned = plan(spec.model_copy(update={"backend": "hf-jobs"}), _env(tmp_path))
        assert planned.config is not None, planned.findings
        evaluates = planned.config["training_args"].get("eval_strategy", "no") != "no"
        judged = planned.facts.job_values.judged["eval_strategy"] != "no"
        assert evaluates is bool(evaluation) and judged is evaluates
