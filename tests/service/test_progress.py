"""Progress from step events: rate over recent steps, ETA, phase, the total of a run by epochs, the timeout warning."""

from __future__ import annotations

from typing import Any

from jobtrail.results.jobs import JobRow
from jobtrail.results.progress import (
    RATE_WINDOW,
    WARNING_CODE,
    AttemptFacts,
    job_progress,
    phase,
    rates,
    timeout_warning,
)
from jobtrail.results.watch import WaitResult


def _steps(count: int, *, every_s: float, start: float = 1000.0, first: int = 1, tokens: int = 100) -> list[dict]:
    return [
        {"event": "step", "step": first + i, "time": start + i * every_s, "loss": 5.0 - i * 0.01, "tokens": tokens * i}
        for i in range(count)
    ]


def _facts(**over: Any) -> AttemptFacts:
    base: dict[str, Any] = dict(status="running", max_steps=60, num_train_epochs=1, started_at=990.0, timeout_s=None)
    return AttemptFacts(**{**base, **over})


def test_rate_eta_and_fraction_of_a_running_job():
    steps = _steps(20, every_s=0.5)  # steps 1..20, 2 steps/s, 200 tokens/s
    now = steps[-1]["time"] + 1.0  # a second after the last step
    p = job_progress(steps, steps, _facts(), now)
    assert p.step == 20 and p.max_steps == 60 and p.fraction == 20 / 60
    assert p.steps_per_second == 2.0 and p.tokens_per_second == 200.0
    assert p.eta_seconds == 19.0  # 40 steps at 2/s, less the second already gone
    assert p.phase == "training" and p.first_loss == 5.0 and p.steps_logged == 20


def test_the_rate_follows_the_recent_steps_not_the_whole_run():
    slow = _steps(20, every_s=2.0)
    fast = _steps(RATE_WINDOW + 1, every_s=0.25, start=slow[-1]["time"] + 0.25, first=21)
    assert rates(slow + fast)[0] == 4.0


def test_no_rate_and_no_eta_before_two_steps_or_after_the_end():
    one = _steps(1, every_s=1.0)
    assert rates(one) == (None, None)
    p = job_progress(one, one, _facts(), 2000.0)
    assert p.eta_seconds is None and p.steps_per_second is None and p.step == 1
    ended = _steps(10, every_s=1.0)
    done = job_progress(ended, ended, _facts(status="succeeded"), 5000.0)
    assert done.eta_seconds is None and done.steps_per_second == 1.0


def test_a_job_that_logged_no_step_reached_the_step_its_checkpoint_and_final_metrics_say():
    # max_steps=3 with logging_steps=10: the trainer printed no step event, yet it trained 3 steps.
    events = [
        {"event": "phase", "phase": "training", "max_steps": 3, "step": 0, "time": 1.0},
        {"event": "checkpoint", "state": "writing", "step": 3, "time": 2.0},
        {"event": "checkpoint", "state": "committed", "step": 3, "time": 2.5},
        {"event": "metrics", "global_step": 3, "train_loss": 4.2, "time": 3.0},
    ]
    done = job_progress([], events, _facts(status="succeeded", max_steps=3), 10.0)
    assert done.step == 3 and done.fraction == 1.0 and done.steps_logged == 0 and done.last_loss is None
    saving = job_progress([], events[:2], _facts(max_steps=3), 10.0)
    assert saving.step is None  # a checkpoint being written is not yet a step the job is known to have kept
    # The furthest known step wins: step events up to 20, then the final metrics at 25.
    steps = _steps(20, every_s=0.5)
    assert job_progress(steps, [*steps, {"event": "metrics", "global_step": 25}], _facts(), 99.0).step == 25


def test_phase_from_the_jobs_own_events_else_from_what_it_printed():
    assert phase([], "queued") == "queued"
    assert phase([], "starting") == "starting"
    assert phase([], "running") == "installing"
    env = [{"event": "environment"}]
    assert phase(env, "running") == "loading_model"
    tokenizing = [*env, {"event": "phase", "phase": "tokenizing"}]
    assert phase(tokenizing, "running") == "tokenizing"
    assert phase([*tokenizing, {"event": "step", "step": 1}], "running") == "training"
    saving = [*tokenizing, {"event": "step", "step": 1}, {"event": "phase", "phase": "saving"}]
    assert phase(saving, "running") == "saving"
    assert phase(saving, "failed") == "saving"  # where it ended
    assert phase([], "failed") is None


