"""Preflight's Hub facts through the real huggingface_hub client against the offline emulator."""

from __future__ import annotations

from pathlib import Path

from jobtrail.models import JobSpec
from jobtrail.preflight import checks
from jobtrail.preflight.checks import Facts
from jobtrail.preflight.probes import hub_model_facts

TOKEN = "hf_user_write_token"


def _files(model_dir: Path) -> dict[str, Path]:
    return {p.name: p for p in model_dir.iterdir() if p.is_file() and not p.name.startswith(".")}


def _model_findings(repo: str, token: str | None = TOKEN):
    spec = JobSpec(method="sft", model=repo, dataset="org/data")
    return checks.check_model(spec, Facts(model=hub_model_facts(repo, token)))


def test_public_hub_model_gives_config_modules_and_chat_template(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("org/tiny", files=_files(tiny_model))
    facts = hub_model_facts("org/tiny", TOKEN)
    assert facts.access == "ok" and facts.config["model_type"] == "qwen2"
    assert "q_proj" in facts.module_names and facts.has_chat_template is True
    assert [f.code for f in _model_findings("org/tiny")] == ["model.ok"]


def test_gated_model_is_refused_with_the_page_to_accept(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("meta/gated", files=_files(tiny_model), gated="manual")
    [finding] = _model_findings("meta/gated")
    assert finding.code == "model.gated" and "https://huggingface.co/meta/gated" in finding.fix
    hub.grant_access("meta/gated", "alice")
    assert [f.code for f in _model_findings("meta/gated")] == ["model.ok"]


def test_private_or_missing_model_is_not_found(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("bob/secret", files=_files(tiny_model), private=True, owner="bob")
    assert [f.code for f in _model_findings("bob/secret")] == ["model.not_found"]
    assert [f.code for f in _model_findings("org/typo-model")] == ["model.not_found"]


def test_unreachable_hub_is_a_warning_that_says_the_check_did_not_run(hub, tiny_model):
    hub.add_token(TOKEN, "alice")
    hub.add_repo("org/tiny", files=_files(tiny_model))
    hub.inject.fail(r"/api/models/org/tiny", status=503, times=None)
    [finding] = _model_findings("org/tiny")
    assert finding.code == "model.unverified" and finding.severity == "warning"
    assert "Could not check" in finding.message
