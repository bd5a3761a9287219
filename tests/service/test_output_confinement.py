"""A local job writes only where it may: dry runs report a forbidden or foreign `output`, force does not
send a job into someone's files, a run's later attempts write into its own directory, and two runs that
passed preflight into the same new directory cannot both start there."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.preflight.outputs import read_owner
from jobtrail.requests import ConvertRequest, SubmitOptions
from support.jobs import TINY_SFT
from support.waiting import wait_for

ENDLESS = {"max_steps": 100000, "save_steps": 2}


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_service()


def _spec(model, data, output: str | None = None, **hyper) -> JobSpec:
    hyperparameters = {**TINY_SFT, **hyper}
    return JobSpec(method="sft", model=str(model), dataset=str(data), output=output, hyperparameters=hyperparameters)


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def test_dry_run_reports_home_hidden_and_system_outputs(service, tiny_model, chat_dataset, monkeypatch):
    monkeypatch.chdir("/usr/lib")
    for output in ("~", "~/.ssh", "../../etc"):
        result = service.submit(_spec(tiny_model, chat_dataset, output), SubmitOptions(dry_run=True))
        found = {f.code: f for f in result.findings}
        assert result.status == "dry_run" and "output.forbidden" in found, (output, result.findings)
        assert found["output.forbidden"].severity == "error" and "output=" in (found["output.forbidden"].fix or "")
        assert result.script_path is None  # nothing is rendered for a place no job may write


def test_a_foreign_directory_is_refused_even_forced_and_left_untouched(service, tiny_model, chat_dataset, tmp_path):
    user = tmp_path / "user-dir"
    (user / "checkpoint-1").mkdir(parents=True)
    (user / "checkpoint-1" / "weights.bin").write_bytes(b"\x01" * 64)
    (user / "README.md").write_text("my notes\n")
    (user / "final").mkdir()
    before = _tree(user)
    for force in (False, True):
        result = service.submit(_spec(tiny_model, chat_dataset, str(user)), SubmitOptions(force=force))
        assert result.status == "rejected" and result.job_id is None, result
        assert [f.code for f in result.findings if f.severity == "error"] == ["output.not_empty"]
    assert service.convert_gguf(ConvertRequest(str(tiny_model), output=str(user))).status == "rejected"
    assert _tree(user) == before and service.ps().jobs == []


def test_a_run_keeps_its_directory_and_a_second_run_cannot_start_there(service, tiny_model, chat_dataset, tmp_path):
    shared = tmp_path / "shared-out"
    blocker = service.submit(_spec(tiny_model, chat_dataset, **ENDLESS)).job_id  # holds the only slot
    first = service.submit(_spec(tiny_model, chat_dataset, str(shared), **ENDLESS))
    second = service.submit(_spec(tiny_model, chat_dataset, str(shared)))
    assert first.status == second.status == "queued"  # both passed preflight: the directory did not exist
    assert not shared.exists()
    try:
        service.cancel(blocker)
        service.refresh()
        wait_for(lambda: (shared / "checkpoint-2" / "JOBTRAIL_COMMITTED").is_file(), 180, "the first checkpoint")
        assert read_owner(shared) == first.job_id
        assert service.inspect(second.job_id).status == "queued"

        service.cancel(first.job_id)
        service.refresh()  # the slot is free: the second run is launched, and refused its directory
        refused = wait_for(lambda: _ended(service, second.job_id), 60, "the second run's launch")
        assert refused.termination_reason == "config_error"
        assert f"claimed by job {first.job_id} first" in (refused.termination_message or "")

        # The first run's next attempt writes on into its own directory, through preflight (changes).
        retried = service.retry(first.job_id, {"learning_rate": 5e-4})
        assert retried.retried, retried
        wait_for(lambda: service.inspect(first.job_id).status == "running", 120, "the retry to run")

        third = service.submit(_spec(tiny_model, chat_dataset, str(shared)))
        [finding] = [f for f in third.findings if f.severity == "error"]
        assert third.status == "rejected" and finding.code == "output.not_empty"
        assert f"job {first.job_id}'s output" in finding.message
    finally:
        for job in (blocker, first.job_id, second.job_id):
            service.cancel(job)


def _ended(service, job_id: str):
    attempt = service.inspect(job_id).attempts[-1]
    return attempt if attempt.status in ("failed", "succeeded", "cancelled") else None
