"""Crash-and-resume harness: SIGKILL a real SFT job at random moments and audit every resume.

One rendered SFT script (LoRA on the tiny model, fixed seed, a checkpoint every few steps) is run
again and again in the same output directory, each time as its own process group that is
SIGKILLed at a moment drawn from a seeded RNG: a random delay after some step event, inside a
save (on a `checkpoint` `writing` event), or right after a commit. Between kills, hand-made
decoys are planted: a partial `checkpoint-<huge>` (all files, no marker) and a committed-looking
`checkpoint-<huge>` with one corrupted byte. A last attempt runs to completion.

Every resume is audited against the directory as it was when the attempt started, using the
runtime's own verify_checkpoint: the chosen checkpoint is the newest one that verifies, it is
no decoy, it is not older than the last commit any attempt announced, and training continues at
chosen step + 1. The final loss curve (for each step, the last loss logged for it) is compared
with an uninterrupted run of the same script in a fresh directory.

Used by tests/service/test_crash_resume.py (20 trials, in two lineages run side by side: one
killed attempt after another is mostly imports on one core, so two output directories use both)
and bench/crash_resume.py (more). Synchronisation is by reading the job's event stream line by
line; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import json
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from jobtrail.templates.render import render_script, scripts_dir

EVENT_PREFIX = "JOBTRAIL "
SAVE_STEPS = 3
# The harshest setting: every save deletes all older commits, so one wrong idea of which
# checkpoint is the newest good one loses all progress (the resume floor check catches that).
RETENTION = 1
DECOY_STEP = 1_000_000  # decoys sit far above any step training reaches
STARTUP_TIMEOUT_S = 120.0  # imports + model + data; ~5 s on an idle 2-core machine
SECONDS_PER_STEP_BUDGET = 1.0  # generous: a step plus its share of saves takes ~0.05 s
PLANT_PROBABILITY = 0.2
# Resume restores weights, optimizer, scheduler, RNG and data position, and one-thread CPU math
# is deterministic, so a resumed run repeats the uninterrupted one bit for bit: measured
# max |Δloss| = 0.0 in every run of this harness. What a broken resume costs, measured by
# resuming this job from a checkpoint with one file left out: no RNG state, up to 2e-3 within six
# steps (the dropout masks change); no optimizer/scheduler state, 0.19. The tolerance sits well
# under the smallest of those and only leaves room for kernels that are not bitwise
# reproducible on some other CPU.
LOSS_TOLERANCE = 1e-4

_STDOUT_LOCK = threading.Lock()

Trigger = Literal["step", "writing", "committed"]
TRIGGERS: tuple[Trigger, ...] = ("step", "writing", "committed")


# --- the job -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrashJob:
    """A rendered SFT script and the directory it trains into."""

    script: Path
    output_dir: Path
    env: dict[str, str]
    max_steps: int

    @property
    def timeout_s(self) -> float:
        """Upper bound for one attempt, start to exit."""
        return STARTUP_TIMEOUT_S + SECONDS_PER_STEP_BUDGET * self.max_steps


def max_steps_for(trials: int) -> int:
    """Enough steps that no trial reaches the end before its kill.

    A trial commits at most two saves past its resume point (see choose_plan), so after t
    trials training is at most 2 * SAVE_STEPS * t steps in.
    """
    return 2 * SAVE_STEPS * trials + SAVE_STEPS


def sft_config(
    model: Path, dataset: Path, output_dir: Path, max_steps: int, seed: int, num_processes: int = 1
) -> dict[str, Any]:
    """The job's CONFIG, in the shape service.build_config produces (num_processes > 1: gloo workers)."""
    launcher = {"kind": "torchrun", "num_processes": num_processes, "strategy": "ddp"}
    return {
        "template": "sft",
        "template_version": 1,
        "model": str(model),
        "dataset": {"source": str(dataset), "split": "train", "mapping": None},
        "output_dir": str(output_dir),
        # Dropout > 0 makes every step draw from the torch RNG, so a resume that failed to
        # restore the RNG state would show in the loss curve.
        "peft": {"method": "lora", "r": 8, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"},
        "training_args": {
            "max_steps": max_steps,
            "learning_rate": 5e-3,
            "per_device_train_batch_size": 2,
            "save_steps": SAVE_STEPS,
            "logging_steps": 1,
            "max_length": 64,
            "seed": seed,
        },
        "checkpoint_retention": RETENTION,
        "push_to_hub": False,
        "hub_model_id": None,
        "launcher": launcher if num_processes > 1 else {"kind": "python", "num_processes": 1, "strategy": "single"},
    }


def render_job(
    workdir: Path,
    model: Path,
    dataset: Path,
    env: dict[str, str],
    *,
    max_steps: int,
    seed: int = 0,
    num_processes: int = 1,
) -> CrashJob:
    """Render the SFT script into workdir/job.py, training into workdir/out (with num_processes workers,
    which torch's launcher starts in the job's process group: one killpg takes them all)."""
    workdir.mkdir(parents=True, exist_ok=True)
    output_dir = workdir / "out"
    script = workdir / "job.py"
    script.write_text(render_script("sft", sft_config(model, dataset, output_dir, max_steps, seed, num_processes)))
    # One torch thread: the tiny model gains nothing from more, and one thread is deterministic.
    return CrashJob(script, output_dir, {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}, max_steps)


def load_runtime() -> ModuleType:
    """scripts/_runtime.py as a module: the very code the rendered script inlines."""
    spec = importlib.util.spec_from_file_location("crash_harness_runtime", scripts_dir() / "_runtime.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # Its runtime imports (_disk ...) are the scripts folder's modules, found as the rendered job inlines them.
    sys.path.insert(0, str(scripts_dir()))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(scripts_dir()))
    return module


# --- a running attempt ----------------------------------------------------------------------------


class JobProcess:
    """The job as its own process group, its events streamed line by line from stdout."""

    def __init__(self, job: CrashJob, stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(job.script)],
            cwd=job.script.parent,
            env=job.env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,  # its own process group, so one killpg takes every child
        )
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()  # None: stdout closed
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                # A line cut short by SIGKILL has no newline and is not an event.
                if line.startswith(EVENT_PREFIX) and line.endswith("\n"):
                    self._queue.put(json.loads(line[len(EVENT_PREFIX) :]))
        finally:  # even if a line does not parse, the attempt sees the end instead of hanging
            self._queue.put(None)

    def next_event(self, until: float) -> dict[str, Any] | None:
        """The next event; None once stdout is closed. TimeoutError at monotonic time `until`."""
        if self._closed:
            return None
        try:
            event = self._queue.get(timeout=max(0.0, until - time.monotonic()))
        except queue.Empty:
            raise TimeoutError from None
        if event is None:
            self._closed = True
        else:
            self.events.append(event)
        return event

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # already gone: nothing to kill
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self, timeout_s: float) -> int:
        """Wait for exit and collect the events still in the pipe; the exit code."""
        until = time.monotonic() + timeout_s
        returncode = self.proc.wait(timeout=timeout_s)
        while self.next_event(until) is not None:
            pass
        self._reader.join(timeout=max(0.0, until - time.monotonic()))
        self._stderr.close()
        return returncode

    def stderr_tail(self, chars: int = 1500) -> str:
        return self.stderr_path.read_text(errors="replace")[-chars:]


