"""Preflight's Hub facts through the real huggingface_hub client against the offline emulator."""

from __future__ import annotations

import pytest

from jobtrail.methods import METHODS
from jobtrail.models import JobSpec
from jobtrail.preflight import rules as checks
from jobtrail.preflight.facts import Facts
from jobtrail.preflight.probes import hub_model_facts
from support.jobs import write_jsonl
from support.remote import model_files, publish, remote_spec

TOKEN = "hf_user_write_token"


def _model_findings(repo: str, token: str | None = TOKEN):
    spec = JobSpec(method="sft", model=repo, dataset="org/data")
    return checks.check_model(spec, Facts(model=hub_model_facts(repo, token)))


def test_public_hub_model_gives_config_modules_and_chat_template(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("org/tiny", files=model_files(tiny_model))
    facts = hub_model_facts("org/tiny", TOKEN)
    assert facts.access == "ok" and facts.config["model_type"] == "qwen2"
    assert "q_proj" in facts.module_names and facts.has_chat_template is True
    assert [f.code for f in _model_findings("org/tiny")] == ["model.ok"]


def test_gated_model_is_refused_with_the_page_to_accept(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("meta/gated", files=model_files(tiny_model), gated="manual")
    [finding] = _model_findings("meta/gated")
    assert finding.code == "model.gated" and "https://huggingface.co/meta/gated" in finding.fix
    hub.grant_access("meta/gated", "alice")
    assert [f.code for f in _model_findings("meta/gated")] == ["model.ok"]


def test_private_or_missing_model_is_not_found(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("bob/secret", files=model_files(tiny_model), private=True, owner="bob")
    assert [f.code for f in _model_findings("bob/secret")] == ["model.not_found"]
    assert [f.code for f in _model_findings("org/typo-model")] == ["model.not_found"]


def test_unreachable_hub_is_a_warning_that_says_the_check_did_not_run(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("org/tiny", files=model_files(tiny_model))
    hub.inject.fail(r"/api/models/org/tiny", status=503, times=None)
    [finding] = _model_findings("org/tiny")
    assert finding.code == "model.unverified" and finding.severity == "warning"
    assert "Could not check" in finding.message


def test_validate_dataset_reads_a_hub_dataset_through_the_emulator(hub, chat_dataset, tmp_path):
    from jobtrail.preflight.dataset import validate_dataset

    hub.add_token(TOKEN, "alice")
    hub.add_repo("alice/chat", repo_type="dataset", files={"data/train-00000.jsonl": chat_dataset})
    report = validate_dataset("alice/chat", "sft")
    assert report.source == "hub" and report.rows == 64 and report.methods["sft"].status == "READY"
    missing = validate_dataset("alice/no-such-data", "sft")
    assert "dataset.not_found" in [f.code for f in missing.findings]
    hub.add_repo(
        "alice/private-data", repo_type="dataset", files={"train.jsonl": chat_dataset}, private=True, owner="bob"
    )
    private = validate_dataset("alice/private-data", "sft")
    assert {f.code for f in private.findings} & {"dataset.not_found", "dataset.access"}


def test_output_repo_must_be_a_hub_id_and_creatable(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    from jobtrail.app import build_service

    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    service = build_service(tmp_path / "home")
    spec = remote_spec(hyperparameters={"max_steps": 2, "max_length": 64}, output="just-a-name")
    dry = service.submit(spec, dry_run=True)
    [finding] = [f for f in dry.findings if f.code == "output.repo"]
    assert "<your-user-or-org>/<model-name>" in finding.fix
    hub.inject.fail(r"^/api/repos/create", status=403, times=None, message="You don't have the rights")
    refused = service.submit(spec.model_copy(update={"output": "someorg/out"}))
    assert refused.status == "rejected" and "output.create_failed" in {f.code for f in refused.findings}
    assert service.ps().jobs == []


PAIRS = [{"prompt": f"Question {i}?", "chosen": f"A good answer {i}.", "rejected": f"Bad {i}."} for i in range(8)]
DATA_BY_METHOD = {
    "dpo": PAIRS,
    "reward": PAIRS,
    "kto": [{"prompt": f"Question {i}?", "completion": f"Answer {i}.", "label": i % 2 == 0} for i in range(8)],
    "grpo": [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)],
}


@pytest.mark.parametrize("method", METHODS)
def test_remote_dry_run_of_every_method_checks_the_estimate_and_the_timeout(
    hub, tiny_model, chat_dataset, tmp_path, monkeypatch, method
):
    from jobtrail.app import build_service

    data = chat_dataset if method == "sft" else write_jsonl(tmp_path / "data.jsonl", DATA_BY_METHOD[method])
    publish(hub, TOKEN, tiny_model, data, monkeypatch)
    service = build_service(tmp_path / "home")
    spec = remote_spec(method=method, hyperparameters={"max_steps": 5000}, output="alice/out", timeout_s=60)
    short = service.submit(spec, dry_run=True)
    codes = {f.code for f in short.findings}
    assert "estimate.unavailable" not in codes and {"estimate", "timeout.short"} <= codes
    unset = service.submit(spec.model_copy(update={"timeout_s": None}), dry_run=True)
    assert "timeout.default" in {f.code for f in unset.findings}
