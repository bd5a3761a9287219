"""Careless agents after an ending: a job that ended with each termination reason, retried by hand; a retry storm
and a spent budget; a spending cap; a result a blocking alert spoils, with a follower held behind it; a follower
whose parent failed for good; a conversion that stopped. The jobs are ledger records (replay_harness.add_record: the
config and script preflight plans for the tiny model, as a real job of that ending leaves them); anything that would
start a job runs on a sandbox. Every call the replies propose is replayed and must be accepted."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from replay_harness import Agent, World, add_attempt, add_events, add_record, assert_replays, calls_of, load_watch

from jobtrail.models import JobStatus, TerminationReason as R
from jobtrail.preflight.plan import Conversion


def _after_an_ending(world: World, job: str) -> Agent:
    """What a careless agent does with a job that ended: everything, in a sandbox copy of the world."""
    agent = world.agent().sandbox()
    agent.call("wait", job_id=job, timeout_s=0)
    agent.call("inspect", job_id=job)
    agent.call("retry", job_id=job)
    agent.call("metrics", job_id=job)
    agent.call("plot", job_id=job)
    agent.call("logs", job_id=job, tail=20)
    agent.call("cancel", job_id=job)
    return agent


@pytest.mark.parametrize("reason", [r for r in R if r is not R.BUDGET], ids=lambda r: r.value)
def test_a_job_that_ended_with_each_reason(world: World, reason: R) -> None:
    job = add_record(world, reason)
    agent = _after_an_ending(world, job)
    waited = agent.replies[0]
    if reason.status.value == "failed" and reason not in (
        R.INFRA_TRANSIENT,
        R.PREEMPTED,
        R.LOST,
        R.HUB_ERROR,
        R.EVAL_FAILED,
        R.DISK_FULL,
    ):
        # Retry is proposed only where it would run; these need a change or a fix first.
        assert f'retry(job_id="{job}")' not in calls_of(waited), waited.summary
    assert_replays(agent)


def test_a_timeout_storm_names_the_change_not_the_retry(world: World) -> None:
    job = add_record(world, R.TIMEOUT, last_metrics={"step": 3})
    add_attempt(world, job, R.TIMEOUT, last_metrics={"step": 5})
    agent = _after_an_ending(world, job)
    assert f'retry(job_id="{job}")' not in calls_of(agent.replies[1])
    assert_replays(agent)


def test_an_oom_whose_budget_is_spent(world: World) -> None:
    job = add_record(world, R.OOM, hyperparameters={"per_device_train_batch_size": 4})
    add_attempt(world, job, R.OOM)
    add_attempt(world, job, R.OOM)
    agent = _after_an_ending(world, job)
    agent.call("retry", job_id=job, changes={"per_device_train_batch_size": "1"})  # a string for a number
    assert_replays(agent)


def test_a_job_its_spending_cap_stopped(world: World) -> None:
    job = add_record(world, R.BUDGET, run={"max_cost_usd": 1.0}, cost_usd=1.2)
    agent = _after_an_ending(world, job)
    assert any('"max_cost_usd"' in c for c in calls_of(agent.replies[2])), agent.replies[2].summary
    assert_replays(agent)


def test_a_succeeded_job_with_a_blocking_alert_holds_its_follower(world: World) -> None:
    watch = load_watch()
    parent = add_record(world, R.SUCCEEDED, hyperparameters={"learning_rate": 0.0}, forced=True)  # as it had to be
    config = world.service.ledger.attempts(parent)[0].config
    alert = watch.nothing_learned_alert(8, [2.0] * 8, [0.0] * 8, [], 0.0, token_loss=True, start_step=0, config=config)
    add_events(world, f"{parent}/1", {"event": "alert", **alert})
    follower = add_record(world, None, spec={"after": parent})
    agent = _after_an_ending(world, parent)
    held = agent.call("inspect", job_id=follower)
    assert f'release(job_id="{follower}")' in calls_of(held), held.summary
    agent.call("wait", job_id=follower, timeout_s=0)
    agent.call("release", job_id=follower)
    assert_replays(agent)


def test_a_diverged_parent_holds_its_follower_until_a_retry_with_a_lower_rate(world: World) -> None:
    watch = load_watch()
    parent = add_record(world, R.DIVERGED, hyperparameters={"learning_rate": 10.0})
    alert = watch.nan_loss_alert(4, float("nan"), parent, 10.0)
    add_events(world, f"{parent}/1", {"event": "alert", **alert})
    follower = add_record(world, None, spec={"after": parent})
    agent = world.agent().sandbox()
    held = agent.call("inspect", job_id=follower)
    assert any(c.startswith(f'retry(job_id="{parent}", changes=') for c in calls_of(held)), held.summary
    agent.call("release", job_id=follower)  # refused: there is no model to release it onto
    agent.call("retry", job_id=follower)
    agent.call("retry", job_id=parent)
    assert_replays(agent)


def test_a_follower_whose_parent_failed_for_good_is_not_retried_alone(world: World) -> None:
    parent = add_record(world, R.CONFIG_ERROR)
    follower = add_record(
        world,
        R.CANCELLED,
        spec={"after": parent},
        termination_message=f"Never started: it waited for {parent}, which ended failed (config_error).",
    )
    agent = world.agent().sandbox()
    retried = agent.call("retry", job_id=follower)
    assert not retried["retried"] and retried["status"] == "cancelled" and "queued" not in retried.summary
    assert f'retry(job_id="{follower}")' not in calls_of(retried)
    agent.call("inspect", job_id=follower)
    agent.call("wait", job_id=follower, timeout_s=0)
    assert_replays(agent)


def test_a_conversion_that_stopped_is_converted_again_with_its_own_arguments(world: World) -> None:
    job = add_record(world, R.CONFIG_ERROR, task=Conversion(["Q8_0"], None), termination_message="pre-tokenizer")
    agent = _after_an_ending(world, job)
    refused = agent.replies[2]
    assert any(c.startswith("convert_gguf(") and '"Q8_0"' in c for c in calls_of(refused)), refused.summary
    assert not [c for c in calls_of(agent.replies[0]) if c.startswith(("metrics(", "plot("))]
    changed = agent.call("retry", job_id=job, changes={"pre_tokenizer": "qwen2"})
    assert changed["retried"], changed.summary
    agent.call("retry", job_id=job, changes={"learning_rate": 1e-4})  # not a conversion's argument
    assert_replays(agent)


def test_a_succeeded_training_job_proposes_what_follows_it(world: World) -> None:
    job = add_record(world, R.SUCCEEDED, spec={"eval_dataset": None})
    agent = _after_an_ending(world, job)
    agent.call("evaluate", job_id=job, dataset=str(world.dataset), checkpoint="checkpoint-99")
    agent.call("convert_gguf", source=job, quantizations=["Q4_K_M"])
    agent.call("submit", method="sft", model=job, dataset=str(world.dataset), dry_run=True)
    assert_replays(agent)


def test_ps_and_report_over_every_ending(world: World) -> None:
    for reason in (R.OOM, R.UNKNOWN, R.SUCCEEDED, R.CANCELLED):
        add_record(world, reason)
    add_record(world, None)
    agent = world.agent().sandbox()
    agent.call("ps")
    agent.call("ps", status="failed")
    agent.call("ps", status="queued", limit=2)
    agent.call("report", days=1, group_by="method")
    assert_replays(agent)


def test_a_stalled_job_is_named_by_its_watchdog(world: World) -> None:
    """The job side's alerts (scripts/_watch.py) reach the agent in wait, inspect and ps: their fixes are proposals."""
    running = add_record(world, None, status=JobStatus.RUNNING, started_at=time.time() - 900)
    stalled = load_watch().Watchdog(60.0, lambda alert: None).check(time.monotonic() + 600)
    assert stalled
    add_events(world, f"{running}/1", {"event": "alert", **stalled})
    agent = world.agent().sandbox()  # the running record is the world host's: a sandbox never probes it
    agent.call("wait", job_id=running, timeout_s=0)
    agent.call("inspect", job_id=running)
    agent.call("ps", status="running")
    assert_replays(agent)


def test_bad_input_from_a_hyperparameter_names_the_corrected_submit(world: World, tmp_path: Path) -> None:
    """A one-row dataset with eval_split_ratio 0.4 ended bad_input (preflight now refuses it, dataset.nothing_to_train):
    retry refuses, and names the submit without the held-out slice."""
    one = tmp_path / "one.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    one.write_text(json.dumps({"messages": turns}) + "\n")
    job = add_record(world, R.BAD_INPUT, hyperparameters={"eval_split_ratio": 0.4}, dataset=one, forced=True)
    agent = world.agent().sandbox()
    refused = agent.call("retry", job_id=job)
    [submit] = [c for c in calls_of(refused) if c.startswith("submit(")]
    assert "eval_split_ratio" not in submit and f'dataset="{one}"' in submit, refused.summary
    agent.call("inspect", job_id=job)
    assert_replays(agent)
