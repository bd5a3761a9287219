"""Preflight of a remote job's trackio Space through the real huggingface_hub client and the Hub emulator:
the token's rights to make the Space (whoami's role and fine-grained scopes), a Space that trackio did not
make, a public one; the Space is never created by jobtrail, and report_to="none" leaves trackio out."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.requests import SubmitOptions
from support.remote import publish, remote_spec

WRITE = "hf_alice_write_secret_token_42"
SPACE = "alice/jobtrail-trackio"


@pytest.fixture
def alice(hub, tiny_model, chat_dataset, monkeypatch):
    publish(hub, WRITE, tiny_model, chat_dataset, monkeypatch)
    return hub


def _dry_run(tmp_path, monkeypatch, token: str = WRITE, **spec):
    monkeypatch.setenv("HF_TOKEN", token)
    result = build_service(tmp_path / "home").submit(remote_spec(timeout_s=1800, **spec), SubmitOptions(dry_run=True))
    return {f.code: f for f in result.findings if f.code.startswith("trackio.")}, result


def test_a_write_token_and_no_space_yet_is_fine_and_the_space_is_left_for_trackio(alice, tmp_path, monkeypatch):
    found, result = _dry_run(tmp_path, monkeypatch)
    assert list(found) == ["trackio.space"] and found["trackio.space"].severity == "info"
    assert (
        f"https://huggingface.co/spaces/{SPACE}; trackio creates it, private, in the job"
        in found["trackio.space"].message
    )
    assert ("space", SPACE) not in alice.repos  # never pre-created: a hand-made Space has no trackio app
    assert result.status == "dry_run" and not [f for f in result.findings if f.severity == "error"]


@pytest.mark.parametrize(
    ("role", "permissions", "warned"),
    [
        ("read", None, True),
        ("fineGrained", ["repo.content.read", "job.write"], True),  # can run jobs, not make Spaces
        ("fineGrained", ["repo.content.read", "repo.write", "job.write"], False),
    ],
)
def test_a_token_that_cannot_make_the_space_is_warned(alice, tmp_path, monkeypatch, role, permissions, warned):
    token = f"hf_alice_{role}_{len(permissions or [])}_token"
    alice.add_token(token, "alice", role, permissions=permissions)
    found, _ = _dry_run(tmp_path, monkeypatch, token=token)
    assert ("trackio.space_rights" in found) is warned, found
    if warned:
        finding = found["trackio.space_rights"]
        assert finding.severity == "warning" and SPACE in finding.message
        assert "repo.write on alice" in finding.fix and "'report_to': 'none'" in finding.fix


def test_a_space_trackio_did_not_make_is_warned_and_a_public_one_too(alice, tmp_path, monkeypatch):
    alice.add_repo(SPACE, repo_type="space", files={"app.py": "print('hello')"}, private=True)
    found, _ = _dry_run(tmp_path, monkeypatch)
    assert list(found) == ["trackio.space_not_trackio"]
    assert "'trackio_space_id': 'alice/<a new name>'" in found["trackio.space_not_trackio"].fix

    alice.add_repo("alice/dash", repo_type="space", files={"app.py": ""}, info={"tags": ["trackio"]})
    found, result = _dry_run(tmp_path, monkeypatch, hyperparameters={"trackio_space_id": "alice/dash"})
    assert list(found) == ["trackio.space_public"] and "anyone can see" in found["trackio.space_public"].message
    assert result.script_path and '"trackio_space_id":"alice/dash"' in Path(result.script_path).read_text()


def test_a_private_trackio_space_of_the_users_is_used_as_it_is(alice, tmp_path, monkeypatch):
    alice.add_repo(SPACE, repo_type="space", files={"app.py": ""}, private=True, info={"tags": ["trackio"]})
    found, _ = _dry_run(tmp_path, monkeypatch)
    assert list(found) == ["trackio.space"] and "creates" not in found["trackio.space"].message


def test_report_to_none_leaves_trackio_out(alice, tmp_path, monkeypatch):
    token = "hf_alice_read_only_token"
    alice.add_token(token, "alice", "read")
    found, _ = _dry_run(tmp_path, monkeypatch, token=token, hyperparameters={"report_to": "none"})
    assert found == {}
