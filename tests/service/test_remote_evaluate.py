"""evaluate() of a remote (hf-jobs) job: the evaluation runs on HF Jobs (the emulator runs it for real) and reads
what the job pushed to its Hub repo, at the commit that pushed it; where nothing was pushed, a structured refusal
that names the fix."""

from __future__ import annotations

import hashlib
import json

import pytest

from jobtrail.app import build_service
from jobtrail.demo.tinymodel import write_chat_dataset
from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.requests import EvaluateRequest, SubmitOptions
from support.remote import SHORT_TRAINING, publish, remote_spec
from support.waiting import wait_for, wait_until_terminal

TOKEN = "hf_alice_write_secret_token_42"
REPO = "alice/tiny-sft"
HYPER = SHORT_TRAINING
LONG = {**HYPER, "max_steps": 100000, "save_steps": 100000}  # cancelled long before it saves anything


@pytest.fixture
def remote(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    heldout = write_chat_dataset(tmp_path / "heldout.jsonl", rows=12, seed=7)
    hub.add_repo("alice/heldout", repo_type="dataset", files={"test.jsonl": heldout})
    return build_service(tmp_path / "home")


def _ended(service, job_id: str, what: str, timeout: float = 240):
    return wait_until_terminal(lambda: service.inspect(job_id), timeout, what, interval=0.5)


def test_a_remote_job_is_evaluated_on_hf_jobs_from_the_model_and_checkpoint_it_pushed(remote, hub):
    trained = remote.submit(remote_spec(timeout_s=1800, hyperparameters=HYPER))
    assert trained.job_id, [f.model_dump() for f in trained.findings]
    # Queued before the job ends: it evaluates the final model once the job has pushed it.
    final = remote.evaluate(EvaluateRequest("alice/heldout", job_id=trained.job_id, after=trained.job_id))
    assert final.status == "queued" and final.job_id and final.backend == "hf-jobs", final
    assert final.waiting_for and final.waiting_for.startswith(trained.job_id)
    done = _ended(remote, trained.job_id, "the remote training")
    assert done.status == "succeeded", (done.termination_message, remote.logs(trained.job_id, tail=40).lines)
    # checkpoint-3 was replaced on the Hub by checkpoint-6: it is read at the commit that pushed it.
    middle = remote.evaluate(EvaluateRequest("alice/heldout", job_id=trained.job_id, checkpoint="checkpoint-3"))
    assert middle.job_id and middle.backend == "hf-jobs", [f.model_dump() for f in middle.findings]
    for evaluation in (final, middle):
        ended = _ended(remote, evaluation.job_id, "a remote evaluation")
        assert ended.status == "succeeded", (ended.termination_message, remote.logs(evaluation.job_id, tail=40).lines)
        assert ended.attempts[0].placement.remote_id in hub.jobs  # it ran on HF Jobs

    records = {e["checkpoint"]: e for e in remote.inspect(trained.job_id).evaluations}
    assert set(records) == {"final", "checkpoint-3"} and all(e["state"] == "finished" for e in records.values())
    head = hub.repo_files(REPO)
    assert json.loads(head["last-checkpoint/JOBTRAIL_COMMITTED"])["step"] == 6

    read = records["final"]["record"]["checkpoint"]
    assert (read["adapter"], read["subfolder"], read["step"]) == (REPO, None, 6)
    at = hub.repo_files(REPO, revision=read["revision"])  # the commit it read holds the final model
    assert "adapter_model.safetensors" in at
    assert read["manifest_sha256"] == hashlib.sha256(at["jobtrail_manifest.json"]).hexdigest()

    read = records["checkpoint-3"]["record"]["checkpoint"]
    assert (read["adapter"], read["subfolder"], read["step"]) == (REPO, "last-checkpoint", 3)
    marker = json.loads(hub.repo_files(REPO, revision=read["revision"])["last-checkpoint/JOBTRAIL_COMMITTED"])
    assert marker["step"] == 3 and read["manifest_sha256"] == marker["manifest_sha256"]

    for label, evaluation in (("final", final), ("checkpoint-3", middle)):
        record = records[label]["record"]
        assert len(record["evaluator"]["sha256"]) == 64 and record["evaluator"]["packages"]["torch"]
        assert record["task_set"]["dataset"] == "alice/heldout" and record["task_set"]["rows"] == 12
        assert records[label]["metrics"]["loss"] > 0
        # Its machine is gone: the raw outputs were uploaded to the evaluated job's repo.
        kept = f"jobtrail-evals/{evaluation.job_id}/raw_outputs.jsonl"
        assert record["raw_outputs"].endswith(kept)
        assert hashlib.sha256(hub.repo_files(REPO)[kept]).hexdigest() == record["raw_outputs_sha256"]
        shown = remote.inspect(evaluation.job_id).evaluation
        assert shown and shown["evaluates"] == trained.job_id and shown["checkpoint"] == label
    assert records["final"]["evaluator_sha256"] == records["checkpoint-3"]["evaluator_sha256"]


def test_a_remote_job_that_pushed_nothing_is_refused_with_the_fix(remote, hub):
    job_id = remote.submit(remote_spec(timeout_s=1800, hyperparameters=LONG), SubmitOptions(force=True)).job_id
    assert remote.cancel(job_id).status == "cancelled"
    refused = remote.evaluate(EvaluateRequest("alice/heldout", job_id=job_id))
    assert refused.status == "rejected" and refused.job_id is None
    [finding] = [f for f in refused.findings if f.severity == "error"]
    assert finding.code == "adapter.not_pushed" and REPO in finding.message
    assert f'retry(job_id="{job_id}")' in finding.fix and f'after="{job_id}"' in finding.fix
    with pytest.raises(NotFoundError, match="pushed no checkpoint") as caught:
        remote.evaluate(EvaluateRequest("alice/heldout", job_id=job_id, checkpoint="checkpoint-3"))
    assert "after=" in caught.value.fix


def test_a_remote_job_without_a_hub_repo_is_refused_now_with_or_without_after(remote, hub, monkeypatch):
    # A job the server holds no token for (forced past preflight) has no repo to push to.
    parent = remote.submit(remote_spec(timeout_s=1800, hyperparameters=LONG), SubmitOptions(force=True)).job_id
    monkeypatch.delenv("HF_TOKEN")
    tokenless = build_service(remote.home)
    lost = tokenless.submit(remote_spec(timeout_s=1800, output=None, after=parent), SubmitOptions(force=True))
    assert lost.job_id and lost.output_repo is None and lost.status == "queued"
    for after in (lost.job_id, None):  # queued after it, or once it has ended: refused at once either way
        if after is None:
            assert remote.cancel(parent).status == "cancelled"
            wait_for(lambda: remote.inspect(lost.job_id).status == "cancelled", 30, "the follower to end")
        with pytest.raises(InvalidRequestError) as caught:
            remote.evaluate(EvaluateRequest("alice/heldout", job_id=lost.job_id, after=after))
        assert "without a Hub repo" in caught.value.message and 'output="' in caught.value.fix
    assert not [job for job in hub.jobs.values() if job.spec["labels"].get("jobtrail-run") != parent]


def test_submit_with_eval_dataset_on_hf_jobs_measures_the_base_then_the_pushed_final_model(remote, hub):
    job = remote.submit(remote_spec(timeout_s=1800, hyperparameters=HYPER, eval_dataset="alice/heldout"))
    assert job.job_id, [f.model_dump() for f in job.findings]
    done = wait_for(
        lambda: (r := remote.inspect(job.job_id)).eval_delta is not None and r, 300, "both evaluations", interval=0.5
    )
    assert [e["checkpoint"] for e in done.evaluations] == ["base", "final"] and "loss" in done.eval_delta
    base, final = (e["record"] for e in done.evaluations)
    assert base["checkpoint"]["adapter"] is None and base["checkpoint"]["model"] == "alice/tiny"
    assert (final["checkpoint"]["adapter"], final["checkpoint"]["step"]) == (REPO, 6)
    assert base["evaluator"]["sha256"] == final["evaluator"]["sha256"]
    for record in (base, final):  # both kept their rows in the job's repo
        assert "/jobtrail-evals/" in record["raw_outputs"] and record["raw_outputs"].startswith(hub.url)
