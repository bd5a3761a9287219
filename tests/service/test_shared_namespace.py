"""Servers of two HF accounts sharing one ledger (issue 17): a remote (hf-jobs) attempt belongs to the HF namespace
its job was submitted for, the one the submitting server's backend launches in. Only a server launching HF Jobs in
that namespace starts, follows, stops and retries it there (another would run it, and bill it, under its own
account); any other shows it with its namespace (`host`, `followed_here: false`) and answers a cancel `pending`,
saying who carries it out. Retries, evaluations of the job and idempotent replays keep the namespace; an attempt
recorded before namespaces were stays any server's, and becomes its claimant's.

Server A (alice's token) is a service in this process, so that its one HF Jobs slot can hold a job queued; server B
(bob's token) is a `jobtrail serve --http` process with its poller, called by a real MCP client."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.backends.hf_jobs import HfJobsBackend
from jobtrail.backends.local import LocalBackend
from jobtrail.errors import BackendError
from jobtrail.ledger.connection import LEDGER_URL_ENV
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobStatus
from jobtrail.requests import SubmitOptions
from jobtrail.service.facade import JobService
from support.records import add_queued_run
from support.remote import publish, remote_spec
from support.servers import serving
from support.waiting import wait_for, wait_until_terminal

ALICE_TOKEN = "hf_alice_write_secret_token_42"
BOB_TOKEN = "hf_bob_write_secret_token_4242"
ENDLESS = {"max_steps": 100000, "save_steps": 100000, "per_device_train_batch_size": 2, "max_length": 64}


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_env(request, tmp_path, monkeypatch) -> dict[str, str]:
    """Where both servers' ledger is: one SQLite home they share, or one PostgreSQL database (each its own home)."""
    if request.param == "sqlite":
        return {"JOBTRAIL_HOME": str(tmp_path / "home")}
    url = request.getfixturevalue("postgres_url")
    monkeypatch.setenv(LEDGER_URL_ENV, url)  # server A, in this process
    return {"JOBTRAIL_HOME": str(tmp_path / "home-b"), LEDGER_URL_ENV: url}


def _jobs_in(hub, namespace: str) -> set[str]:
    return {job_id for job_id, job in hub.jobs.items() if job.namespace == namespace}


def test_a_remote_job_is_started_followed_stopped_and_retried_only_in_the_namespace_it_was_submitted_for(
    hub, tiny_model, chat_dataset, tmp_path, monkeypatch, ledger_env
):
    publish(hub, ALICE_TOKEN, tiny_model, chat_dataset, monkeypatch)  # alice's token in HF_TOKEN: server A's
    hub.add_token(BOB_TOKEN, "bob", orgs=["team"])  # B may create the team's repos, never run jobs as alice
    a = build_service(tmp_path / "home")
    a.context.backends["hf-jobs"].max_concurrent = 1  # A's one HF Jobs slot; B's backend has no limit
    spec = remote_spec(timeout_s=1800, hyperparameters=ENDLESS)
    first = a.submit(spec, SubmitOptions(force=True, idempotency_key="team-sft"))
    second = a.submit(
        remote_spec(timeout_s=1800, hyperparameters=ENDLESS, output="alice/tiny-sft-2"), SubmitOptions(force=True)
    )
    assert (first.status, second.status) == ("starting", "queued"), (first, second)
    assert _jobs_in(hub, "alice") and not _jobs_in(hub, "bob")

    b_env = {**os.environ, **ledger_env, "HF_TOKEN": BOB_TOKEN}
    with serving([("host-b", b_env)], logs=tmp_path) as (b,):
        # B refreshes at every call and each second, with free HF Jobs slots: it never starts alice's queued job.
        rows = {row["job_id"]: row for row in b.call("ps")["jobs"]}
        assert rows[first.job_id]["host"] == "alice" and rows[second.job_id]["host"] == "alice"
        assert rows[second.job_id]["status"] == "queued"
        queued = b.call("inspect", job_id=second.job_id)
        assert queued["host"] == "alice" and not queued["followed_here"] and "HF namespace alice" in queued["summary"]
        assert (
            "namespace alice" in queued["waiting_for"] and "this server, namespace bob, cannot" in queued["waiting_for"]
        )
        running = b.call("inspect", job_id=first.job_id)
        assert running["host"] == "alice" and not running["followed_here"]
        assert running["attempts"][0]["placement"]["namespace"] == "alice"

        # Through B: a replay of A's keyed submit is A's job, still alice's.
        # submit's arguments as an agent passes them for A's jobs: remote_spec's, with ENDLESS
        remote = {"method": "sft", "dataset": "alice/data", "backend": "hf-jobs", "flavor": "cpu-basic"}
        remote |= {"timeout": "30m", "hyperparameters": ENDLESS, "force": True}
        replay = b.call("submit", model="alice/tiny", output="alice/tiny-sft", idempotency_key="team-sft", **remote)
        assert replay["already_submitted"] and replay["job_id"] == first.job_id, replay
        # A job that waits for alice's and trains on from its model is alice's too, though submitted through B.
        follower = b.call("submit", model=first.job_id, output="team/tiny-sft-more", **remote)
        assert follower["job_id"] and follower["status"] == "queued", follower["summary"]
        assert b.call("inspect", job_id=follower["job_id"])["host"] == "alice"

        # B's cancel of alice's running job is recorded; A carries it out, and A's slot goes to its queued job.
        asked = b.call("cancel", job_id=first.job_id)
        assert asked["pending"] and asked["host"] == "alice" and asked["status"] in ("starting", "running"), asked
        assert "namespace alice" in asked["message"] and "this server (namespace bob)" in asked["message"]
        assert f'wait(job_id="{first.job_id}")' in asked["summary"]
        done = wait_until_terminal(lambda: a.inspect(first.job_id), 120, "A to stop its job", interval=0.5)
        assert (done.status, done.termination_reason) == ("cancelled", "cancelled"), done.summary
        assert done.attempts[0].cancel_sent_at >= done.attempts[0].cancel_requested_at
        started = wait_for(
            lambda: (r := a.inspect(second.job_id)).attempts[0].placement and r, 60, "A to start its queued job"
        )
        assert started.attempts[0].placement.namespace == "alice" and started.host == "alice"

        # Retried through B: the new attempt is alice's, queued until A has a slot; B never starts it.
        retried = b.call("retry", job_id=first.job_id)
        assert retried["retried"] and retried["status"] == "queued", retried
        again = b.call("inspect", job_id=first.job_id)
        assert again["status"] == "queued" and again["host"] == "alice" and again["attempts"][1]["host"] == "alice"
        assert "this server, namespace bob, cannot" in again["waiting_for"]
        assert b.call("inspect", job_id=first.job_id)["attempts"][1]["placement"] is None
    assert not _jobs_in(hub, "bob")
    assert a.cancel(second.job_id).status == "cancelled"
    a.refresh()  # A's slot is free: the retry starts, in alice's namespace
    resumed = a.ledger.get_attempt(f"{first.job_id}/2")
    assert resumed.placement is not None and resumed.placement.namespace == "alice" and resumed.host == "alice"
    assert resumed.placement.remote_id in _jobs_in(hub, "alice")
    assert a.cancel(first.job_id).status == "cancelled"


