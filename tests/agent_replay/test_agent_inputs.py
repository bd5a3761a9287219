"""Careless agents at the door: typos, wrong types, strings for numbers, names people write, refused submits and
dry runs, the planning tools. Each scenario is a few calls; every call the replies propose is replayed
(replay_harness) and must be accepted. No job runs here: submits are dry runs or refused, and the one that
would start a job runs on a sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_harness import Agent, World, assert_replays, calls_of


@pytest.fixture
def agent(world: World) -> Agent:
    return world.agent()


def _pairs(path: Path, rows: int = 3) -> Path:
    path.write_text(
        "".join(json.dumps({"prompt": f"p{i}", "chosen": "yes", "rejected": "no"}) + "\n" for i in range(rows))
    )
    return path


def test_a_typo_in_a_hyperparameter_is_refused_without_force(world: World, agent: Agent) -> None:
    reply = agent.call(
        "submit",
        method="sft",
        model=str(world.model),
        dataset=str(world.dataset),
        hyperparameters={"learnin_rate": 1e-4},
        dry_run=True,
    )
    assert reply["status"] == "dry_run" and "hyperparameters.unknown" in reply.summary
    assert not [c for c in calls_of(reply) if "force=true" in c]  # force would not pass an unknown name
    forced = agent.call(
        "submit",
        method="sft",
        model=str(world.model),
        dataset=str(world.dataset),
        hyperparameters={"learnin_rate": 1e-4},
        force=True,
    )
    assert forced["status"] == "rejected" and "force=true" not in forced.summary  # refused forced: never again
    assert_replays(agent)


def test_strings_for_numbers_and_names_people_write(world: World, agent: Agent) -> None:
    reply = agent.call(
        "submit",
        method="sft",
        model=str(world.model),
        dataset=str(world.dataset),
        hyperparameters={"max_steps": "3", "lr": "1e-4", "batch": 2},
        dry_run=True,
    )
    assert reply["status"] == "dry_run", reply.summary
    started = [c for c in calls_of(reply) if c.startswith("submit(")]
    assert started and "dry_run" not in started[0] and str(world.dataset) in started[0]  # the same submit, for real
    assert_replays(agent)


def test_a_wrong_case_method_and_a_misplaced_hyperparameter(world: World, agent: Agent) -> None:
    wrong = agent.call("submit", method="SFT", model=str(world.model), dataset=str(world.dataset), dry_run=True)
    assert wrong.is_error and "Did you mean 'sft'" in wrong.text
    beside = agent.call(
        "submit", method="sft", model=str(world.model), dataset=str(world.dataset), max_steps=3, dry_run=True
    )
    assert beside.is_error and "hyperparameters" in beside.text
    assert_replays(agent)


def test_a_missing_dataset_proposes_the_same_submit_with_the_data_left_to_the_agent(
    world: World, agent: Agent, tmp_path: Path
) -> None:
    reply = agent.call("submit", method="sft", model=str(world.model), dataset=str(tmp_path / "nope.jsonl"))
    assert reply["status"] == "rejected"
    assert f'submit(method="sft", model="{world.model}", dataset=..., dry_run=true)' in calls_of(reply)
    assert_replays(agent)


def test_a_missing_model(world: World, agent: Agent, tmp_path: Path) -> None:
    reply = agent.call(
        "submit", method="sft", model=str(tmp_path / "no-model"), dataset=str(world.dataset), dry_run=True
    )
    assert "model." in reply.summary
    assert_replays(agent)


def test_a_forbidden_output_is_left_out_never_forced(world: World, agent: Agent) -> None:
    reply = agent.call(
        "submit", method="sft", model=str(world.model), dataset=str(world.dataset), output="/etc/jt", dry_run=True
    )
    assert "output.forbidden" in reply.summary and not [c for c in calls_of(reply) if "force=true" in c]
    assert [c for c in calls_of(reply) if c.startswith("submit(") and "output" not in c]
    assert_replays(agent)


def test_preference_pairs_for_sft_need_a_mapping_and_force_would_pass(
    world: World, agent: Agent, tmp_path: Path
) -> None:
    pairs = _pairs(tmp_path / "pairs.jsonl", rows=12)
    reply = agent.call("submit", method="sft", model=str(world.model), dataset=str(pairs), dry_run=True)
    assert "dataset.columns" in reply.summary
    proposed = calls_of(reply)
    assert any(c.startswith("validate_dataset(") for c in proposed)
    assert any("force=true" in c for c in proposed)  # the plan passes forced: force is offered
    agent.call("validate_dataset", dataset=str(pairs))
    assert_replays(agent)


def test_a_dataset_no_method_takes(world: World, agent: Agent, tmp_path: Path) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text("".join(json.dumps({"foo": i, "bar": "x"}) + "\n" for i in range(12)))
    agent.call("validate_dataset", dataset=str(odd))
    agent.call("submit", method="dpo", model=str(world.model), dataset=str(odd), dry_run=True)
    assert_replays(agent)


def test_a_one_row_dataset_with_a_held_out_slice(world: World, agent: Agent, tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    one.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}) + "\n"
    )
    agent.call(
        "submit",
        method="sft",
        model=str(world.model),
        dataset=str(one),
        hyperparameters={"eval_split_ratio": 0.4},
        dry_run=True,
    )
    agent.call("submit", method="sft", model=str(world.model), dataset=str(one), dry_run=True)
    assert_replays(agent)


def test_a_run_too_short_to_log_and_a_smoke_run_too_long(world: World, agent: Agent) -> None:
    agent.call(
        "submit",
        method="sft",
        model=str(world.model),
        dataset=str(world.dataset),
        hyperparameters={"max_steps": 3, "logging_steps": 10},
        dry_run=True,
    )
    agent.call(
        "submit",
        method="sft",
        model=str(world.model),
        dataset=str(world.dataset),
        hyperparameters={"max_steps": 3},
        smoke_steps=5,
        dry_run=True,
    )
    assert_replays(agent)


def test_a_job_id_given_as_dataset_and_an_unknown_job(world: World, agent: Agent) -> None:
    agent.call("inspect", job_id="jt-nope0000")
    agent.call("wait", job_id="jt-4f9k2m7")  # a character short
    agent.call("submit", method="sft", model=str(world.model), dataset="jt-4f9k2m7q", dry_run=True)
    assert_replays(agent)


def test_estimate_cost_carries_the_agents_arguments_into_the_submit(world: World, agent: Agent) -> None:
    reply = agent.call("estimate_cost", model=str(world.model), dataset=str(world.dataset), max_steps=30)
    [submit] = [c for c in calls_of(reply) if c.startswith("submit(")]
    assert f'dataset="{world.dataset}"' in submit and '"max_steps": 30' in submit
    agent.call("estimate_cost", model=str(world.model), num_examples=200, flavor="a10g-large")
    agent.call("estimate_cost", model=str(world.model), max_steps="30")  # a string for a number
    assert_replays(agent)


def test_the_planning_tools_and_an_empty_filter(agent: Agent) -> None:
    agent.call("hardware")
    agent.call("report", days=1)
    agent.call("report", days=7, group_by="method")
    agent.call("ps", status="running")
    agent.call("ps", limit="5")  # a string for a number
    agent.call("logs", job_id="jt-nope0000", tail=-1)
    assert_replays(agent)


def test_evaluate_and_convert_with_careless_arguments(world: World, agent: Agent) -> None:
    sandbox = agent.sandbox()  # what would start a job starts it there, never here
    sandbox.call("evaluate", dataset=str(world.dataset))  # neither job_id nor model
    sandbox.call("evaluate", model=str(world.model), dataset=str(world.dataset), metrics=["acc"])
    sandbox.call("convert_gguf", source=str(world.model), quantizations=[])
    sandbox.call("convert_gguf", source=str(world.model), quantizations=["Q9_Z"])
    sandbox.call("convert_gguf", source=str(world.model), quantizations="Q8_0")  # a string for a list
    assert_replays(sandbox)


def test_convert_gguf_names_the_pre_tokenizer_its_tokenizer_needs(world: World, agent: Agent) -> None:
    sandbox = agent.sandbox()
    reply = sandbox.call("convert_gguf", source=str(world.model), quantizations=["Q8_0"])
    # The tiny model's BPE tokenizer is unknown to llama.cpp by its hash; its split regex is Qwen2's.
    assert reply["job_id"] and reply["pre_tokenizer"] == "qwen2" and reply["applied_pre_tokenizer"], reply.summary
    assert "pre_tokenizer='qwen2' applied" in reply.summary
    assert_replays(sandbox)
