"""What jobtrail's own per-step code costs a training step, on CPU: microseconds per step, piece by piece.

The rendered SFT job hands the Trainer two callbacks of its own (_training.make_callback: step events, the
run's watch and watchdog; _tracking.make_trackio_callback: the trackio run). This bench builds both exactly as
the job does (the job's TRL config from build_training_args, a real trackio run in a temporary TRACKIO_DIR) and
drives them through `--steps` optimizer steps the way transformers' training loop calls its callbacks, on a
real TrainerState, with a log at every step carrying what SFTTrainer logs. The step events go to a file, as a
job's log does. transformers' own callbacks that the job's Trainer runs (DefaultFlowCallback, and the
PrinterCallback that disable_tqdm=True puts in place of the progress bar) are timed beside them, apart from
jobtrail's figure. No tensor, no model: this is the host-side cost alone (target: jobtrail < 1 ms per step).

Usage: python bench/step_overhead.py [--steps N] [--json]
Prints `<piece> <microseconds per step>` lines: each callback's hooks, `jobtrail_us` (both of jobtrail's
callbacks: what the training thread spends in them), `jobtrail_late_us` (the same over the last tenth of the
steps: a per-step cost that grows with the run shows there), `transformers_us`, and `other_threads_cpu_us`,
the CPU the process's other threads spent meanwhile (jobtrail's trackio sender and trackio's own writer: on a
GPU they mostly run while the training thread waits for the device, on a busy CPU they compete with it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
HOOKS = ("on_step_begin", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end")
TARGET_US = 1000.0
TRACKIO_INIT_TIMEOUT_S = 120.0


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as the job runs it: its `from _runtime import ...` resolve beside it (one module each)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))


def sft_log(step: int, tokens: int) -> dict[str, float]:
    """What SFTTrainer logs at a step (transformers' loss, grad_norm, learning_rate, epoch and token count, TRL's
    entropy, num_tokens and mean_token_accuracy), with values that wander as a real run's do."""
    return {
        "loss": 2.5 / math.sqrt(step) + 0.01 * math.sin(step),
        "grad_norm": 1.0 + 0.1 * math.cos(step),
        "learning_rate": 2e-4 * (1 - step / 1e6),
        "entropy": 1.7 + 0.05 * math.sin(step / 7),
        "num_tokens": float(tokens),
        "mean_token_accuracy": 0.6 + 0.1 * math.sin(step / 11),
        "epoch": step / 1000,
        "num_input_tokens_seen": tokens,
    }


@contextlib.contextmanager
def stdout_to(path: Path) -> Iterator[None]:
    """Point the process's stdout (what emit() and print() write to) at a file, as a job's log is."""
    saved = sys.stdout
    with path.open("w", buffering=1) as log:
        sys.stdout = log
        try:
            yield
        finally:
            sys.stdout = saved


def build_callbacks(training: ModuleType, workdir: Path, *, trackio: bool = True) -> tuple[list[tuple[str, Any]], Any]:
    """(named callbacks in the Trainer's order, the job's training args), each built as the rendered SFT job
    builds it (without trackio: report_to "none")."""
    import trl
    from transformers.trainer_callback import DefaultFlowCallback, PrinterCallback

    sft = load_script("sft")
    report_to = {} if trackio else {"report_to": "none"}
    config = training.example_config(
        "sft", str(workdir / "model"), str(workdir / "rows.jsonl"), logging_steps=1, **report_to
    )
    config["training_args"].update(max_steps=10**9, save_steps=10**9)
    job = training.Job(config, "bench-run", "bench-run/1", workdir / "out")
    job.output_dir.mkdir(parents=True, exist_ok=True)
    args = training.build_training_args(trl.SFTConfig, config, job.output_dir)
    tracking = training.make_trackio_callback(config, job.run_id, job.attempt_id, "bench-model", "sft")
    jobtrail = training.make_callback(job, sft.SFT, args)
    if tracking:
        jobtrail.alert = tracking.also_on_trackio(jobtrail.alert)
    named = [
        ("transformers.DefaultFlowCallback", DefaultFlowCallback()),
        ("jobtrail.JobtrailCallback", jobtrail),
        *([("jobtrail.TrackioCallback", tracking)] if tracking else []),
        ("transformers.PrinterCallback", PrinterCallback()),
    ]
    return named, args


def wait_for_trackio(tracking: Any) -> None:
    """The timed steps log to a trackio run that exists (while init runs, logs only wait in memory)."""
    reporter = tracking.reporter
    deadline = time.monotonic() + TRACKIO_INIT_TIMEOUT_S
    while reporter.run is None and not reporter.off and time.monotonic() < deadline:
        reporter.init_done.wait(0.1)


def wait_until_sent(tracking: Any, step: int) -> None:
    """Until trackio was handed the last step's log, so that the other threads' CPU counts the sending."""
    reporter = tracking.reporter
    deadline = time.monotonic() + TRACKIO_INIT_TIMEOUT_S
    while reporter.last_step != step and not reporter.off and time.monotonic() < deadline:
        time.sleep(0.01)


