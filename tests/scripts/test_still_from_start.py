"""A run whose gradient norm is exactly 0 from its first logged step on never had anything to train (issue 25):
it is no collapse (that is a drop to 0 from a run that was learning, and ends `diverged` with a lower learning
rate), so it stops after STILL_LOGS logged steps with a blocking `nothing_learned` alert whose fix names what
holds gradients at 0, and the job ends `config_error`. The detectors are pure functions of scripts/_watch.py;
the real run is the tiny model's with lora_dropout 1 (every adapter input dropped: every gradient exactly 0)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from jobtrail.models import ExitRecord, TerminationReason as R
from jobtrail.outcomes.classify import classify
from jobtrail.results.endings import BLOCKING
from jobtrail.templates.render import render_script
from support.jobs import JobKit, run_jobs

CONFIG = {
    "template": "sft",
    "model": "org/m",
    "dataset": {"source": "data.jsonl", "split": "train", "mapping": None},
    "peft": {"method": "lora", "r": 8, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"},
}


@pytest.fixture(scope="module")
def watch() -> ModuleType:
    from support.jobs import load_script_module

    return load_script_module("_watch")


def run(watch: ModuleType, grads: list, config: dict | None = None, spikes: bool = True) -> tuple[object, list]:
    """A RunWatch fed a healthy-looking falling loss and `grads`: (the watch, every alert it raised)."""
    seen = watch.RunWatch("jt-1", 2e-4, spikes=spikes, overflow_expected=False, vocab_size=800, config=config)
    raised = []
    for step, grad in enumerate(grads, start=1):
        raised += seen.on_step(step, 6.7 - 0.01 * step, grad)
    return seen, raised


def test_zero_from_the_first_logged_step_stops_as_nothing_learned(watch: ModuleType) -> None:
    seen, raised = run(watch, [0.0, 0.0, 0.0, 0.0, 0.0], CONFIG)
    assert [(a["code"], a["step"]) for a in raised] == [("nothing_learned", 3)]
    (alert,) = raised
    assert seen.stopped is alert and seen.still is alert and seen.diverged is None
    assert alert["code"] in BLOCKING and alert["code"] not in watch.STOPPING  # it ends config_error, not diverged
    assert "exactly 0 at every one of the first 3 logged steps" in alert["message"]
    assert "whatever the learning rate" in alert["message"] and "'config_error'" in alert["message"]
    assert "retry(" not in alert["fix"] and "learning_rate" not in alert["fix"]
    for cause in ("frozen model", "(-100)", "completion_only_loss", "assistant_only_loss", "max_length"):
        assert cause in alert["fix"], cause
    assert 'validate_dataset(dataset="data.jsonl", method="sft")' in alert["fix"]
    assert 'submit(method="sft", model="org/m", dataset="data.jsonl")' in alert["fix"]
    assert seen.on_train_end([], CONFIG, 0) == []  # said once, as it stopped
    assert seen.on_lost_weights(4) == []


def test_lora_dropout_1_is_named_with_the_submit_that_drops_it(watch: ModuleType) -> None:
    dropped = {**CONFIG, "peft": {**CONFIG["peft"], "dropout": 1.0}}
    _, (alert,) = run(watch, [0.0, 0.0, 0.0], dropped)
    assert "lora_dropout 1 zeroes every input of the LoRA adapters" in alert["message"]
    assert alert["fix"].startswith('submit(method="sft", model="org/m", dataset="data.jsonl") trains it again with ')
    assert "without lora_dropout 1" in alert["fix"]


def test_a_drop_to_0_from_a_learning_run_is_still_a_collapse(watch: ModuleType) -> None:
    seen, raised = run(watch, [0.8, 0.6, 0.0, 0.0], CONFIG)
    assert [(a["code"], a["step"]) for a in raised] == [("collapsed", 4)] and seen.diverged is raised[0]
    assert "learning_rate" in raised[0]["fix"] and seen.still is None
    # A first step of 0 and then a moving gradient is a run that learns: a later drop is a collapse.
    _, raised = run(watch, [0.0, 0.7, 0.5, 0.0, 0.0])
    assert [(a["code"], a["step"]) for a in raised] == [("collapsed", 5)]
    # The non-zero gradient is remembered however long ago it was.
    _, raised = run(watch, [0.5, *[0.4] * 40, 0.0, 0.0])
    assert [a["code"] for a in raised] == ["collapsed"]
    assert watch.collapse_alert(3, [6.7, 6.6, 6.5], [0.0, 0.0, 0.0], None, "jt-1", 1e-3) is None
    assert watch.collapse_alert(2, [6.7, 6.6], [0.0, 0.0], None, "jt-1", 1e-3) is None


def test_what_is_no_proof_of_a_still_run(watch: ModuleType) -> None:
    # Two zeros only (STILL_LOGS is 3), a gradient that moved at step 3, grad norms not logged.
    for grads in ([0.0, 0.0], [0.0, 0.0, 0.3, 0.0], [None, None, None, None], [None, 0.0, 0.0, 0.0]):
        seen, raised = run(watch, grads, CONFIG)
        assert raised == [] and seen.stopped is None, grads
    # A loss that is no scale (GRPO's): a still gradient there is its reward_std alert's to judge.
    seen, raised = run(watch, [0.0, 0.0, 0.0, 0.0], CONFIG, spikes=False)
    assert raised == [] and seen.stopped is None


def test_a_log_whose_termination_event_was_lost_reads_config_error() -> None:
    tail = [
        "Traceback (most recent call last):",
        '  File "/jobs/j/script.py", line 760, in train_and_finish',
        '    raise NothingTrainableError(callback.watch.still["message"])',
        "NothingTrainableError: Nothing is being learned: the gradient norm was exactly 0 at every one of the first "
        "3 logged steps, so no update moves a weight, whatever the learning rate (no trainable weight gets a "
        "gradient from the loss). Training stopped here and the job ends 'config_error'.",
    ]
    verdict = classify(ExitRecord(exit_code=1, ended_at=1.0), None, tail)
    assert verdict.reason is R.CONFIG_ERROR and "nothing_learned alert" in verdict.message


def test_a_real_run_with_every_gradient_0_stops_within_3_steps(tmp_path: Path, kit: JobKit) -> None:
    """The tiny model, LoRA with lora_dropout 1 and 20 steps planned: it stops at step 3, ends config_error (not
    diverged) and saves no final model (it would be the model it started from)."""
    config = kit.config(tmp_path / "out", max_steps=20, save_steps=2, learning_rate=1e-3)
    config["peft"]["dropout"] = 1.0
    script = tmp_path / "job.py"
    script.write_text(render_script("sft", config))
    (done,) = run_jobs((script, {**kit.env, "JOBTRAIL_RUN_ID": "jt-still"}))
    assert done.returncode != 0 and done.steps() == [1, 2, 3], done.describe()
    assert {e["grad_norm"] for e in done.named("step")} == {0.0}
    (alert,) = done.named("alert")
    assert (alert["code"], alert["step"]) == ("nothing_learned", 3), alert
    assert "lora_dropout 1 zeroes every input" in alert["message"] and str(kit.model) in alert["fix"]
    term = done.termination
    assert (term["reason"], term["error_type"]) == ("config_error", "NothingTrainableError"), term
    assert term["message"] == f"NothingTrainableError: {alert['message']}"
    assert not done.named("artifact") and not done.named("metrics")
    assert not (tmp_path / "out" / "final").exists()
