"""Retries on real local jobs: automatic resume after preemption, refusals with the diagnosis, resume after cancel."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec, JobStatus, TerminationReason
from jobtrail.requests import SubmitOptions
from support.jobs import TINY_SFT
from support.waiting import wait_for, wait_until_terminal

HYPER = {**TINY_SFT, "max_steps": 16}


@pytest.fixture
def service(tmp_path):
    return build_service(tmp_path / "home")


def _spec(model: Path, dataset: Path, **hyper) -> JobSpec:
    return JobSpec(method="sft", model=str(model), dataset=str(dataset), hyperparameters={**HYPER, **hyper})


def _committed_step(service, job_id: str) -> int:
    steps = [
        c.step or 0
        for c in service.inspect(job_id).checkpoints
        if c.state == "committed" and Path(c.path).name.startswith("checkpoint-")
    ]
    return max(steps, default=0)


def test_preempted_job_is_resumed_automatically_from_its_last_committed_checkpoint(service, tiny_model, chat_dataset):
    job_id = service.submit(_spec(tiny_model, chat_dataset, max_steps=400), SubmitOptions(max_retries=2)).job_id
    wait_for(lambda: _committed_step(service, job_id) >= 4, 120, "a committed checkpoint")
    placement = service.inspect(job_id).attempts[0].placement
    os.killpg(placement.pgid, signal.SIGTERM)  # a signal jobtrail did not send: the machine taking the job away
    first = wait_for(
        lambda: (a := service.inspect(job_id).attempts[0]).termination_reason and a, 60, "attempt 1 to end"
    )
    assert first.termination_reason == "preempted", first
    second = wait_for(
        lambda: len(service.inspect(job_id).attempts) == 2 and service.inspect(job_id).attempts[1],
        30,
        "the automatic retry",
    )
    assert second.retry_note and "preempted" in second.retry_note
    wait_for(lambda: service.inspect(job_id).attempts[1].resumed_from, 120, "attempt 2 to resume")
    resumed = service.inspect(job_id).attempts[1]
    assert Path(resumed.resumed_from).name.startswith("checkpoint-")
    assert int(Path(resumed.resumed_from).name.split("-")[1]) >= 4
    service.cancel(job_id)  # the point is made; do not train 400 steps


def test_bad_input_is_not_retried_and_the_answer_carries_the_diagnosis(service, tiny_model, tmp_path):
    data = tmp_path / "broken.jsonl"
    data.write_text(
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n{oops\n'
    )
    job_id = service.submit(_spec(tiny_model, data), SubmitOptions(force=True, max_retries=3)).job_id
    done = wait_until_terminal(lambda: service.inspect(job_id), 120, "the job to fail")
    assert done.termination_reason == "bad_input" and len(done.attempts) == 1  # max_retries did not retry it
    assert "bad_input" in done.retries_stopped and "validate_dataset" in done.retries_stopped  # and inspect says why
    assert "Automatic retries stopped" in done.to_markdown()
    answer = service.retry(job_id)
    assert not answer.retried and answer.fix and "validate_dataset" in answer.fix
    assert answer.diagnosis


def test_cancelled_job_resumes_on_request_and_finishes(service, tiny_model, chat_dataset):
    job_id = service.submit(_spec(tiny_model, chat_dataset)).job_id
    wait_for(lambda: _committed_step(service, job_id) >= 4, 120, "a committed checkpoint")
    assert service.cancel(job_id).status == "cancelled"
    answer = service.retry(job_id)
    assert answer.retried and answer.attempt == 2 and answer.resume_from
    done = wait_until_terminal(lambda: service.inspect(job_id), 180, "the resumed attempt", attempts=2)
    assert done.status == "succeeded" and done.progress.step == 16
    second = done.attempts[1]
    assert second.resumed_from and second.config_sha256 == done.attempts[0].config_sha256
    again = service.retry(job_id)
    assert not again.retried and "already succeeded" in again.message


def test_retry_with_changes_renders_a_new_config_and_refuses_unknown_names(service, tiny_model, chat_dataset):
    job_id = service.submit(_spec(tiny_model, chat_dataset, max_steps=400)).job_id
    wait_for(lambda: service.inspect(job_id).status == "running", 30, "the job to run")
    service.cancel(job_id)
    with pytest.raises(InvalidRequestError) as info:
        service.retry(job_id, {"learning_rte": 1})
    assert "learning_rate" in str(info.value)
    assert len(service.inspect(job_id).attempts) == 1
    changed = service.retry(
        job_id, {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 2, "max_steps": 2}
    )
    assert changed.retried and changed.changes["per_device_train_batch_size"] == 1
    done = wait_until_terminal(lambda: service.inspect(job_id), 180, "the changed attempt", attempts=2)
    first, second = done.attempts
    assert second.config_sha256 != first.config_sha256
    assert done.status == "succeeded" and done.hyperparameters["per_device_train_batch_size"] == 2  # the run's own spec


def _ended_as(service, job_id: str, number: int, reason: TerminationReason) -> None:
    """Rewrite how an attempt ended: the cause is what the policy weighs, and a real one takes minutes to provoke."""
    attempt = service.context.ledger.attempts(job_id)[number - 1]
    service.context.ledger.update_attempt(attempt.attempt_id, status=JobStatus.FAILED, termination_reason=reason)


def test_after_an_unknown_failure_a_retry_with_changes_is_accepted(service, tiny_model, chat_dataset):
    job_id = service.submit(_spec(tiny_model, chat_dataset, max_steps=400)).job_id
    wait_for(lambda: service.inspect(job_id).status == "running", 60, "the job to run")
    service.cancel(job_id)
    _ended_as(service, job_id, 1, TerminationReason.UNKNOWN)
    refused = service.retry(job_id)
    assert not refused.retried and "a retry with changes" in refused.fix  # a change, not a call with blanks
    same = service.retry(job_id, {"max_steps": 400})
    assert not same.retried and "change nothing" in same.message
    changed = service.retry(job_id, {"max_steps": 8})
    assert changed.retried and changed.attempt == 2, changed
    service.cancel(job_id)


def test_a_longer_timeout_after_two_timeouts_that_made_progress_is_not_a_storm(service, tiny_model, chat_dataset):
    spec = _spec(tiny_model, chat_dataset, max_steps=400).model_copy(update={"timeout_s": 120})
    job_id = service.submit(spec).job_id
    wait_for(lambda: _committed_step(service, job_id) >= 4, 120, "a committed checkpoint")
    service.cancel(job_id)
    _ended_as(service, job_id, 1, TerminationReason.TIMEOUT)
    assert service.retry(job_id).retried
    wait_for(lambda: service.inspect(job_id).attempts[1].resumed_from, 120, "attempt 2 to resume")
    wait_for(lambda: (service.inspect(job_id).progress.step or 0) > _committed_step(service, job_id), 120, "a step")
    service.cancel(job_id)
    _ended_as(service, job_id, 2, TerminationReason.TIMEOUT)
    storm = service.retry(job_id)
    assert not storm.retried and "storm" in storm.message
    longer = service.retry(job_id, {"timeout": "5m"})
    assert longer.retried and longer.attempt == 3, longer
    service.cancel(job_id)


def test_a_finished_job_is_trained_further_from_its_adapter(service, tiny_model, chat_dataset):
    first = service.submit(_spec(tiny_model, chat_dataset, max_steps=4)).job_id
    done = wait_until_terminal(lambda: service.inspect(first), 180, "the first job")
    assert done.status == "succeeded", done.termination_message
    final = Path(done.attempts[0].output_dir) / "final"
    assert (final / "adapter_config.json").is_file()
    assert (
        service.submit(_spec(final, chat_dataset), SubmitOptions(dry_run=True)).status == "dry_run"
    )  # the adapter is a model
    checkpoint = _spec(tiny_model, chat_dataset).model_copy(update={"init_from": first, "init_checkpoint": "4"})
    planned = service.submit(checkpoint, SubmitOptions(dry_run=True))
    assert planned.status == "dry_run", planned.findings
    with pytest.raises(InvalidRequestError) as info:
        service.submit(checkpoint.model_copy(update={"init_checkpoint": "checkpoint-999"}), SubmitOptions(dry_run=True))
    assert "checkpoint-4" in str(info.value.fix)
    further = _spec(tiny_model, chat_dataset, max_steps=2).model_copy(update={"init_from": first})
    second = service.submit(further).job_id
    result = wait_until_terminal(lambda: service.inspect(second), 180, "the second job")
    assert result.status == "succeeded", result.termination_message
    assert result.progress.step == 2 and not result.attempts[0].resumed_from  # a fresh schedule
    assert result.progress.first_loss < done.progress.first_loss  # ... from the trained adapter, not a new one
    assert result.model == str(final) and result.init_from == first  # the receipt says where it started
