"""Training speed: the SFT job jobtrail renders against plain TRL, on the same model, data, steps,
sequence length and device.

  * rendered: the script `submit(dry_run=true)` renders (built through jobtrail's own preflight pass,
    with `output` set, so it is byte for byte what `submit` would run), run as it is. Its figures come
    from its own JOBTRAIL events: the step events (loss, TRL's num_tokens), the environment event (the
    device) and the metrics event (train_runtime; peak GPU memory as torch.cuda.max_memory_allocated).
    Whatever preflight turns on for speed (the receipt's `speedups`, `launcher`) is measured as it is,
    and so is its reporting to trackio (jobtrail's default, into a temporary TRACKIO_DIR here).
  * baseline: bench/baseline_sft.py, the quick start of TRL's documentation with default settings
    (which report to nothing).

Both run as real subprocesses of this process, one after the other, with the same interpreter and
environment, on one device: CUDA_VISIBLE_DEVICES is narrowed to one GPU unless it is set, and a job
that may choose its number of workers (num_processes) is given 1. Nothing watches or changes either
training. So that both learn the same thing, the rendered job is given the baseline's optimisation
settings as user values (TRL's default learning rate and seed; with --peft lora, PEFT's default
LoraConfig: rank, alpha, dropout and target modules), and, with --batch, the same micro-batch and no
gradient accumulation. Without --batch each side keeps its own batch shape (both train 8 rows per
optimizer step by default); the table shows each side's rows per step.

Figures, the same way for both sides:
  tokens/s     TRL's num_tokens at the last step (the non-padding tokens trained, counted by
               SFTTrainer itself, padding-free batches included) ÷ the Trainer's train_runtime
  wall         the process from start to exit: imports, loading, tokenising and saving included
  peak memory  GPU: torch.cuda.max_memory_allocated as each side reports it; CPU: the peak RSS of
               the process (os.wait4's rusage)
  MFU          model FLOPs per token (estimate/cost.py's flops_per_token without recomputation:
               ≈ 6N for full fine-tuning, ≈ 4N + the adapters' gradients for LoRA) × tokens/s ÷ the
               GPU's peak dense bf16 FLOPS (estimate/hardware.py); "n/a" on CPU
  loss         the logged training loss (both log every 10 steps, TRL's default); the curves agree
               when every common logged step is within --loss-tolerance (relative) of the baseline
Targets (issue 15, on an H100): rendered ≥ 1.5× the baseline's tokens/s with the same loss curve,
and MFU ≥ 40% for a 7-8B LoRA (judged for LoRA on models of 6B parameters or more). They are printed
as met or missed on a GPU; on CPU they do not apply.

Modes:
  --cpu-smoke                 the tiny model the tests build offline, 10 steps on CPU (< 1 minute):
                              keeps the bench from rotting (tests/bench runs it)
  (default)                   Qwen/Qwen2.5-0.5B, full fine-tuning, on trl-lib/Capybara (TRL's quick start)
  --model Qwen/Qwen2.5-7B --peft lora
                              the 7-8B LoRA (meta-llama/Llama-3.1-8B too, with a token for the gated repo)
  --offline-shape qwen2.5-0.5b|qwen2.5-7b
                              instead of --model and --dataset, for a GPU machine that cannot reach the
                              Hub: a random-weight stand-in of that shape (bf16, like the Hub's), built in
                              the temporary directory (the 7B: ~15 GB, minutes), on toy chat rows of varied
                              length. tokens/s, memory and MFU depend on the shape, not on the weights; the
                              losses start near ln(vocabulary)

Usage: python bench/train_throughput.py [--cpu-smoke] [--model M] [--peft none|lora] [--dataset D]
           [--steps N] [--max-length L] [--batch B] [--offline-shape S] [--loss-tolerance X] [--json]
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobtrail.app import build_service
from jobtrail.demo.tinymodel import build_tiny_model
from jobtrail.estimate.cost import flops_per_token
from jobtrail.estimate.hardware import gpu_facts
from jobtrail.estimate.params import model_shape
from jobtrail.methods.hyperparameters import field_type
from jobtrail.models import JobSpec
from jobtrail.outcomes.events import parse_line

BENCH = Path(__file__).resolve().parent
BASELINE_SCRIPT = BENCH / "baseline_sft.py"
BASELINE_PREFIX = "BASELINE "
RUN_TIMEOUT_S = 3600  # per side; the smoke takes seconds
LOSS_TOLERANCE = 0.10
SPEEDUP_TARGET, LORA_MFU_TARGET = 1.5, 0.40
LORA_MFU_MIN_PARAMS = 6e9  # the MFU target is the 7-8B LoRA's: smaller models cannot fill an H100
# Stand-ins for machines without the Hub: the real models' sizes (their config.json), random weights.
SHAPES: dict[str, dict[str, int]] = {
    "qwen2.5-0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14, num_kv_heads=2, vocab_size=151936
    ),
    "qwen2.5-7b": dict(
        hidden_size=3584, intermediate_size=18944, num_layers=28, num_heads=28, num_kv_heads=4, vocab_size=152064
    ),
}
_WORDS = ("the", "apple", "sky", "grass", "is", "red", "blue", "green", "one", "two", "three", "after", "what", "and")


@dataclass(frozen=True)
class Setup:
    """What both sides train: the same model, data, steps, sequence length and device."""

    model: str
    dataset: str
    steps: int
    max_length: int
    peft: str  # "none" (full fine-tuning, TRL's quick start) or "lora"
    batch: int | None  # per-device micro-batch for both sides; None: each side's default


@dataclass
class Side:
    """One side's figures, measured the same way for both."""

    tokens: int
    train_runtime_s: float
    wall_s: float
    peak_memory_bytes: int | None
    losses: dict[int, float]  # logged step → training loss
    rows_per_step: int
    device: str
    trainable_params: int | None = None
    mfu: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # what the render chose (speedups, launcher)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_runtime_s

    @property
    def final_loss(self) -> float:
        return self.losses[max(self.losses)]


