"""Training speed: the SFT job jobtrail renders against plain TRL, on the same model, data, steps,
sequence length and device, measured as a user's long run sees it.

  * rendered: the script `submit(dry_run=true)` renders (built through jobtrail's own preflight pass,
    with `output` set, so it is byte for byte what `submit` would run), with logging_steps=1. Whatever
    preflight turns on for speed (the receipt's `speedups`, `launcher`) is measured as it is, and so is
    its reporting to trackio (jobtrail's default, into a temporary TRACKIO_DIR here).
  * baseline: bench/baseline_sft.py, the quick start of TRL's documentation with default settings
    (which report to nothing), logging every step too.

Both run as real subprocesses, one after the other, with the same interpreter and environment, on one
device (CUDA_VISIBLE_DEVICES narrowed to one GPU unless set; a job that may choose its number of workers is
given 1), each through bench/step_hook.py: the script runs unchanged as __main__, and one TrainerCallback
clocks every step the same way on both sides (and, when asked, stops training at a step or a deadline, or
profiles steps). So that both learn the same thing, the rendered job is given the baseline's optimisation
settings as user values (TRL's default learning rate and seed; with --peft lora, PEFT's default LoraConfig),
and, with --batch, the same micro-batch and no gradient accumulation.

Figures, the same way for both sides (bench/step_timing.py says how steps are told apart):
  steady tokens/s    tokens trained in the steady steps ÷ their time: the steps after the warm-up, outside
                     the profiler's window, and without a checkpoint in them; per-step times from the
                     steps' logs, tokens from TRL's num_tokens
  warm-up            the first --warmup-steps steps (default 3), reported apart
  whole-run tokens/s TRL's num_tokens at the last step ÷ the Trainer's train_runtime (the old figure:
                     warm-up and checkpoints included)
  checkpoints        each save's write (the Trainer's save) and, for the rendered job, its commit
                     (checkpoint events `writing` → `committed`), seconds and GB, and the time the steps
                     holding them lost (stall); the rendered job's final model commit apart
  peak memory        GPU: torch.cuda.max_memory_allocated; CPU: the peak RSS of the process
  MFU                model FLOPs per token (estimate/cost.py, no recomputation) × steady tokens/s ÷ the
                     GPU's peak dense bf16 FLOPS (estimate/hardware.py); "n/a" on CPU
  loss               the training loss at every step both trained; the curves agree when each is within
                     --loss-tolerance (relative) of the baseline's
  --profile          a torch profiler over --profile-steps (default 5-8) on each side: top CUDA kernels,
                     top CPU ops, and where the GPU idles (bench/profile_summary.py)
Targets (issue 29, on a GPU): rendered ≥ 1.5× the baseline's steady tokens/s with the same loss curve; MFU
≥ 40% for a LoRA of 6B+ parameters and ≥ 25% for full fine-tuning; checkpoint commit ≤ 1.5× the seconds per
GB of the baseline's plain write. Printed as met or missed on a GPU; on CPU they do not apply.

Modes:
  --cpu-smoke            stand-ins of ~0.1M parameters on CPU (< 1 minute idle): keeps the bench from rotting
  (default)              Qwen/Qwen2.5-0.5B, full fine-tuning, on trl-lib/Capybara (TRL's quick start)
  --model M --peft lora  any Hub model; --offline-shape qwen2.5-0.5b|qwen2.5-7b instead of --model and
                         --dataset: a stand-in of that shape (bench/standin.py, seconds) on toy chat rows
  --cases 0.5b-full,7b-lora
                         several cases (CASES: an offline stand-in and a PEFT method each) one after the other;
                         --suite names both. With --cpu-smoke each case's shape is reduced (SMOKE_SIZES).
  --budget-s S           the whole run within about S seconds: each case gets a share of the time left
                         (CASES' weights), each side half of its case's; a side trains until its deadline
                         (from its own step times, less a reserve for saving and exiting), at least
                         --warmup-steps + 5 steps (with --profile, through 3 steps after the window), and at
                         most --steps; the rendered side trains the steps the baseline did. What was cut is
                         printed and in the JSON.
  --json PATH            every figure as JSON, rewritten after each case ("-": to stdout at the end, the tables
                         going to stderr instead); environment variables in PATH (and DIR) are expanded;
                         a case that fails is listed under "failed" (and the exit status is 1), the others run
  --logs DIR             each side's output copied there (CASE-SIDE.log), kept after the temporary folder goes

Usage: python bench/train_throughput.py [--cpu-smoke] [--suite | --cases C,...] [--budget-s S] [--profile]
           [--model M] [--peft none|lora] [--dataset D] [--offline-shape S] [--steps N] [--max-length L]
           [--batch B] [--warmup-steps W] [--profile-steps A-B] [--loss-tolerance X] [--json PATH] [--logs DIR]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import step_timing
from standin import SHAPES
from throughput_report import model_params, print_case, print_cuts, summarise

from jobtrail.app import build_service
from jobtrail.methods.hyperparameters import field_type
from jobtrail.models import JobSpec
from jobtrail.outcomes.events import parse_line
from jobtrail.requests import SubmitOptions

BENCH = Path(__file__).resolve().parent
BASELINE_SCRIPT, HOOK_SCRIPT, STANDIN_SCRIPT = BENCH / "baseline_sft.py", BENCH / "step_hook.py", BENCH / "standin.py"
BASELINE_PREFIX = "BASELINE "
RUN_TIMEOUT_S = 3600  # per side without a budget
GRACE_S = 120  # with a budget: how long a side may run past its deadline before it is killed
LOSS_TOLERANCE = 0.10
STEADY_MIN = 5  # steady steps a budget always leaves after the warm-up
# A side's time after its last step: exiting, plus writing and hashing checkpoints at about this rate (issue 29's
# H100: 6 GB committed in 16.7 s).
TAIL_S, WRITE_BYTES_PER_S = 10.0, 0.35e9


@dataclass(frozen=True)
class Case:
    shape: str  # an offline stand-in (standin.SHAPES)
    peft: str
    weight: float  # its share of a budget, against the other cases'


CASES = {
    "0.5b-full": Case("qwen2.5-0.5b", "none", 1.0),
    "7b-lora": Case("qwen2.5-7b", "lora", 1.3),  # the 15 GB stand-in is built and loaded twice in its share
}
# --cpu-smoke: each shape reduced to ~0.1M parameters (its embeddings tied or not, as the real one).
SMOKE_SIZES = dict(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2, vocab_size=800)


@dataclass(frozen=True)
class Setup:
    """What both sides train: the same model, data, steps, sequence length and device."""

    model: str
    dataset: str
    steps: int  # max_steps of both sides (a budget may end them sooner)
    max_length: int
    peft: str  # "none" (full fine-tuning, TRL's quick start) or "lora"
    batch: int | None  # per-device micro-batch for both sides; None: each side's default


@dataclass
class Ran:
    """A finished side: its output lines, wall time, peak RSS and what step_hook recorded."""

    lines: list[str]
    wall_s: float
    max_rss_bytes: int
    returncode: int
    log: Path
    record: dict[str, Any] | None


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
    hyperparameters = {
        "max_steps": setup.steps,
        "max_length": setup.max_length,
        "logging_steps": 1,  # a step event every step: the bench's per-step times
        **baseline_math(setup),
    }
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
    result = build_service(home).submit(spec, SubmitOptions(dry_run=True, include_script=True))
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


def run_side(argv: list[str], cwd: Path, env: dict[str, str], hook: dict[str, Any], timeout_s: float) -> Ran:
    """One side run to its end through step_hook; its own rusage (os.wait4) gives its peak RSS."""
    out = cwd / "step_hook.json"
    log = cwd / "output.log"
    hook_env = {**env, "JOBTRAIL_BENCH_HOOK": json.dumps({**hook, "out": str(out)})}
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as f:
        argv = [sys.executable, str(HOOK_SCRIPT), *argv]
        proc = subprocess.Popen(argv, cwd=cwd, env=hook_env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        timer = threading.Timer(timeout_s, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    wall = time.perf_counter() - started
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    record = json.loads(out.read_text()) if out.is_file() else None
    return Ran(lines, wall, usage.ru_maxrss * 1024, proc.returncode, log, record)  # ru_maxrss: KiB on Linux


def failed(name: str, ran: Ran, why: str) -> SystemExit:
    tail = "\n".join(ran.lines[-40:])
    return SystemExit(f"{name}: {why} (exit {ran.returncode}; log {ran.log})\n{tail}")


def side_figures(name: str, ran: Ran, args: argparse.Namespace, commits: dict[str, Any] | None) -> dict[str, Any]:
    if ran.record is None:
        raise failed(name, ran, "training never ended (no step record)")
    window = args.profile_window if args.profile else None
    try:
        figures = step_timing.step_figures(
            ran.record, warmup_steps=args.warmup_steps, profile_window=window, commits=commits
        )
    except ValueError as exc:
        raise failed(name, ran, str(exc)) from exc
    return figures | {
        "max_steps": ran.record.get("max_steps"),
        "stopped": ran.record.get("stopped"),
        "profile": ran.record.get("profile"),
        "wall_s": ran.wall_s,
    }


def rendered_side(ran: Ran, config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    events = [e for e in map(parse_line, ran.lines) if e]
    end = next((e for e in events if e["event"] == "termination"), {})
    if ran.returncode != 0 or end.get("reason") != "succeeded":
        raise failed("rendered job", ran, f"ended {end.get('reason')}: {end.get('message')}")
    metrics = next(e for e in events if e["event"] == "metrics")
    environment = next(e for e in events if e["event"] == "environment")
    commits = step_timing.checkpoint_commits(events)
    training = config["training_args"]
    workers = int((config.get("launcher") or {}).get("num_processes") or 1)
    figures = side_figures("rendered job", ran, args, commits)
    return figures | {
        "train_runtime_s": float(metrics["train_runtime"]),
        "peak_memory_bytes": metrics["peak_memory_bytes"] if environment["device"] == "cuda" else ran.max_rss_bytes,
        "rows_per_step": int(training["per_device_train_batch_size"])
        * int(training.get("gradient_accumulation_steps", 1))
        * workers,
        "device": (environment.get("gpu") or {}).get("name") or "cpu",
        "final_commit": step_timing.final_commit(commits),
        **{key: config[key] for key in ("speedups", "launcher") if config.get(key)},
    }


def baseline_side(ran: Ran, args: argparse.Namespace) -> dict[str, Any]:
    found = [json.loads(line[len(BASELINE_PREFIX) :]) for line in ran.lines if line.startswith(BASELINE_PREFIX)]
    if ran.returncode != 0 or not found:
        raise failed("baseline", ran, "did not finish")
    report = found[-1]
    return side_figures("baseline", ran, args, None) | {
        "train_runtime_s": float(report["train_runtime"]),
        "peak_memory_bytes": report["peak_memory_bytes"] if report["device"] != "cpu" else ran.max_rss_bytes,
        "rows_per_step": int(report["rows_per_step"]),
        "device": report["device"],
        "trainable_params": int(report["trainable_params"]),
    }


# --- a case: both sides within a deadline --------------------------------------------------------


def run_case(args: argparse.Namespace, setup: Setup, tmp: Path, env: dict[str, str], deadline: float | None) -> dict:
    """Both sides of one setup, the baseline first; the rendered side trains the steps the baseline did."""
    (tmp / "rendered").mkdir()
    (tmp / "baseline").mkdir()
    script, config = render_job(tmp / "home", setup, tmp / "rendered")
    base_argv = [str(BASELINE_SCRIPT), "--model", setup.model, "--dataset", setup.dataset]
    base_argv += ["--steps", str(setup.steps), "--max-length", str(setup.max_length)]
    base_argv += ["--output-dir", str(tmp / "baseline" / "output")]
    base_argv += (["--batch", str(setup.batch)] if setup.batch else []) + (["--lora"] if setup.peft == "lora" else [])
    hook: dict[str, Any] = {"profile": list(args.profile_window)} if args.profile else {}
    base_deadline = None if deadline is None else time.time() + (deadline - time.time()) / 2
    settings = with_deadline(hook, base_deadline, tail_reserve_s(setup, "baseline"), args.min_steps)
    baseline = baseline_side(
        run_side(base_argv, tmp / "baseline", env, settings, kill_after(args, base_deadline)), args
    )
    hook["stop_at"] = baseline["steps_trained"]  # the same steps on both sides (and so the same schedule)
    settings = with_deadline(hook, deadline, tail_reserve_s(setup, "rendered"), args.min_steps)
    ran = run_side([str(script)], script.parent, env, settings, kill_after(args, deadline))
    return {"rendered": rendered_side(ran, config, args), "baseline": baseline, "config": config}


def with_deadline(hook: dict[str, Any], deadline: float | None, reserve_s: float, min_steps: int) -> dict[str, Any]:
    """The side's hook settings with the time its training must end by (the side's deadline less the reserve)."""
    if deadline is None:
        return hook
    return hook | {"deadline": deadline - reserve_s, "min_steps": min_steps}


def kill_after(args: argparse.Namespace, deadline: float | None) -> float:
    return args.timeout if deadline is None else max(0.0, deadline - time.time()) + GRACE_S


def tail_reserve_s(setup: Setup, side: str) -> float:
    """Seconds a side needs after its last step, for full fine-tuning: its checkpoint (the rendered job keeps fp32
    weights and Adam's two moments, 12 bytes a parameter, then hashes them and writes a 4-byte final model;
    plain TRL trains the bf16 weights as loaded, 6 bytes), and the exit. An adapter's files are small."""
    if setup.peft != "none":
        return TAIL_S
    return TAIL_S + model_params(setup.model) * (16 if side == "rendered" else 6) / WRITE_BYTES_PER_S


