"""Preflight of an evaluation of a remote job: what the job pushed to its Hub repo (the emulator's), pinned to the
commit looked at, or refused with the call that fixes it."""

from __future__ import annotations

import json
import sys

import pytest
from huggingface_hub import HfApi

from jobtrail.models import JobSpec
from jobtrail.outcomes.evals import Evaluation, HubWeights
from jobtrail.preflight.facts import PlanEnv
from jobtrail.preflight.plan import plan
from support.remote import publish

TOKEN = "hf_alice_write_secret_token_42"
REPO = "alice/tiny-sft"
FINAL = {"adapter_config.json": "{}", "adapter_model.safetensors": b"weights", "jobtrail_manifest.json": "{}"}
CHECKPOINT_6 = {"last-checkpoint/JOBTRAIL_COMMITTED": json.dumps({"step": 6}), "last-checkpoint/README.md": ""}
SPEC = JobSpec(method="evaluate", model="alice/tiny", dataset="alice/data", backend="hf-jobs", flavor="cpu-basic")


@pytest.fixture
def alice(hub, tiny_model, chat_dataset, monkeypatch):
    """alice's base model alice/tiny and data alice/data on the emulator; her job's repo is each test's."""
    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    return hub


def _plan(tmp_path, label: str, hub: HubWeights, repo: str = REPO):
    env = PlanEnv(job_python=sys.executable, llama_cpp_cache=tmp_path / "cache", hub_token=TOKEN)
    return plan(SPEC, env, Evaluation(label, repo, split="train", hub=hub))


def test_the_final_model_is_read_at_the_commit_preflight_looked_at(alice, tmp_path):
    head = alice.add_repo(REPO, files={**FINAL, **CHECKPOINT_6})
    planned = _plan(tmp_path, "final", HubWeights("jt-a"))
    assert not planned.blocked, [f.model_dump() for f in planned.findings]
    config = planned.config
    assert config["adapter"] == REPO
    assert config["adapter_hub"] == {"job_id": "jt-a", "revision": head, "subfolder": None}
    assert config["output_dir"] == "jobtrail-output"  # the remote job's own working directory
    assert '# [tool.hf-jobs]\n# flavor = "cpu-basic"' in planned.script


def test_a_checkpoint_the_hub_no_longer_holds_is_refused_naming_the_one_it_holds(alice, tmp_path):
    alice.add_repo(REPO, files={**FINAL, **CHECKPOINT_6})
    # No commit recorded for checkpoint-3 (a job from before jobs reported it): the head holds checkpoint-6.
    refused = _plan(tmp_path, "checkpoint-3", HubWeights("jt-a", None, "last-checkpoint"))
    [finding] = [f for f in refused.findings if f.severity == "error"]
    assert finding.code == "adapter.not_pushed" and "holds checkpoint-6, not checkpoint-3" in finding.message
    assert 'checkpoint="checkpoint-6"' in finding.fix and refused.config is None
    assert not _plan(tmp_path, "checkpoint-6", HubWeights("jt-a", None, "last-checkpoint")).blocked


def test_a_job_that_pushed_a_checkpoint_but_no_final_model_is_pointed_at_the_checkpoint(alice, tmp_path):
    alice.add_repo(REPO, files=CHECKPOINT_6)
    [finding] = [f for f in _plan(tmp_path, "final", HubWeights("jt-a")).findings if f.severity == "error"]
    assert finding.code == "adapter.not_pushed" and "holds no final model" in finding.message
    assert 'evaluate(job_id="jt-a", checkpoint="checkpoint-6"' in finding.fix and 'retry(job_id="jt-a")' in finding.fix


def test_a_repo_this_token_cannot_read_is_refused_and_an_unreachable_one_is_left_to_the_job(alice, tmp_path):
    alice.add_repo("bob/tiny-sft", files=FINAL, private=True)
    planned = _plan(tmp_path, "final", HubWeights("jt-b"), repo="bob/tiny-sft")
    [finding] = [f for f in planned.findings if f.severity == "error"]
    assert finding.code == "adapter.not_pushed" and "cannot be read" in finding.message and "HF_TOKEN" in finding.fix
    alice.add_repo(REPO, files=FINAL)
    alice.inject.fail(rf"/api/models/{REPO}", status=503, times=None)
    unverified = _plan(tmp_path, "final", HubWeights("jt-a"))
    assert "adapter.unverified" in {f.code for f in unverified.findings if f.severity == "warning"}
    assert not unverified.blocked and unverified.config["adapter_hub"]["revision"] is None  # the job pins the head
    assert HfApi().model_info("alice/tiny").sha  # the rest of the Hub still answers