# --- kill plans ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class KillPlan:
    """SIGKILL `delay_s` after this attempt's `nth` event of kind `trigger`."""

    trigger: Trigger
    nth: int
    delay_s: float

    def matches(self, event: dict[str, Any], seen: Counter[str]) -> bool:
        """Count `event` if it is of the trigger's kind; True when it is the nth."""
        kind = event_kind(event)
        if kind is None:
            return False
        seen[kind] += 1
        return kind == self.trigger and seen[kind] == self.nth


def event_kind(event: dict[str, Any]) -> Trigger | None:
    """step, or writing/committed of a checkpoint-N directory (the final model is not one)."""
    if event["event"] == "step":
        return "step"
    is_checkpoint = event["event"] == "checkpoint" and Path(event["path"]).name.startswith("checkpoint-")
    if is_checkpoint and event["state"] in ("writing", "committed"):
        return event["state"]
    return None


@dataclass(frozen=True)
class Timings:
    """Typical durations measured on the uninterrupted run; they scale the random delays."""

    step_s: float
    save_s: float


def choose_plan(rng: random.Random, timings: Timings) -> KillPlan:
    """A kill moment no later than two saves past the resume point (see max_steps_for)."""
    trigger = rng.choice(TRIGGERS)
    if trigger == "step":
        # Up to one step after a step's log line: in the next forward or backward pass, or in
        # the save that follows a save step's log line.
        return KillPlan("step", rng.randint(1, 2 * SAVE_STEPS), rng.uniform(0, timings.step_s))
    if trigger == "writing":
        # `writing` is emitted just before the step's log line and the save, so an instant kill
        # tends to land before the first byte; half of the time, jitter across a typical save.
        delay = 0.0 if rng.random() < 0.5 else rng.uniform(0, timings.save_s)
        return KillPlan("writing", rng.randint(1, 2), delay)
    return KillPlan("committed", rng.randint(1, 2), 0.0)  # lands in retention or the next step