def drive(named: list[tuple[str, Any]], args: Any, steps: int) -> dict[str, list[int]]:
    """Run `steps` optimizer steps' worth of callback hooks as transformers' loop calls them; nanoseconds per
    step for each callback (and for the Trainer's own bookkeeping of a log, its log_history)."""
    from transformers import TrainerControl, TrainerState

    state = TrainerState(max_steps=args.max_steps, logging_steps=1, save_steps=args.save_steps)
    state.is_world_process_zero = state.is_local_process_zero = True
    control = TrainerControl()
    spent: dict[str, list[int]] = {name: [0] * steps for name, _ in named}
    spent["transformers.Trainer.log"] = [0] * steps
    kwargs: dict[str, Any] = {"model": None, "processing_class": None, "optimizer": None, "lr_scheduler": None}

    def call(event: str, index: int, **extra: Any) -> None:
        nonlocal control
        for name, callback in named:
            started = time.perf_counter_ns()
            result = getattr(callback, event)(args, state, control, **kwargs, **extra)
            spent[name][index] += time.perf_counter_ns() - started
            control = result if result is not None else control

    call("on_train_begin", 0)
    for index in range(steps):
        call("on_step_begin", index)
        call("on_pre_optimizer_step", index)
        call("on_optimizer_step", index)
        state.global_step += 1
        state.num_input_tokens_seen += 2700
        state.epoch = state.global_step / 1000
        call("on_step_end", index)
        if control.should_log:
            started = time.perf_counter_ns()
            logs = sft_log(state.global_step, state.num_input_tokens_seen)
            state.log_history.append({**logs, "step": state.global_step})
            spent["transformers.Trainer.log"][index] += time.perf_counter_ns() - started
            call("on_log", index, logs=logs)
            control.should_log = False
    return spent


def per_step(spent: dict[str, list[int]], prefix: str) -> list[int]:
    """Nanoseconds of each step in the pieces whose names start with `prefix`."""
    pieces = [ns for name, ns in spent.items() if name.startswith(prefix)]
    return [sum(piece[index] for piece in pieces) for index in range(len(pieces[0]))]


def report(spent: dict[str, list[int]], steps: int) -> dict[str, float]:
    """Medians per step (other processes on the machine only ever add time), and jobtrail's mean."""
    late = max(1, steps // 10)
    figures: dict[str, float] = {f"{name}_us": statistics.median(ns) / 1000 for name, ns in spent.items()}
    ours, theirs = per_step(spent, "jobtrail."), per_step(spent, "transformers.")
    figures["jobtrail_us"] = statistics.median(ours) / 1000
    figures["jobtrail_mean_us"] = statistics.fmean(ours) / 1000
    figures["jobtrail_late_us"] = statistics.median(ours[-late:]) / 1000
    figures["transformers_us"] = statistics.median(theirs) / 1000
    figures["steps"] = steps
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobtrail-step-overhead-") as tmp:
        workdir = Path(tmp)
        os.environ["TRACKIO_DIR"] = str(workdir / "trackio")
        training = load_script("_training")
        with stdout_to(workdir / "job.log"):
            named, args = build_callbacks(training, workdir)
            jobtrail, tracking = dict(named)["jobtrail.JobtrailCallback"], dict(named)["jobtrail.TrackioCallback"]
            wait_for_trackio(tracking)
            main_cpu, all_cpu = time.thread_time_ns(), time.process_time_ns()
            spent = drive(named, args, options.steps)
            wait_until_sent(tracking, options.steps)
            main_cpu, all_cpu = time.thread_time_ns() - main_cpu, time.process_time_ns() - all_cpu
            for callback in (jobtrail, tracking):
                callback.on_train_end(args, _final_state(options.steps), None)
        figures = report(spent, options.steps)
        figures["other_threads_cpu_us"] = max(0, all_cpu - main_cpu) / options.steps / 1000
        # What the callbacks did, so that a reader (and the test) sees the bench drove the real thing.
        log = (workdir / "job.log").read_text().splitlines()
        figures["step_events"] = sum(line.startswith('JOBTRAIL {"event":"step"') for line in log)
        figures["trackio_last_step"] = tracking.reporter.last_step or 0
    if options.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name} {value:.1f}" if isinstance(value, float) else f"{name} {value}")
        verdict = "within" if figures["jobtrail_us"] < TARGET_US else "OVER"
        print(
            f"# jobtrail {figures['jobtrail_us']:.1f} us/step: {verdict} the {TARGET_US:.0f} us target", file=sys.stderr
        )
    return 0


def _final_state(steps: int) -> Any:
    from transformers import TrainerState

    state = TrainerState(global_step=steps)
    state.is_world_process_zero = True
    return state


if __name__ == "__main__":
    raise SystemExit(main())
