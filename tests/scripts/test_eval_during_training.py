"""Evaluation during training, for real on the tiny model: a held-out slice of the training rows
(eval_split_ratio) or an eval_dataset is scored every eval_steps; each evaluation is an `eval` event with
its step, the data manifest records which rows, and an eval dataset the method cannot score is bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobtrail.outcomes import events
from jobtrail.templates.render import render_script
from support.jobs import JobRun, lora_job_config, run_jobs, succeeded, write_jsonl


def _job(root: Path, name: str, model: Path, data: Path, env: dict[str, str], evaluate: dict[str, Any]):
    config = lora_job_config("sft", model, data, root / name / "out", max_steps=8, save_steps=4)
    config["training_args"].update(eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=4)
    config["eval"] = {"split_ratio": None, "seed": 7, "dataset": None, **evaluate}
    script = root / name / "job.py"
    script.parent.mkdir(parents=True)
    script.write_text(render_script("sft", config))
    return script, env


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, chat_dataset: Path, job_env) -> dict[str, JobRun]:
    root = tmp_path_factory.mktemp("eval-during-training")
    rows = chat_dataset.read_text().splitlines()
    held_out = root / "held_out.jsonl"
    held_out.write_text("\n".join(rows[:12]) + "\n")
    questions = write_jsonl(root / "qa.jsonl", [{"question": "2+2?", "answer": "4"}] * 4)
    jobs = {
        "split": _job(root, "split", tiny_model, chat_dataset, job_env, {"split_ratio": 0.25}),
        "dataset": _job(root, "dataset", tiny_model, chat_dataset, job_env, {"dataset": {"source": str(held_out)}}),
        "unfit": _job(root, "unfit", tiny_model, chat_dataset, job_env, {"dataset": {"source": str(questions)}}),
    }
    return dict(zip(jobs, run_jobs(*jobs.values()), strict=True))


def test_a_held_out_slice_is_evaluated_every_eval_steps(runs: dict[str, JobRun]) -> None:
    run = succeeded(runs["split"])
    manifest = run.one("data_manifest")
    assert manifest["rows"] == 64
    assert manifest["eval"] == {"kind": "split", "ratio": 0.25, "seed": 7, "train_rows": 48, "eval_rows": 16}
    evaluations = run.named("eval")
    assert [e["step"] for e in evaluations] == [2, 4, 6, 8]
    assert all(isinstance(e["metrics"]["eval_loss"], float) and "eval_runtime" in e["metrics"] for e in evaluations)
    # What the server reads back: eval_loss with its step, beside the training loss of the same steps.
    points = events.eval_metrics(run.events)
    assert [(p["step"], p["eval_loss"]) for p in points] == [
        (e["step"], e["metrics"]["eval_loss"]) for e in evaluations
    ]
    assert points[-1]["eval_loss"] < points[0]["eval_loss"]  # the held-out rows are like the training rows
    # The phases around an evaluation: evaluating after the step's event, training again after the eval event.
    trail = [e.get("phase") or e["event"] for e in run.events if e["event"] in ("phase", "step", "eval")]
    at_step_2 = trail.index("step", trail.index("training"))
    assert trail[at_step_2 + 1 : at_step_2 + 5] == ["step", "evaluating", "eval", "training"]


def test_an_eval_dataset_is_evaluated_as_the_training_rows_are(runs: dict[str, JobRun]) -> None:
    run = succeeded(runs["dataset"])
    held = run.one("data_manifest")["eval"]
    assert (held["kind"], held["format"], held["eval_rows"], held["train_rows"]) == ("dataset", "messages", 12, 64)
    assert held["dataset"]["rows"] == 12 and held["dataset"]["source"].endswith("held_out.jsonl")
    assert held["dataset"]["kind"] == "file" and len(held["dataset"]["sha256"]) == 64
    assert [e["step"] for e in run.named("eval")] == [2, 4, 6, 8]


def test_an_eval_dataset_the_method_cannot_score_is_bad_input(runs: dict[str, JobRun]) -> None:
    run = runs["unfit"]
    term = run.termination
    assert term["reason"] == "bad_input", run.describe()
    assert "eval_dataset" in term["message"] and "eval_split_ratio" in term["message"]
    assert not run.named("step") and not run.named("data_manifest")


def test_the_data_manifest_is_plain_json(runs: dict[str, JobRun]) -> None:
    assert json.loads(json.dumps(runs["split"].one("data_manifest")))["eval"]["seed"] == 7