@dataclass
class Attempt:
    """What one attempt did, as its events and the harness saw it."""

    events: list[dict[str, Any]]
    returncode: int
    killed: bool
    stderr_path: Path
    problem: str | None = None

    def first(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["event"] == name), None)

    def succeeded(self) -> bool:
        termination = self.first("termination") or {}
        return self.returncode == 0 and termination.get("reason") == "succeeded" and not self.problem

    def steps(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "step"]

    def committed_steps(self) -> list[int]:
        return [e["step"] for e in self.events if event_kind(e) == "committed"]

    def killed_while_writing(self) -> Path | None:
        """The checkpoint this attempt left in state `writing` (no commit announced), if any."""
        last = next((e for e in reversed(self.events) if event_kind(e) in ("writing", "committed")), None)
        return Path(last["path"]) if self.killed and last and last["state"] == "writing" else None


def run_attempt(job: CrashJob, plan: KillPlan | None, stderr_path: Path) -> Attempt:
    """Run the job once; SIGKILL its process group as `plan` says (None: let it finish)."""
    proc = JobProcess(job, stderr_path)
    deadline = time.monotonic() + job.timeout_s
    kill_at: float | None = None
    seen: Counter[str] = Counter()
    problem = None
    try:
        while kill_at is None or time.monotonic() < kill_at:
            event = proc.next_event(deadline if kill_at is None else min(deadline, kill_at))
            if event is None:
                if plan:
                    problem = f"exited before its kill ({plan}); stderr: {proc.stderr_tail()}"
                break
            if plan and kill_at is None and plan.matches(event, seen):
                kill_at = time.monotonic() + plan.delay_s
    except TimeoutError:
        if time.monotonic() >= deadline:
            problem = f"not done within {job.timeout_s:.0f}s ({plan}); stderr: {proc.stderr_tail()}"
    killed = kill_at is not None or problem is not None
    if killed:
        proc.kill()
    returncode = proc.finish(timeout_s=60)
    return Attempt(proc.events, returncode, killed and problem is None, stderr_path, problem)


# --- auditing the checkpoints on disk ------------------------------------------------------------


def newest_verifying(output_dir: Path, rt: ModuleType) -> tuple[Path | None, int | None]:
    """The resume target by an independent scan: every checkpoint-N checked, highest good N."""
    good = [
        (step, path)
        for path in output_dir.glob("checkpoint-*")
        if (step := rt.checkpoint_step(path)) is not None and rt.verify_checkpoint(path)[0]
    ]
    step, path = max(good, default=(None, None))
    return path, step


