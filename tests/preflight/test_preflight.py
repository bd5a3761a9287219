"""Each preflight rule with a passing and a failing case (local facts; Hub facts live with the emulator tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bundled_tables import ARCHITECTURES_TABLE, LORA_MODULES_TABLE, derive_architectures, derive_lora_modules
from jobtrail.methods import METHODS
from jobtrail.methods.registry import SPECS, method_spec
from jobtrail.models import JobSpec
from jobtrail.preflight import rules as checks
from jobtrail.preflight.dataset import validate_dataset
from jobtrail.preflight.dependencies import check_dependencies
from jobtrail.preflight.facts import Facts, gather_requirements
from jobtrail.preflight.plan import Evaluation, PlanEnv, job_values, plan
from jobtrail.preflight.probes import ModelFacts, local_model_facts
from jobtrail.requests import EvaluateRequest
from jobtrail.templates import pep723
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import QLORA_REQUIREMENT, render_script, scripts_dir
from jobtrail.templates.versions import environment_lock, job_lock, pin
from jobtrail.util.data import data_path


def spec(model: Path | str = "/m", dataset: Path | str = "/d.jsonl", **kw) -> JobSpec:
    return JobSpec(method="sft", model=str(model), dataset=str(dataset), **kw)


def codes(findings) -> list[str]:
    return [f.code for f in findings]


def errors(findings) -> list[str]:
    return [f.code for f in findings if f.severity == "error"]


def judge(rule, job: JobSpec, facts: Facts):
    """A training rule on `job`, with its facts carrying the effective hyperparameters its plan computes."""
    return rule(job, replace(facts, values=job_values(job)))


def config(job: JobSpec, *args):
    """The job's config, built from the effective hyperparameters its plan computes."""
    return build_config(job, job_values(job), *args)


@pytest.fixture
def facts(tiny_model) -> Facts:
    return Facts(model=local_model_facts(tiny_model))


def test_local_model_facts_come_from_config_and_safetensors_header(tiny_model):
    facts = local_model_facts(tiny_model)
    assert facts.access == "ok" and facts.config["model_type"] == "qwen2"
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"} <= set(facts.module_names)
    assert facts.has_chat_template is True


def test_model_ok(tiny_model, facts):
    found = checks.check_model(spec(tiny_model), facts)
    assert codes(found) == ["model.ok"] and "vocabulary 800" in found[0].message


def test_model_missing_and_without_config(tmp_path):
    missing = checks.check_model(spec(tmp_path / "none"), Facts(model=local_model_facts(tmp_path / "none")))
    assert errors(missing) == ["model.missing"]
    (tmp_path / "empty").mkdir()
    no_config = checks.check_model(spec(tmp_path / "empty"), Facts(model=local_model_facts(tmp_path / "empty")))
    assert errors(no_config) == ["model.no_config"]


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [("qwen2", []), ("not-a-model", ["model.architecture"]), ("vit", ["model.architecture"])],
)
def test_architecture_must_be_a_known_causal_lm(tmp_path, model_type, expected):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "vocab_size": 10}))
    found = checks.check_model(spec(tmp_path), Facts(model=local_model_facts(tmp_path)))
    assert errors(found) == expected


def test_gated_not_found_and_unverified_hub_models():
    def hub(access: str) -> Facts:
        return Facts(model=ModelFacts(ref="org/m", local=False, access=access, detail="why"))

    assert errors(checks.check_model(spec("org/m"), hub("gated"))) == ["model.gated"]
    assert errors(checks.check_model(spec("org/m"), hub("not_found"))) == ["model.not_found"]
    unverified = checks.check_model(spec("org/m"), hub("unverified"))
    assert codes(unverified) == ["model.unverified"] and unverified[0].severity == "warning"


