"""The job watches itself (scripts/_watch.py): the alert detectors as pure functions, the stall
watchdog's thread, and real tiny-model runs that diverge (and stop, ending `diverged`) or resume
at a changed learning rate."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobtrail.templates.render import render_script
from support.jobs import JobKit, JobRun, load_script_module, run_jobs, succeeded, top_level_names
from support.waiting import wait_for

# A learning rate that turns the tiny model's LoRA weights into infinities after one Adam step.
ABSURD_LR = 1e20


@pytest.fixture(scope="module")
def watch() -> ModuleType:
    return load_script_module("_watch")


def test_watch_shadows_no_name_of_the_runtime_it_is_inlined_with() -> None:
    from support.jobs import SCRIPTS

    mine = top_level_names(SCRIPTS / "_watch.py")
    for other in ("_runtime", "_training", "_tracking", "_model_card", "sft", "grpo", "dpo", "kto", "reward"):
        assert not mine & top_level_names(SCRIPTS / f"{other}.py"), other


# --- the detectors -------------------------------------------------------------------------------


def test_a_nan_or_infinite_loss_is_an_alert_with_a_lower_learning_rate(watch: ModuleType) -> None:
    assert watch.nan_loss_alert(3, 1.25, "jt-1", 2e-4) is None
    for lost in (math.nan, math.inf, -math.inf):
        alert = watch.nan_loss_alert(3, lost, "jt-1", 2e-4)
        assert alert["code"] == "nan_loss" and alert["step"] == 3 and "diverged" in alert["message"]
        assert alert["fix"].startswith('retry(job_id="jt-1", changes={"learning_rate": 2e-05})')


def test_a_spike_is_judged_against_the_running_median_after_warm_up(watch: ModuleType) -> None:
    calm = [2.0, 1.9, 2.1, 1.8, 2.0]
    assert watch.loss_spike_alert(6, 5.9, calm) is None  # under 3x the median
    spike = watch.loss_spike_alert(6, 6.5, calm)
    assert spike["code"] == "loss_spike" and "3.2x" in spike["message"]
    assert watch.loss_spike_alert(4, 60.0, calm[:3]) is None  # still warming up: early losses swing
    assert watch.loss_spike_alert(6, 1.0, [0.0] * 5) is None  # no scale to compare with


def test_a_gradient_norm_explodes_when_infinite_or_far_above_its_median(watch: ModuleType) -> None:
    calm = [1.0, 1.2, 0.9, 1.1, 1.0]
    assert watch.grad_norm_alert(6, 50.0, calm, overflow_expected=False) is None
    assert watch.grad_norm_alert(6, 150.0, calm, overflow_expected=False)["code"] == "grad_norm_exploding"
    assert watch.grad_norm_alert(2, math.inf, [], overflow_expected=False)["code"] == "grad_norm_exploding"
    # fp16's loss scaler skips a step whose gradients overflow: that is its job, not an explosion.
    assert watch.grad_norm_alert(2, math.inf, [], overflow_expected=True) is None
    assert watch.grad_norm_alert(2, None, calm, overflow_expected=False) is None


def test_overfitting_is_eval_loss_rising_three_times_while_training_loss_falls(watch: ModuleType) -> None:
    train = [(step, 3.0 - 0.05 * step) for step in range(1, 41)]
    rising = [(10, 2.0), (20, 2.1), (30, 2.2), (40, 2.3)]
    alert = watch.overfitting_alert(rising, train)
    assert alert["code"] == "overfitting" and alert["step"] == 40
    assert "step 10" in alert["message"] and "max_steps=10" in alert["fix"]
    assert watch.overfitting_alert(rising[:3], train) is None  # two rises are not yet a trend
    assert watch.overfitting_alert([(10, 2.0), (20, 2.1), (30, 2.05), (40, 2.3)], train) is None
    both_rising = [(step, 1.0 + 0.05 * step) for step in range(1, 41)]  # the whole run diverges: no overfitting
    assert watch.overfitting_alert(rising, both_rising) is None


def test_run_watch_raises_each_code_once_and_stops_at_the_first_lost_loss(watch: ModuleType) -> None:
    run = watch.RunWatch("jt-1", 1e-3, spikes=True, overflow_expected=False)
    alerts: list[dict[str, Any]] = []
    for step, loss in enumerate([2.0, 2.1, 1.9, 2.0, 2.0, 9.0, 9.5, 2.0], start=1):
        alerts += run.on_step(step, loss, 1.0)
    assert [(a["code"], a["step"]) for a in alerts] == [("loss_spike", 6)]  # step 7 spikes too: said once
    assert run.diverged is None
    assert [a["code"] for a in run.on_step(9, math.nan, math.nan)] == ["nan_loss"]
    assert run.diverged and run.diverged["step"] == 9
    assert run.on_step(10, math.nan, math.inf) == []  # stopping: nothing more to say
    assert run.on_lost_weights(10) == []

    grpo = watch.RunWatch("jt-2", 1e-5, spikes=False, overflow_expected=False)
    assert [
        a for step, loss in enumerate([0.0, 0.01, -0.02, 0.0, 0.0, 0.5], 1) for a in grpo.on_step(step, loss, 1)
    ] == []
    lost = grpo.on_lost_weights(7)
    assert [a["code"] for a in lost] == ["nan_weights"] and grpo.diverged == lost[0]


def test_a_blow_up_is_judged_from_the_second_logged_step(watch: ModuleType) -> None:
    assert watch.loss_diverged_alert(2, 60.0, 6.0, None, "jt-1", 1e-3) is None  # exactly 10x: not yet
    alert = watch.loss_diverged_alert(2, 17_318_902.0, 6.67, None, "jt-1", 1000.0)
    assert alert["code"] == "loss_diverged" and "2.6e+06x the first logged loss" in alert["message"]
    uniform = math.log(800)
    above = watch.loss_diverged_alert(2, 36.3, 6.67, uniform, "jt-1", 0.9)
    assert above and "ln(vocabulary) = 6.685" in above["message"]
    assert watch.loss_diverged_alert(2, 9.9, 6.67, uniform, "jt-1", 0.9) is None  # under 1.5 x ln(800)
    assert watch.loss_diverged_alert(1, 36.3, None, None, "jt-1", 0.9) is None  # nothing to judge it by


def test_a_collapse_is_a_gradient_of_zero_or_a_loss_pinned_at_a_uniform_guess(watch: ModuleType) -> None:
    uniform = math.log(800)
    assert watch.collapse_alert(3, [6.7, 5.0, 4.0], [1.0, 0.0, 0.0], uniform, "jt-1", 1e-3)["code"] == "collapsed"
    assert watch.collapse_alert(3, [6.7, 5.0, 4.0], [1.0, 0.5, 0.0], uniform, "jt-1", 1e-3) is None
    pinned = watch.collapse_alert(4, [3.0, 4.0, uniform, uniform], [1.0, 1.0, 0.3, 0.2], uniform, "jt-1", 1e-3)
    assert pinned and "pinned" in pinned["message"]
    # A model trained from random weights starts at ln(vocabulary): that is no collapse.
    assert watch.collapse_alert(3, [uniform, uniform, uniform], [1.0, 0.9, 0.8], uniform, "jt-1", 1e-3) is None


def test_run_watch_stops_at_a_blow_up_and_remembers_the_last_healthy_step(watch: ModuleType) -> None:
    run = watch.RunWatch("jt-1", 1000.0, spikes=True, overflow_expected=False, vocab_size=800)
    assert run.on_step(1, 6.67, 2.0) == [] and run.on_step(2, 6.6, 2.1) == []
    stopped = run.on_step(3, 17_318_902.0, 5000.0)
    assert [a["code"] for a in stopped] == ["grad_norm_exploding", "loss_diverged"]
    assert run.diverged == stopped[-1] and run.healthy_step == 2
    assert run.on_step(4, 6.68, 0.0) == []
    grpo = watch.RunWatch("jt-2", 1e-5, spikes=False, overflow_expected=False, vocab_size=800)
    assert [grpo.on_step(step, 0.0, 0.0) for step in (1, 2, 3)] == [[], [], []]  # no loss scale: never judged


def test_run_watch_reads_evaluations(watch: ModuleType) -> None:
    run = watch.RunWatch("jt-1", 1e-3, spikes=True, overflow_expected=False)
    alerts = []
    for step in range(1, 41):
        alerts += run.on_step(step, 3.0 - 0.05 * step, 1.0)
        if step % 10 == 0:
            alerts += run.on_eval(step, 1.7 + step / 100)
    assert [(a["code"], a["step"]) for a in alerts] == [("overfitting", 40)]
    assert run.on_eval(50, math.nan) == []


# --- the stall watchdog --------------------------------------------------------------------------


def test_the_watchdog_check_is_a_pure_function_of_the_clock(watch: ModuleType) -> None:
    dog = watch.Watchdog(60.0, lambda alert: None)
    dog.beat(12)
    start = dog.last_beat
    assert dog.check(start + 59) is None
    with dog.paused():  # committing and pushing a checkpoint is slow, not stuck
        assert dog.check(start + 600) is None
    resumed = dog.last_beat
    stalled = dog.check(resumed + 61)
    assert stalled["code"] == "stalled" and stalled["step"] == 12 and "1.0 minutes" in stalled["message"]
    assert dog.check(resumed + 6000) is None  # said once
    assert watch.Watchdog(None, lambda alert: None).check(start + 10**6) is None  # switched off


def test_the_watchdog_thread_raises_a_stall_once_and_stops(watch: ModuleType) -> None:
    raised: list[dict[str, Any]] = []
    dog = watch.Watchdog(0.3, raised.append)
    dog.start()
    try:
        wait_for(lambda: raised, 10, "the stall alert")
    finally:
        dog.stop()
    assert [a["code"] for a in raised] == ["stalled"]
    beating: list[dict[str, Any]] = []
    alive = watch.Watchdog(5.0, beating.append)
    alive.start()
    alive.beat(1)
    alive.stop()
    assert beating == []


# --- real runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, kit: JobKit) -> dict[str, tuple[JobRun, Path]]:
    """The module's jobs that need no other, side by side (a job is mostly imports on one core): two runs at
    an absurd learning rate, and `first_attempt`, 4 steps at 1e-3 that the resume test continues."""
    root = tmp_path_factory.mktemp("diverged")
    ids = {"JOBTRAIL_RUN_ID": "jt-nan"}
    jobs = {
        "loss": kit.job(root / "loss", env=ids, learning_rate=ABSURD_LR, save_steps=100),
        "weights": kit.job(root / "weights", env=ids, learning_rate=ABSURD_LR, save_steps=1),
        "first_attempt": kit.job(root / "first_attempt", max_steps=4, learning_rate=1e-3),
        # Full fine-tuning at learning rates that destroy the model with finite numbers (issue 25): 1000 after a
        # warm-up whose first update is at 0 (so one healthy checkpoint exists), and 0.9 from the first update.
        "lr1000": full_fine_tuning(kit, root / "lr1000", learning_rate=1000.0, warmup_steps=3),
        "lr0.9": full_fine_tuning(kit, root / "lr0.9", learning_rate=0.9),
    }
    done = run_jobs(*jobs.values())
    return {name: (run, root / name / "out") for name, run in zip(jobs, done, strict=True)}


def full_fine_tuning(kit: JobKit, workdir: Path, **training_args: Any) -> tuple[Path, dict[str, str]]:
    """A full fine-tuning SFT job (no adapter) of 8 steps that logs and saves every step."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = kit.config(workdir / "out", max_steps=8, save_steps=1, logging_steps=1, **training_args)
    config["peft"] = None
    script = workdir / "job.py"
    script.write_text(render_script("sft", config))
    return script, {**kit.env, "JOBTRAIL_RUN_ID": "jt-blown"}