def case_deadline(start: float, budget_s: float | None, weights: list[float]) -> float | None:
    """The end of this case's share of the time left: its weight against the cases still to run."""
    if budget_s is None:
        return None
    now = time.time()
    return now + (start + budget_s - now) * weights[0] / sum(weights)


# --- setting up ----------------------------------------------------------------------------------


_WORDS = ("the", "apple", "sky", "grass", "is", "red", "blue", "green", "one", "two", "three", "after", "what", "and")


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


def build_standin(args: argparse.Namespace, shape: str, dest: Path, env: dict[str, str]) -> dict[str, Any]:
    """bench/standin.py in its own process, so this one never holds a CUDA context while the sides train."""
    sizes = json.dumps(dict(SHAPES[shape], **SMOKE_SIZES)) if args.cpu_smoke else shape
    argv = [sys.executable, str(STANDIN_SCRIPT), "--shape", sizes, "--dest", str(dest)]
    argv += ["--max-positions", str(max(512, args.max_length))]
    argv += ["--dtype", "float32", "--device", "cpu"] if args.cpu_smoke else ["--dtype", "bfloat16"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"building the {shape} stand-in failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def prepare(args: argparse.Namespace, case: Case | None, tmp: Path, env: dict[str, str]) -> tuple[Setup, dict]:
    """The model and data both sides train on, built offline where the mode says so; and the stand-in's facts."""
    model, dataset, peft, built = args.model, args.dataset, args.peft, {}
    shape = case.shape if case else args.offline_shape or ("qwen2.5-0.5b" if args.cpu_smoke else None)
    if shape:
        built = build_standin(args, shape, tmp / "model", env)
        model = built["path"]
        rows = int(args.steps * (args.batch or 8) * 1.25) + 64  # every step's rows, no second epoch
        dataset = str(write_chat_rows(tmp / "chat.jsonl", rows, max_words=max(8, args.max_length // 2)))
    if case:
        peft = case.peft
    setup = Setup(
        model=model, dataset=dataset, steps=args.steps, max_length=args.max_length, peft=peft, batch=args.batch
    )
    return setup, built


def case_label(args: argparse.Namespace) -> str:
    what = args.offline_shape or ("smoke" if args.cpu_smoke else args.model)
    return f"{what}-{'lora' if args.peft == 'lora' else 'full'}"


def environment(args: argparse.Namespace, tmp: Path) -> dict[str, str]:
    """Both sides' environment (this process's too: preflight reads the visible devices)."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRACKIO_DIR": str(tmp / "trackio"),  # the rendered job reports to trackio (its default): keep it here
    }
    # The model and data it makes are in `tmp`; those it is given stay inputs where they are (the roots set, or the
    # defaults: the working directory and the home).
    given = os.environ.get("JOBTRAIL_DATA_ROOTS") or os.pathsep.join([os.getcwd(), str(Path.home())])
    env["JOBTRAIL_DATA_ROOTS"] = os.pathsep.join([str(tmp), given])
    if args.cpu_smoke:
        env |= {"CUDA_VISIBLE_DEVICES": "", "HF_HOME": str(tmp / "hf"), "HF_HUB_OFFLINE": "1"}
        # One thread a side: a tiny model gains nothing from more, and on a busy machine they wait on each other.
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    elif not os.environ.get("CUDA_VISIBLE_DEVICES"):
        env["CUDA_VISIBLE_DEVICES"] = "0"  # one GPU for both sides, whatever the machine has
    if args.offline_shape or args.cases:
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
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny offline stand-ins on CPU")
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B")
    parser.add_argument("--peft", choices=("none", "lora"), default="none")
    parser.add_argument("--dataset", default="trl-lib/Capybara")
    parser.add_argument("--offline-shape", choices=sorted(SHAPES), help="a stand-in of this shape (random weights)")
    parser.add_argument("--cases", help=f"comma-separated, of {', '.join(CASES)}: offline stand-ins, one by one")
    parser.add_argument("--suite", action="store_true", help=f"--cases {','.join(CASES)}")
    parser.add_argument("--budget-s", type=float, help="the whole run within about this many seconds")
    parser.add_argument(
        "--steps", type=int, help="max_steps (default: 100 with a budget, else 50; 10 with --cpu-smoke)"
    )
    parser.add_argument("--max-length", type=int, help="default: 1024 (TRL's); 128 with --cpu-smoke")
    parser.add_argument("--batch", type=int, help="per-device micro-batch of both sides (default: each side's own)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="the first steps, reported apart")
    parser.add_argument("--profile", action="store_true", help="a torch profiler summary of --profile-steps")
    parser.add_argument("--profile-steps", default="5-8", help="FIRST-LAST, after the warm-up")
    parser.add_argument("--loss-tolerance", type=float, default=LOSS_TOLERANCE)
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per side without a budget")
    parser.add_argument("--json", metavar="PATH", help='every figure as JSON to PATH ("-": stdout)')
    parser.add_argument("--logs", metavar="DIR", help="copy each side's output there, as CASE-SIDE.log")
    args = parser.parse_args(argv)
    if args.suite:
        args.cases = ",".join(CASES)
    # $OUT and the like expand here, for callers that pass arguments without a shell (bench/gpu/run.sh).
    args.json, args.logs = (os.path.expandvars(path) if path else path for path in (args.json, args.logs))
    if args.cases:
        unknown = [name for name in args.cases.split(",") if name not in CASES]
        if unknown or args.offline_shape:
            parser.error(f"--cases takes {', '.join(CASES)} (each its own stand-in and PEFT method); got {unknown}")
    args.max_length = args.max_length or (128 if args.cpu_smoke else 1024)
    first, _, last = args.profile_steps.partition("-")
    args.profile_window = (int(first), int(last or first))
    if args.profile and not args.warmup_steps < args.profile_window[0] <= args.profile_window[1]:
        parser.error("--profile-steps must lie after the warm-up (FIRST > --warmup-steps, FIRST <= LAST)")
    # The fewest steps with a steady state after the warm-up (and after the profile): what a budget leaves.
    args.min_steps = args.warmup_steps + STEADY_MIN
    if args.profile:
        args.min_steps = max(args.min_steps, args.profile_window[1] + 3)
    args.steps = args.steps or max(args.min_steps, 100 if args.budget_s else 10 if args.cpu_smoke else 50)
    if args.steps < args.min_steps:
        parser.error(f"--steps must be at least {args.min_steps}: the warm-up, then {STEADY_MIN} steady steps")
    return args


def write_json(path: str | None, report: dict[str, Any]) -> None:
    if not path or path == "-":
        return
    staging = Path(f"{path}.partial")
    staging.write_text(json.dumps(report, indent=2))
    staging.replace(path)  # a reader (or a run killed mid-write) sees the last whole report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    names = args.cases.split(",") if args.cases else [None]
    report: dict[str, Any] = {"budget_s": args.budget_s, "cases": [], "failed": [], "cut": []}
    tables = sys.stderr if args.json == "-" else sys.stdout  # stdout is the JSON's alone
    with tempfile.TemporaryDirectory(prefix="jobtrail-throughput-") as tmp_name:
        tmp = Path(tmp_name)
        env = environment(args, tmp)
        os.environ.update(env)
        child_env = dict(os.environ)
        for i, name in enumerate(names):
            weights = [CASES[n].weight if n else 1.0 for n in names[i:]]
            deadline = case_deadline(started, args.budget_s, weights)
            label = name or case_label(args)
            if deadline is not None and deadline <= time.time() and i > 0:  # the first case always runs
                report["cut"].append(f"{label}: not run, the budget was spent")
                continue
            case_tmp = tmp / f"case-{i}"
            case_tmp.mkdir()
            try:
                summary = bench_case(args, CASES[name] if name else None, label, case_tmp, child_env, deadline)
            except SystemExit as exc:  # one case's failure must not cost the others' figures
                report["failed"].append({"case": label, "error": str(exc)})
                print(f"\n== {label} FAILED: {exc}", file=sys.stderr)
            else:
                report["cases"].append(summary)
                report["cut"] += summary["cut"]
                with contextlib.redirect_stdout(tables):
                    print_case(summary)
            finally:
                keep_logs(args.logs, label, case_tmp)
                shutil.rmtree(case_tmp, ignore_errors=True)  # the next case's stand-in needs the disk
            report["wall_s"] = time.time() - started
            write_json(args.json, report)
    report["wall_s"] = time.time() - started
    write_json(args.json, report)
    with contextlib.redirect_stdout(tables):
        print_cuts(report)
    if args.json == "-":
        print(json.dumps(report, indent=2))
    return 1 if report["failed"] else 0


def bench_case(
    args: argparse.Namespace, case: Case | None, label: str, tmp: Path, env: dict[str, str], deadline: float | None
) -> dict[str, Any]:
    setup, built = prepare(args, case, tmp, env)
    if not args.cpu_smoke and not built:
        warm_caches(setup)
    return summarise(label, setup, run_case(args, setup, tmp, env, deadline), args, built)


def keep_logs(folder: str | None, label: str, case_tmp: Path) -> None:
    """Each side's output (and the hook's record) copied out of the temporary folder, as LABEL-SIDE.log."""
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    for side in ("baseline", "rendered"):
        log = case_tmp / side / "output.log"
        if log.is_file():
            shutil.copyfile(log, Path(folder) / f"{label}-{side}.log")


if __name__ == "__main__":
    sys.exit(main())