def test_lora_targets_exist(tiny_model, facts):
    ok = spec(tiny_model, hyperparameters={"lora_target_modules": ["q_proj", "v_proj"]})
    assert judge(checks.check_lora_targets, ok, facts) == []
    bad = spec(tiny_model, hyperparameters={"lora_target_modules": ["query", "v_proj"]})
    [finding] = judge(checks.check_lora_targets, bad, facts)
    assert finding.code == "lora.targets" and finding.severity == "error" and "'query'" in finding.message
    assert '"lora_target_modules": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]' in (
        finding.fix or ""
    )
    assert judge(checks.check_lora_targets, spec(tiny_model), facts) == []  # "all-linear" needs no check
    fixed = json.loads(finding.fix.split("hyperparameters=")[1].split("}, or")[0] + "}")
    assert judge(checks.check_lora_targets, spec(tiny_model, hyperparameters=fixed), facts) == []  # as sent
    # PEFT's own matching: a path's last parts, and one string as a regex over the whole path.
    for matched in (["self_attn.q_proj"], r".*\.(q|v)_proj", "q_proj, v_proj"):
        assert (
            judge(checks.check_lora_targets, spec(tiny_model, hyperparameters={"lora_target_modules": matched}), facts)
            == []
        )
    [regex] = judge(
        checks.check_lora_targets, spec(tiny_model, hyperparameters={"lora_target_modules": "q_proj|v_proj"}), facts
    )
    assert regex.severity == "error" and "whole path" in regex.message
    assert '"lora_target_modules": ["q_proj", "v_proj"]' in (regex.fix or "")
    # No weights to read: the architecture's modules (the bundled table) judge it, and a miss only warns.
    weightless = Facts(model=facts.model.model_copy(update={"module_names": None, "module_paths": None}))
    [by_type] = judge(checks.check_lora_targets, bad, weightless)
    assert (by_type.code, by_type.severity) == ("lora.targets", "warning") and "qwen2 models" in by_type.message
    assert judge(checks.check_lora_targets, ok, weightless) == []
    unknown_type = {**facts.model.config, "model_type": "not-in-the-table"}
    unknown = Facts(model=weightless.model.model_copy(update={"config": unknown_type}))
    assert codes(judge(checks.check_lora_targets, bad, unknown)) == ["lora.targets_unverified"]


def test_chat_template_needed_for_conversational_data(facts):
    assert checks.check_chat_template(spec(), facts, conversational=True) == []
    without = Facts(model=facts.model.model_copy(update={"has_chat_template": False}))
    assert errors(checks.check_chat_template(spec(), without, conversational=True)) == ["model.chat_template"]
    assert checks.check_chat_template(spec(), without, conversational=False) == []


def _dataset_findings(dataset, facts, **kw):
    s = spec(dataset=dataset, **kw)
    report = validate_dataset(s.dataset, s.method, mapping=s.dataset_mapping)
    return checks.check_dataset(s, replace(facts, dataset=report))


def test_dataset_checks_come_from_validate_dataset(tmp_path, chat_dataset, facts):
    assert errors(_dataset_findings(chat_dataset, facts)) == []
    assert errors(_dataset_findings(tmp_path / "no.jsonl", facts)) == ["dataset.missing"]
    (tmp_path / "data.txt").write_text("x")
    assert errors(_dataset_findings(tmp_path / "data.txt", facts)) == ["dataset.format"]
    (tmp_path / "empty.jsonl").write_text("")
    assert errors(_dataset_findings(tmp_path / "empty.jsonl", facts)) == ["dataset.empty"]


def test_dataset_shape_needing_a_mapping_blocks_until_the_mapping_is_given(tmp_path, facts):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "2+2?", "answer": "4"}\n{"question": "3+3?", "answer": "6"}\n')
    [finding] = [f for f in _dataset_findings(data, facts) if f.severity == "error"]
    assert finding.code == "dataset.columns" and "dataset_mapping" in finding.fix
    mapping = {"kind": "rename", "columns": {"question": "prompt", "answer": "completion"}}
    assert errors(_dataset_findings(data, facts, dataset_mapping=mapping)) == []


def test_conversational_data_needs_a_chat_template(chat_dataset, facts):
    without = Facts(model=facts.model.model_copy(update={"has_chat_template": False}))
    assert "model.chat_template" in errors(_dataset_findings(chat_dataset, without))


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"hyperparameters": {"max_length": 256}}, []),
        ({"hyperparameters": {"max_length": 4096}}, ["config.max_length"]),
        ({"hyperparameters": {"eval_strategy": "steps"}}, ["config.eval_without_data"]),
        ({"hyperparameters": {"eval_strategy": "no"}}, []),
        # Something to evaluate on: an eval_dataset, or a held-out slice of the training rows.
        ({"hyperparameters": {"eval_strategy": "steps"}, "eval_dataset": "/data/held_out.jsonl"}, []),
        ({"hyperparameters": {"eval_strategy": "steps", "eval_split_ratio": 0.1}}, []),
        ({"hyperparameters": {"bf16": True}, "flavor": "t4-small"}, ["config.bf16_unsupported"]),
        ({"hyperparameters": {"bf16": True}, "flavor": "a10g-large"}, []),
    ],
)
def test_config_rules(tiny_model, facts, kw, expected):
    found = judge(checks.check_config, spec(tiny_model, **kw), facts)
    assert errors(found) == expected