@pytest.fixture(scope="module")
def diverged(runs: dict[str, tuple[JobRun, Path]]) -> dict[str, tuple[JobRun, Path]]:
    """Two runs at an absurd learning rate: one caught by its logged loss, one by its weights at a save."""
    return {name: runs[name] for name in ("loss", "weights")}


def test_a_nan_loss_raises_an_alert_and_ends_the_job_diverged(diverged: dict[str, tuple[JobRun, Path]]) -> None:
    run, out = diverged["loss"]
    assert run.returncode == 1, run.describe()
    (alert,) = run.named("alert")
    assert (alert["code"], alert["step"]) == ("nan_loss", 2) and "diverged" in alert["message"]
    assert alert["fix"].startswith('retry(job_id="jt-nan", changes={"learning_rate": 0.0001})')  # not 1e+19
    assert run.steps() == [1, 2] and math.isnan(run.named("step")[-1]["loss"])  # logged as it is, not filtered
    term = run.termination
    assert (term["reason"], term["error_type"]) == ("diverged", "TrainingDivergedError")
    assert term["message"].startswith("TrainingDivergedError: The loss became nan at step 2")
    assert not run.named("artifact") and not run.named("metrics") and not (out / "final").exists()
    assert [e["phase"] for e in run.named("phase")][-1] == "training"  # never reached saving


