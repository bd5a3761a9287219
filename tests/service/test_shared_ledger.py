"""Servers on several machines share one ledger (issue 17), each a server process with its own JOBTRAIL_HOST_ID and
its poller, each called by a real MCP client. On SQLite two hosts share one JOBTRAIL_HOME (several machines in
effect); on PostgreSQL (JOBTRAIL_LEDGER_URL) each host has its own home, as on its own machine. A server follows,
starts and stops only its own host's local jobs, never marks another host's running job lost nor starts its
queued ones; a job submitted through one host is listed, inspected and cancelled through the other, the cancel
carried out by the job's own host. Slots are per host; two servers of one host share its slots. Retries keep the
job's host; idempotency keys and retries hold across processes; job ids never collide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jobtrail.backends.local import LocalBackend
from jobtrail.ledger.store import Ledger
from jobtrail.models import Placement, TerminationReason
from jobtrail.service import runs
from jobtrail.service.facade import JobService
from support.jobs import FOUR_STEP_SFT, TINY_SFT, job_spec
from support.processes import kill_jobs_under, live_group_members
from support.records import add_ended_run
from support.servers import serving
from support.waiting import wait_for, wait_until_terminal

ENDLESS = {**TINY_SFT, "max_steps": 100000, "save_steps": 100000}
ACTIVE = ("starting", "running")


def _submit(tiny_model: Path, chat_dataset: Path) -> dict:
    return {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "hyperparameters": ENDLESS}


@pytest.fixture
def home(tmp_path):
    yield tmp_path / "home"
    kill_jobs_under(tmp_path / "home")  # only where a test failed midway: each test stops its own jobs


@pytest.fixture(params=["sqlite", "postgresql"])
def host_env(request, home):
    """The environment of a server of host `host` on the test's one ledger, with one local slot."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None

    def env(host: str) -> dict[str, str]:
        if url is None:  # one SQLite file: the hosts share a home
            return {**os.environ, "JOBTRAIL_HOME": str(home), "JOBTRAIL_MAX_CONCURRENT": "1"}
        return {
            **os.environ,
            "JOBTRAIL_HOME": str(home / host),
            "JOBTRAIL_LEDGER_URL": url,
            "JOBTRAIL_MAX_CONCURRENT": "1",
        }

    return env


def test_each_host_follows_starts_and_stops_only_its_own_local_jobs(host_env, tmp_path, tiny_model, chat_dataset):
    with serving([(host, host_env(host)) for host in ("host-a", "host-b")], logs=tmp_path) as (a, b):
        first = a.call("submit", **_submit(tiny_model, chat_dataset))
        second = a.call("submit", **_submit(tiny_model, chat_dataset))  # waits for host-a's one slot
        assert second["status"] == "queued", second
        wait_for(
            lambda: (b.call("inspect", job_id=first["job_id"])["progress"]["step"] or 0) >= 1,
            240,
            "host-a's job to train, as host-b reads it from the ledger",
        )
        # host-b refreshes at every call and each second: it neither marks host-a's job lost nor starts its queue.
        rows = {row["job_id"]: row for row in b.call("ps")["jobs"]}
        assert rows[first["job_id"]]["status"] == "running" and rows[first["job_id"]]["host"] == "host-a"
        assert rows[second["job_id"]]["status"] == "queued" and rows[second["job_id"]]["host"] == "host-a"
        seen = b.call("inspect", job_id=first["job_id"])
        assert seen["host"] == "host-a" and not seen["followed_here"] and "Host host-a's job" in seen["summary"]
        waiting = b.call("inspect", job_id=second["job_id"])["waiting_for"]
        assert "host host-a" in waiting and "this server, host host-b, cannot" in waiting, waiting
        # A queued job is cancelled from anywhere: a ledger compare-and-set.
        dequeued = b.call("cancel", job_id=second["job_id"])
        assert (dequeued["status"], dequeued["termination_reason"], dequeued["pending"]) == (
            "cancelled",
            "cancelled",
            False,
        )

        # host-b's own slot is free although host-a's is taken: slots are each machine's.
        third = b.call("submit", **_submit(tiny_model, chat_dataset))
        ours = wait_for(
            lambda: (r := b.call("inspect", job_id=third["job_id"]))["attempts"][0]["placement"] and r,
            120,
            "host-b's job to start on host-b",
        )
        assert ours["status"] in ACTIVE and ours["attempts"][0]["placement"]["host"] == "host-b"
        assert ours["host"] == "host-b" and ours["followed_here"]
        assert a.call("inspect", job_id=third["job_id"])["status"] in ACTIVE  # host-a did not mark it lost

        # Cancelled through the other host: recorded there, carried out by the job's own host at its next refresh.
        asked = b.call("cancel", job_id=first["job_id"])
        assert asked["pending"] and asked["host"] == "host-a" and asked["status"] == "running", asked
        assert "host host-a" in asked["message"] and f'wait(job_id="{first["job_id"]}")' in asked["summary"]
        assert a.call("cancel", job_id=third["job_id"])["pending"]
        for job, watcher in ((first, b), (third, a)):
            done = wait_until_terminal(
                lambda job=job, watcher=watcher: watcher.call("inspect", job_id=job["job_id"]),
                120,
                f"{job['job_id']} to be stopped by its own host",
                interval=0.5,
            )
            attempt = done["attempts"][0]
            assert (done["status"], done["termination_reason"]) == ("cancelled", "cancelled"), done["summary"]
            assert attempt["cancel_requested_at"] and attempt["cancel_sent_at"] >= attempt["cancel_requested_at"]
            wait_for(lambda pgid=attempt["placement"]["pgid"]: not live_group_members(pgid), 60, "nothing left running")
        assert b.call("inspect", job_id=second["job_id"])["attempts"][0]["placement"] is None  # never started


