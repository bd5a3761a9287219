"""The tiny-model SFT job end to end on backend="hf-jobs": the real HfApi client, the emulator runs
the submitted script for real (downloading model and data from it and pushing checkpoints back)."""

from __future__ import annotations

import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec, Launcher
from jobtrail.requests import EstimateRequest, SubmitOptions
from support.remote import SHORT_TRAINING, publish, remote_spec
from support.waiting import wait_for, wait_until_terminal

TOKEN = "hf_alice_write_secret_token_42"
HYPER = SHORT_TRAINING


@pytest.fixture
def remote(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    return build_service(tmp_path / "home")


def _spec(**kw) -> JobSpec:
    return remote_spec(**{"timeout_s": 1800, "hyperparameters": HYPER, **kw})


def test_sft_runs_on_hf_jobs_pushes_committed_checkpoints_and_keeps_the_token_secret(remote, hub, tmp_path):
    # Two workers (gloo on the emulator's CPU): the script starts them itself under `uv run` too.
    submitted = remote.submit(_spec(hyperparameters={**HYPER, "num_processes": 2}))
    assert submitted.job_id, [f.model_dump() for f in submitted.findings]
    assert submitted.launcher == Launcher(kind="torchrun", num_processes=2, strategy="ddp")
    assert submitted.output_repo == "alice/tiny-sft"
    done = wait_until_terminal(lambda: remote.inspect(submitted.job_id), 240, "the remote job to end", interval=0.5)
    assert done.status == "succeeded", (done.termination_message, remote.logs(submitted.job_id, tail=40).lines)
    attempt = done.attempts[0]
    assert attempt.placement.remote_id and attempt.placement.url and attempt.placement.flavor == "cpu-basic"
    assert attempt.placement.image.startswith("ghcr.io/astral-sh/uv")
    assert done.progress.step == 6 and attempt.data_manifest["kind"] == "hub"
    assert attempt.environment["world_size"] == 2 and attempt.launcher == submitted.launcher
    # Billed per minute at the flavor's live price (cpu-basic: the emulator's hardware listing).
    assert attempt.cost_usd is not None and 0 < attempt.cost_usd < 0.01 and attempt.gpu_seconds == 0
    job = hub.jobs[attempt.placement.remote_id]
    assert job.spec["labels"]["jobtrail-run"] == submitted.job_id
    assert job.spec["labels"]["jobtrail-config-sha256"] == attempt.config_sha256
    calibrated = remote.estimate_cost(
        EstimateRequest(
            "alice/tiny",
            num_examples=12,
            avg_tokens=20,
            max_length=64,
            per_device_train_batch_size=2,
            flavor="cpu-basic",
        )
    )
    assert calibrated.calibrated, "a finished attempt's measurement should replace the model's guess"
    files = set(hub.repo_files("alice/tiny-sft"))
    assert "last-checkpoint/JOBTRAIL_COMMITTED" in files and "last-checkpoint/jobtrail_manifest.json" in files
    assert "adapter_model.safetensors" in files
    # Each checkpoint lands in one atomic commit: no revision of the repo holds a checkpoint without its marker.
    for revision in hub.repo_history("alice/tiny-sft"):
        if any(path.startswith("last-checkpoint/") for path in revision):
            assert "last-checkpoint/JOBTRAIL_COMMITTED" in revision, sorted(revision)
    logs = remote.logs(submitted.job_id, tail=500)
    assert logs.finished and any('"event":"step"' in line for line in logs.lines)
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_remote_preflight_refuses_local_paths_and_missing_token(remote, tiny_model, chat_dataset, monkeypatch):
    local = remote.submit(_spec(model=str(tiny_model), dataset=str(chat_dataset)), SubmitOptions(dry_run=True))
    codes = {f.code for f in local.findings if f.severity == "error"}
    assert {"remote.local_model", "remote.local_dataset"} <= codes
    fix = next(f.fix for f in local.findings if f.code == "remote.local_dataset")
    assert "hf upload" in fix and "--repo-type dataset" in fix
    monkeypatch.delenv("HF_TOKEN")
    anonymous = build_service(remote.home).submit(_spec(), SubmitOptions(dry_run=True))
    assert "auth.no_token" in {f.code for f in anonymous.findings}


def test_read_only_token_cannot_push_so_the_job_is_refused(remote, hub, monkeypatch):
    hub.add_token("hf_read_only_token", "bob", role="read")
    monkeypatch.setenv("HF_TOKEN", "hf_read_only_token")
    refused = build_service(remote.home).submit(_spec(output="bob/out"))
    assert refused.status == "rejected" and "auth.cannot_push" in {f.code for f in refused.findings}


def test_cancel_a_remote_job(remote):
    # 100,000 steps would outlast the timeout (preflight says so): forced, since it is cancelled anyway.
    job_id = remote.submit(
        _spec(hyperparameters={**HYPER, "max_steps": 100000, "save_steps": 100000}), SubmitOptions(force=True)
    ).job_id
    wait_for(lambda: remote.inspect(job_id).status == "running", 120, "the remote job to run", interval=0.5)
    result = remote.cancel(job_id)
    assert result.status == "cancelled" and result.termination_reason == "cancelled"


def test_remote_timeout_is_classified_timeout(remote):
    job_id = remote.submit(
        _spec(timeout_s=3, hyperparameters={**HYPER, "max_steps": 100000}), SubmitOptions(force=True)
    ).job_id
    done = wait_for(lambda: (r := remote.inspect(job_id)).status == "failed" and r, 120, "the timeout", interval=0.5)
    assert done.termination_reason == "timeout"


def test_jobs_403_ends_the_attempt_as_auth_error_with_the_fix(remote, hub):
    hub.inject.jobs_auth_error(403)
    job_id = remote.submit(_spec()).job_id
    done = remote.inspect(job_id)
    assert done.status == "failed" and done.termination_reason == "auth_error"
    assert "job.write" in done.termination_message and TOKEN not in done.termination_message
    answer = remote.retry(job_id)
    assert not answer.retried and "HF_TOKEN" in answer.fix


def test_a_retried_remote_job_resumes_on_a_fresh_machine_from_the_hubs_last_checkpoint(remote, hub):
    job_id = remote.submit(
        _spec(hyperparameters={**HYPER, "max_steps": 100000, "save_steps": 2}), SubmitOptions(force=True)
    ).job_id
    wait_for(
        lambda: "last-checkpoint/JOBTRAIL_COMMITTED" in set(hub.repo_files("alice/tiny-sft")),
        180,
        "a committed checkpoint on the Hub",
        interval=0.5,
    )
    assert remote.cancel(job_id).status == "cancelled"
    answer = remote.retry(job_id, {"max_steps": 8})
    assert answer.retried
    done = wait_for(
        lambda: (r := remote.inspect(job_id)).status in ("succeeded", "failed") and len(r.attempts) == 2 and r,
        240,
        "the resumed remote attempt",
        interval=0.5,
    )
    assert done.status == "succeeded", done.termination_message
    second = done.attempts[1]
    # The emulator runs each job in a fresh directory: the checkpoint can only have come from the Hub.
    assert second.resumed_from and "checkpoint-" in second.resumed_from
    assert done.progress.step == 8


def test_remote_preflight_estimates_memory_and_time_on_the_flavor(remote):
    short = remote.submit(
        _spec(timeout_s=60, hyperparameters={**HYPER, "max_steps": 5000}), SubmitOptions(dry_run=True)
    )
    [finding] = [f for f in short.findings if f.code == "timeout.short"]
    assert finding.severity == "error" and finding.fix.startswith('timeout="')
    unset = remote.submit(_spec(timeout_s=None), SubmitOptions(dry_run=True))
    assert "timeout.default" in {f.code for f in unset.findings}
    no_flavor = remote.submit(_spec(flavor=None), SubmitOptions(dry_run=True))
    assert "flavor.missing" in {f.code for f in no_flavor.findings if f.severity == "error"}
    submitted = remote.submit(_spec(timeout_s=None))
    run = remote.inspect(submitted.job_id)
    assert remote.ledger.get_attempt(f"{submitted.job_id}/1").timeout_s >= 3600  # never below 1 hour
    remote.cancel(run.job_id)
