"""Careless-agent conversations written apart from the scenario suite (issue 27's second check), run the same way:
every call a reply proposes is replayed as written (replay_harness.py) and must be accepted.

Each conversation is what a sloppy agent sends: misspelt arguments, strings for numbers, comma strings for lists,
a method in capitals, a job id where a dataset goes, top-level hyperparameters on retry, calls on the wrong kind
of job or on ids that do not exist. Jobs are ledger records (add_record) and the pipeline's evaluation; a
conversation that retries, cancels, releases or starts jobs runs on a sandbox (a copy of the ledger whose host has
no slot), so nothing here trains."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from replay_harness import TINY, Agent, Jobs, World, add_record, assert_replays

from jobtrail.models import TerminationReason as R
from jobtrail.preflight.plan import Conversion


def _data(world: World, name: str, rows: list[dict[str, object]]) -> Path:
    path = world.root / "apart" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


REPLAYED: list[int] = []  # proposals replayed per conversation, said once the module ends


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    print(f"\napart scenarios: {len(REPLAYED)} conversations, {sum(REPLAYED)} proposals replayed")


def _converse(agent: Agent, *calls: tuple[str, dict[str, object]]) -> None:
    for tool, arguments in calls:
        agent.call(tool, **arguments)
    REPLAYED.append(agent.replayed)
    assert_replays(agent)


def test_misspelt_submit_arguments_then_the_named_fix(world: World) -> None:
    agent = world.agent()
    model, dataset = str(world.model), str(world.dataset)
    _converse(
        agent,
        ("submit", {"methd": "sft", "model": model, "dataset": dataset}),
        ("submit", {"method": "sft", "modle": model, "datset": dataset, "dry_run": True}),
        ("submit", {"method": "sft", "model": model, "dataset": dataset, "hyperparameter": {"max_steps": 4}}),
    )
    assert all(r.is_error for r in agent.replies)


def test_numbers_written_as_strings(world: World) -> None:
    agent = world.agent()
    hyper = {"learning_rate": "2e-4", "max_steps": "30", "per_device_train_batch_size": "2", "logging_steps": "1"}
    _converse(
        agent,
        (
            "submit",
            {
                "method": "sft",
                "model": str(world.model),
                "dataset": str(world.dataset),
                "hyperparameters": hyper,
                "dry_run": True,
            },
        ),
        (
            "submit",
            {
                "method": "sft",
                "model": str(world.model),
                "dataset": str(world.dataset),
                "smoke_steps": "2",
                "hyperparameters": TINY,
                "dry_run": "true",
            },
        ),
    )


def test_lists_written_as_comma_strings(world: World) -> None:
    agent = world.agent()
    _converse(
        agent,
        (
            "submit",
            {
                "method": "sft",
                "model": str(world.model),
                "dataset": str(world.dataset),
                "dry_run": True,
                "hyperparameters": {**TINY, "lora_target_modules": "q_proj,v_proj"},
            },
        ),
        ("estimate_cost", {"model": str(world.model), "dataset": str(world.dataset), "max_steps": 30}),
        ("convert_gguf", {"source": "nope-no-such-job", "quantizations": "Q4_K_M,Q8_0"}),
    )


def test_method_in_capitals(world: World) -> None:
    agent = world.agent()
    _converse(
        agent,
        ("submit", {"method": "SFT", "model": str(world.model), "dataset": str(world.dataset), "dry_run": True}),
        ("validate_dataset", {"dataset": str(world.dataset), "method": "Sft"}),
        ("estimate_cost", {"model": str(world.model), "dataset": str(world.dataset), "method": "DPO"}),
    )


def test_a_job_id_passed_as_dataset(world: World, pipeline: Jobs) -> None:
    trained = pipeline.trained
    agent = world.agent()
    _converse(
        agent,
        ("submit", {"method": "dpo", "model": str(world.model), "dataset": trained, "dry_run": True}),
        ("validate_dataset", {"dataset": trained, "method": "sft"}),
    )


def test_estimate_then_its_next_steps_literally(world: World) -> None:
    agent = world.agent()
    _converse(
        agent,
        (
            "estimate_cost",
            {
                "model": str(world.model),
                "dataset": str(world.dataset),
                "max_steps": 30,
                "per_device_train_batch_size": 2,
            },
        ),
        ("estimate_cost", {"model": str(world.model), "num_examples": 64, "avg_tokens": 40}),
        ("hardware", {}),
    )


def test_wrong_columns_then_the_fix(world: World) -> None:
    rows = [{"question": f"what is {i}+1?", "answer": str(i + 1)} for i in range(12)]
    qa = _data(world, "qa.jsonl", rows)
    agent = world.agent()
    _converse(
        agent,
        ("validate_dataset", {"dataset": str(qa), "method": "sft"}),
        (
            "submit",
            {"method": "sft", "model": str(world.model), "dataset": str(qa), "hyperparameters": TINY, "dry_run": True},
        ),
        ("validate_dataset", {"dataset": str(qa), "method": "dpo"}),
    )


def test_force_on_what_force_cannot_pass(world: World) -> None:
    rows = [{"foo": i} for i in range(12)]
    junk = _data(world, "junk.jsonl", rows)
    agent = world.agent()
    _converse(
        agent,
        (
            "submit",
            {
                "method": "sft",
                "model": str(world.model),
                "dataset": str(world.dataset),
                "force": True,
                "dry_run": True,
                "hyperparameters": {**TINY, "lerning_rate": 1e-4},
            },
        ),
        (
            "submit",
            {
                "method": "dpo",
                "model": str(world.model),
                "dataset": str(junk),
                "force": True,
                "dry_run": True,
                "hyperparameters": TINY,
            },
        ),
        (
            "submit",
            {
                "method": "sft",
                "model": str(world.model),
                "dataset": str(world.dataset),
                "force": True,
                "dry_run": True,
                "output": "/etc/jobtrail-out",
            },
        ),
    )


def test_retry_with_hyperparameters_at_the_top_level(world: World) -> None:
    oom = add_record(world, R.OOM)
    diverged = add_record(world, R.DIVERGED)
    agent = world.agent().sandbox()
    _converse(
        agent,
        ("retry", {"job_id": oom, "per_device_train_batch_size": 1}),
        ("retry", {"job_id": diverged, "learning_rate": "1e-4"}),
        ("retry", {"job_id": diverged, "hyperparameters": {"learning_rate": 1e-4}}),
        ("inspect", {"job_id": oom}),
    )


def test_cancel_a_finished_job_then_retry_it(world: World) -> None:
    timed_out = add_record(world, R.TIMEOUT)
    cancelled = add_record(world, R.CANCELLED)
    agent = world.agent().sandbox()
    _converse(
        agent,
        ("cancel", {"job_id": timed_out}),
        ("retry", {"job_id": timed_out}),
        ("cancel", {"job_id": cancelled}),
        ("retry", {"job_id": cancelled}),
        ("wait", {"job_id": cancelled, "timeout_s": "0"}),
    )


def test_wait_and_plot_on_an_evaluation_job(world: World, pipeline: Jobs) -> None:
    agent = world.agent()
    _converse(
        agent,
        ("wait", {"job_id": pipeline.evaluated, "timeout_s": 0}),
        ("metrics", {"job_id": pipeline.evaluated}),
        ("plot", {"job_id": pipeline.evaluated}),
        ("inspect", {"job_id": pipeline.evaluated}),
    )


def test_convert_a_job_that_has_no_model_then_follow_next(world: World) -> None:
    failed = add_record(world, R.CONFIG_ERROR)
    unknown = add_record(world, R.UNKNOWN)
    agent = world.agent().sandbox()
    _converse(
        agent,
        ("convert_gguf", {"source": failed, "quantizations": ["Q4_K_M"]}),
        ("convert_gguf", {"job_id": unknown, "quantization": "Q8_0"}),
        ("evaluate", {"job_id": failed, "dataset": str(world.dataset)}),
    )


def test_metrics_and_plot_on_a_conversion(world: World) -> None:
    trained = add_record(world, R.SUCCEEDED)
    conversion = add_record(world, R.SUCCEEDED, task=Conversion(["Q8_0"]), spec={"after": trained})
    failed = add_record(world, R.CONFIG_ERROR, task=Conversion(["Q4_K_M"]))
    agent = world.agent().sandbox()
    _converse(
        agent,
        ("metrics", {"job_id": conversion}),
        ("plot", {"job_id": conversion, "metric": "loss"}),
        ("wait", {"job_id": conversion}),
        ("logs", {"job_id": failed}),
        ("retry", {"job_id": failed, "changes": {"learning_rate": 1e-4}}),
        ("inspect", {"job_id": failed}),
    )


def test_ps_with_bad_filters(world: World) -> None:
    agent = world.agent()
    _converse(
        agent,
        ("ps", {"status": "runing"}),
        ("ps", {"status": "FAILED", "limit": "5"}),
        ("ps", {"filter": "failed"}),
        ("report", {"days": "7"}),
    )


def test_an_unknown_job_id_everywhere(world: World) -> None:
    agent = world.agent().sandbox()
    ghost = "jt-00000000-ghost"
    _converse(
        agent,
        ("inspect", {"job_id": ghost}),
        ("logs", {"job_id": ghost}),
        ("wait", {"job_id": ghost}),
        ("retry", {"job_id": ghost}),
        ("cancel", {"id": ghost}),
    )


def test_release_what_is_not_held(world: World) -> None:
    succeeded = add_record(world, R.SUCCEEDED)
    failed = add_record(world, R.BAD_INPUT)
    agent = world.agent().sandbox()
    _converse(
        agent, ("release", {"job_id": succeeded}), ("release", {"job_id": failed}), ("release", {"job": succeeded})
    )


def test_a_chain_whose_parent_failed(world: World) -> None:
    parent = add_record(world, R.CONFIG_ERROR)
    agent = world.agent().sandbox()
    follower = agent.call(
        "submit", method="dpo", model=parent, dataset=str(world.dataset), hyperparameters=TINY, after=parent
    )
    evaluation = agent.call("evaluate", job_id=parent, dataset=str(world.dataset), after=parent)
    for reply in (follower, evaluation):
        job = None if reply.is_error or reply.content is None else reply.content.get("job_id")
        if job:
            agent.call("wait", job_id=job, timeout_s=0)
            agent.call("retry", job_id=job)
            agent.call("inspect", job_id=job)
    _converse(agent, ("retry", {"job_id": parent}))


def test_names_people_write_and_a_smoke_run_too_long(world: World) -> None:
    agent = world.agent()
    base = {"method": "sft", "model": str(world.model), "dataset": str(world.dataset), "dry_run": True}
    _converse(
        agent,
        ("submit", {**base, "hyperparameters": {"batch": 2, "epochs": "1", "lr": "1e-3", "seq_len": 64}}),
        ("submit", {**base, "smoke_steps": 500, "hyperparameters": {"num_train_epochs": 1, "logging_steps": 400}}),
        ("submit", {**base, "hyperparameters": {**TINY, "eval_split_ratio": 0.99}}),
        ("submit", {**base, "learning_rate": 1e-4, "max_steps": 4}),
    )


@pytest.mark.parametrize(
    "reason", [R.TIMEOUT, R.PREEMPTED, R.DISK_FULL, R.DEPENDENCY_ERROR, R.INFRA_TRANSIENT, R.LOST, R.EVAL_FAILED]
)
def test_wait_then_retry_each_ending(world: World, reason: R) -> None:
    job = add_record(world, reason)
    agent = world.agent().sandbox()
    _converse(
        agent,
        ("wait", {"job_id": job, "timeout_s": 0}),
        ("retry", {"job_id": job, "changes": '{"max_steps": 4}'}),
        ("retry", {"job_id": job}),
        ("metrics", {"job_id": job}),
    )


def test_more_submit_slips(world: World, pipeline: Jobs) -> None:
    agent = world.agent()
    base = {"method": "sft", "model": str(world.model), "dataset": str(world.dataset), "dry_run": True}
    _converse(
        agent,
        ("submit", {**base, "eval_dataset": pipeline.trained, "hyperparameters": TINY}),
        ("submit", {**base, "timeout": "30", "hyperparameters": TINY}),
        ("submit", {**base, "timeout": "1m", "hyperparameters": {"num_train_epochs": 50}}),
        ("submit", {**base, "max_cost_usd": "5", "hyperparameters": TINY}),
        ("submit", {**base, "backend": "hf-jobs", "hyperparameters": TINY}),
        ("submit", {**base, "dataset_mapping": "messages=conversations", "hyperparameters": TINY}),
        ("submit", {**base, "method": "kto", "hyperparameters": TINY}),
        ("submit", {**base, "method": "grpo", "hyperparameters": TINY}),
        ("submit", {**base, "hyperparameters": {**TINY, "output_dir": "/tmp/x", "push_to_hub": True}}),
    )


def test_a_succeeded_record_with_no_files(world: World) -> None:
    trained = add_record(world, R.SUCCEEDED)
    agent = world.agent().sandbox()
    _converse(
        agent,
        ("inspect", {"job_id": trained}),
        ("wait", {"job_id": trained, "timeout_s": 0}),
        ("retry", {"job_id": trained}),
        ("evaluate", {"job_id": trained, "dataset": str(world.dataset)}),
        ("convert_gguf", {"source": trained, "quantizations": ["Q4_K_M"], "pre_tokenizer": "qwen2"}),
        ("logs", {"job_id": trained, "cursor": "abc"}),
    )


@pytest.mark.parametrize("reason", list(R))
def test_inspect_then_follow_each_ending(world: World, reason: R) -> None:
    job = add_record(world, reason)
    conversion = add_record(world, reason, task=Conversion(["Q8_0"]))
    agent = world.agent().sandbox()
    _converse(
        agent,
        ("inspect", {"job_id": job}),
        ("inspect", {"job_id": conversion}),
        ("wait", {"job_id": conversion, "timeout_s": 0}),
        ("retry", {"job_id": conversion}),
    )


def test_chaining_on_jobs_that_have_not_ended(world: World, pipeline: Jobs) -> None:
    agent = world.agent()
    base = {"model": pipeline.trained, "dataset": str(world.dataset), "dry_run": True, "hyperparameters": TINY}
    _converse(
        agent,
        ("submit", {**base, "method": "sft", "after": pipeline.trained}),
        ("submit", {**base, "method": "sft", "after": "jt-nothere1"}),
        ("submit", {**base, "method": "sft", "init_from": pipeline.failing}),
        ("estimate_cost", {"model": pipeline.trained, "dataset": str(world.dataset), "max_steps": "8"}),
        ("validate_dataset", {"dataset": str(world.dataset), "method": "sft", "model": pipeline.trained}),
    )


def test_idempotent_submits_with_drifting_values(world: World) -> None:
    agent = world.agent().sandbox()
    base = {"method": "sft", "model": str(world.model), "dataset": str(world.dataset), "idempotency_key": "k-apart-1"}
    _converse(
        agent,
        ("submit", {**base, "hyperparameters": {**TINY, "max_steps": 4}}),
        ("submit", {**base, "hyperparameters": {**TINY, "max_steps": "4"}}),
        ("submit", {**base, "hyperparameters": {**TINY, "max_steps": 6}}),
        ("cancel", {"job_id": "k-apart-1"}),
    )