def test_config_warnings(tiny_model, facts):
    compiled_spec = spec(tiny_model, flavor="a10g-large", hyperparameters={"torch_compile": True})
    compiled = judge(checks.check_config, compiled_spec, facts)
    assert "config.torch_compile" in codes(compiled)
    assert codes(judge(checks.check_config, spec(tiny_model, flavor="h100"), facts)) == ["config.flavor_ignored"]


def test_default_max_length_is_capped_at_the_models_positions(tiny_model, facts):
    positions = checks.max_positions(facts)
    assert positions == 512
    assert config(spec(tiny_model), "/o", positions)["training_args"]["max_length"] == 512
    chosen = config(spec(tiny_model, hyperparameters={"max_length": 128}), "/o", positions)
    assert chosen["training_args"]["max_length"] == 128


def test_dependencies_of_the_job_python_come_from_the_template_header(tmp_path, facts):
    assert gather_requirements(facts, "sft", sys.executable).missing_requirements == []
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    lacking = gather_requirements(facts, "sft", str(bare / "bin" / "python"), qlora=True)
    [finding] = check_dependencies(spec(), lacking)
    assert finding.code == "dependencies.missing" and "trl>=" in finding.message and "jobtrail[train]" in finding.fix
    assert "bitsandbytes" in finding.message  # rendering adds it to a QLoRA job's header
    broken = gather_requirements(facts, "sft", str(tmp_path / "no-python"))
    assert errors(check_dependencies(spec(), broken)) == ["dependencies.python"]
    # The header read before rendering is the rendered script's header.
    qlora = spec(hyperparameters={"peft": "qlora"})
    rendered = pep723.read_metadata(render_script("sft", config(qlora, "/o")))["dependencies"]
    template = pep723.read_metadata((scripts_dir() / "sft.py").read_text())["dependencies"]
    assert rendered == [pin(r, job_lock()) for r in [*template, QLORA_REQUIREMENT]]  # each pinned as tested


def test_a_job_that_does_not_report_to_trackio_needs_no_trackio(tmp_path, facts):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    for report_to in ("none", ["tensorboard"]):
        quiet = gather_requirements(facts, "sft", python, training_args={"report_to": report_to}).missing_requirements
        assert quiet and not [r for r in quiet if r.startswith("trackio")], quiet
        rendered = pep723.read_metadata(
            render_script("sft", config(spec(hyperparameters={"report_to": report_to}), "/o"))
        )
        template = pep723.read_metadata((scripts_dir() / "sft.py").read_text())["dependencies"]
        assert rendered["dependencies"] == [pin(r, job_lock()) for r in template if not r.startswith("trackio")]
    reporting = gather_requirements(facts, "sft", python, training_args={"report_to": ["trackio"]})
    assert [r for r in reporting.missing_requirements if r.startswith("trackio>=")]


def test_bundled_architecture_table_is_the_locked_transformers():
    table = json.loads(data_path(ARCHITECTURES_TABLE).read_text())
    assert table["transformers_version"] == environment_lock().version_of("transformers"), (
        "the table is not the lock's: python tools/bundled_tables.py write"
    )
    assert table == derive_architectures()


def test_bundled_lora_modules_are_what_the_locked_transformers_builds():
    """Deriving every type takes ~20 s (tools/bundled_tables.py diff does it): a few families are built here, and the
    table must hold every causal-LM type but those whose default config does not build."""
    table = json.loads(data_path(LORA_MODULES_TABLE).read_text())
    assert table["transformers_version"] == environment_lock().version_of("transformers"), (
        "the table is not the lock's: python tools/bundled_tables.py write"
    )
    families = ["qwen2", "llama", "gpt2", "falcon", "phi"]
    assert derive_lora_modules(families)["modules"] == {family: table["modules"][family] for family in families}
    assert table["modules"]["gpt2"]["linear"] == ["c_attn", "c_fc", "c_proj", "lm_head"]  # Conv1D counts
    missing = set(derive_architectures()["causal_lm_model_types"]) - set(table["modules"])
    assert len(missing) < 20, missing  # 15 with transformers 5.24: configs that need arguments or packages


