"""The evaluation job (scripts/evaluate.py), rendered and run for real on CPU.

One module fixture trains a LoRA adapter (scripts/sft.py) while the evaluations that need no
adapter run beside it, then evaluates the adapter: every job is a real subprocess on the
offline tiny model, and tests read their `JOBTRAIL {...}` events. Nothing is mocked.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobtrail.demo.tinymodel import write_chat_dataset
from jobtrail.outcomes.evals import EvalRecord, Evaluation, delta, eval_config
from jobtrail.templates.configs import COMMIT_MARKER, REMOTE_CHECKPOINT
from jobtrail.templates.render import render_script, scripts_dir
from support.jobs import (
    JobRun,
    assert_templates_import_light,
    finish_job,
    load_script_module,
    lora_job_config,
    start_job,
    succeeded,
    top_level_names,
    write_jsonl,
)

TRAIN_STEPS = 16


@dataclass
class EvalRun(JobRun):
    """A finished job and the script it ran (the evaluator's provenance names its sha256)."""

    script: Path = Path()

    def evals(self, state: str) -> list[dict[str, Any]]:
        return self.named("eval", state=state)

    def finished(self) -> dict[str, Any]:
        """The finished eval event of a job that succeeded."""
        (event,) = succeeded(self).evals("finished")
        return event


Job = tuple[subprocess.Popen[str], Path]  # the process and its script


def start(template: str, config: dict[str, Any], workdir: Path, env: dict[str, str]) -> Job:
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "job.py"
    script.write_text(render_script(template, config))
    return start_job(script, env), script


def finish(job: Job) -> EvalRun:
    proc, script = job
    run = finish_job(proc)
    return EvalRun(run.returncode, run.stdout, run.stderr, run.events, script)


def training_config(template: str, model: Path, dataset: Path, output_dir: Path) -> dict[str, Any]:
    """A few LoRA steps (sft or reward) with a learning rate high enough that the loss clearly drops."""
    return lora_job_config(
        template,
        model,
        dataset,
        output_dir,
        retention=1,
        max_steps=TRAIN_STEPS,
        learning_rate=2e-2,
        per_device_train_batch_size=4,
        save_steps=TRAIN_STEPS,
    )


COLOURS = {"apple": "red", "sky": "blue", "grass": "green", "snow": "white", "coal": "black", "lemon": "yellow"}


def qa_rows() -> list[dict[str, Any]]:
    return [{"question": f"What color is the {thing}?", "answer": colour} for thing, colour in COLOURS.items()]


def preference_rows() -> list[dict[str, Any]]:
    wrong = dict(zip(COLOURS, list(COLOURS.values())[1:] + list(COLOURS.values())[:1], strict=True))
    return [
        {
            "prompt": f"What color is the {thing}?",
            "chosen": f" The {thing} is {colour}.",
            "rejected": f" The {thing} is {wrong[thing]}.",
        }
        for thing, colour in COLOURS.items()
    ]


def test_rendered_evaluator_is_self_contained_and_shadows_no_runtime_name(tmp_path: Path) -> None:
    config = eval_config("/models/tiny", "/data/held_out.jsonl", Evaluation("base"), output_dir=str(tmp_path))
    text = render_script("evaluate", config)
    ast.parse(text)
    assert "from _runtime" not in text and "from _training" not in text and "import jobtrail" not in text
    assert text.count("def verify_checkpoint(") == 1 and text.count("def load_train_dataset(") == 1
    scripts = scripts_dir()
    runtime = set().union(
        *(top_level_names(scripts / f"_{name}.py") for name in ("runtime", "training", "mapping", "metrics"))
    )
    assert not top_level_names(scripts / "evaluate.py") & runtime


def test_evaluator_imports_without_heavy_packages(job_env: dict[str, str]) -> None:
    assert_templates_import_light(["evaluate"], job_env)


# --- the template's own rules, in process (its module level imports only the standard library) ------


@pytest.fixture(scope="module")
def evaluator() -> ModuleType:
    """scripts/evaluate.py as a module (its runtime imports resolve next to it, as when run from scripts/)."""
    return load_script_module("evaluate")


def test_the_evaluator_identity_leaves_the_per_job_config_out(evaluator: ModuleType, tmp_path: Path) -> None:
    first = render_script(
        "evaluate", eval_config("/models/a", "/data/a.jsonl", Evaluation("base"), output_dir=str(tmp_path / "a"))
    )
    on_adapter = Evaluation("final", adapter="/runs/x/final")
    second = render_script(
        "evaluate", eval_config("/models/b", "/data/b.jsonl", on_adapter, output_dir=str(tmp_path / "b"))
    )
    packages = {"torch": "2.13.0", "transformers": "5.23.0"}
    assert first != second
    assert evaluator.evaluator_sha256(first, packages) == evaluator.evaluator_sha256(second, packages)
    assert evaluator.evaluator_sha256(first, packages) != evaluator.evaluator_sha256(
        first, {**packages, "torch": "2.14"}
    )
    changed_code = first.replace("SAMPLED_FAILURES = 5", "SAMPLED_FAILURES = 6")
    assert evaluator.evaluator_sha256(changed_code, packages) != evaluator.evaluator_sha256(first, packages)


def test_metrics_follow_the_data_when_not_asked_for(evaluator: ModuleType) -> None:
    def chosen(columns: list[str], row: dict[str, Any]) -> list[str]:
        fmt = evaluator.data_format(columns)
        return evaluator.choose_metrics(None, fmt, [evaluator.to_example(row, fmt, 0)], reward_head=False)

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    assert chosen(["messages"], chat) == ["loss", "perplexity"]
    short_answer = {"question": "2+2?", "answer": 4}
    assert chosen(["question", "answer"], short_answer) == ["loss", "perplexity", "exact_match"]
    essay = {"prompt": "Write.", "completion": " ".join(["word"] * 40)}
    assert chosen(["prompt", "completion"], essay) == ["loss", "perplexity"]  # long answers never match exactly
    pair = {"prompt": "Q", "chosen": "a", "rejected": "b"}
    assert chosen(["prompt", "chosen", "rejected"], pair) == ["pairwise_accuracy"]
    with pytest.raises(ValueError, match="fit no evaluation format"):
        evaluator.data_format(["input", "output"])


@pytest.mark.parametrize(
    ("metric", "fmt", "reward_head", "words"),
    [
        ("exact_match", "text", False, "plain 'text' rows"),
        ("pairwise_accuracy", "messages", False, "needs preference pairs"),
        ("loss", "preference", False, "use pairwise_accuracy"),
        ("perplexity", "messages", True, "reward model"),
    ],
)
def test_metrics_that_do_not_fit_are_refused(
    evaluator: ModuleType, metric: str, fmt: str, reward_head: bool, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        evaluator.choose_metrics([metric], fmt, [], reward_head)


def test_only_a_verified_commit_is_evaluated(evaluator: ModuleType, tmp_path: Path) -> None:
    runtime = sys.modules["_runtime"]
    plain = tmp_path / "plain-model"
    plain.mkdir()
    assert evaluator.describe_checkpoint({"model": str(plain)}) == {
        "label": str(plain),
        "model": str(plain),
        "adapter": None,
        "manifest_sha256": None,
        "step": None,
    }

    ckpt = tmp_path / "checkpoint-3"
    ckpt.mkdir()
    (ckpt / "adapter_model.safetensors").write_bytes(b"weights")
    with pytest.raises(ValueError, match="not a verified commit"):  # partial: no marker yet
        evaluator.describe_checkpoint({"model": "base", "adapter": str(ckpt)})
    marker = runtime.commit_checkpoint(ckpt, 3, "run-1", "att-1")
    described = evaluator.describe_checkpoint({"model": "base", "adapter": str(ckpt), "checkpoint_label": "step 3"})
    assert (described["label"], described["step"]) == ("step 3", 3)
    assert described["manifest_sha256"] == marker["manifest_sha256"]
    (ckpt / "adapter_model.safetensors").write_bytes(b"WEIGHTS")  # same size, other bytes
    with pytest.raises(ValueError, match="sha256 mismatch"):
        evaluator.describe_checkpoint({"model": "base", "adapter": str(ckpt)})


def test_a_directory_without_an_adapter_config_is_loaded_as_the_model(evaluator: ModuleType, tmp_path: Path) -> None:
    whole, adapter = tmp_path / "whole" / "final", tmp_path / "lora" / "final"
    for directory, config in ((whole, "config.json"), (adapter, "adapter_config.json")):
        directory.mkdir(parents=True)
        (directory / config).write_text("{}")
        sys.modules["_runtime"].commit_checkpoint(directory, 8, "run-1", "att-1")
    loaded, record = evaluator.evaluated_weights({"model": "base", "adapter": str(whole)}, tmp_path)
    assert loaded == {"model": str(whole), "adapter": None} and (record["adapter"], record["step"]) == (str(whole), 8)
    loaded, _ = evaluator.evaluated_weights({"model": "base", "adapter": str(adapter)}, tmp_path)
    assert loaded == {"model": "base", "adapter": str(adapter)}


def test_the_server_names_a_remote_jobs_hub_folder_and_marker_as_the_job_does(evaluator: ModuleType) -> None:
    runtime = sys.modules["_runtime"]  # loaded beside the evaluator
    assert (REMOTE_CHECKPOINT, COMMIT_MARKER) == (runtime.REMOTE_CHECKPOINT, runtime.MARKER_NAME)


def test_answers_match_regardless_of_case_spacing_and_full_stop(evaluator: ModuleType) -> None:
    assert evaluator.normalize_answer("  The Sky is  BLUE. ") == evaluator.normalize_answer("the sky is blue")
    assert evaluator.normalize_answer("blue") != evaluator.normalize_answer("blue-green")


# --- real evaluation jobs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, chat_dataset: Path, job_env: dict[str, str]
) -> dict[str, EvalRun]:
    """Every evaluation of this module, run side by side (they are mostly import-bound)."""
    root = tmp_path_factory.mktemp("evaluate")
    held_out = write_chat_dataset(root / "held_out.jsonl", rows=12, seed=1)
    qa = write_jsonl(root / "qa.jsonl", qa_rows())
    pairs = write_jsonl(root / "pairs.jsonl", preference_rows())
    broken = write_jsonl(root / "broken.jsonl", [{"messages": [{"role": "user", "content": "no answer"}]}])
    model = str(tiny_model)

    def evaluation(name: str, dataset: Path, adapter: str | None = None) -> Job:
        task = Evaluation(adapter or "base", adapter, max_new_tokens=8)  # an adapter is labelled by its path
        config = eval_config(model, str(dataset), task, output_dir=str(root / name / "out"))
        return start("evaluate", config, root / name, job_env)

    trainings = {
        template: start(
            template, training_config(template, tiny_model, data, root / template / "out"), root / template, job_env
        )
        for template, data in (("sft", chat_dataset), ("reward", pairs))
    }
    jobs = {
        "base": evaluation("base", held_out),
        "qa": evaluation("qa", qa),
        "pairs": evaluation("pairs", pairs),
        "broken_rows": evaluation("broken_rows", broken),
        # A job trained with peft "none" leaves a whole model, no adapter: here the base model's own files.
        "whole_model": evaluation("whole_model", held_out, adapter=model),
        "bad_metric": start(
            "evaluate",
            {
                **eval_config(model, str(held_out), Evaluation("base"), output_dir=str(root / "bad" / "out")),
                "metrics": ["bleu"],
            },
            root / "bad",
            job_env,
        ),
    }
    for training in trainings.values():
        trained = finish(training)
        assert trained.returncode == 0, trained.describe()
    jobs["trained"] = evaluation("trained", held_out, adapter=str(root / "sft" / "out" / "final"))
    jobs["reward_model"] = evaluation("reward_model", pairs, adapter=str(root / "reward" / "out" / "final"))
    return {name: finish(job) for name, job in jobs.items()}


def test_base_model_loss_and_perplexity_on_chat_data(runs: dict[str, EvalRun]) -> None:
    finished = runs["base"].finished()
    assert finished["checkpoint"]["label"] == "base" and finished["checkpoint"]["adapter"] is None
    assert set(finished["metrics"]) == {"loss", "perplexity"}  # chat data: no exact_match unasked
    loss, perplexity = finished["metrics"]["loss"], finished["metrics"]["perplexity"]
    assert loss > 0 and perplexity == pytest.approx(2.718281828**loss, rel=1e-6)
    manifest = next(e for e in runs["base"].events if e["event"] == "data_manifest")
    assert (manifest["format"], manifest["rows"]) == ("messages", 12)
    phases = [e["phase"] for e in runs["base"].events if e["event"] == "phase"]
    assert phases == ["loading_model", "evaluating"]


def test_trained_adapter_beats_base_and_records_full_provenance(runs: dict[str, EvalRun], tiny_model: Path) -> None:
    base, trained = (EvalRecord.from_events(runs[name].events) for name in ("base", "trained"))
    assert base and trained and base.state == trained.state == "finished"
    assert delta(base, trained)["loss"] < 0, (base.metrics, trained.metrics)

    run = runs["trained"]
    assert trained.evaluator
    assert trained.evaluator.script_sha256 == hashlib.sha256(run.script.read_bytes()).hexdigest()
    assert base.evaluator and base.evaluator.script_sha256 != trained.evaluator.script_sha256  # their CONFIGs
    assert base.evaluator.sha256 == trained.evaluator.sha256 and len(trained.evaluator.sha256 or "") == 64
    assert trained.evaluator.template == "evaluate" and trained.evaluator.packages["transformers"]
    assert trained.task_set and trained.task_set.rows == 12 and trained.task_set.split == "train"
    held_out = Path(trained.task_set.dataset)
    assert trained.task_set.revision_or_sha256 == hashlib.sha256(held_out.read_bytes()).hexdigest()
    assert trained.decoding and (trained.decoding.temperature, trained.decoding.do_sample) == (0.0, False)
    assert (trained.decoding.max_new_tokens, trained.decoding.seed, trained.decoding.top_k) == (8, 42, 0)
    checkpoint = trained.checkpoint
    assert checkpoint and checkpoint.adapter and checkpoint.label == checkpoint.adapter
    assert checkpoint.model == str(tiny_model) and checkpoint.step == TRAIN_STEPS
    committed = json.loads((Path(checkpoint.adapter) / "JOBTRAIL_COMMITTED").read_text())
    assert checkpoint.manifest_sha256 == committed["manifest_sha256"]
    assert base.checkpoint and base.checkpoint.manifest_sha256 is None  # the base model has no commit
    assert trained.started_at and trained.finished_at and trained.started_at <= trained.finished_at

    assert trained.raw_outputs and trained.raw_outputs_sha256
    raw = Path(trained.raw_outputs).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == trained.raw_outputs_sha256
    lines = [json.loads(line) for line in raw.decode().splitlines()]
    assert len(lines) == 12 and all({"prompt", "reference", "loss", "tokens"} <= set(line) for line in lines)


def test_a_whole_model_in_place_of_an_adapter_is_scored_as_the_model(runs: dict[str, EvalRun]) -> None:
    base, whole = (runs[name].finished() for name in ("base", "whole_model"))
    assert whole["checkpoint"]["adapter"] == whole["checkpoint"]["label"] == base["checkpoint"]["model"]
    assert whole["metrics"]["loss"] == pytest.approx(base["metrics"]["loss"])  # the same weights


def test_exact_match_on_question_answer_data(runs: dict[str, EvalRun]) -> None:
    finished = runs["qa"].finished()
    # A random tiny model answers nonsense: the record is under test, not the score.
    assert set(finished["metrics"]) == {"loss", "perplexity", "exact_match"}
    assert 0.0 <= finished["metrics"]["exact_match"] <= 1.0
    lines = [json.loads(line) for line in Path(finished["raw_outputs"]).read_text().splitlines()]
    assert len(lines) == len(qa_rows()) and all(isinstance(line["output"], str) for line in lines)
    assert [line["reference"] for line in lines] == [row["answer"] for row in qa_rows()]
    failing = [line for line in lines if not line["correct"]]
    assert len(finished["sampled_failures"]) == min(5, len(failing))
    assert all(failure["correct"] is False for failure in finished["sampled_failures"])


@pytest.mark.parametrize(("name", "scorer"), [("pairs", "log_likelihood"), ("reward_model", "reward_head")])
def test_pairwise_accuracy_on_preference_data(runs: dict[str, EvalRun], name: str, scorer: str) -> None:
    finished = runs[name].finished()
    assert list(finished["metrics"]) == ["pairwise_accuracy"] and finished["scorer"] == scorer
    lines = [json.loads(line) for line in Path(finished["raw_outputs"]).read_text().splitlines()]
    assert len(lines) == len(preference_rows())
    assert all(line["correct"] == (line["chosen_score"] > line["rejected_score"]) for line in lines)
    assert finished["metrics"]["pairwise_accuracy"] == sum(line["correct"] for line in lines) / len(lines)


@pytest.mark.parametrize(("name", "words"), [("broken_rows", "ending with the assistant"), ("bad_metric", "bleu")])
def test_crashing_evaluator_ends_eval_failed(runs: dict[str, EvalRun], name: str, words: str) -> None:
    run = runs[name]
    assert run.returncode != 0 and run.termination["reason"] == "eval_failed", run.describe()
    assert words in run.termination["message"]
    record = EvalRecord.from_events(run.events)
    assert record and record.state == "failed" and words in (record.failure or "")
    assert record.failure_cause  # the general reading of the error, kept for the diagnosis