def step_mismatch(ckpt: Path, step: int, rt: ModuleType) -> str | None:
    """A verified checkpoint's marker and Trainer state must both name the directory's step."""
    marker_step = json.loads((ckpt / rt.MARKER_NAME).read_text())["step"]
    trainer_step = json.loads((ckpt / "trainer_state.json").read_text())["global_step"]
    if (marker_step, trainer_step) == (step, step):
        return None
    return f"{ckpt.name}: marker says step {marker_step}, trainer state {trainer_step}"


def plant_partial(output_dir: Path, source: Path, step: int, rt: ModuleType) -> Path:
    """A checkpoint killed between its manifest and its marker: every byte there, no marker."""
    decoy = output_dir / f"checkpoint-{step}"
    shutil.copytree(source, decoy, ignore=shutil.ignore_patterns(rt.MARKER_NAME))
    return decoy


def plant_corrupt(output_dir: Path, source: Path, step: int, rt: ModuleType) -> Path:
    """A properly committed checkpoint that later lost one bit: same sizes, wrong sha256."""
    decoy = output_dir / f"checkpoint-{step}"
    shutil.copytree(source, decoy, ignore=shutil.ignore_patterns(rt.MARKER_NAME, rt.MANIFEST_NAME))
    # Its `committed` event is not the job's. sys.stdout is one for all lineages' threads: one
    # redirect at a time, or two interleaved ones would leave it pointing at a StringIO.
    with _STDOUT_LOCK, contextlib.redirect_stdout(io.StringIO()):
        rt.commit_checkpoint(decoy, step, "planted", "planted")
    weights = decoy / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    return decoy


# --- the runs ------------------------------------------------------------------------------------


@dataclass
class Reference:
    """The uninterrupted run: loss per step and the timings that scale kill delays."""

    losses: dict[int, float]
    timings: Timings


def run_uninterrupted(job: CrashJob) -> Reference:
    """Run `job` once to completion in its own (fresh) directory."""
    attempt = run_attempt(job, None, job.output_dir.parent / "uninterrupted.stderr")
    if not attempt.succeeded():
        raise RuntimeError(f"uninterrupted run failed: {attempt.problem or attempt.stderr_path.read_text()[-3000:]}")
    losses = {e["step"]: e["loss"] for e in attempt.steps()}
    return Reference(losses, measure_timings(attempt.events))


def measure_timings(events: list[dict[str, Any]]) -> Timings:
    """Median gap between step events, and median writing → committed time of a checkpoint."""
    step_times = [e["time"] for e in events if e["event"] == "step"]
    gaps = [b - a for a, b in itertools.pairwise(step_times)]
    writing = {e["step"]: e["time"] for e in events if event_kind(e) == "writing"}
    saves = [e["time"] - writing[e["step"]] for e in events if event_kind(e) == "committed"]
    return Timings(statistics.median(gaps), statistics.median(saves))


@dataclass
class CrashReport:
    trials: int = 0
    kills_by_trigger: Counter[str] = field(default_factory=Counter)
    kills_in_save: int = 0  # the checkpoint was in state `writing` when the kill landed
    partial_dirs_left: int = 0  # ...and its directory held bytes that do not verify
    resumes_checked: int = 0
    decoys_partial: int = 0
    decoys_corrupt: int = 0
    max_abs_dloss: float = float("nan")  # final curve vs the uninterrupted run
    max_abs_dloss_any_attempt: float = float("nan")  # every loss any attempt logged
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"trials={self.trials} kills={dict(self.kills_by_trigger)} kills_in_save={self.kills_in_save} "
            f"partial_dirs_left={self.partial_dirs_left} resumes_checked={self.resumes_checked} "
            f"decoys=partial:{self.decoys_partial},corrupt:{self.decoys_corrupt} "
            f"max|Δloss|={self.max_abs_dloss:.3g} (any attempt {self.max_abs_dloss_any_attempt:.3g}) "
            f"violations={len(self.violations)}"
        )