# One row of each TRL dataset format, by validate_dataset's name for it.
FORMAT_ROWS = {
    "messages": {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]},
    "prompt_completion": {"prompt": "Two plus two?", "completion": "Four."},
    "text": {"text": "A sentence to model."},
    "preference": {"prompt": "Two plus two?", "chosen": "Four.", "rejected": "Five."},
    "preference_implicit_prompt": {"chosen": "Two plus two is four.", "rejected": "Two plus two is five."},
    "unpaired_preference": {"prompt": "Two plus two?", "completion": "Four.", "label": True},
    "prompt_only": {"prompt": "Two plus two?"},
}


def test_registry_declares_every_method_once_with_trl_classes_and_checks():
    import trl

    assert tuple(SPECS) == METHODS
    for name, method in SPECS.items():
        assert method.name == name and method.checks and method.flops.sequences >= 1
        assert hasattr(trl, method.config_class) and hasattr(trl, method.trainer_class)
        assert set(method.data_formats) <= set(FORMAT_ROWS)


@pytest.mark.parametrize("method", METHODS)
def test_validate_dataset_takes_exactly_the_registry_formats_as_they_are(tmp_path, method):
    from jobtrail.preflight.dataset import validate_dataset

    ready = set()
    for name, row in FORMAT_ROWS.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text((json.dumps(row) + "\n") * 4)
        if validate_dataset(str(path), method).methods[method].status == "READY":
            ready.add(name)
    assert ready == set(method_spec(method).data_formats)


# --- the one preflight pass ------------------------------------------------------------------------


def _env(tmp_path) -> PlanEnv:
    return PlanEnv(job_python=sys.executable, llama_cpp_cache=tmp_path / "cache")


def test_plan_gathers_facts_then_judges_then_builds_and_renders(tmp_path, tiny_model, chat_dataset):
    good = spec(tiny_model, chat_dataset, hyperparameters={"max_steps": 3})
    planned = plan(good, _env(tmp_path))
    assert planned.facts.missing_requirements == [] and planned.facts.dataset.rows == 64
    assert "model.ok" in codes(planned.findings) and not planned.blocked
    assert planned.config["output_dir"] is None  # the job's own run directory, given to it at launch
    chosen = plan(good.model_copy(update={"output": str(tmp_path / "out")}), _env(tmp_path))
    assert chosen.config["output_dir"] == str(tmp_path / "out")
    assert planned.config["training_args"]["max_length"] == 512  # the default, capped at the model's positions
    assert planned.script == render_script("sft", planned.config)
    misnamed = plan(spec(tiny_model, chat_dataset, hyperparameters={"learning_rte": 1}), _env(tmp_path))
    assert misnamed.blocked and misnamed.config is None and misnamed.script == ""
    # Errors that leave a config to build (here: the data) block the submission, yet a forced one has its config.
    no_data = plan(spec(tiny_model, tmp_path / "none.jsonl"), _env(tmp_path))
    assert errors(no_data.findings) == ["dataset.missing"] and no_data.config is not None


def test_plan_of_a_retry_keeps_the_previous_output_and_length(tmp_path, tiny_model, chat_dataset):
    previous = plan(spec(tiny_model, chat_dataset), _env(tmp_path)).config
    previous = {
        **previous,
        "output_dir": "/first/output",
        "training_args": {**previous["training_args"], "max_length": 128},
    }
    changed = spec(tiny_model, chat_dataset, hyperparameters={"per_device_train_batch_size": 1})
    retried = plan(changed, _env(tmp_path), previous=previous)
    assert retried.config["output_dir"] == "/first/output" and retried.config["training_args"]["max_length"] == 128
    assert retried.config["training_args"]["per_device_train_batch_size"] == 1
    too_long = spec(tiny_model, chat_dataset, hyperparameters={"max_length": 100_000})
    assert "config.max_length" in errors(plan(too_long, _env(tmp_path), previous=previous).findings)


