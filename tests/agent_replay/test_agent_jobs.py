"""Careless agents with real jobs (the session's pipeline, conftest.py: the tiny model on the local backend): a job
followed to its end through a smoke run, its base and final evaluations, a conversion and an evaluation chained after
it; a job that fails on broken data and the follower it takes down; a job cancelled while it trains. Each reply's
proposed calls are replayed as they come (replay_harness)."""

from __future__ import annotations

from typing import Any

import pytest
from replay_harness import TINY, Agent, Jobs, Reply, World, add_events, assert_replays, calls_of, load_watch

from support.waiting import wait_for

JOB_TIMEOUT_S = 420


def _wait_until_ended(agent: Agent, job: str) -> Reply:
    """wait(job_id) again while it has not ended, as its summary says to."""

    def ended() -> Reply | None:
        reply = agent.call("wait", job_id=job, timeout_s=20)
        return reply if reply["terminal"] else None

    return wait_for(ended, JOB_TIMEOUT_S, f"{job} to end", interval=0)


@pytest.fixture
def agent(world: World) -> Agent:
    return world.agent()


def test_the_pipeline_was_submitted_with_working_proposals(pipeline: Jobs) -> None:
    assert_replays(pipeline.submitted)


def test_a_job_followed_through_its_smoke_run_to_its_end(agent: Agent, pipeline: Jobs, world: World) -> None:
    job = pipeline.trained
    agent.call("inspect", job_id=job)
    agent.call("metrics", job_id=job)
    done = _wait_until_ended(agent, job)
    assert done["status"] == "succeeded", done.summary
    proposed = calls_of(done)
    assert any(c.startswith("plot(") for c in proposed) and any("init_from" in c for c in proposed)
    agent.call("inspect", job_id=job)
    agent.call("metrics", job_id=job)
    agent.call("plot", job_id=job)
    agent.call("logs", job_id=job, attempt=1)  # the smoke run's
    agent.call("retry", job_id=job)  # nothing to retry: a new job trains it further
    assert_replays(agent)


def test_an_evaluation_reports_its_metrics_and_the_job_it_evaluated(agent: Agent, pipeline: Jobs) -> None:
    done = _wait_until_ended(agent, pipeline.evaluated)
    assert done["status"] == "succeeded", done.summary
    assert done["evaluation"] and done["evaluation"]["metrics"], done.summary
    assert "Evaluation of" in done.summary and "loss" in done.summary
    assert not [c for c in calls_of(done) if c.startswith(("metrics(", "plot("))]
    assert f'inspect(job_id="{pipeline.trained}")' in calls_of(done)
    metrics = agent.call("metrics", job_id=pipeline.evaluated)
    assert "evaluation" in metrics.summary and "wait" not in metrics.summary
    plot = agent.call("plot", job_id=pipeline.evaluated)
    assert plot.is_error and "logging_steps" not in plot.text
    trained = agent.call("inspect", job_id=pipeline.trained)
    assert {e["checkpoint"] for e in trained["evaluations"]} >= {"base", "final"}, trained.summary
    assert_replays(agent)


def test_a_conversion_reports_its_files_with_their_sizes(agent: Agent, pipeline: Jobs) -> None:
    done = _wait_until_ended(agent, pipeline.converted)
    assert done["status"] == "succeeded", done.summary
    assert {f["quantization"] for f in done["files"]} == {"F16", "Q8_0"} and " MB)" in done.summary
    assert not [c for c in calls_of(done) if c.startswith(("metrics(", "plot("))]
    agent.call("inspect", job_id=pipeline.converted)
    agent.call("metrics", job_id=pipeline.converted)
    agent.call("retry", job_id=pipeline.converted)
    assert_replays(agent)


def test_a_failure_on_broken_data_takes_its_follower_down(agent: Agent, pipeline: Jobs) -> None:
    failed = _wait_until_ended(agent, pipeline.failing)
    assert failed["termination_reason"] == "bad_input", failed.summary
    assert f'retry(job_id="{pipeline.failing}")' not in calls_of(failed)
    agent.call("retry", job_id=pipeline.failing)
    agent.call("logs", job_id=pipeline.failing, tail=5)
    follower = _wait_until_ended(agent, pipeline.follower)
    assert follower["status"] == "cancelled", follower.summary
    retried = agent.call("retry", job_id=pipeline.follower)
    assert not retried["retried"] and "queued" not in retried.summary
    agent.call("ps", status="failed")
    assert_replays(agent)


def test_a_job_cancelled_while_it_trains_is_resumed_by_its_retry(agent: Agent, world: World) -> None:
    submitted = agent.call(
        "submit",
        method="sft",
        model=str(world.model),
        dataset=str(world.dataset),
        hyperparameters={**TINY, "max_steps": 5000, "save_steps": 1},
    )
    job = submitted["job_id"]

    def training() -> Any:
        return agent.service.inspect(job).progress.step  # not through the agent: no replies while polling

    wait_for(training, JOB_TIMEOUT_S, f"{job} to train a step", interval=0.5)
    cancelled = agent.call("cancel", job_id=job)
    assert cancelled["status"] == "cancelled", cancelled.summary
    assert f'retry(job_id="{job}")' in calls_of(cancelled)
    agent.call("wait", job_id=job, timeout_s=0)
    agent.call("metrics", job_id=job)
    assert_replays(agent)


def test_a_finished_jobs_advice_alerts_propose_calls_that_work(agent: Agent, pipeline: Jobs, world: World) -> None:
    """loss_not_falling and overfitting, as the job side writes them (scripts/_watch.py), on the trained job: advice,
    not blocking; their fixes are proposals."""
    job = pipeline.trained
    _wait_until_ended(agent, job)
    watch = load_watch()
    flat = watch.loss_not_falling_alert(12, [2.0 + (i % 2) * 0.1 for i in range(12)], job, 1e-3)
    over = watch.overfitting_alert([(2, 1.0), (4, 1.1), (6, 1.2), (8, 1.3)], [(s, 3.0 - s / 4) for s in range(1, 9)])
    assert flat and over
    latest = world.service.ledger.attempts(job)[-1]
    add_events(world, latest.attempt_id, {"event": "alert", **flat}, {"event": "alert", **over})
    agent.call("wait", job_id=job, timeout_s=0)
    agent.call("inspect", job_id=job)
    assert_replays(agent)