def test_nan_weights_are_never_committed(diverged: dict[str, tuple[JobRun, Path]]) -> None:
    run, out = diverged["weights"]
    assert run.termination["reason"] == "diverged", run.describe()
    assert [(a["code"], a["step"]) for a in run.named("alert")] == [("nan_weights", 2)]
    # Step 1's weights were still numbers (huge ones): committed, then withdrawn once step 2 showed them lost (no
    # logged loss had vouched for them: step 1's was computed before its update). Step 2's were not even begun.
    assert [(e["step"], e["state"]) for e in run.named("checkpoint")] == [
        (1, "writing"),
        (1, "committed"),
        (1, "withdrawn"),
    ]
    assert not (out / "checkpoint-1" / "JOBTRAIL_COMMITTED").exists()
    assert "No committed checkpoint from before the blow-up" in run.termination["message"]


def test_a_finite_blow_up_stops_the_run_and_keeps_only_the_checkpoint_from_before_it(
    runs: dict[str, tuple[JobRun, Path]],
) -> None:
    """learning_rate=1000 on full fine-tuning: the loss is finite but far above the first one at the first update
    that used the rate. The run stops there (not 5 logged steps later), ends diverged, and keeps checkpoint-1 (its
    update ran at a warm-up rate of 0, and step 2's healthy loss vouched for it) while checkpoint-2 is withdrawn."""
    run, out = runs["lr1000"]
    assert run.termination["reason"] == "diverged", run.describe()
    losses = {e["step"]: e["loss"] for e in run.named("step")}
    assert sorted(losses) == [1, 2, 3] and losses[3] > 10 * losses[1]
    stop = next(a for a in run.named("alert") if a["code"] == "loss_diverged")
    assert stop["step"] == 3 and "the first logged loss" in stop["message"]
    assert 'changes={"learning_rate": 0.0001}' in stop["fix"]
    states = [(e["step"], e["state"]) for e in run.named("checkpoint")]
    assert (1, "committed") in states and (2, "withdrawn") in states and (1, "withdrawn") not in states
    assert (out / "checkpoint-1" / "JOBTRAIL_COMMITTED").exists()
    assert not (out / "checkpoint-2" / "JOBTRAIL_COMMITTED").exists()
    assert "Kept checkpoint-1 (step 1)" in run.termination["message"]
    assert not (out / "final").exists()