def test_an_evaluation_of_a_missing_model_adapter_or_dataset_is_refused_before_any_job(
    tmp_path, tiny_model, chat_dataset
):
    def evaluation(model, dataset, adapter=None):
        target = JobSpec(method="evaluate", model=str(model), dataset=str(dataset))
        return plan(target, _env(tmp_path), Evaluation(label="base", adapter=adapter))

    ok = evaluation(tiny_model, chat_dataset)
    assert not ok.blocked and ok.config["model"] == str(tiny_model) and ok.script
    assert errors(evaluation(tmp_path / "gone", chat_dataset).findings) == ["model.missing"]
    assert errors(evaluation(tiny_model, tmp_path / "gone.jsonl").findings) == ["dataset.missing"]
    missing_adapter = evaluation(tiny_model, chat_dataset, adapter=str(tmp_path / "run" / "final"))
    assert errors(missing_adapter.findings) == ["adapter.missing"] and missing_adapter.config is None

    from jobtrail.app import build_service

    service = build_service(tmp_path / "home")
    refused = service.evaluate(EvaluateRequest(str(tmp_path / "gone.jsonl"), model=str(tiny_model)))
    assert refused.job_id is None and refused.status == "rejected" and "dataset.missing" in codes(refused.findings)
    assert "Not evaluated" in refused.to_markdown() and service.ps().jobs == []


def test_a_retry_with_changes_goes_through_the_same_rules(tmp_path, tiny_model, chat_dataset):
    from jobtrail.app import build_service
    from jobtrail.errors import InvalidRequestError
    from support.waiting import wait_for

    service = build_service(tmp_path / "home")
    job_id = service.submit(spec(tiny_model, chat_dataset, hyperparameters={"max_steps": 400})).job_id
    wait_for(lambda: service.inspect(job_id).status == "running", 60, "the job to run")
    service.cancel(job_id)
    with pytest.raises(InvalidRequestError) as info:
        service.retry(job_id, {"max_length": 100_000})  # more than the model's 512 positions
    assert "512 positions" in str(info.value) and len(service.inspect(job_id).attempts) == 1
    assert service.retry(job_id, {"max_steps": 1}).retried
    second = service.inspect(job_id).attempts[1]
    assert "model.ok" in codes(second.findings)  # the retry's own preflight is on its receipt
    service.cancel(job_id)


def test_a_numeric_string_max_length_is_judged_against_the_positions_too(tiny_model: Path) -> None:
    facts = Facts(model=local_model_facts(tiny_model))
    positions = facts.model.config["max_position_embeddings"]
    findings = judge(checks.check_config, spec(hyperparameters={"max_length": str(positions * 2)}), facts)
    assert "config.max_length" in errors(findings)


def test_submit_measures_the_rows_with_the_models_tokenizer_and_warns_when_they_will_be_cut(
    tmp_path, tiny_model, chat_dataset
):
    cut = plan(spec(tiny_model, chat_dataset, hyperparameters={"max_length": "12"}), _env(tmp_path))
    [too_long] = [f for f in cut.findings if f.code == "dataset.too_long"]
    assert too_long.severity == "warning" and too_long.message.startswith("64 of 64 rows")
    assert "max_length 12" in too_long.message and "max_length" in too_long.fix
    # The default the job gets (1024, capped at the model's 512 positions) cuts nothing.
    whole = plan(spec(tiny_model, chat_dataset), _env(tmp_path))
    assert "dataset.too_long" not in codes(whole.findings)
    assert whole.facts.dataset.token_lengths.max_length == 512
    # A model whose tokenizer is not on this machine: said, not silently skipped.
    unmeasured = plan(spec("nobody/uncached-model", chat_dataset), _env(tmp_path))
    [tokens] = [f for f in unmeasured.findings if f.code == "dataset.tokens"]
    assert "not measured" in tokens.message and tokens.severity == "info" and "validate_dataset" in tokens.fix


@pytest.mark.parametrize("backend", ["local", "hf-jobs"])
def test_a_timeout_under_a_minute_is_warned_as_seconds_meant_as_minutes(backend):
    """submit(timeout=30) was accepted without a word: 30 seconds, which ends every job before its first step."""
    short = JobSpec(method="sft", model="m", dataset="d.jsonl", backend=backend, timeout_s=30)
    [finding] = checks.check_timeout_unit(short, Facts())
    assert finding.code == "timeout.seconds" and finding.severity == "warning"
    assert "30 seconds" in finding.message and 'timeout="30m"' in (finding.fix or "")
    assert checks.check_timeout_unit(short.model_copy(update={"timeout_s": 60}), Facts()) == []
    assert checks.check_timeout_unit(short.model_copy(update={"timeout_s": None}), Facts()) == []
    assert checks.check_timeout_unit in checks.TRAINING_CHECKS
