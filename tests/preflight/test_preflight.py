"""Each preflight rule with a passing and a failing case (local facts; Hub facts live with the emulator tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobtrail.methods import METHODS
from jobtrail.methods.registry import SPECS, method_spec
from jobtrail.util.data import data_path
from jobtrail.preflight import rules as checks
from jobtrail.preflight.rules import Facts
from jobtrail.preflight.probes import ModelFacts, local_model_facts
from jobtrail.templates.render import render_script
from jobtrail.models import JobSpec
from jobtrail.templates.configs import build_config


def spec(model: Path | str = "/m", dataset: Path | str = "/d.jsonl", **kw) -> JobSpec:
    return JobSpec(method="sft", model=str(model), dataset=str(dataset), **kw)


def codes(findings) -> list[str]:
    return [f.code for f in findings]


def errors(findings) -> list[str]:
    return [f.code for f in findings if f.severity == "error"]


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


@pytest.mark.parametrize(("model_type", "expected"), [("qwen2", []), ("not-a-model", ["model.architecture"]),
                                                       ("vit", ["model.architecture"])])
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
    assert checks.check_lora_targets(ok, facts) == []
    bad = spec(tiny_model, hyperparameters={"lora_target_modules": ["query", "v_proj"]})
    [finding] = checks.check_lora_targets(bad, facts)
    assert finding.code == "lora.targets" and "q_proj" in finding.fix and "'query'" in finding.message
    unknown = Facts(model=facts.model.model_copy(update={"module_names": None}))
    assert codes(checks.check_lora_targets(bad, unknown)) == ["lora.targets_unverified"]
    assert checks.check_lora_targets(spec(tiny_model), facts) == []  # "all-linear" needs no check


def test_chat_template_needed_for_conversational_data(facts):
    assert checks.check_chat_template(spec(), facts, conversational=True) == []
    without = Facts(model=facts.model.model_copy(update={"has_chat_template": False}))
    assert errors(checks.check_chat_template(spec(), without, conversational=True)) == ["model.chat_template"]
    assert checks.check_chat_template(spec(), without, conversational=False) == []


def _dataset_findings(dataset, facts, **kw):
    s = spec(dataset=dataset, **kw)
    return checks.check_dataset(s, checks.gather_dataset(facts, s))


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
        ({"hyperparameters": {"bf16": True}, "flavor": "t4-small"}, ["config.bf16_unsupported"]),
        ({"hyperparameters": {"bf16": True}, "flavor": "a10g-large"}, []),
    ],
)
def test_config_rules(tiny_model, facts, kw, expected):
    found = checks.check_config(spec(tiny_model, **kw), facts)
    assert errors(found) == expected


def test_config_warnings(tiny_model, facts):
    compiled = checks.check_config(spec(tiny_model, flavor="a10g-large", hyperparameters={"torch_compile": True}), facts)
    assert "config.torch_compile" in codes(compiled)
    assert codes(checks.check_config(spec(tiny_model, flavor="h100"), facts)) == ["config.flavor_ignored"]


def test_default_max_length_is_capped_at_the_models_positions(tiny_model, facts):
    positions = checks.max_positions(facts)
    assert positions == 512
    assert build_config(spec(tiny_model), "/o", positions)["training_args"]["max_length"] == 512
    assert build_config(spec(tiny_model, hyperparameters={"max_length": 128}), "/o", positions)["training_args"]["max_length"] == 128


def test_dependencies_of_the_job_python(tmp_path, facts):
    script = render_script("sft", build_config(spec(), "/o"))
    assert checks.gather_requirements(facts, script, sys.executable).missing_requirements == []
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    lacking = checks.gather_requirements(facts, script, str(bare / "bin" / "python"))
    [finding] = checks.check_dependencies(spec(), lacking)
    assert finding.code == "dependencies.missing" and "trl>=" in finding.message and "jobtrail[train]" in finding.fix
    broken = checks.gather_requirements(facts, script, str(tmp_path / "no-python"))
    assert errors(checks.check_dependencies(spec(), broken)) == ["dependencies.python"]


def test_bundled_architecture_table_matches_installed_transformers():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    table = json.loads(data_path("transformers_architectures.json").read_text())
    assert set(table["model_types"]) == set(CONFIG_MAPPING_NAMES)
    assert set(table["causal_lm_model_types"]) == set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


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