def test_a_loss_above_a_uniform_guess_stops_the_run_at_its_second_step(runs: dict[str, tuple[JobRun, Path]]) -> None:
    """learning_rate=0.9 on full fine-tuning: 6.7 → ~36, not 10x the first loss but far above ln(800) = 6.7."""
    run, out = runs["lr0.9"]
    assert run.termination["reason"] == "diverged", run.describe()
    stop = next(a for a in run.named("alert") if a["code"] in ("loss_diverged", "collapsed"))
    assert stop["step"] == 2 and "ln(vocabulary)" in stop["message"]
    assert run.steps() == [1, 2]
    assert not list(out.glob("checkpoint-*/JOBTRAIL_COMMITTED"))


def test_a_resumed_attempt_trains_at_its_own_learning_rate(
    tmp_path: Path, kit: JobKit, runs: dict[str, tuple[JobRun, Path]]
) -> None:
    """A retry with changes={"learning_rate": ...} resumes the optimizer and scheduler state, which hold the
    old rate: the job rebases them, keeping the schedule's shape (linear decay over max_steps)."""
    first, first_out = runs["first_attempt"]  # 4 steps at 1e-3
    succeeded(first)
    shutil.copytree(first_out, tmp_path / "a2" / "out")
    (second,) = run_jobs(kit.job(tmp_path / "a2", max_steps=8, learning_rate=1e-4))
    succeeded(second)
    assert second.one("resume")["step"] == 4
    assert second.one("learning_rate_rebased") | {"time": 0} == {
        "event": "learning_rate_rebased",
        "time": 0,
        "checkpoint": 1e-3,
        "now": 1e-4,
    }
    rates = {e["step"]: e["learning_rate"] for e in second.named("step")}
    assert rates[5] == pytest.approx(1e-4 * (8 - 4) / 8, rel=1e-6)  # 5e-5; the old base would give 5e-4
    assert rates[8] < rates[5]