def test_two_servers_of_one_host_on_postgresql_never_run_more_than_its_slots(
    postgres_url, home, tmp_path, tiny_model, chat_dataset
):
    env = {
        **os.environ,
        "JOBTRAIL_HOME": str(home),
        "JOBTRAIL_LEDGER_URL": postgres_url,
        "JOBTRAIL_MAX_CONCURRENT": "1",
    }
    short = {"method": "sft", "model": str(tiny_model), "dataset": str(chat_dataset), "hyperparameters": FOUR_STEP_SFT}
    with serving([("host-a", env), ("host-a", env)], logs=tmp_path) as servers:
        with ThreadPoolExecutor(2) as pool:  # both submits, and both servers' dispatch, at once
            submitted = list(pool.map(lambda server: server.call("submit", **short), servers))
        assert sorted(s["status"] for s in submitted) == ["queued", "starting"], submitted
        queued = next(s for s in submitted if s["status"] == "queued")
        waiting = servers[0].call("inspect", job_id=queued["job_id"])["waiting_for"]
        assert "1 slot on host host-a" in waiting, waiting
        done = [
            wait_until_terminal(lambda job=job: servers[1].call("inspect", job_id=job["job_id"]), 300, "both jobs")
            for job in submitted
        ]
    assert [d["status"] for d in done] == ["succeeded", "succeeded"], [d["summary"] for d in done]
    first, second = sorted((d["attempts"][0]["started_at"], d["attempts"][0]["ended_at"]) for d in done)
    assert second[0] >= first[1], "the second job started only once the first had ended"


def _service(home: Path, host: str, slots: int = 1) -> JobService:
    local = LocalBackend(python=sys.executable, max_concurrent=slots, host=host)
    return JobService(
        ledger=Ledger(home / "ledger.sqlite"), backends={"local": local}, home=home, job_python=sys.executable
    )


_RETRY = """
import json, sys
from pathlib import Path
from jobtrail.app import build_service
result = build_service(Path(sys.argv[1])).retry(sys.argv[2])
print(json.dumps({"retried": result.retried, "message": result.message}))
"""
_SUBMIT = """
import json, sys
from pathlib import Path
from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
spec = JobSpec.model_validate_json(sys.argv[2])
result = build_service(Path(sys.argv[1])).submit(spec, SubmitOptions(idempotency_key="team"))
print(json.dumps({"job_id": result.job_id, "already_submitted": result.already_submitted}))
"""


def _race(script: str, home: Path, argument: str, hosts: tuple[str, ...]) -> list[dict]:
    """Run `script` in one process per host id at once; their JSON answers."""
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(home), argument],
            stdout=subprocess.PIPE,
            env={**os.environ, "JOBTRAIL_HOST_ID": host},
            text=True,
        )
        for host in hosts
    ]
    return [json.loads(racer.communicate(timeout=180)[0].strip().splitlines()[-1]) for racer in racers]


