"""jobtrail.outcomes.evals: the evaluate job's CONFIG, and its record rebuilt from `eval` events (pure)."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from jobtrail.errors import InvalidRequestError
from jobtrail.outcomes.evals import EVAL_METRICS, EvalRecord, Evaluation, delta, eval_config
from jobtrail.templates.render import scripts_dir

EVALUATOR = {
    "template": "evaluate",
    "template_version": 1,
    "sha256": "ef" * 32,
    "script_sha256": "ab" * 32,
    "packages": {"torch": "2.13.0", "trl": None},
}
TASK_SET = {
    "dataset": "/data/held_out.jsonl",
    "revision_or_sha256": "cd" * 32,
    "split": "train",
    "rows": 12,
    "rows_available": 40,
    "format": "messages",
    "mapping": None,
}
DECODING = {"max_new_tokens": 64, "temperature": 0.0, "do_sample": False, "seed": 42}
CHECKPOINT = {
    "label": "final",
    "model": "/models/tiny",
    "adapter": "/out/final",
    "manifest_sha256": "ef" * 32,
    "step": 16,
}
RECORD = {
    "evaluator": EVALUATOR,
    "task_set": TASK_SET,
    "decoding": DECODING,
    "checkpoint": CHECKPOINT,
    "scorer": "log_likelihood",
}


def started(at: float = 10.0) -> dict[str, Any]:
    return {"event": "eval", "time": at, "state": "started", "metric_names": ["loss", "perplexity"], **RECORD}


def finished(metrics: dict[str, float], at: float = 20.0) -> dict[str, Any]:
    return {
        "event": "eval",
        "time": at,
        "state": "finished",
        "metrics": metrics,
        "raw_outputs": "/out/raw_outputs.jsonl",
        "raw_outputs_sha256": "12" * 32,
        "sampled_failures": [{"index": 3, "correct": False}],
        **RECORD,
    }


def failed(at: float = 15.0) -> dict[str, Any]:
    return {
        "event": "eval",
        "time": at,
        "state": "failed",
        "cause": "bad_input",
        "message": "ValueError: dataset row 0 does not fit the messages format",
    }


def test_a_finished_evaluation_holds_every_provenance_field() -> None:
    events = [{"event": "start", "time": 1.0}, started(), {"event": "step", "step": 1}, finished({"loss": 2.0})]
    record = EvalRecord.from_events(events)
    assert record is not None and record.state == "finished"
    assert record.evaluator and record.evaluator.script_sha256 == "ab" * 32 and record.evaluator.sha256 == "ef" * 32
    assert record.evaluator.packages["trl"] is None  # not installed where the evaluator ran
    assert record.task_set and (record.task_set.rows, record.task_set.revision_or_sha256) == (12, "cd" * 32)
    assert record.decoding and record.decoding.do_sample is False
    assert record.checkpoint and (record.checkpoint.step, record.checkpoint.adapter) == (16, "/out/final")
    assert record.metrics == {"loss": 2.0} and record.metric_names == ["loss", "perplexity"]
    assert record.raw_outputs == "/out/raw_outputs.jsonl" and record.sampled_failures[0]["index"] == 3
    assert (record.started_at, record.finished_at, record.failure) == (10.0, 20.0, None)


def test_no_eval_events_is_no_record() -> None:
    assert EvalRecord.from_events([{"event": "start"}, {"event": "termination", "reason": "succeeded"}]) is None


def test_a_failure_after_the_start_keeps_what_was_evaluated() -> None:
    record = EvalRecord.from_events([started(), failed()])
    assert record is not None and record.state == "failed"
    assert record.checkpoint and record.checkpoint.label == "final"  # which checkpoint's evaluation failed
    assert record.failure and "row 0" in record.failure and record.failure_cause == "bad_input"
    assert record.metrics == {} and record.finished_at == 15.0


def test_a_failure_before_the_start_is_a_record_without_provenance() -> None:
    record = EvalRecord.from_events([failed()])
    assert record is not None and record.state == "failed"
    assert record.evaluator is None and record.started_at is None and record.failure_cause == "bad_input"


def test_a_job_that_died_mid_evaluation_stays_started() -> None:
    record = EvalRecord.from_events([started()])
    assert record is not None and record.state == "started" and record.finished_at is None


def test_the_last_evaluation_wins() -> None:
    events = [started(1.0), finished({"loss": 3.0}, 2.0), started(3.0), finished({"loss": 1.0}, 4.0)]
    record = EvalRecord.from_events(events)
    assert record is not None and record.metrics == {"loss": 1.0} and record.started_at == 3.0


def test_delta_is_after_minus_before_on_shared_metrics() -> None:
    before = EvalRecord.from_events([started(), finished({"loss": 3.0, "perplexity": 20.0, "exact_match": 0.25})])
    after = EvalRecord.from_events([started(), finished({"loss": 2.5, "perplexity": 12.0, "exact_match": 0.5})])
    assert before and after
    assert delta(before, after) == {"loss": -0.5, "perplexity": -8.0, "exact_match": 0.25}
    del after.metrics["exact_match"]
    assert set(delta(before, after)) == {"loss", "perplexity"}  # only what both measured


def test_eval_config_builds_the_template_config() -> None:
    mapping = {"kind": "rename", "columns": {"question": "prompt"}}
    task = Evaluation("base", split="test", metrics=["exact_match"], temperature=0.7)
    config = eval_config(
        "/models/tiny", "org/qa", task, output_dir="/runs/r1/eval-base", mapping=mapping, max_rows=50, seed=1
    )
    assert config == {
        "template": "evaluate",
        "template_version": 1,
        "model": "/models/tiny",
        "adapter": None,
        "adapter_hub": None,
        "outputs_repo": None,
        "checkpoint_label": "base",
        "dataset": {"source": "org/qa", "split": "test", "mapping": mapping},
        "metrics": ["exact_match"],
        "max_new_tokens": 64,
        "temperature": 0.7,
        "max_rows": 50,
        "output_dir": "/runs/r1/eval-base",
        "seed": 1,
    }
    with_adapter = eval_config(
        "/models/tiny", "/d.jsonl", Evaluation("step 40", "/runs/r1/out/checkpoint-40"), output_dir="/o"
    )
    assert (with_adapter["adapter"], with_adapter["checkpoint_label"]) == ("/runs/r1/out/checkpoint-40", "step 40")
    # metrics None: the job chooses by the data's format; max_new_tokens: evaluate's default
    assert with_adapter["metrics"] is None and with_adapter["max_new_tokens"] == 64


@pytest.mark.parametrize(
    ("task", "overrides", "words"),
    [
        (Evaluation("base", metrics=["loss", "bleu"]), {}, "bleu"),
        (Evaluation("base", max_new_tokens=0), {}, "max_new_tokens"),
        (Evaluation("base", temperature=-0.1), {}, "temperature"),
        (Evaluation("base"), {"max_rows": 0}, "max_rows"),
        (Evaluation("base"), {"output_dir": "relative/dir"}, "relative"),
    ],
)
def test_eval_config_refuses_what_cannot_run_and_says_the_fix(
    task: Evaluation, overrides: dict[str, Any], words: str
) -> None:
    arguments: dict[str, Any] = {"output_dir": "/o", **overrides}
    with pytest.raises(InvalidRequestError) as caught:
        eval_config("/models/tiny", "/d.jsonl", task, **arguments)
    assert words in caught.value.message and caught.value.fix


def test_server_and_job_know_the_same_metrics() -> None:
    tree = ast.parse((scripts_dir() / "evaluate.py").read_text())
    job_side = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "METRIC_NAMES" for t in node.targets)
    )
    assert tuple(job_side) == EVAL_METRICS
