"""submit(idempotency_key=...): a resent submit returns the job the first one started, in one process or
two racing; other arguments with a used key are refused naming them; a dry run never uses a key."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from support.jobs import TINY_SFT, job_spec


@pytest.fixture
def service(tmp_path):
    return build_service(tmp_path / "home")


def _spec(tiny_model, chat_dataset, **hyper) -> JobSpec:
    return job_spec("sft", tiny_model, chat_dataset, hyperparameters={**TINY_SFT, "max_steps": 400, **hyper})


def test_the_same_key_gives_one_job_and_other_arguments_are_refused(service, tiny_model, chat_dataset, monkeypatch):
    spec = _spec(tiny_model, chat_dataset)
    dry = service.submit(spec, SubmitOptions(dry_run=True, idempotency_key="call-1"))
    assert dry.status == "dry_run" and dry.job_id is None and dry.idempotency_key is None  # a dry run uses no key
    first = service.submit(spec, SubmitOptions(idempotency_key="call-1"))
    try:
        assert first.job_id and not first.already_submitted and first.idempotency_key == "call-1"
        # The agent's client timed out: it sends the same call again, a relative path this time.
        monkeypatch.chdir(chat_dataset.parent)
        again = service.submit(
            spec.model_copy(update={"dataset": chat_dataset.name}), SubmitOptions(idempotency_key="call-1")
        )
        assert again.job_id == first.job_id and again.already_submitted
        assert again.status in ("queued", "starting", "running") and again.script_sha256 == first.script_sha256
        assert "Not submitted again" in again.summary and first.job_id in again.summary
        assert len(service.ps().jobs) == 1
        # Sent again with its values written as strings ("400" for 400) and lr for learning_rate: the same call, as
        # the schema reads it (issue 27: "30" and 30 were different arguments).
        written = {name: str(value) for name, value in spec.hyperparameters.items()}
        written["lr"] = written.pop("learning_rate")
        resent = service.submit(
            spec.model_copy(update={"hyperparameters": written}), SubmitOptions(idempotency_key="call-1")
        )
        assert resent.job_id == first.job_id and resent.already_submitted and len(service.ps().jobs) == 1

        with pytest.raises(InvalidRequestError) as refused:
            service.submit(
                _spec(tiny_model, chat_dataset, learning_rate=5e-4),
                SubmitOptions(max_retries=2, idempotency_key="call-1"),
            )
        text = str(refused.value)
        assert first.job_id in text and "hyperparameters.learning_rate: 0.001 then, 0.0005 now" in text
        assert "max_retries: 0 then, 2 now" in text and "new idempotency_key" in text
        assert f'inspect(job_id="{first.job_id}")' in text
        assert len(service.ps().jobs) == 1

        # A rejected submit uses no key: fixed, the same key starts the job.
        rejected = service.submit(
            _spec(tiny_model, chat_dataset, learning_rate=-1.0), SubmitOptions(idempotency_key="call-2")
        )
        assert rejected.status == "rejected" and rejected.job_id is None
        assert service.ledger.run_by_idempotency_key("call-2") is None
    finally:
        service.cancel(first.job_id)


_RACE = """
import json, sys
from pathlib import Path
from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
spec = JobSpec.model_validate_json(sys.argv[2])
result = build_service(Path(sys.argv[1])).submit(spec, SubmitOptions(idempotency_key="race"))
print(json.dumps({"job_id": result.job_id, "already_submitted": result.already_submitted}))
"""


def test_two_processes_racing_with_one_key_make_one_job(tmp_path, tiny_model, chat_dataset):
    home = tmp_path / "home"
    spec = _spec(tiny_model, chat_dataset).model_dump_json()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACE, str(home), spec], stdout=subprocess.PIPE, env=env, text=True)
        for _ in range(2)
    ]
    answers = [json.loads(racer.communicate(timeout=180)[0].strip().splitlines()[-1]) for racer in racers]
    service = build_service(home)
    jobs = service.ps().jobs
    try:
        assert len(jobs) == 1 and {a["job_id"] for a in answers} == {jobs[0].job_id}
        assert sorted(a["already_submitted"] for a in answers) == [False, True]
    finally:
        for job in jobs:
            service.cancel(job.job_id)