@dataclass
class Ran:
    """A finished subprocess: its output lines, wall time and peak RSS."""

    lines: list[str]
    wall_s: float
    max_rss_bytes: int
    returncode: int
    log: Path


# --- the two sides -------------------------------------------------------------------------------


def baseline_math(setup: Setup) -> dict[str, Any]:
    """The baseline's optimisation settings, read from TRL and PEFT themselves, as jobtrail hyperparameters."""
    from trl import SFTConfig

    defaults = {f.name: f.default for f in dataclasses.fields(SFTConfig)}
    values: dict[str, Any] = {"learning_rate": defaults["learning_rate"], "seed": defaults["seed"], "peft": setup.peft}
    if setup.peft == "lora":
        from peft import LoraConfig
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
        from transformers import AutoConfig

        lora = LoraConfig()
        model_type = AutoConfig.from_pretrained(setup.model).model_type
        values |= {
            "lora_r": lora.r,
            "lora_alpha": lora.lora_alpha,
            "lora_dropout": lora.lora_dropout,
            "lora_target_modules": list(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING[model_type]),
        }
    return values


def render_job(home: Path, setup: Setup, workdir: Path) -> tuple[Path, dict[str, Any]]:
    """The script submit would run for this setup (a dry run with output set) and its CONFIG."""
    hyperparameters = {"max_steps": setup.steps, "max_length": setup.max_length, **baseline_math(setup)}
    if setup.batch:
        hyperparameters |= {"per_device_train_batch_size": setup.batch, "gradient_accumulation_steps": 1}
    if field_type("sft", "num_processes") is not None:  # one device on both sides
        hyperparameters["num_processes"] = 1
    spec = JobSpec(
        method="sft",
        model=setup.model,
        dataset=setup.dataset,
        output=str(workdir / "output"),
        hyperparameters=hyperparameters,
    )
    result = build_service(home).submit(spec, dry_run=True, include_script=True)
    errors = [f"{f.code}: {f.message} {f.fix or ''}" for f in result.findings if f.severity == "error"]
    if errors or not result.script:
        raise SystemExit("jobtrail refused the job:\n  " + "\n  ".join(errors))
    script = workdir / "job.py"
    script.write_text(result.script)
    return script, script_config(result.script)


