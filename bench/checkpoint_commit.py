"""What committing a checkpoint costs a training job, against writing the same bytes with safetensors/torch.save alone.

A checkpoint is written as the Trainer writes one (the weights with safetensors, an AdamW state twice their size
with torch.save, the small state files), three ways, alternated round by round:
  * bare: the writes alone, what a job without the commit protocol pays;
  * inline: the writes, then commit_checkpoint in the training thread (how jobtrail committed before);
  * jobtrail: through the job's own callback (_training.make_callback, built as the rendered SFT job builds it):
    on_step_end begins the checkpoint, the bytes are written, on_save hands the commit to the background and
    training goes on; the commit (sha256 and fsync of every file, manifest, marker) is timed until it landed.
Training is blocked for `*_blocked_s`; the target is jobtrail_blocked_s <= 1.5x bare_write_s. The same bytes take
the same time to write on every way, so where the disk's pace wanders (a shared machine), jobtrail_hooks_s, the
blocked time that is jobtrail's own (its two hooks), says more than the ratio.

Usage: python bench/checkpoint_commit.py [--mb 256] [--rounds 5] [--workdir DIR] [--json]
Prints `<figure> <value>` lines (medians over the rounds): gb, bare_write_s, inline_blocked_s, jobtrail_blocked_s,
jobtrail_hooks_s, jobtrail_committed_s (from the checkpoint's `writing` until its marker landed), the ratios of
each to the bare write, and commit_s_per_gb (the background commit alone).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from step_overhead import build_callbacks, load_script, stdout_to

TARGET_RATIO = 1.5


def make_state(megabytes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(weights, AdamW state): fp32 tensors, the weights totalling `megabytes` in 16 MB matrices, the state two
    tensors of each weight's shape. Filled, not randomly initialised (slow on a CPU): sha256 and the disk cost
    the same whatever the bytes."""
    import torch

    side = 2048  # 16 MB of fp32
    weights = {f"model.layers.{i}.weight": torch.full((side, side), float(i)) for i in range(max(1, megabytes // 16))}
    moments = {"exp_avg": 1e-3, "exp_avg_sq": 1e-6}
    state = {
        i: {name: torch.full_like(w, value) for name, value in moments.items()} for i, w in enumerate(weights.values())
    }
    return weights, {"state": state, "param_groups": [{"lr": 2e-4, "params": list(state)}]}


def write_checkpoint(folder: Path, model: tuple[dict[str, Any], dict[str, Any]], step: int) -> None:
    """The files the Trainer writes into checkpoint-N."""
    import torch
    from safetensors.torch import save_file

    weights, optimizer = model
    folder.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(folder / "model.safetensors"))
    torch.save(optimizer, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    torch.save({"python": 0, "numpy": 0, "cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def bare(workdir: Path, model: tuple[dict[str, Any], dict[str, Any]], step: int) -> dict[str, float]:
    folder = workdir / "bare" / f"checkpoint-{step}"
    try:
        return {"bare_write_s": timed(lambda: write_checkpoint(folder, model, step))}
    finally:
        shutil.rmtree(folder)


def inline(workdir: Path, model: tuple[dict[str, Any], dict[str, Any]], step: int, runtime: Any) -> dict[str, float]:
    folder = workdir / "inline" / f"checkpoint-{step}"

    def save_and_commit() -> None:
        runtime.begin_checkpoint(folder, step)
        write_checkpoint(folder, model, step)
        runtime.commit_checkpoint(folder, step, "bench-run", "bench-run/1")

    try:
        return {"inline_blocked_s": timed(save_and_commit)}
    finally:
        shutil.rmtree(folder)


def through_jobtrail(
    job_dir: Path, model: tuple[dict[str, Any], dict[str, Any]], step: int, callback: Any, args: Any, runtime: Any
) -> dict[str, float]:
    """One save as the Trainer makes it with the job's callback: blocked until on_save returns, committed when
    the background commit is done."""
    from transformers import TrainerControl, TrainerState

    state = TrainerState(global_step=step, max_steps=10**9)
    state.is_world_process_zero = True
    control = TrainerControl(should_save=True)
    started = time.perf_counter()
    callback.on_step_end(args, state, control, model=None)
    hooks = time.perf_counter() - started
    write_checkpoint(job_dir / f"checkpoint-{step}", model, step)
    saved = time.perf_counter()
    callback.on_save(args, state, control)
    blocked = time.perf_counter() - started
    hooks += blocked - (saved - started)
    runtime.COMMITS.wait()
    committed = time.perf_counter() - started
    return {"jobtrail_blocked_s": blocked, "jobtrail_hooks_s": hooks, "jobtrail_committed_s": committed}


def bench(workdir: Path, megabytes: int, rounds: int) -> dict[str, float]:
    training, runtime = load_script("_training"), load_script("_runtime")
    model = make_state(megabytes)
    with stdout_to(workdir / "job.log"):
        named, args = build_callbacks(training, workdir, trackio=False)
        callback = dict(named)["jobtrail.JobtrailCallback"]
        job_dir = Path(args.output_dir)
        samples: list[dict[str, float]] = []
        ways: list[Callable[[int], dict[str, float]]] = [
            lambda step: bare(workdir, model, step),
            lambda step: inline(workdir, model, step, runtime),
            lambda step: through_jobtrail(job_dir, model, step, callback, args, runtime),
        ]
        for step in range(1, rounds + 1):
            sample: dict[str, float] = {}
            for way in ways[step % 3 :] + ways[: step % 3]:  # each way first, second and third in turn
                os.sync()  # each starts with no other way's bytes still going to the disk
                sample.update(way(step))
            committed = job_dir / f"checkpoint-{step}"
            assert runtime.verify_checkpoint(committed) == (True, "ok"), "the commit did not verify"
            sample["bytes"] = sum(p.stat().st_size for p in committed.iterdir() if p.name != runtime.MARKER_NAME)
            samples.append(sample)
    figures = {name: statistics.median(s[name] for s in samples) for name in samples[0]}
    figures["gb"] = figures.pop("bytes") / 1e9
    base = figures["bare_write_s"]
    figures["inline_ratio"] = figures["inline_blocked_s"] / base
    figures["jobtrail_blocked_ratio"] = figures["jobtrail_blocked_s"] / base
    figures["jobtrail_committed_ratio"] = figures["jobtrail_committed_s"] / base
    figures["commit_s_per_gb"] = (figures["jobtrail_committed_s"] - figures["jobtrail_blocked_s"]) / figures["gb"]
    figures["rounds"] = rounds
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256, help="the weights' size; the checkpoint is ~3x (AdamW)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, help="where to write (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    options = parser.parse_args()
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="jobtrail-checkpoint-commit-"))
    try:
        figures = bench(workdir.resolve(), options.mb, options.rounds)
    finally:
        if options.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if options.json:
        print(json.dumps(figures))
        return 0
    for name, value in figures.items():
        print(f"{name} {value:.6f}" if isinstance(value, float) else f"{name} {value}")
    verdict = "within" if figures["jobtrail_blocked_ratio"] <= TARGET_RATIO else "OVER"
    print(
        f"# training blocked {figures['jobtrail_blocked_ratio']:.2f}x the bare write: {verdict} the target",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
