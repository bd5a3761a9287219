"""A run that ended on its own but learned nothing says so (issue 25 item 3): `nothing_learned`, a blocking
alert, where it is sure (a learning rate of 0; a gradient norm of exactly 0, a loss identical, or DPO's margins
exactly 0 at every logged step), and `loss_not_falling`, a warning, where it is a judgment. The detectors are
pure functions of scripts/_watch.py; the real runs are the tiny model's."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from support.jobs import JobKit, load_script_module, run_jobs, succeeded

FLAT = [6.68, 6.66, 6.68, 6.68, 6.66, 6.69, 6.67, 6.69, 6.70, 6.68]  # the tiny model at learning_rate 0
CONFIG = {"template": "sft", "model": "org/m", "dataset": {"source": "data.jsonl", "split": "train", "mapping": None}}


@pytest.fixture(scope="module")
def watch() -> ModuleType:
    return load_script_module("_watch")


def learned(watch: ModuleType, losses: list[float], grads: list, margins: list[float], lr: float, **kw) -> dict | None:
    options = {"token_loss": True, "start_step": 0, "config": CONFIG, **kw}
    return watch.nothing_learned_alert(len(losses), losses, grads, margins, lr, **options)


def test_what_is_sure_to_have_learned_nothing(watch: ModuleType) -> None:
    zero = learned(watch, [6.68, 6.66, 6.69], [0.6, 0.5, 0.6], [], 0.0)
    assert zero and zero["code"] == "nothing_learned" and "learning rate was 0" in zero["message"]
    assert zero["fix"].startswith('submit(method="sft", model="org/m", dataset="data.jsonl") trains it again')
    # Even one logged step at a rate of 0 is sure; a resumed one ends where its checkpoint was.
    resumed = learned(watch, [6.6], [0.5], [], 0.0, start_step=40)
    assert resumed and "the checkpoint it resumed from (step 40)" in resumed["message"]
    grads = learned(watch, [6.7, 6.6, 6.5], [0.0, 0.0, 0.0], [], 1e-4)
    assert grads and "gradient norm was exactly 0 at every one of the 3" in grads["message"]
    assert 'validate_dataset(dataset="data.jsonl", method="sft")' in grads["fix"]
    same = learned(watch, [0.6931, 0.6931, 0.6931], [0.1, 0.2, 0.1], [], 1e-6)
    assert same and "the loss was 0.6931 at every one of the 3" in same["message"]
    margins = learned(watch, [0.69, 0.7, 0.68], [0.1, 0.2, 0.1], [0.0, 0.0, 0.0], 1e-6, token_loss=False)
    assert margins and "rewards/margins was exactly 0" in margins["message"]
    mapped = {**CONFIG, "dataset": {"source": "d", "mapping": {"messages": "conv"}}}
    assert watch.resubmit_call(mapped) == 'submit(method="sft", model="org/m", dataset="d", ' + (
        'dataset_mapping={"messages": "conv"})'
    )


def test_what_is_no_proof_of_learning_nothing(watch: ModuleType) -> None:
    # Too few logged steps to be sure of a still run; one step whose gradient was 0 among moving ones.
    assert learned(watch, [6.7, 6.7], [0.0, 0.0], [0.0, 0.0], 1e-4) is None
    assert learned(watch, [6.7, 6.6, 6.5], [0.0, 0.4, 0.0], [], 1e-4) is None
    assert learned(watch, [6.7, 6.6, 6.5], [None, None, None], [], 1e-4) is None  # grad norms not logged
    # GRPO's loss is no scale: the same value at every step says nothing (its reward_std alert does).
    assert learned(watch, [0.0, 0.0, 0.0], [0.1, 0.2, 0.1], [], 1e-6, token_loss=False) is None
    # DPO's first step has margins of 0 (the policy is its reference): later ones move.
    assert learned(watch, [0.69, 0.68, 0.6], [0.1, 0.2, 0.1], [0.0, 0.01, 0.2], 1e-6, token_loss=False) is None


def test_a_loss_that_never_fell_is_a_warning_after_enough_steps(watch: ModuleType) -> None:
    warned = watch.loss_not_falling_alert(10, FLAT, "jt-1", 1e-7)
    assert warned and warned["code"] == "loss_not_falling" and warned["code"] not in watch.STOPPING
    assert "6.673 on average over the first 3, 6.69 over the last 3" in warned["message"]
    assert 'evaluate(job_id="jt-1", dataset=...) on held-out data' in warned["fix"]  # a call an agent can send
    assert watch.loss_not_falling_alert(9, FLAT[:9], "jt-1", 1e-7) is None  # too few to judge
    falling = [6.68, 6.66, 6.67, 6.66, 6.65, 6.67, 6.65, 6.66, 6.64, 6.63]  # the tiny model at 2e-4: 0.5% lower
    assert watch.loss_not_falling_alert(10, falling, "jt-1", 2e-4) is None


def test_run_watch_judges_the_attempt_once_it_ended(watch: ModuleType) -> None:
    still = watch.RunWatch("jt-1", 0.0, spikes=True, overflow_expected=False, vocab_size=800)
    for step, loss in enumerate([6.68, 6.66, 6.69], start=1):
        assert still.on_step(step, loss, 0.6) == []
    (alert,) = still.on_train_end([], CONFIG, 0)
    assert (alert["code"], alert["step"]) == ("nothing_learned", 3)
    assert still.on_train_end([], CONFIG, 0) == []  # each code once
    flat = watch.RunWatch("jt-2", 1e-7, spikes=True, overflow_expected=False)
    for step, loss in enumerate(FLAT, start=1):
        flat.on_step(step, loss, 0.5)
    assert [a["code"] for a in flat.on_train_end([], CONFIG, 0)] == ["loss_not_falling"]
    resumed = watch.RunWatch("jt-3", 1e-7, spikes=True, overflow_expected=False)
    for step, loss in enumerate(FLAT, start=41):
        resumed.on_step(step, loss, 0.5)
    assert resumed.on_train_end([], CONFIG, 40) == []  # a resumed attempt may start at its floor
    blown = watch.RunWatch("jt-4", 0.0, spikes=True, overflow_expected=False)
    blown.on_step(1, float("nan"), 0.5)
    assert blown.on_train_end([], CONFIG, 0) == []  # it ends diverged: that alert says it all


def test_real_runs_at_a_rate_of_0_and_a_healthy_one(tmp_path: Path, kit: JobKit) -> None:
    """The tiny model, 10 logged steps each: at learning_rate 0 the job ends succeeded with nothing_learned;
    at 1e-3 (its loss falls about 3%) with no alert of either kind."""
    ids = {"JOBTRAIL_RUN_ID": "jt-still"}
    still, healthy = run_jobs(
        kit.job(tmp_path / "still", env=ids, max_steps=10, save_steps=100, learning_rate=0.0),
        kit.job(tmp_path / "healthy", env=ids, max_steps=10, save_steps=100, learning_rate=1e-3),
    )
    (alert,) = succeeded(still).named("alert", code="nothing_learned")
    assert alert["step"] == 10 and "learning rate was 0" in alert["message"], still.describe()
    assert str(kit.model) in alert["fix"] and str(kit.chat_dataset) in alert["fix"]
    assert still.steps() == list(range(1, 11)) and len({e["loss"] for e in still.named("step")}) > 1
    codes = [a["code"] for a in succeeded(healthy).named("alert")]
    assert "nothing_learned" not in codes and "loss_not_falling" not in codes, healthy.describe()
