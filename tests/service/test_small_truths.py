"""Small truths the tools tell: an empty filtered list says so, a log says whether its attempt runs, waits or
has ended, any attempt's log can be read, and a queued job names what it waits behind."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.models import JobSpec, TerminationReason
from jobtrail.outcomes.retry import AttemptFacts, JobFacts, decide
from jobtrail.requests import ConvertRequest, EvaluateRequest, SubmitOptions
from jobtrail.results.jobs import CancelResult, RetryResult
from jobtrail.service.runs import how_it_stopped
from support.jobs import TINY_SFT
from support.records import add_ended_run, add_queued_run
from support.waiting import wait_for

ENDLESS = {"max_steps": 100000, "save_steps": 100000}


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_service()


def _spec(model, data, **hyper) -> JobSpec:
    return JobSpec(method="sft", model=str(model), dataset=str(data), hyperparameters={**TINY_SFT, **hyper})


def test_ps_with_a_filter_that_matches_nothing_says_so(service, tiny_model, chat_dataset):
    assert "No jobs yet" in service.ps(status="failed").to_markdown()
    job = service.submit(_spec(tiny_model, chat_dataset, **ENDLESS)).job_id
    try:
        result = service.ps(status="failed")
        assert result.jobs == [] and result.status_filter == "failed"
        assert result.note and "No jobs with status 'failed'" in result.note
        assert "No jobs yet" not in result.to_markdown() and "ps()" in result.to_markdown()
        assert service.ps().note is None
    finally:
        service.cancel(job)


def test_queued_job_names_what_it_waits_behind_and_its_log_says_queued(service, tiny_model, chat_dataset):
    first = service.submit(_spec(tiny_model, chat_dataset, **ENDLESS)).job_id
    second = service.submit(_spec(tiny_model, chat_dataset)).job_id
    try:
        inspected = service.inspect(second)
        assert inspected.status == "queued"
        assert inspected.waiting_for and first in inspected.waiting_for and "1 slot" in inspected.waiting_for
        assert f"Waiting for {inspected.waiting_for}" in inspected.to_markdown()
        assert service.inspect(first).waiting_for is None
        logs = service.logs(second)
        assert logs.status == "queued" and logs.waiting_for == inspected.waiting_for and not logs.finished
        text = logs.to_markdown()
        assert "still running" not in text and "queued" in text and first in text
    finally:
        service.cancel(second)
        service.cancel(first)


def test_logs_of_an_ended_job_never_say_still_running_and_any_attempt_can_be_read(service, tiny_model, chat_dataset):
    job = service.submit(_spec(tiny_model, chat_dataset, **ENDLESS)).job_id
    wait_for(lambda: (service.inspect(job).progress.step or 0) >= 1, 120, "the first training step")
    service.cancel(job)
    first_lines = service.logs(job, tail=1, cursor=0)  # ended, but one line does not reach the end
    assert first_lines.status == "cancelled" and not first_lines.finished
    assert "still running" not in first_lines.to_markdown() and "cancelled, more to read" in first_lines.to_markdown()
    whole = service.logs(job, tail=5000)
    assert whole.finished and "still running" not in whole.to_markdown()
    with pytest.raises(
        InvalidRequestError, match=f"past the end of the log \\(it ends at cursor {whole.cursor}\\)"
    ) as past:
        service.logs(job, cursor=whole.cursor + 1)  # no logs call returned it: no line would ever follow
    assert past.value.fix and f"cursor={whole.cursor}" in past.value.fix

    retried = service.retry(job)
    assert retried.retried
    try:
        latest = service.logs(job)
        assert latest.attempt == 2 and latest.latest_attempt == 2
        older = service.logs(job, tail=5000, attempt=1)
        assert older.attempt == 1 and older.status == "cancelled" and older.lines == whole.lines
        partial = service.logs(job, tail=1, cursor=0, attempt=1)
        assert f'logs(job_id="{job}", attempt=1, cursor={partial.cursor})' in partial.to_markdown()
        with pytest.raises(InvalidRequestError, match="no attempt 3"):
            service.logs(job, attempt=3)
    finally:
        service.cancel(job)


def test_a_dry_run_hashes_the_script_a_submission_of_the_same_inputs_runs(service, tiny_model, chat_dataset, tmp_path):
    chosen = _spec(tiny_model, chat_dataset, **ENDLESS).model_copy(update={"output": str(tmp_path / "out")})
    dry = service.submit(chosen, SubmitOptions(dry_run=True))
    assert dry.script is None
    assert (
        service.submit(chosen, SubmitOptions(dry_run=True, include_script=True)).script
        == Path(dry.script_path).read_text()
    )
    job = service.submit(chosen).job_id
    try:
        assert service.inspect(job).attempts[0].script_sha256 == dry.script_sha256
    finally:
        service.cancel(job)


def test_without_output_the_same_script_runs_in_its_own_run_directory_and_resumes_there(
    service, tiny_model, chat_dataset
):
    """A local job without `output` writes into runs/<job_id>/output, which the local backend gives it at launch
    (JOBTRAIL_OUTPUT_DIR): its script holds no job id, so the dry run's sha256 is the submission's."""
    own_dir = _spec(tiny_model, chat_dataset, max_steps=100000, save_steps=2)
    dry = service.submit(own_dir, SubmitOptions(dry_run=True))
    assert '"output_dir":null' in Path(dry.script_path).read_text()
    job = service.submit(own_dir).job_id
    try:
        output = service.home / "runs" / job / "output"
        first = service.inspect(job).attempts[0]
        assert first.script_sha256 == dry.script_sha256 and first.output_dir == str(output)
        assert job not in service.ledger.script(service.ledger.attempts(job)[0].script_sha256)
        committed = wait_for(
            lambda: [c.path for c in service.inspect(job).checkpoints if c.state == "committed"],
            180,
            "a committed checkpoint",
        )
        service.cancel(job)
        assert all(Path(path).parent == output for path in committed) and Path(committed[-1]).is_dir()

        assert service.retry(job).retried
        resumed = wait_for(lambda: service.inspect(job).attempts[1].resumed_from, 180, "the retry to resume")
        second = service.inspect(job).attempts[1]
        assert Path(resumed).parent == output and second.output_dir == str(output)
        assert second.script_sha256 == dry.script_sha256
    finally:
        service.cancel(job)


def test_an_ended_job_that_logged_no_step_is_never_told_to_wait_for_one(service):
    """A 3-step job with the default logging_steps=10 ends without a step event: metrics said "no step logged yet"
    and plot "wait(...) until steps are logged", which never happens once the job has ended."""
    add_ended_run(
        service.ledger,
        "jt-short",
        TerminationReason.SUCCEEDED,
        config={"training_args": {"max_steps": 3, "logging_steps": 10}},
    )
    final = {"event": "metrics", "time": time.time(), "train_loss": 6.67, "global_step": 3}
    assert service.ledger.ingest("jt-short/1", from_offset=0, to_offset=1, events=[final], fields={}, checkpoints=[])
    result = service.metrics("jt-short")
    assert result.series == {} and result.note
    assert "jt-short ended (succeeded) without logging a training step" in result.note
    assert "it trained 3 steps, and a step is logged every logging_steps=10" in result.note
    assert '"logging_steps": 1}' in result.summary and "yet" not in result.summary  # the submit that logs them
    assert "plot(" not in result.summary  # nothing to plot either
    with pytest.raises(InvalidRequestError) as refused:
        service.plot("jt-short")
    assert "ended (succeeded) without logging a training step" in refused.value.message
    assert "wait(" not in refused.value.fix and '{"logging_steps": 1}' in refused.value.fix


def _ended(reason: TerminationReason) -> AttemptFacts:
    return AttemptFacts(number=1, reason=reason, config_sha256="A", last_step=10, start_step=None)


def test_a_refused_retry_says_not_retried_once_and_never_proposes_retry_for_a_succeeded_job():
    """Decisions whose message starts "Not retried:" were shown "Not retried: Not retried: ..."; a succeeded job's
    refusal was followed by "apply the Fix: retry(job_id=..., changes={...})", a retry that is refused again."""
    never = decide([_ended(TerminationReason.BAD_INPUT)], {}, None)
    refused = RetryResult(job_id="jt-x", retried=False, attempt=None, status="failed", message=never.message)
    assert refused.summary.startswith("Not retried: bad_input does not go away"), refused.summary
    done = decide([_ended(TerminationReason.SUCCEEDED)], {}, None, job=JobFacts(job_id="jt-x"))
    result = RetryResult(
        job_id="jt-x", retried=False, attempt=None, status="succeeded", message=done.message, fix=done.fix
    )
    assert "retry(" not in result.summary and 'init_from="jt-x"' in result.summary, result.summary


def test_a_job_id_no_job_has_is_refused_where_a_model_may_be_named_and_capitals_find_the_job(
    service, tiny_model, chat_dataset
):
    """convert_gguf(source="jt-nope") started a conversion of the "Hub model" jt-nope, and submit/evaluate with
    model="jt-..." (a mistyped or foreign id) planned a job on a model that does not exist; an id in capitals was
    "No job with id 'JT-...'" though ids are Crockford base32, which has no case."""
    add_ended_run(service.ledger, "jt-4f9k2m7q", TerminationReason.SUCCEEDED)
    mistyped = "jt-4f9k2m7"  # a character short
    refusals = [
        lambda: service.convert_gguf(ConvertRequest(mistyped)),
        lambda: service.submit(
            JobSpec(method="sft", model=mistyped, dataset=str(chat_dataset)), SubmitOptions(dry_run=True)
        ),
        lambda: service.evaluate(EvaluateRequest(str(chat_dataset), model=mistyped)),
    ]
    for refuse, argument in zip(refusals, ("source", "model", "model"), strict=True):
        with pytest.raises(NotFoundError) as refused:
            refuse()
        assert f"{argument}='{mistyped}' looks like a job id, and no job has it." in refused.value.message
        assert "ps" in refused.value.fix
    with pytest.raises(InvalidRequestError) as named:
        service.evaluate(EvaluateRequest(str(chat_dataset), model="jt-4f9k2m7q"))
    assert 'evaluate(job_id="jt-4f9k2m7q"' in named.value.fix
    assert service.inspect(" JT-4F9K2M7Q\n").job_id == "jt-4f9k2m7q"
    assert [job.job_id for job in service.ps().jobs] == ["jt-4f9k2m7q"]  # nothing was started


def test_a_cancel_never_promises_a_checkpoint_the_job_may_not_have(service):
    """cancel's next step read "retry(...) resumes it from the last committed checkpoint" for a job cancelled
    before its first save, whose retry starts over."""
    add_ended_run(service.ledger, "jt-x", TerminationReason.CANCELLED)
    cancelled = service.cancel("jt-x")
    assert 'retry(job_id="jt-x")' in cancelled.summary and "it committed no checkpoint" in cancelled.summary


def test_waiting_long_on_an_ended_job_never_says_call_wait_again(service):
    """wait(timeout_s=100000) on a finished job answered "waited at most 55 s. Call wait again to keep waiting"
    beside status succeeded and waited_s 0."""
    add_ended_run(service.ledger, "jt-done", TerminationReason.SUCCEEDED)
    result = service.wait("jt-done", 100000)
    assert result.terminal and "at most 55 s" in result.note and "wait again" not in result.summary, result.summary


def test_a_status_is_never_repeated_as_its_own_reason(service, tiny_model, chat_dataset):
    """cancel of an ended job read "succeeded (succeeded)", and a job after a cancelled one "cancelled (cancelled)"."""
    done = CancelResult(job_id="jt-x", status="succeeded", termination_reason="succeeded", message="It had ended.")
    assert "**jt-x**: succeeded. It had ended." in done.summary, done.summary
    failed = CancelResult(job_id="jt-x", status="failed", termination_reason="oom", message="It had ended.")
    assert "failed (oom)" in failed.summary
    add_ended_run(service.ledger, "jt-cancelled", TerminationReason.CANCELLED)
    with pytest.raises(InvalidRequestError) as refused:
        service.submit(_spec(tiny_model, chat_dataset).model_copy(update={"after": "jt-cancelled"}))
    assert "already ended cancelled:" in refused.value.message, refused.value.message
    add_queued_run(service.ledger, "jt-follower", spec={"after": "jt-cancelled"})
    never = wait_for(lambda: (r := service.inspect("jt-follower")).status == "cancelled" and r, 10, "the follower")
    assert "which ended cancelled." in (never.termination_message or ""), never.termination_message
    assert "cancelled (cancelled)" not in never.summary


def test_a_cancel_says_what_stopped_the_job(service, tiny_model, chat_dataset):
    """cancel answered "Stopped (SIGTERM, then SIGKILL after the grace period)" for a job that SIGTERM ended."""
    job = service.submit(_spec(tiny_model, chat_dataset, **ENDLESS)).job_id
    wait_for(lambda: service.inspect(job).progress.step is not None, 120, "the job to train")
    cancelled = service.cancel(job)
    assert cancelled.status == "cancelled", cancelled.summary
    assert "ended after SIGTERM" in cancelled.message and "no SIGKILL was needed" in cancelled.message, (
        cancelled.message
    )
    killed = how_it_stopped(None, signal.SIGKILL, "SIGTERM, then SIGKILL after the grace period")
    assert "SIGKILL ended it" in killed and "grace period" in killed
    assert "SIGKILL ended it" in how_it_stopped(137, None, "-")  # a shell's 128 + 9
    assert how_it_stopped(None, None, "HF's cancel") == "Stopped (HF's cancel)."  # no exit status of its own


def test_a_retry_says_the_status_its_attempt_has():
    """retry answered "attempt 2 queued" while the attempt it started was already starting."""
    common = dict(job_id="jt-x", retried=True, attempt=2, message="Resuming.", resume_from="/o/checkpoint-10")
    starting = RetryResult(status="starting", **common).summary
    assert starting.startswith("**jt-x** attempt 2 starting, resuming from /o/checkpoint-10."), starting
    later = RetryResult(status="queued", delay_s=30, **{**common, "resume_from": None}).summary
    assert later.startswith("**jt-x** attempt 2 queued after 30s, from scratch (no committed checkpoint)."), later