@dataclass
class Lineage:
    """What the harness knows across attempts in the crashed directory."""

    floor: int = 0  # the newest commit any attempt announced: no resume may go below it
    decoys: set[Path] = field(default_factory=set)
    curve: dict[int, float] = field(default_factory=dict)  # step → last loss logged for it
    logged: list[tuple[int, float]] = field(default_factory=list)  # every (step, loss) logged


def run_with_kills(job: CrashJob, reference: Reference, trials: int, rng_seed: int) -> CrashReport:
    """`trials` killed attempts, then one to completion, all in job.output_dir; audited."""
    rt = load_runtime()
    rng = random.Random(rng_seed)
    report, lineage = CrashReport(), Lineage()
    logs = job.output_dir.parent / "logs"
    logs.mkdir(exist_ok=True)
    for trial in range(trials):
        plan = choose_plan(rng, reference.timings)
        attempt = audited_attempt(job, plan, logs / f"trial-{trial}.stderr", rt, report, lineage)
        report.trials += 1
        record_kill(attempt, plan, rt, report)
        if not attempt.killed:
            break  # the lineage is no longer what the next trials assume
        maybe_plant(job.output_dir, rng, rt, report, lineage)
    final = audited_attempt(job, None, logs / "final.stderr", rt, report, lineage)
    check_final(final, job, rt, report)
    compare_curves(reference, lineage, job.max_steps, report)
    return report


