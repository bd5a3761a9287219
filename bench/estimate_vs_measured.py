"""The estimator against real jobs (SFT, and DPO where a shape says so): peak memory and step time, estimated vs
measured.

Each shape runs a real job through jobtrail (build_service → submit → inspect until terminal)
on a dataset whose every row is longer than max_length, so every micro-batch is exactly
batch × max_length tokens (a DPO row: a short prompt whose chosen and rejected answers each run past
max_length, so 2 × batch sequences of max_length): the shape the estimator is given is the shape that ran. The
estimate is made for this machine (a Flavor built from it) and compared with the job's
`metrics` event:
  * CPU: peak memory = the job's ru_maxrss (all of the process), peak FLOPS = a matmul
    measured here. The demo model by default; `--only small-full` runs a 40M-parameter model
    where FLOPs and tensors matter (~3 minutes). Jobs and the matmul use ONE thread: on a
    shared 2-core machine, two OpenMP threads competing with other processes slow down by
    10× or more, which would measure the neighbours rather than the estimator;
  * CUDA: peak memory = torch.cuda.max_memory_allocated (the estimate's overhead, the CUDA
    context, is left out of the comparison), peak FLOPS = the GPU's data-sheet figure.
Step time is the lower quartile of the intervals between step events (logged every step; the
first two are skipped as warm-up): the machine's own pace when other processes leave it
alone. The load average is printed before and after.
Targets: peak memory within ±15%, step time within ±25%.

Several of the estimator's constants were measured with this script and with the micro-benchmarks
that estimate/cost.py cites, so on those machines agreement is partly by construction; the
script's job is to catch drift (a new TRL, another machine) and to show the gaps it cannot fit.

`--local` measures what an agent sees instead (issue 25 item 8): the whole run's wall time against
estimate_cost's answer through the service, for the demo model on this machine. The estimate for a
job on 256 chat rows is taken before any run (a guess from FLOPs), then a first job on the 64-row
demo data calibrates, then the estimate is taken again and that 256-row job runs: its wall time
(attempt start to end) is printed next to both estimates, with the ratios. Target: within 2×.

`--only small-full,small-full-dpo,small-full-x2` holds DPO to the model where SFT is the control (issue 29 item 5):
chosen and rejected run as one batch of twice the rows, so 4 pairs should hold what 8 SFT rows hold (small-full-x2)
plus the reference model that full fine-tuning loads; the differences between the shapes are printed.

Usage: python bench/estimate_vs_measured.py [--steps N] [--only NAME[,NAME...]] [--local]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from jobtrail.app import build_service
from jobtrail.demo.run import prepare
from jobtrail.demo.tinymodel import build_tiny_model, write_chat_dataset
from jobtrail.estimate import EstimateResult, Flavor
from jobtrail.estimate.hardware import gpu_facts
from jobtrail.models import JobSpec
from jobtrail.preflight.plan import estimate_alone
from jobtrail.requests import EstimateRequest

DEADLINE_S = 900
POLL_S = 1.0  # gentle: on a 2-core machine a busy poller slows the job it measures
MEMORY_TARGET, TIME_TARGET = 0.15, 0.25


@dataclass(frozen=True)
class Shape:
    name: str
    model: dict[str, int] | None  # build_tiny_model sizes (max 512 positions); None = the demo model
    peft: str
    batch: int
    max_length: int
    default: bool = True  # run without --only
    checkpointing: bool = True  # gradient checkpointing (preflight turns it off where the estimate fits without)
    method: str = "sft"


_SMALL = dict(hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8, num_kv_heads=2, vocab_size=32000)
CPU_SHAPES = [
    Shape("demo-lora", None, "lora", batch=4, max_length=128),
    Shape("small-full", _SMALL, "none", batch=4, max_length=256, default=False),
    Shape("small-full-dpo", _SMALL, "none", batch=4, max_length=256, default=False, method="dpo"),
    # DPO's control: the model says 4 pairs hold what 8 SFT rows do, plus the reference model.
    Shape("small-full-x2", _SMALL, "none", batch=8, max_length=256, default=False),
]
_QWEN2_770M = dict(
    hidden_size=2048, intermediate_size=5632, num_layers=16, num_heads=16, num_kv_heads=4, vocab_size=32000
)
GPU_SHAPES = [  # the demo model is too small to say anything on a GPU
    Shape("770m-lora", _QWEN2_770M, "lora", batch=16, max_length=512),
    Shape("770m-full", _QWEN2_770M, "none", batch=16, max_length=512),
    # Every layer's activations held at once: the case speedups choose when it fits (not yet measured).
    Shape("770m-lora-nockpt", _QWEN2_770M, "lora", batch=16, max_length=512, checkpointing=False),
]


def this_machine(cuda: bool) -> Flavor:
    """A Flavor describing the machine the jobs run on."""
    if cuda:
        props = torch.cuda.get_device_properties(0)
        facts = gpu_facts(props.name)
        peak = facts.peak_tflops if facts else matmul_tflops(torch.bfloat16, "cuda")
        return Flavor(
            name="this-gpu",
            gpu=props.name,
            gpu_count=1,
            vram_gb=props.total_memory / 1e9,
            price_per_hour=0.0,
            bf16=torch.cuda.is_bf16_supported(),
            peak_tflops=peak,
        )
    ram_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    return Flavor(
        name="this-cpu",
        cpu=f"{os.cpu_count()} cores",
        ram_gb=ram_gb,
        price_per_hour=0.0,
        peak_tflops=matmul_tflops(torch.float32, "cpu"),
    )


def matmul_tflops(dtype: torch.dtype, device: str, n: int = 2048, repeats: int = 5, trials: int = 5) -> float:
    """The machine's dense matmul rate, the 'peak' the estimator's efficiency applies to: the
    best of several trials, so that a moment of contention does not lower it."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    a @ b
    best = 0.0
    for _ in range(trials):
        _sync(device)
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        _sync(device)
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - started) / 1e12)
    return best


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def write_long_rows(path: Path, rows: int, words: int, seed: int = 0) -> Path:
    """Text rows of `words` toy words each: longer than max_length tokens, so all truncate."""
    rng = random.Random(seed)
    vocab = ["apple", "sky", "grass", "red", "blue", "green", "one", "two", "three", "comes", "after", "the", "is"]
    with path.open("w", encoding="utf-8") as f:
        for _ in range(rows):
            f.write('{"text": "' + " ".join(rng.choice(vocab) for _ in range(words)) + '"}\n')
    return path


