"""The launcher in the preflight pass: chosen once from the machine's GPUs, the user's num_processes and
the estimate; judged (at most one worker per GPU); rendered into the config the job starts its workers from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jobtrail.models import SINGLE_PROCESS, JobSpec, Launcher
from jobtrail.preflight import rules
from jobtrail.preflight.facts import Facts, with_launcher
from jobtrail.preflight.plan import Evaluation, PlanEnv, estimate_alone, job_values, plan
from jobtrail.requests import EstimateRequest
from jobtrail.templates.configs import FSDP_CONFIG, build_config, launcher_of
from support.estimates import LLAMA_31_8B, OFFLINE

DDP_2 = Launcher(kind="torchrun", num_processes=2, strategy="ddp")
FSDP_4 = Launcher(kind="torchrun", num_processes=4, strategy="fsdp")


def _spec(backend: str = "local", **hyper) -> JobSpec:
    remote = {"flavor": "l4x4", "output": "alice/out"} if backend != "local" else {}
    return JobSpec(method="sft", model="/m", dataset="/d.jsonl", backend=backend, hyperparameters=hyper, **remote)


def _facts(spec: JobSpec, **facts) -> Facts:
    """Facts as a plan gives them to the rules: with the job's effective hyperparameters."""
    return Facts(values=job_values(spec), **facts)


def _config(spec: JobSpec, **options) -> dict:
    return build_config(spec, job_values(spec), "/out", **options)


def _env(tmp_path: Path) -> PlanEnv:
    return PlanEnv(job_python=sys.executable, llama_cpp_cache=tmp_path / "cache")


@pytest.mark.parametrize("requested", [8, "8"])  # a numeric string is read as the number, like any knob's
def test_more_workers_than_the_flavors_gpus_is_refused_with_the_fix(requested):
    spec = _spec("hf-jobs", num_processes=requested)
    [finding] = rules.check_launcher(spec, with_launcher(_facts(spec, gpus=4)))
    assert finding.severity == "error" and finding.code == "launcher.too_many_processes"
    assert "num_processes=8 but l4x4 has 4 GPUs" in finding.message
    assert "num_processes to 4 or fewer" in finding.fix and "a flavor with 8 GPUs" in finding.fix


def test_a_cpu_takes_any_number_of_workers_and_the_choice_is_said():
    spec = _spec(num_processes=2)
    facts = with_launcher(_facts(spec, gpus=0))
    assert facts.launcher == DDP_2
    [finding] = rules.check_launcher(spec, facts)
    assert finding.severity == "info" and "2 worker processes on this machine's CPU (torchrun, gloo)" in finding.message


def test_one_process_says_nothing_and_a_bad_value_is_the_hyperparameter_rules_to_refuse():
    assert rules.check_launcher(_spec(), with_launcher(_facts(_spec(), gpus=0))) == []
    for bad in ("two", 0, 1.5):
        spec = _spec(num_processes=bad)
        assert with_launcher(_facts(spec, gpus=4)).launcher.num_processes == 4  # read as not given
        [finding] = [f for f in rules.check_hyperparameters(spec, Facts()) if f.severity == "error"]
        assert "num_processes" in finding.message and finding.fix


def test_the_config_carries_the_launcher_and_fsdp_turns_on_the_trainers_fsdp():
    spec = _spec()
    assert _config(spec)["launcher"] == SINGLE_PROCESS.model_dump()
    ddp = _config(spec, launcher=DDP_2)
    assert launcher_of(ddp) == DDP_2 and "fsdp" not in ddp["training_args"]
    sharded = _config(spec, launcher=FSDP_4)["training_args"]
    assert sharded["fsdp"] is True and sharded["fsdp_config"] == {**FSDP_CONFIG, "activation_checkpointing": True}
    assert sharded["gradient_checkpointing"] is False  # FSDP's own activation checkpointing instead
    without = _config(_spec(gradient_checkpointing=False), launcher=FSDP_4)["training_args"]
    assert without["fsdp_config"]["activation_checkpointing"] is False
    own = _config(_spec(fsdp=True, fsdp_config={"version": 1}), launcher=FSDP_4)["training_args"]
    assert own["fsdp_config"] == {"version": 1}  # the user's FSDP settings are kept whole


def test_fsdps_settings_are_names_transformers_takes() -> None:
    """Only checked here (config accepted, accelerate's plugin arguments built): FSDP needs GPUs to run,
    and on a CPU accelerate trains MULTI_CPU DDP whatever the config says."""
    import trl

    from jobtrail.templates.configs import fsdp_training_args

    args = trl.SFTConfig(output_dir="/tmp/unused", use_cpu=True, report_to="none", **fsdp_training_args({}, "sft"))
    assert args.fsdp is True and args.fsdp_plugin_args["fsdp_version"] == 2
    assert args.fsdp_plugin_args["state_dict_type"] == "FULL_STATE_DICT"
    assert args.fsdp_plugin_args["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"


def test_a_local_job_with_num_processes_renders_its_launcher(tmp_path, tiny_model, chat_dataset, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine's CPU, even where GPUs are
    spec = JobSpec(
        method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters={"num_processes": "2"}
    )
    planned = plan(spec, _env(tmp_path))
    assert not planned.blocked and planned.launcher == DDP_2
    assert planned.config["launcher"] == DDP_2.model_dump() and "num_processes" not in planned.config["training_args"]
    assert "launcher" in [f.code for f in planned.findings]
    evaluation = plan(spec.model_copy(update={"method": "evaluate"}), _env(tmp_path), Evaluation("base"))
    assert evaluation.launcher == SINGLE_PROCESS  # evaluations and conversions stay one process


def test_a_job_too_big_even_sharded_is_refused_per_gpu():
    estimate = estimate_alone(
        EstimateRequest("org/m", peft="none", optim="adamw", flavor="l4x4", max_steps=10),
        config=LLAMA_31_8B,
        api=OFFLINE,
    )
    spec = JobSpec(method="sft", model="org/m", dataset="org/d", backend="hf-jobs", flavor="l4x4", timeout_s=36000)
    [finding] = [f for f in rules.check_estimate(spec, Facts(estimate=estimate)) if f.severity == "error"]
    assert finding.code == "memory.does_not_fit"
    assert "GB per GPU (4 workers, sharded with FSDP) but l4x4 offers" in finding.message
