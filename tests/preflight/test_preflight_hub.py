"""Preflight's Hub facts through the real huggingface_hub client against the offline emulator."""

from __future__ import annotations

import pytest

from jobtrail.methods import METHODS
from jobtrail.models import JobSpec
from jobtrail.preflight import rules as checks
from jobtrail.preflight.facts import Facts
from jobtrail.preflight.probes import hub_model_facts
from jobtrail.requests import EstimateRequest, EvaluateRequest, SubmitOptions
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


def test_output_repo_must_be_a_hub_id_the_token_may_write(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    """A dry run refuses an output repo the token may not create, as the submit does (output.permission, before any
    job); the repo is made when the job starts, and a refusal there (the token changed since) ends it auth_error."""
    from jobtrail.app import build_service

    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    service = build_service(tmp_path / "home")
    spec = remote_spec(hyperparameters={"max_steps": 2, "max_length": 64}, output="just-a-name")
    dry = service.submit(spec, SubmitOptions(dry_run=True))
    [finding] = [f for f in dry.findings if f.code == "output.repo"]
    assert "<your-user-or-org>/<model-name>" in finding.fix
    assert not [f for f in dry.findings if f.code.startswith("output.") and f.code != "output.repo"]
    elsewhere = spec.model_copy(update={"output": "someorg/out"})
    for dry_run in (True, False):
        refused = service.submit(elsewhere, SubmitOptions(dry_run=dry_run))
        [finding] = [f for f in refused.findings if f.code == "output.permission"]
        assert "someorg is neither alice nor one of its organizations" in finding.message
        assert "output='alice/out'" in finding.fix
    assert refused.status == "rejected" and service.ps().jobs == [] and hub.jobs == {}
    assert ("model", "someorg/out") not in hub.repos
    hub.inject.fail(r"^/api/repos/create", status=403, times=None, message="You don't have the rights")
    started = service.submit(spec.model_copy(update={"output": "alice/out"}))
    assert started.status == "failed" and "Could not create the output repo alice/out" in started.termination_message
    assert service.inspect(started.job_id).termination_reason == "auth_error" and hub.jobs == {}


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
    short = service.submit(spec, SubmitOptions(dry_run=True))
    codes = {f.code for f in short.findings}
    assert "estimate.unavailable" not in codes and {"estimate", "timeout.short"} <= codes
    unset = service.submit(spec.model_copy(update={"timeout_s": None}), SubmitOptions(dry_run=True))
    assert "timeout.default" in {f.code for f in unset.findings}


@pytest.fixture
def offline_hub(monkeypatch):
    """HF_ENDPOINT at a local port nobody listens on: every Hub request is refused."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    return url


def test_offline_dry_run_of_a_hub_model_warns_within_seconds(offline_hub, chat_dataset, tmp_path):
    import time

    from jobtrail.app import build_service

    service = build_service(tmp_path / "home")
    started = time.monotonic()
    dry = service.submit(
        JobSpec(method="sft", model="Qwen/Qwen2.5-0.5B", dataset=str(chat_dataset)), SubmitOptions(dry_run=True)
    )
    assert time.monotonic() - started < 10
    [model] = [f for f in dry.findings if f.code.startswith("model.")]
    assert (model.code, model.severity) == ("model.unverified", "warning") and offline_hub in model.message


@pytest.fixture
def hanging_hub(monkeypatch):
    """HF_ENDPOINT at a local port that accepts connections and never answers (a Hub that hangs)."""
    import socket

    from huggingface_hub import constants

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)  # the kernel completes handshakes; nobody ever reads or answers
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_TOKEN", "hf_some_token")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    yield url
    server.close()


def test_a_hanging_hub_costs_one_probe_timeout_per_call_not_one_per_check(hanging_hub, tmp_path):
    import time

    from jobtrail.app import build_service
    from jobtrail.util.hub import HUB_PROBE_TIMEOUT_S

    service = build_service(tmp_path / "home")
    started = time.monotonic()
    # Model, dataset, token and prices are each checked on the Hub: four probes, one wait.
    dry = service.submit(remote_spec(model="Qwen/Qwen2.5-0.5B", dataset="org/data"), SubmitOptions(dry_run=True))
    took = time.monotonic() - started
    assert took < 2 * HUB_PROBE_TIMEOUT_S + 3, took
    unverified = {f.code for f in dry.findings if hanging_hub in f.message}
    assert {"model.unverified", "dataset.unverified"} <= unverified, [f.model_dump() for f in dry.findings]


def test_offline_estimate_fails_fast_with_a_fix_that_names_real_arguments(offline_hub):
    import time

    from jobtrail.errors import JobtrailError
    from jobtrail.preflight.plan import estimate_alone

    started = time.monotonic()
    with pytest.raises(JobtrailError) as caught:
        estimate_alone(EstimateRequest("Qwen/Qwen2.5-0.5B", num_examples=100, avg_tokens=100))
    assert time.monotonic() - started < 10
    assert offline_hub in caught.value.message and "config=" not in str(caught.value)


def test_offline_evaluation_of_an_uncached_hub_model_is_refused_at_once(offline_hub, chat_dataset, tmp_path):
    from jobtrail.app import build_service

    service = build_service(tmp_path / "home")
    result = service.evaluate(EvaluateRequest(str(chat_dataset), model="Qwen/Qwen2.5-0.5B"))
    assert result.job_id is None and "model.unreachable" in {f.code for f in result.findings}


@pytest.mark.parametrize(
    ("command", "codes"),
    [
        (["preflight", "--model", "Qwen/Qwen2.5-0.5B", "--method", "sft", "--dataset", "DATA"], {0, 1}),
        (["estimate", "Qwen/Qwen2.5-0.5B", "--num-examples", "10", "--avg-tokens", "10"], {2}),
    ],
)
def test_offline_cli_prints_a_message_not_a_traceback(
    offline_hub, chat_dataset, tmp_path, monkeypatch, capsys, command, codes
):
    from jobtrail.surface.cli import main

    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    code = main([str(chat_dataset) if part == "DATA" else part for part in command])
    out, err = capsys.readouterr()
    assert code in codes and "Traceback" not in out + err and "internal error" not in out + err
    assert offline_hub in out + err


def test_local_job_timeout_is_checked_against_this_machines_estimate(tiny_model, chat_dataset, tmp_path):
    from jobtrail.app import build_service

    service = build_service(tmp_path / "home")
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters={"max_steps": 10**7})
    short = service.submit(spec.model_copy(update={"timeout_s": 60}), SubmitOptions(dry_run=True))
    [finding] = [f for f in short.findings if f.code == "timeout.short"]
    assert finding.severity == "warning" and "this machine" in finding.message and 'timeout="' in finding.fix
    enough = service.submit(
        spec.model_copy(update={"hyperparameters": {"max_steps": 2}, "timeout_s": 3600}), SubmitOptions(dry_run=True)
    )
    assert "timeout.short" not in {f.code for f in enough.findings}