def _server(ledger: Ledger, home: Path, namespace: str | None, token: str | None = None) -> JobService:
    """A server with a local backend and HF Jobs launching in `namespace` (None: the token's user, by whoami)."""
    backends = {
        "local": LocalBackend(python=sys.executable, host=f"host-{namespace}"),
        "hf-jobs": HfJobsBackend(token, namespace),
    }
    return JobService(ledger=ledger, backends=backends, home=home, job_python=sys.executable)


def test_a_remote_attempt_of_no_namespace_is_any_servers_until_one_claims_it(ledger_location, tmp_path):
    ledger = Ledger(ledger_location)
    alice, bob = _server(ledger, tmp_path, "alice"), _server(ledger, tmp_path, "bob")
    add_queued_run(ledger, "jt-before00", backend="hf-jobs", host=None)  # recorded before namespaces were
    add_queued_run(ledger, "jt-alices00", backend="hf-jobs", host="alice")
    legacy, hers = ledger.get_attempt("jt-before00/1"), ledger.get_attempt("jt-alices00/1")
    assert alice.context.reaches(legacy) and bob.context.reaches(legacy)
    assert alice.context.reaches(hers) and not bob.context.reaches(hers)
    # The server that claims it launches it in its namespace: from then on it is that namespace's.
    assert ledger.claim_slot(legacy.attempt_id, "hf-jobs", None, bob.context.backend_host("hf-jobs")) == "claimed"
    claimed = ledger.get_attempt(legacy.attempt_id)
    assert claimed.host == "bob" and bob.context.reaches(claimed) and not alice.context.reaches(claimed)


def test_a_job_reading_a_remote_jobs_model_belongs_to_that_jobs_namespace(ledger_location, tmp_path):
    ledger = Ledger(ledger_location)
    bob = _server(ledger, tmp_path, "bob")
    add_queued_run(ledger, "jt-alices00", backend="hf-jobs", host="alice")
    add_queued_run(ledger, "jt-before00", backend="hf-jobs", host=None)
    add_queued_run(ledger, "jt-localjob", backend="local", host="host-alice")
    # An evaluation, conversion or follower of alice's remote job runs where her model is, submitted through B.
    assert bob.context.host_for("hf-jobs", reads="jt-alices00") == "alice"
    # Otherwise a new remote job is B's namespace's, and a local one B's host's.
    assert bob.context.host_for("hf-jobs") == bob.context.host_for("hf-jobs", reads="jt-before00") == "bob"
    assert bob.context.host_for("hf-jobs", reads="jt-localjob") == "bob"
    assert bob.context.host_for("local", reads="jt-alices00") == "host-bob"
    assert bob.context.host_for("local", reads="jt-localjob") == "host-alice"


def test_a_server_that_cannot_learn_its_namespace_reaches_only_attempts_of_none_and_submits_no_remote_job(
    hub, ledger_location, tmp_path, monkeypatch, tiny_model, chat_dataset
):
    publish(hub, ALICE_TOKEN, tiny_model, chat_dataset, monkeypatch)
    ledger = Ledger(ledger_location)
    add_queued_run(ledger, "jt-alices00", backend="hf-jobs", host="alice", status=JobStatus.RUNNING)
    add_queued_run(ledger, "jt-before00", backend="hf-jobs", host=None)
    lost = _server(ledger, tmp_path, None, token="hf_revoked_token_0123456789")  # whoami answers 401
    assert not lost.context.reaches(ledger.get_attempt("jt-alices00/1"))
    assert lost.context.reaches(ledger.get_attempt("jt-before00/1"))
    seen = lost.inspect("jt-alices00")  # no traceback: it shows what the ledger knows
    assert seen.host == "alice" and not seen.followed_here
    with pytest.raises(BackendError) as refused:
        lost.context.host_for("hf-jobs")
    assert refused.value.reason == "auth_error" and "HF_TOKEN" in (refused.value.fix or "")
    asked = lost.cancel("jt-alices00")
    assert asked.pending and "whose hf-jobs namespace is unknown now" in asked.message, asked.message
    assert ledger.get_attempt("jt-alices00/1").status is JobStatus.RUNNING
