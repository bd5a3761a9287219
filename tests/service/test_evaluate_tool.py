"""evaluate(): evaluation jobs tied to a job's checkpoints, with provenance in the ledger."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.demo.tinymodel import write_chat_dataset
from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.outcomes import events
from jobtrail.requests import EvaluateRequest
from jobtrail.surface.params import EvalDataset
from support.jobs import job_spec
from support.waiting import wait_for, wait_until_terminal

ROOT = Path(__file__).resolve().parents[2]
HYPER = {
    "max_steps": 8,
    "logging_steps": 1,
    "save_steps": 4,
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 1,
    "max_length": 64,
    "learning_rate": 2e-2,
}


def test_evaluations_of_base_and_trained_checkpoints_with_provenance(
    tmp_path, tiny_model, chat_dataset, two_local_slots
):
    service = build_service(tmp_path / "home")
    heldout = write_chat_dataset(tmp_path / "heldout.jsonl", rows=12, seed=7)
    trained = service.submit(job_spec("sft", tiny_model, chat_dataset, hyperparameters=HYPER))
    base = service.evaluate(
        EvaluateRequest(str(heldout), model=str(tiny_model))
    )  # the base model needs no training: beside it
    assert wait_until_terminal(lambda: service.inspect(trained.job_id), 180, "training").status == "succeeded"

    final = service.evaluate(EvaluateRequest(str(heldout), job_id=trained.job_id))
    middle = service.evaluate(EvaluateRequest(str(heldout), job_id=trained.job_id, checkpoint="checkpoint-4"))
    for ev in (base, final, middle):
        job_id = ev.job_id
        assert (
            wait_until_terminal(lambda job_id=job_id: service.inspect(job_id), 180, "an evaluation").status
            == "succeeded"
        )

    records = {e["checkpoint"]: e for e in service.inspect(trained.job_id).evaluations}
    assert set(records) == {"final", "checkpoint-4"}
    final_record = records["final"]["record"]
    assert records["final"]["state"] == "finished" and "loss" in records["final"]["metrics"]
    assert len(final_record["evaluator"]["sha256"]) == 64 and final_record["evaluator"]["packages"]["torch"]
    assert final_record["task_set"]["rows"] == 12 and len(final_record["task_set"]["revision_or_sha256"]) == 64
    assert final_record["decoding"]["temperature"] == 0.0 and Path(final_record["raw_outputs"]).is_file()
    assert final_record["checkpoint"]["manifest_sha256"]
    base_loss = service.ledger.events(f"{base.job_id}/1", "eval")[-1]["metrics"]["loss"]
    assert records["final"]["metrics"]["loss"] < base_loss  # training helped on held-out data

    # "Which checkpoint of this run scored best on task set X, with which evaluator?" — one query.
    task_set = final_record["task_set"]["revision_or_sha256"]
    best = (
        service.ledger._conn()
        .execute(
            "SELECT checkpoint, evaluator_sha256 FROM evals "
            "WHERE target_run_id = ? AND task_set_sha256 = ? AND state = 'finished'"
            " ORDER BY json_extract(metrics_json, '$.loss') LIMIT 1",
            (trained.job_id, task_set),
        )
        .fetchone()
    )
    assert best[0] in ("final", "checkpoint-4") and best[1] == final_record["evaluator"]["sha256"]

    # Each evaluation job shows its own result: what it evaluated and the metrics; a model alone included.
    of_base, of_final = service.inspect(base.job_id), service.inspect(final.job_id)
    assert of_base.evaluation and of_base.evaluation["evaluates"] == str(tiny_model)
    assert of_base.evaluation["checkpoint"] == "base" and of_base.evaluation["metrics"]["loss"] == base_loss
    assert of_final.evaluation and of_final.evaluation["evaluates"] == trained.job_id
    assert (
        of_final.evaluation["checkpoint"] == "final" and of_final.evaluation["metrics"] == records["final"]["metrics"]
    )
    assert f"Evaluates {trained.job_id} at final: loss" in of_final.to_markdown()
    assert service.inspect(trained.job_id).evaluation is None
    # One evaluator, whichever job it scores: its identity leaves the per-job CONFIG out.
    assert of_base.evaluation["evaluator_sha256"] == records["final"]["evaluator_sha256"] == best[1]
    assert of_base.evaluation["record"]["evaluator"]["script_sha256"] != final_record["evaluator"]["script_sha256"]


def test_a_crashing_evaluator_ends_eval_failed_and_leaves_training_alone(tmp_path, tiny_model, chat_dataset):
    service = build_service(tmp_path / "home")
    trained = service.submit(job_spec("sft", tiny_model, chat_dataset, hyperparameters={**HYPER, "max_steps": 2}))
    assert wait_until_terminal(lambda: service.inspect(trained.job_id), 180, "training").status == "succeeded"
    failing = service.evaluate(EvaluateRequest(str(chat_dataset), job_id=trained.job_id, metrics=["pairwise_accuracy"]))
    done = wait_until_terminal(lambda: service.inspect(failing.job_id), 180, "the evaluation")
    assert done.status == "failed" and done.termination_reason == "eval_failed"
    job = service.inspect(trained.job_id)
    assert job.status == "succeeded" and job.evaluations[0]["state"] == "failed"
    with pytest.raises(NotFoundError):
        service.evaluate(EvaluateRequest(str(chat_dataset), job_id=trained.job_id, checkpoint="checkpoint-999"))
    with pytest.raises(InvalidRequestError):
        service.evaluate(EvaluateRequest(str(chat_dataset)))


def test_submit_with_eval_dataset_measures_base_before_and_final_after(
    tmp_path, tiny_model, chat_dataset, two_local_slots
):
    service = build_service(tmp_path / "home")
    heldout = write_chat_dataset(tmp_path / "heldout.jsonl", rows=12, seed=7)
    job = service.submit(job_spec("sft", tiny_model, chat_dataset, hyperparameters=HYPER, eval_dataset=str(heldout)))
    done = wait_for(
        lambda: (r := service.inspect(job.job_id)).eval_delta is not None and r, 300, "both evaluations and the delta"
    )
    assert [e["checkpoint"] for e in done.evaluations] == ["base", "final"]
    base_eval, final_eval = done.evaluations
    assert base_eval["evaluator_sha256"] == final_eval["evaluator_sha256"] and len(base_eval["evaluator_sha256"]) == 64
    assert done.eval_delta["loss"] < 0 and "Change from the base model" in done.to_markdown()
    # The same held-out rows are scored during training too, every tenth of the run (eval_steps 0.1 of 8 steps).
    training = done.attempts[0]
    assert training.data_manifest and training.data_manifest["eval"]["kind"] == "dataset"
    assert training.data_manifest["eval"]["eval_rows"] == 12
    points = events.eval_metrics(service.ledger.events(training.attempt_id, "eval"))
    assert [p["step"] for p in points] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert all(isinstance(p["eval_loss"], float) for p in points)


def test_the_base_evaluation_is_queued_behind_training_as_the_docs_say(tmp_path, tiny_model, chat_dataset):
    """references/methods.md said the base evaluation is queued ahead of training: it is an evaluation job queued
    behind the training attempt, so on the one local slot (the default) it waits for training to end."""
    service = build_service(tmp_path / "home")
    endless = {**HYPER, "max_steps": 100000, "save_steps": 100000}
    job = service.submit(
        job_spec("sft", tiny_model, chat_dataset, hyperparameters=endless, eval_dataset=str(chat_dataset))
    ).job_id
    (base,) = service.inspect(job).evaluations
    try:
        wait_for(lambda: service.inspect(job).progress.step is not None, 120, "training")
        evaluation = service.inspect(base["eval_job_id"])
        assert base["checkpoint"] == "base" and evaluation.status == "queued", evaluation.summary
        assert job in (evaluation.waiting_for or ""), evaluation.waiting_for
    finally:
        service.cancel(base["eval_job_id"])
        service.cancel(job)
    said = {
        "references/methods.md": " ".join((ROOT / "references" / "methods.md").read_text().split()),
        "eval_dataset's description": EvalDataset.__metadata__[0].description,
    }
    for where, text in said.items():
        assert "ahead of training" not in text and "evaluated before training" not in text, where
        assert "queued behind" in text, where