def write_long_pairs(path: Path, rows: int, words: int, seed: int = 0) -> Path:
    """Preference rows: a short prompt, and chosen and rejected answers of `words` toy words each, so that both
    sequences of every pair run past max_length and truncate to it."""
    rng = random.Random(seed)
    vocab = ["apple", "sky", "grass", "red", "blue", "green", "one", "two", "three", "comes", "after", "the", "is"]
    with path.open("w", encoding="utf-8") as f:
        for _ in range(rows):
            chosen, rejected = (" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(2))
            f.write(json.dumps({"prompt": "what comes after one?", "chosen": chosen, "rejected": rejected}) + "\n")
    return path


def run_job(home: Path, model: Path, dataset: Path, shape: Shape, steps: int) -> dict[str, Any]:
    """Submit one job, wait for it, return its summary plus the step rate between logs."""
    service = build_service(home)
    spec = JobSpec(
        method=shape.method,
        model=str(model),
        dataset=str(dataset),
        timeout_s=DEADLINE_S,
        hyperparameters={
            "peft": shape.peft,
            "max_steps": steps,
            "per_device_train_batch_size": shape.batch,
            "gradient_accumulation_steps": 1,
            "max_length": shape.max_length,
            "logging_steps": 1,
            "save_steps": 10 * steps,
            "learning_rate": 1e-4,
            "gradient_checkpointing": shape.checkpointing,
        },
    )
    submitted = service.submit(spec)
    if not submitted.job_id:
        raise SystemExit(f"{shape.name}: not submitted: {[f.message for f in submitted.findings]}")
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = service.inspect(submitted.job_id)
        if result.status in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    if result.status != "succeeded":
        raise SystemExit(f"{shape.name}: job {result.status}: {result.termination_message}")
    attempt = result.attempts[-1]
    summary = dict(attempt.summary or {})
    times = [e["time"] for e in service.ledger.events(attempt.attempt_id, "step")]
    intervals = [b - a for a, b in itertools.pairwise(times[1:])]
    summary["step_time_s"] = statistics.quantiles(intervals, n=4)[0]
    return summary


def estimate(model: Path, shape: Shape, steps: int, host: Flavor) -> EstimateResult:
    return estimate_alone(
        EstimateRequest(
            str(model),
            method=shape.method,
            peft=shape.peft,
            num_examples=steps * shape.batch,
            avg_tokens=shape.max_length,
            max_length=shape.max_length,
            per_device_train_batch_size=shape.batch,
            gradient_accumulation_steps=1,
            num_train_epochs=1,
            gradient_checkpointing=shape.checkpointing,
            lora_r=16,
        ),
        machine=host,
    )


def compare(shape: Shape, est: EstimateResult, measured: dict[str, Any], cuda: bool) -> int:
    """Print estimate, measurement and ratio for peak memory and step time; count misses."""
    memory = est.memory
    print("  estimate GB: " + ", ".join(f"{k[:-3]} {v:.3f}" for k, v in memory.model_dump().items()))
    est_gb = memory.total_gb - (memory.overhead_gb if cuda else 0.0)  # max_memory_allocated has no context
    misses = 0
    for label, e, m, target in (
        ("peak memory GB", est_gb, measured["peak_memory_bytes"] / 1e9, MEMORY_TARGET),
        ("step time s", est.step_time_s, measured["step_time_s"], TIME_TARGET),
    ):
        ratio = e / m
        verdict = "ok" if abs(ratio - 1) <= target else f"OUTSIDE ±{target:.0%}"
        misses += verdict != "ok"
        print(f"  {shape.name:<11} {label:<15} estimate {e:9.4f}  measured {m:9.4f}  ratio {ratio:5.2f}  {verdict}")
    return misses


LOCAL_SHAPE = {"max_length": 128, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}
LOCAL_TARGET = 2.0


def run_local(home: Path, model: Path, dataset: Path) -> float:
    """One epoch of the demo SFT job through the service; its wall time, attempt start to end."""
    service = build_service(home)
    hyperparameters = {**LOCAL_SHAPE, "num_train_epochs": 1, "logging_steps": 10}
    job = service.submit(JobSpec(method="sft", model=str(model), dataset=str(dataset), hyperparameters=hyperparameters))
    if not job.job_id:
        raise SystemExit(f"not submitted: {[f.message for f in job.findings]}")
    deadline = time.monotonic() + DEADLINE_S
    while (result := service.inspect(job.job_id)).status not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{job.job_id} still {result.status} after {DEADLINE_S}s")
        time.sleep(POLL_S)
    attempt = result.attempts[-1]
    if result.status != "succeeded" or attempt.started_at is None or attempt.ended_at is None:
        raise SystemExit(f"{job.job_id}: {result.status}: {result.termination_message}")
    summary = attempt.summary or {}
    wall = attempt.ended_at - attempt.started_at
    print(
        f"  ran {dataset.name}: {wall:.1f}s wall, train() {summary.get('train_runtime')}s, "
        f"{summary.get('tokens_per_second')} tokens/s"
    )
    return wall


def local_estimate(home: Path, model: Path, dataset: Path) -> EstimateResult:
    est = build_service(home).estimate_cost(
        EstimateRequest(str(model), dataset=str(dataset), num_train_epochs=1, **LOCAL_SHAPE)
    )
    print(
        f"  estimate {dataset.name}: {est.hours * 3600 if est.hours else 0:.1f}s, {est.tokens} tokens "
        f"({est.tokens_counted}), {est.tokens_per_second} tokens/s; {est.speed_source}; "
        f"timeout {est.recommended_timeout}"
    )
    return est


def main_local() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ.update(HF_HOME=str(home / "hf"), TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
        os.environ["JOBTRAIL_DATA_ROOTS"] = str(home)  # the model and data it makes there are its jobs' inputs
        model, small = prepare(home)
        big = write_chat_dataset(home / "chat256.jsonl", rows=256, seed=1)
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        guess = local_estimate(home / "jobtrail", model, big)
        run_local(home / "jobtrail", model, small)  # calibrates
        calibrated = local_estimate(home / "jobtrail", model, big)
        measured = run_local(home / "jobtrail", model, big)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        misses = 0
        for label, est in (("guess (no run)", guess), ("calibrated", calibrated)):
            seconds = (est.hours or 0) * 3600
            ratio = seconds / measured
            ok = 1 / LOCAL_TARGET <= ratio <= LOCAL_TARGET
            misses += label == "calibrated" and not ok
            print(
                f"{label:<15} estimate {seconds:7.1f}s  measured {measured:7.1f}s  ratio {ratio:5.2f}  "
                f"{'within 2x' if ok else 'OUTSIDE 2x'}"
            )
    return 1 if misses else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--only", help="run only the shapes with these names (comma-separated)")
    parser.add_argument("--local", action="store_true", help="whole-run wall time vs estimate_cost, calibrated")
    args = parser.parse_args()
    if args.local:
        return main_local()
    cuda = torch.cuda.is_available()
    only = args.only.split(",") if args.only else None
    shapes = [s for s in (GPU_SHAPES if cuda else CPU_SHAPES) if (s.name in only if only else s.default)]
    if not cuda:
        os.environ["OMP_NUM_THREADS"] = "1"  # the jobs inherit it
        torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ.update(HF_HOME=str(home / "hf"), TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
        os.environ["JOBTRAIL_DATA_ROOTS"] = str(home)  # the model and data it makes there are its jobs' inputs
        demo_model, _ = prepare(home)
        host = this_machine(cuda)
        print(
            f"machine: {host.gpu or host.cpu}, peak {host.peak_tflops:.3g} TFLOPS "
            f"({'data sheet, bf16' if cuda else 'measured fp32 matmul, 1 thread'})"
        )
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        failures = 0
        peaks: dict[str, tuple[float, float]] = {}  # estimated and measured peak GB per shape
        for shape in shapes:
            model = demo_model if shape.model is None else build_tiny_model(home / shape.name, **shape.model)
            rows = (args.steps + 1) * shape.batch
            write = write_long_pairs if shape.method == "dpo" else write_long_rows
            dataset = write(home / f"{shape.name}.jsonl", rows, words=2 * shape.max_length)
            measured = run_job(home, model, dataset, shape, args.steps)
            est = estimate(model, shape, args.steps, host)
            print(
                f"{shape.name}: {est.params:,} params, {est.trainable_params:,} trainable, "
                f"batch {shape.batch} × {shape.max_length} tokens, {args.steps} steps; measured "
                f"{measured['tokens_per_second']} tokens/s over {measured['train_runtime']}s"
            )
            failures += compare(shape, est, measured, cuda)
            peaks[shape.name] = (est.memory.total_gb, measured["peak_memory_bytes"] / 1e9)
    for (a, (est_a, got_a)), (b, (est_b, got_b)) in itertools.combinations(peaks.items(), 2):
        # What one shape holds beyond another: the process's runtime and whatever both share cancel out.
        print(f"  {b} - {a}: estimate {est_b - est_a:+.3f} GB, measured {got_b - got_a:+.3f} GB")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("all within target" if not failures else f"{failures} comparison(s) outside target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