def script_config(script: str) -> dict[str, Any]:
    """The CONFIG a rendered script holds (`CONFIG: dict = json.loads('...')`)."""
    for node in ast.parse(script).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "CONFIG":
            assert isinstance(node.value, ast.Call) and isinstance(node.value.args[0], ast.Constant)
            return dict(json.loads(node.value.args[0].value))
    raise SystemExit("the rendered script holds no CONFIG")


def run(argv: list[str], cwd: Path, env: dict[str, str], log: Path, timeout_s: float) -> Ran:
    """Run one side to its end; its own rusage (os.wait4) gives its peak RSS."""
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        timer = threading.Timer(timeout_s, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    wall = time.perf_counter() - started
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return Ran(lines, wall, usage.ru_maxrss * 1024, proc.returncode, log)  # ru_maxrss: KiB on Linux


def failed(name: str, ran: Ran, why: str) -> SystemExit:
    tail = "\n".join(ran.lines[-40:])
    return SystemExit(f"{name}: {why} (exit {ran.returncode}; log {ran.log})\n{tail}")


def rendered_side(ran: Ran, config: dict[str, Any], steps: int) -> Side:
    events = [e for e in map(parse_line, ran.lines) if e]
    end = next((e for e in events if e["event"] == "termination"), {})
    if ran.returncode != 0 or end.get("reason") != "succeeded":
        raise failed("rendered job", ran, f"ended {end.get('reason')}: {end.get('message')}")
    logged = [e for e in events if e["event"] == "step"]
    metrics = next(e for e in events if e["event"] == "metrics")
    environment = next(e for e in events if e["event"] == "environment")
    args = config["training_args"]
    workers = int((config.get("launcher") or {}).get("num_processes") or 1)
    return Side(
        tokens=last_logged_tokens("rendered job", ran, [(e["step"], (e.get("metrics") or {})) for e in logged], steps),
        train_runtime_s=float(metrics["train_runtime"]),
        wall_s=ran.wall_s,
        peak_memory_bytes=metrics["peak_memory_bytes"] if environment["device"] == "cuda" else ran.max_rss_bytes,
        losses={e["step"]: float(e["loss"]) for e in logged},
        rows_per_step=int(args["per_device_train_batch_size"])
        * int(args.get("gradient_accumulation_steps", 1))
        * workers,
        device=(environment.get("gpu") or {}).get("name") or "cpu",
        extra={key: config[key] for key in ("speedups", "launcher") if config.get(key)},
    )


def baseline_side(ran: Ran, steps: int) -> Side:
    found = [json.loads(line[len(BASELINE_PREFIX) :]) for line in ran.lines if line.startswith(BASELINE_PREFIX)]
    if ran.returncode != 0 or not found:
        raise failed("baseline", ran, "did not finish")
    report = found[-1]
    logged = [entry for entry in report["log_history"] if "loss" in entry]
    return Side(
        tokens=last_logged_tokens("baseline", ran, [(entry["step"], entry) for entry in logged], steps),
        train_runtime_s=float(report["train_runtime"]),
        wall_s=ran.wall_s,
        peak_memory_bytes=report["peak_memory_bytes"] if report["device"] != "cpu" else ran.max_rss_bytes,
        losses={entry["step"]: float(entry["loss"]) for entry in logged},
        rows_per_step=int(report["rows_per_step"]),
        device=report["device"],
        trainable_params=int(report["trainable_params"]),
    )


def last_logged_tokens(name: str, ran: Ran, logs: list[tuple[int, dict[str, Any]]], steps: int) -> int:
    """TRL's running num_tokens at the last step; a run whose last step was not logged cannot be counted."""
    counted = [(step, log["num_tokens"]) for step, log in logs if "num_tokens" in log]
    if not counted or counted[-1][0] != steps:
        raise failed(name, ran, f"no num_tokens logged at step {steps}: --steps must be a multiple of 10")
    return int(counted[-1][1])


# --- figures -------------------------------------------------------------------------------------


def add_mfu(sides: dict[str, Side], setup: Setup, rendered_config: dict[str, Any]) -> dict[str, Any]:
    """Each side's MFU (None on CPU or an unknown GPU); returns what it was measured against: the GPU's
    peak as text (or why there is none) and the model's parameters."""
    from transformers import AutoConfig

    baseline = sides["baseline"]
    if baseline.device == "cpu":
        return {"peak": None, "model_params": None}
    shape = model_shape(AutoConfig.from_pretrained(setup.model).to_dict())
    facts = gpu_facts(baseline.device)
    if facts is None:
        return {"peak": f"no data-sheet peak for {baseline.device}", "model_params": shape.params}
    # The same rows, so the baseline's (unpacked) rows give the mean sequence length the attention term needs.
    mean_length = baseline.tokens / (setup.steps * baseline.rows_per_step)
    # Both sides train the same adapters (render_job gives the rendered job the baseline's LoRA settings).
    assert setup.peft == "none" or rendered_config["peft"]["r"] == baseline_math(setup)["lora_r"]
    per_token = flops_per_token(
        shape,
        seq_len=mean_length,
        peft="lora" if setup.peft == "lora" else "none",
        method="sft",
        gradient_checkpointing=False,  # model FLOPs: recomputation is the job's cost, not useful work
        lora_trainable=(baseline.trainable_params or 0) if setup.peft == "lora" else 0,
    )
    for side in sides.values():
        side.mfu = per_token * side.tokens_per_s / (facts.peak_tflops * 1e12)
    return {"peak": f"{facts.peak_tflops:g} TFLOPS bf16 dense", "model_params": shape.params}


def loss_agreement(rendered: Side, baseline: Side, tolerance: float) -> dict[str, Any]:
    common = sorted(set(rendered.losses) & set(baseline.losses))
    gaps = {step: abs(rendered.losses[step] - baseline.losses[step]) / abs(baseline.losses[step]) for step in common}
    worst = max(gaps.values()) if gaps else math.inf
    return {
        "tolerance": tolerance,
        "steps_compared": common,
        "max_relative_gap": worst,
        "agree": bool(common) and worst <= tolerance,
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarise(setup: Setup, sides: dict[str, Side], basis: dict[str, Any], tolerance: float) -> dict[str, Any]:
    rendered, baseline = sides["rendered"], sides["baseline"]
    figures = {
        name: {
            "tokens": side.tokens,
            "tokens_per_s": side.tokens_per_s,
            "train_runtime_s": side.train_runtime_s,
            "wall_s": side.wall_s,
            "peak_memory_bytes": side.peak_memory_bytes,
            "mfu": side.mfu,
            "final_loss": side.final_loss,
            "losses": {str(step): loss for step, loss in sorted(side.losses.items())},
            "rows_per_step": side.rows_per_step,
            "device": side.device,
            **side.extra,
        }
        for name, side in sides.items()
    }
    ratios = {
        key: ratio(figures["rendered"][key], figures["baseline"][key])
        for key in ("tokens_per_s", "tokens", "train_runtime_s", "wall_s", "peak_memory_bytes", "mfu", "final_loss")
    }
    report: dict[str, Any] = {
        "setup": dataclasses.asdict(setup) | {"device": rendered.device, **basis},
        **figures,
        "ratios": ratios,
        "loss": loss_agreement(rendered, baseline, tolerance),
    }
    if rendered.device != "cpu":
        report["targets"] = {
            "speedup": {"target": SPEEDUP_TARGET, "met": (ratios["tokens_per_s"] or 0) >= SPEEDUP_TARGET},
            "loss_curve": {"met": report["loss"]["agree"]},
            **(
                {"lora_mfu": {"target": LORA_MFU_TARGET, "met": (rendered.mfu or 0) >= LORA_MFU_TARGET}}
                if setup.peft == "lora" and (basis["model_params"] or 0) >= LORA_MFU_MIN_PARAMS
                else {}
            ),
        }
    return report


def print_table(report: dict[str, Any]) -> None:
    setup = report["setup"]
    memory = "peak RSS" if setup["device"] == "cpu" else "peak GPU memory"
    print(
        f"{setup['model']} ({'LoRA' if setup['peft'] == 'lora' else 'full fine-tuning'}) on {setup['dataset']}\n"
        f"{setup['steps']} steps, max_length {setup['max_length']}, device {setup['device']}"
        + (f", peak {setup['peak']}" if setup["peak"] else "")
    )
    rows = [
        ("tokens/s", "tokens_per_s", lambda v: f"{v:,.1f}"),
        ("tokens trained", "tokens", lambda v: f"{v:,}"),
        ("train runtime s", "train_runtime_s", lambda v: f"{v:.2f}"),
        ("wall s", "wall_s", lambda v: f"{v:.1f}"),
        (f"{memory} GB", "peak_memory_bytes", lambda v: f"{v / 1e9:.3f}"),
        ("MFU", "mfu", lambda v: f"{v:.1%}"),
        ("final loss", "final_loss", lambda v: f"{v:.4f}"),
        ("rows per step", "rows_per_step", lambda v: f"{v}"),
    ]
    print(f"{'':<20}{'rendered':>14}{'baseline':>14}{'ratio':>10}")
    for label, key, show in rows:
        cells = [report[side][key] for side in ("rendered", "baseline")]
        shown = [show(v) if v is not None else "n/a" for v in cells]
        r = report["ratios"].get(key)
        print(f"{label:<20}{shown[0]:>14}{shown[1]:>14}{(f'{r:.2f}x' if r is not None else ''):>10}")
    loss = report["loss"]
    print(
        f"loss curves ({len(loss['steps_compared'])} logged steps): max relative gap {loss['max_relative_gap']:.2%}, "
        f"tolerance {loss['tolerance']:.0%}: {'agree' if loss['agree'] else 'DIFFER'}"
    )
    for key in ("speedups", "launcher"):
        if key in report["rendered"]:
            print(f"rendered {key}: {json.dumps(report['rendered'][key])}")
    for name, target in (report.get("targets") or {}).items():
        bar = f" {target['target']}" if "target" in target else ""
        print(f"target {name}{bar}: {'met' if target['met'] else 'MISSED'}")


# --- setting up ----------------------------------------------------------------------------------


def write_chat_rows(path: Path, rows: int, max_words: int, seed: int = 0) -> Path:
    """Chat rows whose answers vary in length (4..max_words toy words), so batches carry padding."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for _ in range(rows):
            question = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) + "?"
            answer = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, max_words))) + "."
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            f.write(json.dumps({"messages": messages}) + "\n")
    return path


def prepare(args: argparse.Namespace, tmp: Path) -> Setup:
    """The model and data both sides train on, built offline where the mode says so."""
    model, dataset = args.model, args.dataset
    if args.cpu_smoke or args.offline_shape:
        shape = SHAPES.get(args.offline_shape, {}) if args.offline_shape else {}
        name = args.offline_shape or "tiny"
        dtype = "bfloat16" if args.offline_shape else "float32"
        built = build_tiny_model(tmp / "models" / name, max_positions=max(512, args.max_length), dtype=dtype, **shape)
        model = str(built)
        rows = args.steps * 64  # enough rows for any batch shape, no second epoch
        dataset = str(write_chat_rows(tmp / "chat.jsonl", rows, max_words=max(8, args.max_length // 2)))
    return Setup(
        model=model, dataset=dataset, steps=args.steps, max_length=args.max_length, peft=args.peft, batch=args.batch
    )


def environment(args: argparse.Namespace, tmp: Path) -> dict[str, str]:
    """Both sides' environment (this process's too: preflight reads the visible devices)."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRACKIO_DIR": str(tmp / "trackio"),  # the rendered job reports to trackio (its default): keep it here
    }
    if args.cpu_smoke:
        env |= {"CUDA_VISIBLE_DEVICES": "", "HF_HOME": str(tmp / "hf"), "HF_HUB_OFFLINE": "1"}
    elif not os.environ.get("CUDA_VISIBLE_DEVICES"):
        env["CUDA_VISIBLE_DEVICES"] = "0"  # one GPU for both sides, whatever the machine has
    if args.offline_shape:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def warm_caches(setup: Setup) -> None:
    """Download a Hub model and dataset before anything is timed, so neither side pays for it."""
    from huggingface_hub import snapshot_download

    if not Path(setup.model).exists():
        snapshot_download(setup.model)
    if not Path(setup.dataset).exists():
        snapshot_download(setup.dataset, repo_type="dataset")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The rendered SFT job against plain TRL SFT: speed and loss.")
    parser.add_argument("--cpu-smoke", action="store_true", help="the tiny offline model, 10 steps on CPU")
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B")
    parser.add_argument("--peft", choices=("none", "lora"), default="none")
    parser.add_argument("--dataset", default="trl-lib/Capybara")
    parser.add_argument("--steps", type=int, help="a multiple of 10 (default: 50; 10 with --cpu-smoke)")
    parser.add_argument("--max-length", type=int, help="default: 1024 (TRL's); 128 with --cpu-smoke")
    parser.add_argument("--batch", type=int, help="per-device micro-batch of both sides (default: each side's own)")
    parser.add_argument("--offline-shape", choices=sorted(SHAPES), help="a random-weight stand-in of this shape")
    parser.add_argument("--loss-tolerance", type=float, default=LOSS_TOLERANCE)
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per side")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    args.steps = args.steps or (10 if args.cpu_smoke else 50)
    args.max_length = args.max_length or (128 if args.cpu_smoke else 1024)
    if args.steps % 10:
        parser.error("--steps must be a multiple of 10: both sides log (and count tokens) every 10 steps")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jobtrail-throughput-") as tmp_name:
        tmp = Path(tmp_name)
        env = environment(args, tmp)
        os.environ.update(env)
        setup = prepare(args, tmp)
        if not args.cpu_smoke and not args.offline_shape:
            warm_caches(setup)
        child_env = {**os.environ, **env}
        (tmp / "rendered").mkdir()
        script, config = render_job(tmp / "home", setup, tmp / "rendered")
        base_argv = [sys.executable, str(BASELINE_SCRIPT), "--model", setup.model, "--dataset", setup.dataset]
        base_argv += ["--steps", str(setup.steps), "--max-length", str(setup.max_length)]
        base_argv += ["--output-dir", str(tmp / "baseline" / "output")]
        base_argv += (["--batch", str(setup.batch)] if setup.batch else []) + (
            ["--lora"] if setup.peft == "lora" else []
        )
        (tmp / "baseline").mkdir()
        baseline = baseline_side(
            run(base_argv, tmp / "baseline", child_env, tmp / "baseline.log", args.timeout), setup.steps
        )
        rendered_run = run([sys.executable, str(script)], script.parent, child_env, tmp / "rendered.log", args.timeout)
        sides = {"rendered": rendered_side(rendered_run, config, setup.steps), "baseline": baseline}
        basis = add_mfu(sides, setup, config)
        report = summarise(setup, sides, basis, args.loss_tolerance)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
