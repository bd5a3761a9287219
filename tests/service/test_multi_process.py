"""Jobs of many processes, for real on this CPU: the rendered script starts two gloo workers under
torch's elastic launcher; what their receipt says, their checkpoints, and how they end (a cancel, a
worker SIGKILLed) with nothing left running. The 4-GPU dry run is the HF Jobs emulator's."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec, Launcher
from jobtrail.requests import EstimateRequest, SubmitOptions
from support.jobs import TINY_SFT
from support.processes import command_line, live_children, live_group_members
from support.remote import publish, remote_spec
from support.waiting import wait_for, wait_until_terminal

DDP_2 = Launcher(kind="torchrun", num_processes=2, strategy="ddp")
TOKEN = "hf_alice_write_secret_token_15"


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine's CPU, even where GPUs are
    return build_service(tmp_path / "home")


def _spec(model: Path, dataset: Path, **hyper) -> JobSpec:
    hyperparameters = {**TINY_SFT, "num_processes": 2, "report_to": "none", **hyper}
    return JobSpec(method="sft", model=str(model), dataset=str(dataset), hyperparameters=hyperparameters)


def _training(service, job_id: str) -> tuple[int, list[int]]:
    """Once the job trains: (its process group, the launcher's worker processes)."""
    wait_for(lambda: (service.inspect(job_id).progress.step or 0) >= 2, 240, "the workers to train")
    pgid = service.inspect(job_id).attempts[0].placement.pgid
    workers = [pid for pid in live_children(pgid) if "multiprocessing.spawn" in command_line(pid)]
    assert len(workers) == 2, [command_line(pid) for pid in live_group_members(pgid)]
    return pgid, workers


def test_a_two_worker_job_trains_and_its_receipt_says_so(service, tiny_model, chat_dataset):
    spec = _spec(tiny_model, chat_dataset)
    dry = service.submit(spec, SubmitOptions(dry_run=True))
    assert dry.launcher == DDP_2 and "launcher" in {f.code for f in dry.findings}
    job_id = service.submit(spec).job_id
    done = wait_until_terminal(lambda: service.inspect(job_id), 300, "the two-worker job to end")
    attempt = done.attempts[0]
    assert done.status == "succeeded", (done.termination_message, service.logs(job_id, tail=60).lines)
    assert attempt.launcher == DDP_2 and attempt.environment["world_size"] == 2
    assert "device cpu, 2 workers (ddp)" in done.to_markdown()
    # One account of the training, rank 0's: every event once.
    events = service.ledger.events(attempt.attempt_id)
    assert [e["step"] for e in events if e["event"] == "step"] == list(range(1, TINY_SFT["max_steps"] + 1))
    assert [e["event"] for e in events].count("start") == 1
    assert [e["reason"] for e in events if e["event"] == "termination"] == ["succeeded"]
    # A checkpoint is committed only once every worker wrote its part (each its own RNG state).
    newest = [c for c in done.checkpoints if c.state == "committed" and Path(c.path).name.startswith("checkpoint-")]
    manifest = json.loads((Path(newest[-1].path) / "jobtrail_manifest.json").read_text())
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {f["path"] for f in manifest["files"]}


def test_cancelling_a_two_worker_job_stops_every_worker(service, tiny_model, chat_dataset):
    job_id = service.submit(_spec(tiny_model, chat_dataset, max_steps=400)).job_id
    pgid, _ = _training(service, job_id)
    result = service.cancel(job_id)
    assert (result.status, result.termination_reason) == ("cancelled", "cancelled")
    wait_until_terminal(lambda: service.inspect(job_id), 60, "the cancel to end the attempt")
    assert live_group_members(pgid) == [], "every worker of a cancelled attempt is gone"


def test_a_worker_killed_by_sigkill_ends_the_attempt_preempted_with_nothing_left(service, tiny_model, chat_dataset):
    job_id = service.submit(_spec(tiny_model, chat_dataset, max_steps=400)).job_id
    pgid, workers = _training(service, job_id)
    os.kill(workers[-1], signal.SIGKILL)  # one worker only: torch's launcher stops the other
    done = wait_until_terminal(lambda: service.inspect(job_id), 120, "the attempt to end")
    assert done.termination_reason == "preempted", (done.termination_message, service.logs(job_id, tail=40).lines)
    assert f"(pid {workers[-1]}) was stopped by SIGKILL" in done.termination_message
    assert live_group_members(pgid) == []


def test_a_dry_run_on_a_4_gpu_flavor_runs_one_worker_per_gpu(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    remote = build_service(tmp_path / "home")
    dry = remote.submit(remote_spec(flavor="l4x4", timeout_s=3600), SubmitOptions(dry_run=True))
    assert dry.launcher == Launcher(kind="torchrun", num_processes=4, strategy="ddp"), dry.findings
    [said] = [f for f in dry.findings if f.code == "launcher"]
    assert "one per GPU of l4x4" in said.message
    too_many = remote.submit(
        remote_spec(flavor="l4x4", timeout_s=3600, hyperparameters={"num_processes": 8}), SubmitOptions(dry_run=True)
    )
    assert "launcher.too_many_processes" in {f.code for f in too_many.findings if f.severity == "error"}
    estimate = remote.estimate_cost(EstimateRequest("alice/tiny", flavor="l4x4", max_steps=10))
    assert estimate.launcher == dry.launcher  # estimate_cost shows the same choice