def test_an_ended_jobs_phase_is_its_end_and_where_one_that_did_not_succeed_stopped_is_kept_apart():
    steps = _steps(3, every_s=1.0)
    saved = [*steps, {"event": "phase", "phase": "saving", "time": 1003.0}]
    done = job_progress(steps, saved, _facts(status="succeeded", max_steps=3), 2000.0)
    assert done.phase == "succeeded" and done.stopped_in is None
    failed = job_progress(steps, saved, _facts(status="failed", max_steps=3), 2000.0)
    assert failed.phase == "failed" and failed.stopped_in == "saving"
    running = job_progress(steps, saved, _facts(max_steps=3), 1004.0)
    assert running.phase == "saving" and running.stopped_in is None
    row = JobRow(
        job_id="jt-a",
        status="succeeded",
        method="sft",
        model="m",
        dataset="d",
        backend="local",
        created_at=1.0,
        attempts=1,
        progress=done,
    )
    assert "saving" not in row.model_dump_json()  # ps and the job resource
    common = dict(job_id="jt-a", terminal=True, attempts=1, waited_s=1.0, timed_out=False)
    ended = WaitResult(status="succeeded", progress=done, **common).headline()
    assert "saving" not in ended and "at step 3/3" in ended
    stopped = WaitResult(status="failed", termination_reason="oom", progress=failed, **common).headline()
    assert "while saving" in stopped


def test_a_run_by_epochs_takes_its_total_from_the_phase_event_else_from_the_epoch():
    steps = [{**e, "epoch": e["step"] / 40} for e in _steps(10, every_s=1.0)]  # 40 steps per epoch
    by_epochs = _facts(max_steps=-1, num_train_epochs=2)
    assert job_progress(steps, steps, by_epochs, 1010.0).max_steps == 80
    announced = [{"event": "phase", "phase": "training", "max_steps": 77}, *steps]
    assert job_progress(steps, announced, by_epochs, 1010.0).max_steps == 77


def test_steps_of_earlier_attempts_count_but_the_rate_is_the_latest_attempts():
    first = _steps(30, every_s=0.1)  # attempt 1: fast, then it died
    second = _steps(5, every_s=1.0, start=5000.0, first=29)  # attempt 2 resumed from step 28, slower
    p = job_progress(first + second, second, _facts(), 5004.0)
    assert p.step == 33 and p.steps_logged == 35 and p.steps_per_second == 1.0 and p.first_loss == 5.0


def test_a_job_that_will_pass_its_timeout_is_warned_with_the_stop_step_and_the_calls_that_fix_it():
    steps = _steps(11, every_s=1.0)  # 1 step/s, step 11 at t=1010
    facts = _facts(max_steps=100, started_at=1000.0, timeout_s=30)
    p = job_progress(steps, steps, facts, 1010.0)
    assert p.eta_seconds == 89.0
    warning = timeout_warning("jt-abc", p, facts, 1010.0)
    assert warning is not None and warning["code"] == WARNING_CODE
    assert warning["step"] == 31  # 20 s left at 1 step/s
    assert "stop near step 31" in warning["message"]
    # (10 s gone + 89 s to go) × 1.3 = 129 s → 3 minutes, rounded up
    assert 'retry(job_id="jt-abc", changes={"timeout": "3m"})' in warning["fix"]
    assert "max_steps=31" in warning["fix"]
    roomy = _facts(max_steps=100, started_at=1000.0, timeout_s=3600)
    assert timeout_warning("jt-abc", job_progress(steps, steps, roomy, 1010.0), roomy, 1010.0) is None
    no_limit = _facts(max_steps=100)
    assert timeout_warning("jt-abc", p, no_limit, 1010.0) is None


def test_a_new_attempt_is_where_it_is_itself_never_where_the_attempt_before_it_died():
    first = _steps(30, every_s=0.1)  # attempt 1 reached step 30, then it died
    queued = job_progress(first, [], _facts(status="queued"), 5000.0)
    assert queued.step is None and queued.fraction is None and queued.phase == "queued"
    assert queued.last_loss == first[-1]["loss"]  # the losses still span the attempts it continues
    resumed = [{"event": "resume", "checkpoint": "/runs/x/output/checkpoint-28", "step": 28, "time": 5001.0}]
    assert job_progress(first, resumed, _facts(), 5002.0).step == 28
    scratch = [{"event": "resume", "checkpoint": None, "step": None, "time": 5001.0}]
    assert job_progress(first, scratch, _facts(), 5002.0).step is None