def run_lineages(jobs: list[CrashJob], reference: Reference, trials: int, rng_seed: int) -> CrashReport:
    """`trials` kills shared out over `jobs` (each its own output directory, a lineage of kills and
    resumes audited by run_with_kills with its own seed), the lineages run side by side; one report."""
    assert trials % len(jobs) == 0, "every lineage takes the same number of kills"
    seeds = range(rng_seed, rng_seed + len(jobs))
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        reports = list(
            pool.map(lambda job, seed: run_with_kills(job, reference, trials // len(jobs), seed), jobs, seeds)
        )
    merged = CrashReport()
    for lineage, report in enumerate(reports):
        merged.trials += report.trials
        merged.kills_by_trigger += report.kills_by_trigger
        merged.kills_in_save += report.kills_in_save
        merged.partial_dirs_left += report.partial_dirs_left
        merged.resumes_checked += report.resumes_checked
        merged.decoys_partial += report.decoys_partial
        merged.decoys_corrupt += report.decoys_corrupt
        merged.violations += [f"lineage {lineage}: {violation}" for violation in report.violations]
    merged.max_abs_dloss = max(report.max_abs_dloss for report in reports)
    merged.max_abs_dloss_any_attempt = max(report.max_abs_dloss_any_attempt for report in reports)
    return merged


def audited_attempt(
    job: CrashJob, plan: KillPlan | None, stderr_path: Path, rt: ModuleType, report: CrashReport, lineage: Lineage
) -> Attempt:
    """Snapshot the resume target, run the attempt, then check its resume against the snapshot."""
    expected_path, expected_step = newest_verifying(job.output_dir, rt)
    mismatch = step_mismatch(expected_path, expected_step, rt) if expected_path else None
    attempt = run_attempt(job, plan, stderr_path)
    problems = [p for p in (mismatch, attempt.problem) if p]
    problems += resume_problems(attempt, expected_path, expected_step, lineage)
    report.violations += [f"{stderr_path.stem}: {p}" for p in problems]
    report.resumes_checked += attempt.first("resume") is not None
    lineage.floor = max([lineage.floor, *attempt.committed_steps()])
    for event in attempt.steps():
        lineage.curve[event["step"]] = event["loss"]
        lineage.logged.append((event["step"], event["loss"]))
    return attempt


def resume_problems(
    attempt: Attempt, expected_path: Path | None, expected_step: int | None, lineage: Lineage
) -> list[str]:
    """Everything wrong with how `attempt` resumed."""
    resume = attempt.first("resume")
    if resume is None:
        return ["no resume event"]
    chosen = Path(resume["checkpoint"]) if resume["checkpoint"] else None
    problems = []
    if chosen != expected_path or resume["step"] != expected_step:
        problems.append(f"resumed from {chosen} (step {resume['step']}), newest verifying is {expected_path}")
    if chosen in lineage.decoys:
        problems.append(f"resumed from a planted decoy {chosen}")
    if (resume["step"] or 0) < lineage.floor:
        problems.append(f"resumed at step {resume['step']} though checkpoint-{lineage.floor} was committed")
    # Decoys sit above every real step, so resume must have examined, skipped and reported each.
    unreported = lineage.decoys - {Path(s["path"]) for s in resume["skipped"]}
    if unreported:
        problems.append(f"decoys not reported as skipped: {sorted(map(str, unreported))}")
    steps = attempt.steps()
    if steps and steps[0]["step"] != (resume["step"] or 0) + 1:
        problems.append(f"resumed at step {resume['step']} but the first step logged is {steps[0]['step']}")
    return problems


def record_kill(attempt: Attempt, plan: KillPlan, rt: ModuleType, report: CrashReport) -> None:
    """Count where the kill landed: which trigger, and whether inside a save."""
    if not attempt.killed:
        return
    report.kills_by_trigger[plan.trigger] += 1
    writing = attempt.killed_while_writing()
    if writing is not None:
        report.kills_in_save += 1
        report.partial_dirs_left += writing.is_dir() and not rt.verify_checkpoint(writing)[0]


def maybe_plant(output_dir: Path, rng: random.Random, rt: ModuleType, report: CrashReport, lineage: Lineage) -> None:
    """Plant each kind of decoy as soon as there is a checkpoint to copy (so every later resume
    meets both), then more now and then, copied from newer checkpoints."""
    source, _ = newest_verifying(output_dir, rt)
    if source is None:
        return
    due_partial = not report.decoys_partial or rng.random() < PLANT_PROBABILITY
    due_corrupt = not report.decoys_corrupt or rng.random() < PLANT_PROBABILITY
    next_step = DECOY_STEP + len(lineage.decoys)
    if due_partial:
        lineage.decoys.add(plant_partial(output_dir, source, next_step, rt))
        report.decoys_partial += 1
        next_step += 1
    if due_corrupt:
        lineage.decoys.add(plant_corrupt(output_dir, source, next_step, rt))
        report.decoys_corrupt += 1


def check_final(final: Attempt, job: CrashJob, rt: ModuleType, report: CrashReport) -> None:
    """The last attempt must finish the run: succeeded, at max_steps, final model committed."""
    metrics = final.first("metrics") or {}
    if not final.succeeded() or metrics.get("global_step") != job.max_steps:
        report.violations.append(
            f"final attempt: exit {final.returncode}, {final.problem or final.first('termination')}, "
            f"metrics {metrics}; stderr: {final.stderr_path}"
        )
    ok, why = rt.verify_checkpoint(job.output_dir / "final")
    if not ok:
        report.violations.append(f"final model does not verify: {why}")


def compare_curves(reference: Reference, lineage: Lineage, max_steps: int, report: CrashReport) -> None:
    """max |Δloss| of the final curve (and of every logged loss) against the uninterrupted run."""
    missing = sorted(set(range(1, max_steps + 1)) - set(lineage.curve))
    if missing:
        report.violations.append(f"no loss logged for steps {missing[:10]}")
    report.max_abs_dloss = max(abs(loss - reference.losses[s]) for s, loss in lineage.curve.items())
    report.max_abs_dloss_any_attempt = max(abs(loss - reference.losses[s]) for s, loss in lineage.logged)