def test_a_retry_keeps_the_jobs_host_and_processes_racing_make_one_attempt_and_one_keyed_job(
    home, tiny_model, chat_dataset
):
    # host-a has no free slot: its jobs stay queued, and no process of another host may start them.
    host_a = _service(home, "host-a", slots=0)
    spec = job_spec("sft", tiny_model, chat_dataset, hyperparameters=TINY_SFT)
    job = host_a.submit(spec).job_id
    assert host_a.cancel(job).status == "cancelled"
    # Two other hosts retry it at the same moment: one new attempt, on host-a, where its checkpoints are.
    answers = _race(_RETRY, home, job, ("host-b", "host-c"))
    assert sorted(a["retried"] for a in answers) == [False, True], answers
    attempts = host_a.inspect(job).attempts
    assert [(a.number, a.status, a.host) for a in attempts] == [(1, "cancelled", "host-a"), (2, "queued", "host-a")]
    host_b = _service(home, "host-b")
    host_b.refresh()
    assert host_b.inspect(job).status == "queued"  # host-b's free slot never takes host-a's job

    # Two hosts submit with one idempotency key at once: one job (it waits behind host-a's queued one).
    follower = job_spec("sft", tiny_model, chat_dataset, hyperparameters=TINY_SFT, after=job).model_dump_json()
    answers = _race(_SUBMIT, home, follower, ("host-b", "host-c"))
    assert len({a["job_id"] for a in answers}) == 1 and sorted(a["already_submitted"] for a in answers) == [False, True]
    keyed = host_b.inspect(answers[0]["job_id"])
    assert keyed.status == "queued" and keyed.host == "host-a"  # it reads host-a's job's model: host-a runs it


def test_a_new_job_never_takes_an_id_another_job_holds(home, tiny_model, chat_dataset, monkeypatch):
    service = _service(home, "host-a", slots=0)
    spec = job_spec("sft", tiny_model, chat_dataset, hyperparameters=TINY_SFT)
    held = service.submit(spec)
    before = service.ledger.get_attempt(f"{held.job_id}/1")
    # The next id drawn is the one already held, as another server might draw it.
    monkeypatch.setattr(runs, "new_run_id", lambda: held.job_id)
    smoke = service.submit(spec.model_copy(update={"smoke_steps": 1}))
    assert smoke.status == "queued" and smoke.job_id and smoke.job_id != held.job_id
    assert service.ledger.get_attempt(f"{held.job_id}/1") == before  # never overwritten
    [attempt] = service.inspect(smoke.job_id).attempts
    assert attempt.attempt_id == f"{smoke.job_id}/1" and held.job_id not in attempt.model_dump_json()
    stored = service.ledger.get_attempt(attempt.attempt_id)
    own = str(home / "runs" / smoke.job_id / "smoke")  # the smoke run's directory, in its config and script
    assert stored.config["output_dir"] == stored.output_dir == smoke.output_dir == own
    assert own in service.ledger.script(stored.script_sha256)
    assert {job.job_id for job in service.ps().jobs} == {held.job_id, smoke.job_id}


@pytest.mark.parametrize("host_id", ["", "  ", "gpu box", "-x", "a" * 129, "host/1"])
def test_a_host_id_that_is_no_name_is_refused_with_the_fix(tmp_path, monkeypatch, host_id):
    from jobtrail.app import build_service
    from jobtrail.errors import InvalidRequestError

    monkeypatch.setenv("JOBTRAIL_HOST_ID", host_id)
    if not host_id.strip():  # unset in effect: the machine's hostname
        assert build_service(tmp_path / "home").context.host
        return
    with pytest.raises(InvalidRequestError) as refused:
        build_service(tmp_path / "home")
    assert "JOBTRAIL_HOST_ID" in str(refused.value) and "gpu-box-1" in (refused.value.fix or "")


def test_another_hosts_log_that_is_not_here_says_where_it_is(home):
    service = _service(home, "host-b")
    elsewhere = Placement(backend="local", host="host-a", pid=1, workdir="/on/host-a/attempt-1", started_at=1.0)
    add_ended_run(service.ledger, "jt-hosta000", TerminationReason.SUCCEEDED, placement=elsewhere, host="host-a")
    read = service.logs("jt-hosta000")
    assert read.lines == [] and "host host-a" in read.note and 'metrics(job_id="jt-hosta000")' in read.summary
    assert service.inspect("jt-hosta000").followed_here is False
