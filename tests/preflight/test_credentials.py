"""Credentials are refused at any depth of hyperparameters and dataset_mapping, by key name and by value shape,
naming where they are with the value masked (issue 28 item 3); trust_remote_code takes only a JSON boolean; a model
directory's own code and Hub kernels are said; report_to and worker counts are bounded (item 5)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec
from jobtrail.preflight.credentials import mask_samples, refuse_credentials
from jobtrail.preflight.hyperparams import check_names
from jobtrail.preflight.passthrough import check_passthrough
from jobtrail.preflight.remote_code import remote_code
from jobtrail.requests import SubmitOptions
from support.jobs import TINY_SFT

# Fake credentials of each known shape, assembled at run time so that no scanner takes the test for a leak.
SHAPED = {
    "hugging face": "hf_" + "Ab3" * 12,
    "github classic": "gh" + "p_" + "x7Y" * 12,
    "github app": "gh" + "s_" + "k2L" * 12,
    "github fine-grained": "github" + "_pat_" + "11AB" * 10,
    "openai": "sk-" + "proj-" + "Qw9" * 10,
    "aws": "AK" + "IA" + "QWERTYUIOP123456",
    "slack": "xo" + "xb-" + "123456789012-abcdefABCDEF",
    "jwt": "ey" + "JhbGciOiJIUzI1NiJ9." + "ey" + "JzdWIiOiIxMjM0In0.c2lnbmF0dXJl",
    "pem": "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----",
}


def _spec(**kw: object) -> JobSpec:
    return JobSpec(method="sft", model="Qwen/Qwen2.5-0.5B", dataset="org/data", **kw)  # type: ignore[arg-type]


def _refusal(spec: JobSpec) -> str:
    with pytest.raises(InvalidRequestError) as info:
        refuse_credentials(spec)
    assert "secrets=" in (info.value.fix or "") and "HF_TOKEN" in (info.value.fix or "")
    return str(info.value)


@pytest.mark.parametrize("kind", SHAPED)
def test_a_credential_shaped_value_is_refused_at_any_depth_named_and_masked(kind):
    value = SHAPED[kind]
    for hyperparameters, where in (
        ({"model_init_kwargs": {"revision": value}}, "model_init_kwargs.revision"),
        ({"dataset_kwargs": {"extra": [{"x": value}]}}, "dataset_kwargs.extra[0].x"),
        ({"model_init_kwargs": json.dumps({"revision": value})}, "model_init_kwargs.revision"),
        ({"run_name": f"run with {value} in it"}, "run_name"),
    ):
        text = _refusal(_spec(hyperparameters=hyperparameters))
        assert f"hyperparameters {where} = " in text and "***" in text and value not in text, text
    text = _refusal(_spec(dataset_mapping={"prompt": "question", "completion": value}))
    assert "dataset_mapping completion = " in text and value not in text


@pytest.mark.parametrize(
    ("hyperparameters", "where"),
    [
        ({"model_init_kwargs": {"token": "anything-at-all"}}, "model_init_kwargs.token"),
        ({"model_init_kwargs": {"use_auth_token": True}}, "model_init_kwargs.use_auth_token"),
        ({"dataset_kwargs": {"token": "abc"}}, "dataset_kwargs.token"),
        ({"hub_token": "x" * 20}, "hub_token"),
        ({"generation_kwargs": {"client": {"api_key": "k-123"}}}, "generation_kwargs.client.api_key"),
        ({"lr_scheduler_kwargs": {"PASSWORD": "p"}}, "lr_scheduler_kwargs.PASSWORD"),
        ({"model_init_kwargs": {"aws_secret": "s"}}, "model_init_kwargs.aws_secret"),
    ],
)
def test_a_credential_by_its_name_is_refused_at_any_depth(hyperparameters, where):
    text = _refusal(_spec(hyperparameters=hyperparameters))
    assert f"hyperparameters {where} = " in text and "by its name" in text


def test_names_and_values_that_are_no_credentials_pass():
    ordinary = {
        "max_new_tokens": 64,
        "eos_token": "<|im_end|>",
        "pad_token": "<pad>",
        "model_init_kwargs": {"token": None, "revision": "main", "torch_dtype": "bfloat16"},
        "run_name": "sk-short",
        "dataset_text_field": "text",
    }
    refuse_credentials(_spec(hyperparameters=ordinary, dataset_mapping={"prompt": "task-description"}))


def test_through_submit_nothing_is_stored_and_the_error_shows_the_place(tmp_path, tiny_model, chat_dataset):
    service = build_service(tmp_path / "home")
    token = SHAPED["github classic"]
    spec = JobSpec(
        method="sft",
        model=str(tiny_model),
        dataset=str(chat_dataset),
        hyperparameters={**TINY_SFT, "model_init_kwargs": {"token": token}},
    )
    for options in (SubmitOptions(dry_run=True, include_script=True), SubmitOptions(force=True)):
        with pytest.raises(InvalidRequestError) as info:
            service.submit(spec, options)
        assert "model_init_kwargs.token = ghp_***" in info.value.message and token not in str(info.value)
    assert service.ps().jobs == []
    stored = b"".join(p.read_bytes() for p in (tmp_path / "home").rglob("*") if p.is_file())
    assert token.encode() not in stored


def test_samples_are_masked_by_key_and_shape():
    sample = {"text": f"see {SHAPED['openai']}", "auth": {"user": "u"}, "x_api_key": "k", "keywords": "a, b"}
    masked = mask_samples(sample)
    assert masked["text"] == "see sk-proj-*** (38 characters)" and masked["auth"] == "<dict>"
    assert masked["x_api_key"] == "*** (1 character)" and masked["keywords"] == "a, b"


@pytest.mark.parametrize(
    ("hyperparameters", "fix"),
    [
        ({"trust_remote_code": "false"}, "trust_remote_code: false"),
        ({"trust_remote_code": "True"}, "trust_remote_code: true"),
        ({"model_init_kwargs": {"trust_remote_code": "false"}}, "model_init_kwargs.trust_remote_code: false"),
        ({"model_init_kwargs": {"trust_remote_code": 1}}, "model_init_kwargs.trust_remote_code: true"),
        ({"model_init_kwargs": {"trust_remote_code": "maybe"}}, "true or false"),
    ],
)
def test_trust_remote_code_takes_only_a_json_boolean(hyperparameters, fix):
    errors = [f for f in check_names("sft", hyperparameters) if f.severity == "error"]
    assert len(errors) == 1 and "not a JSON boolean" in errors[0].message and fix in (errors[0].fix or "")


def test_a_string_trust_remote_code_leaves_no_config_even_forced(tmp_path, tiny_model, chat_dataset):
    service = build_service(tmp_path / "home")
    spec = JobSpec(
        method="sft",
        model=str(tiny_model),
        dataset=str(chat_dataset),
        hyperparameters={**TINY_SFT, "model_init_kwargs": {"trust_remote_code": "false"}},
    )
    result = service.submit(spec, SubmitOptions(force=True))
    assert result.status == "rejected" and result.job_id is None
    assert [f.code for f in result.findings if f.severity == "error"] == ["hyperparameters.value"]
    for boolean in (False, True):
        hyper = {"model_init_kwargs": {"trust_remote_code": boolean}}
        assert not [f for f in check_names("sft", hyper) if f.severity == "error"]


def test_a_model_directory_with_its_own_code_is_a_warning_naming_the_files(tmp_path, tiny_model):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    assert remote_code(str(model), {}, runs_here=True) == []
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (model / "config.json").write_text(json.dumps(config))
    (model / "modeling_evil.py").write_text("import os\n")
    [plain] = remote_code(str(model), {}, runs_here=True)
    assert plain.code == "model.remote_code" and plain.severity == "warning"
    assert "modeling_evil.py" in plain.message and "config.json → modeling_evil.py" in plain.message
    assert "only with trust_remote_code=true" in plain.message
    [trusted] = remote_code(str(model), {"model_init_kwargs": {"trust_remote_code": True}}, runs_here=True)
    assert "runs it inside the job" in trusted.message


def test_a_hub_kernel_as_attn_implementation_is_remote_code(monkeypatch):
    kernel = {"model_init_kwargs": {"attn_implementation": "kernels-community/flash-attn3"}}
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    [warning] = remote_code("Qwen/Qwen2.5-0.5B", kernel, runs_here=True)
    assert warning.severity == "warning" and "kernels-community/flash-attn3" in warning.message
    assert remote_code("Qwen/Qwen2.5-0.5B", {"model_init_kwargs": {"attn_implementation": "sdpa"}}, True) == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    [refusal] = remote_code("Qwen/Qwen2.5-0.5B", kernel, runs_here=True)
    assert refusal.severity == "error" and "HF_HUB_OFFLINE" in refusal.message
    assert remote_code("Qwen/Qwen2.5-0.5B", kernel, runs_here=False)[0].severity == "warning"  # its machine's Hub


@pytest.mark.parametrize("value", ["all", "wandb", ["trackio", "tensorboard"]])
def test_report_to_is_what_jobtrail_supports(value):
    [finding] = check_passthrough(_spec(hyperparameters={"report_to": value}))
    assert finding.code == "hyperparameters.report_to" and finding.severity == "error"
    assert '"report_to": "trackio"' in (finding.fix or "") and '"report_to": "none"' in (finding.fix or "")


@pytest.mark.parametrize("value", ["trackio", "none", ["trackio"], [], None])
def test_report_to_trackio_or_none_passes(value):
    assert check_passthrough(_spec(hyperparameters={"report_to": value})) == []


def test_worker_counts_are_bounded_by_the_machine_or_the_flavor():
    cpus = os.cpu_count() or 1
    for name in ("dataloader_num_workers", "dataset_num_proc"):
        [local] = check_passthrough(_spec(hyperparameters={name: 100000}))
        assert local.code == "hyperparameters.workers" and f"({cpus})" in local.message
        assert check_passthrough(_spec(hyperparameters={name: cpus})) == []
    remote = _spec(backend="hf-jobs", flavor="a10g-small", hyperparameters={"dataset_num_proc": "8"})
    [flavor] = check_passthrough(remote)
    assert "a10g-small flavor" in flavor.message and "(4)" in flavor.message
    assert (
        check_passthrough(_spec(backend="hf-jobs", flavor="a10g-large", hyperparameters={"dataset_num_proc": 8})) == []
    )
