"""Receipts at scale: a ledger of N realistic attempts, its bytes per attempt, and the p50/p99 of ps, inspect and
report as the service runs them (JobService, as the MCP tools call it). Issue 17's targets at 100,000 attempts:
under 5 KB an attempt, ps and inspect p50 under 20 ms, report under 50 ms.

    python bench/ledger_scale.py                       # 100,000 attempts, SQLite in a temp JOBTRAIL_HOME
    python bench/ledger_scale.py --smoke               # 300 attempts (tests/bench/test_ledger_scale.py)
    python bench/ledger_scale.py --postgres            # and in a PostgreSQL started for the run
    python bench/ledger_scale.py --postgres-url URL    # ... or in this database (filled before: measured as it is)
    python bench/ledger_scale.py --postgres --no-sqlite  # PostgreSQL alone (beside a SQLite run: 2 cores, 2 runs)

What the ledger is filled with is what jobs record, through the Ledger API (ledger/store.py): scripts rendered
from the templates by the real renderer with hyperparameters drawn from a team's usual ranges (SFT most, then
DPO, GRPO, KTO, reward; five models, twenty datasets, local and HF Jobs with their flavors), retries that
run their first attempt's script (a preemption) or a changed one (an OOM halves the micro-batch), and event
streams as the job runtime prints them, read back by the tracker's own digest (outcomes/events.py): start,
environment, data manifest, phases, a step event every logging step (10) with TRL's metrics, checkpoints
every save (100) with two kept, the final model, the summary and the termination. 30 days of them, ending
in the termination reasons a team sees (55% succeeded; OOMs, timeouts, preemptions, config errors ...).

Prints one figure a line, "<engine> <name> <value>", e.g. "sqlite bytes_per_attempt 3127".
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jobtrail.app import build_service
from jobtrail.ledger.connection import LEDGER_URL_ENV
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobSpec, NewAttempt, Placement, RunRecord, TerminationReason
from jobtrail.outcomes import events
from jobtrail.preflight.plan import job_values
from jobtrail.service.context import new_run, queued_attempt
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import render_script
from jobtrail.templates.runtime import runtime_module
from jobtrail.util.digest import config_json, sha256_text

DAY = 86400.0
SMOKE_ATTEMPTS = 300
METHODS = {"sft": 0.6, "dpo": 0.2, "grpo": 0.08, "kto": 0.06, "reward": 0.06}
MODELS = [
    "Qwen/Qwen2.5-0.5B",
    "Qwen/Qwen2.5-1.5B-Instruct",
    "Qwen/Qwen2.5-7B",
    "meta-llama/Llama-3.2-1B",
    "HuggingFaceTB/SmolLM2-360M",
]
DATASETS = [f"acme/{topic}-{version}" for topic in ("chat", "support", "code", "math", "prefs") for version in "abcd"]
FLAVORS = {"a10g-large": 1.5, "l4x1": 0.8, "a100-large": 2.5, "h100": 4.5}  # USD an hour
REASONS = {
    "succeeded": 0.55,
    "oom": 0.08,
    "cancelled": 0.07,
    "timeout": 0.05,
    "config_error": 0.05,
    "preempted": 0.04,
    "diverged": 0.03,
    "dependency_error": 0.03,
    "infra_transient": 0.03,
    "lost": 0.02,
    "budget": 0.02,
    "hub_error": 0.02,
    "unknown": 0.01,
}
RETRIED = {"oom", "preempted", "infra_transient", "lost", "timeout"}
LOGGING_STEPS, SAVE_STEPS, KEPT = 10, 100, 2
SCRIPTS_KEPT = 64
RUNTIME = runtime_module("_runtime")  # event lines as the job prints them
f32 = runtime_module("_metrics").as_float32
PACKAGES = {"torch": "2.13.0", "transformers": "5.23.0", "trl": "1.16.0", "peft": "0.21.2", "datasets": "5.2.0"}


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


class Filler:
    """Runs and attempts of 30 days, written through the Ledger API."""

    def __init__(self, ledger: Ledger, attempts: int, seed: int) -> None:
        self.ledger, self.target, self.rng = ledger, attempts, random.Random(seed)
        self.now = time.time()
        self.written = 0
        # config_json → script: a config rendered once for its run's attempts (a retry may reuse it). Only the
        # latest are kept: 100,000 attempts' scripts of ~120 KB each would hold ~9 GB.
        self._scripts: dict[str, str] = {}

    def fill(self) -> int:
        number = 0
        while self.written < self.target:
            number += 1
            self._run(f"jt-{number:08d}")
        return number

    def _run(self, run_id: str) -> None:
        rng = self.rng
        method = _pick(rng, METHODS)
        remote = rng.random() < 0.4
        flavor = rng.choice(list(FLAVORS)) if remote else None
        hyperparameters = {
            "learning_rate": rng.choice([5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4]),
            "max_steps": rng.choice([100, 200, 300, 500, 1000]),
            "lora_r": rng.choice([8, 16, 32, 64]),
            "per_device_train_batch_size": rng.choice([1, 2, 4, 8]),
        }
        spec = JobSpec(
            method=method,  # type: ignore[arg-type]
            model=rng.choice(MODELS),
            dataset=rng.choice(DATASETS),
            backend="hf-jobs" if remote else "local",
            flavor=flavor,
            timeout_s=rng.choice([3600, 7200, 14400]) if remote else None,
            hyperparameters=hyperparameters,
        )
        created = self.now - rng.random() * 30 * DAY
        run = new_run(
            run_id,
            spec,
            created,
            flavor=flavor,
            max_retries=2,
            max_cost_usd=rng.choice([None, 20.0, 50.0]) if remote else None,
        )
        started = created
        for number in (1, 2, 3):
            reason = _pick(rng, REASONS)
            attempt, log = self._attempt(run, spec, number, started, reason)
            if number == 1:
                self.ledger.add_run(run, attempt)
            else:
                self.ledger.add_attempt(attempt)
            digest = events.digest(log)
            size = sum(len(line) + 1 for line in log)
            self.ledger.ingest(
                attempt.attempt_id,
                from_offset=0,
                to_offset=size,
                events=digest.events,
                fields=digest.fields,
                checkpoints=digest.checkpoints,
            )
            self.written += 1
            if reason not in RETRIED or rng.random() < 0.4 or self.written >= self.target:
                return
            if reason == "oom":  # retry's proposal: half the micro-batch, twice the accumulation
                batch = max(1, spec.hyperparameters["per_device_train_batch_size"] // 2)
                spec = spec.model_copy(
                    update={"hyperparameters": {**spec.hyperparameters, "per_device_train_batch_size": batch}}
                )
            started = (attempt.ended_at or started) + rng.uniform(30, 600)

    def _script(self, spec: JobSpec) -> tuple[dict[str, Any], str]:
        push_to = f"acme/{spec.method}-{spec.dataset.split('/')[1]}" if spec.backend == "hf-jobs" else None
        config = build_config(spec, job_values(spec), None if push_to is None else "jobtrail-output", push_to=push_to)
        key = config_json(config)
        if key not in self._scripts:
            if len(self._scripts) >= SCRIPTS_KEPT:
                del self._scripts[next(iter(self._scripts))]
            table = {"flavor": spec.flavor or "", "timeout": f"{spec.timeout_s}s"} if push_to else None
            self._scripts[key] = render_script(spec.method, config, hf_jobs=table)
        return config, self._scripts[key]

    def _attempt(
        self, run: RunRecord, spec: JobSpec, number: int, created: float, reason: str
    ) -> tuple[NewAttempt, list[str]]:
        rng = self.rng
        config, script = self._script(spec)
        ended = TerminationReason(reason)
        max_steps = int(spec.hyperparameters["max_steps"])
        reached = {
            "succeeded": max_steps,
            "oom": rng.choice([0, 0, 1, 2]),
            "config_error": 0,
            "dependency_error": 0,
            "hub_error": max_steps,
        }.get(reason, int(max_steps * rng.random()))
        step_s = rng.uniform(0.3, 3.0)
        started = created + rng.uniform(5, 120)
        finished = started + 60 + reached * step_s
        remote = run.backend == "hf-jobs"
        attempt_id = f"{run.run_id}/{number}"
        log = _job_log(rng, spec, attempt_id, started, reached, step_s, reason)
        gpu_seconds = finished - started if remote else None
        # The attempt as the service queues it (its config and script fingerprinted), then what its run recorded.
        queued = queued_attempt(
            run.run_id,
            number,
            spec,
            config,
            script,
            created_at=created,
            output_dir=config["output_dir"] or f"/home/ana/.jobtrail/runs/{run.run_id}/output",
            findings=[{"code": "model.ok", "severity": "info", "message": f"{spec.model}: fits.", "fix": None}],
            retry_note=None if number == 1 else "Retried automatically after a transient failure.",
        )
        ran = {
            "status": ended.status,
            "started_at": started,
            "ended_at": finished,
            "placement": _placement(rng, run, attempt_id, started),
            "exit_code": 0 if reason == "succeeded" else rng.choice([1, 137, None]),
            "termination_reason": ended,
            "termination_message": None if reason == "succeeded" else f"The job ended {reason} at step {reached}.",
            "evidence": None if reason == "succeeded" else f"RuntimeError: {reason} while training (step {reached})",
            "gpu_seconds": gpu_seconds,
            "cost_usd": round(gpu_seconds / 3600 * FLAVORS[run.flavor or "l4x1"], 4) if gpu_seconds else None,
        }
        return queued.model_copy(update=ran), log


def _placement(rng: random.Random, run: RunRecord, attempt_id: str, started: float) -> Placement:
    if run.backend == "local":
        pid = rng.randrange(1000, 60000)
        workdir = f"/home/ana/.jobtrail/runs/{attempt_id.replace('/', '/attempt-')}"
        return Placement(backend="local", host="ana-ws", pid=pid, pgid=pid, workdir=workdir, started_at=started)
    remote_id = f"{rng.getrandbits(96):024x}"
    return Placement(
        backend="hf-jobs",
        host="huggingface.co",
        workdir=f"/home/ana/.jobtrail/runs/{attempt_id.replace('/', '/attempt-')}",
        started_at=started,
        remote_id=remote_id,
        namespace="acme",
        url=f"https://huggingface.co/jobs/acme/{remote_id}",
        flavor=run.flavor,
        image="ghcr.io/astral-sh/uv:python3.12-bookworm",
        secret_sources=["HF_TOKEN"],
    )


def _job_log(
    rng: random.Random, spec: JobSpec, attempt_id: str, started: float, reached: int, step_s: float, reason: str
) -> list[str]:
    """The JOBTRAIL lines a job of `spec` prints when it ends `reason` after `reached` steps."""
    clock = [started]
    lines: list[str] = []
    output = "jobtrail-output" if spec.backend == "hf-jobs" else f"/home/ana/.jobtrail/runs/{attempt_id[:11]}/output"

    def say(event: str, seconds: float = 0.5, **payload: Any) -> None:
        clock[0] += seconds
        lines.append(RUNTIME.event_line(event, clock[0], payload))

    gpu = None if spec.backend == "local" else {"name": "NVIDIA A10G", "memory_gb": 22.5, "count": 1}
    say("start", template=spec.method, template_version=1, run_id=attempt_id[:11], attempt_id=attempt_id)
    device = {"cuda": None, "device": "cpu"} if gpu is None else {"cuda": "12.8", "device": "cuda"}
    say("environment", 8, python="3.12.7", platform="Linux-6.8-x86_64", host="ana-ws", packages=PACKAGES,
        gpu=gpu, world_size=1, **device)  # fmt: skip
    if reason == "dependency_error":
        say("termination", reason=reason, message="No module named 'trl'")
        return lines
    say("phase", phase="tokenizing")
    rows = 5000 + sum(map(ord, spec.dataset)) * 7
    digest = sha256_text(spec.dataset)
    say("data_manifest", 20, source=spec.dataset, kind="hub", sha256=digest, split="train", rows=rows,
        columns=["messages"], fingerprint=digest[:16], mapping=None, format="messages")  # fmt: skip
    if reason == "config_error":
        say("termination", reason=reason, message="The dataset has no 'chosen' column.")
        return lines
    say("phase", phase="loading_model")
    say("resume", 10, checkpoint=None, step=None, skipped=[])
    say("phase", 30, phase="training", max_steps=spec.hyperparameters["max_steps"], step=0)
    lr0, loss = float(spec.hyperparameters["learning_rate"]), rng.uniform(1.5, 3.0)
    committed: list[str] = []
    tokens = 0
    for step in range(1, reached + 1):
        tokens += 2048 * spec.hyperparameters["per_device_train_batch_size"]
        loss = max(0.05, loss * 0.997 + rng.gauss(0, 0.03))
        if step % LOGGING_STEPS == 0:
            # transformers rounds its speed metrics (train_runtime to 4 places, throughputs to 3).
            metrics = {"entropy": rng.uniform(0.5, 2.5), "mean_token_accuracy": rng.uniform(0.4, 0.9),
                       "num_tokens": float(tokens),
                       "train_runtime": round(step * step_s, 4),
                       "train_tokens_per_second": round(rng.uniform(2e3, 2e4), 3)}  # fmt: skip
            # As the job's log_step prints them (scripts/_training.py): metrics at float32's precision.
            say("step", step_s * LOGGING_STEPS, step=step, loss=f32(loss),
                learning_rate=f32(lr0 * (1 - step / (reached + 1))), grad_norm=f32(abs(rng.gauss(0.8, 0.3))),
                epoch=f32(step / 625), tokens=tokens, metrics=f32(metrics))  # fmt: skip
        if step % SAVE_STEPS == 0:
            path = f"{output}/checkpoint-{step}"
            say("checkpoint", 1, state="writing", step=step, path=path)
            say("checkpoint", 4, state="committed", step=step, path=path, manifest_sha256=sha256_text(path),
                files=11, bytes=rng.randrange(10**7, 10**9))  # fmt: skip
            committed.append(path)
            if len(committed) > KEPT:
                say("checkpoint", 0.1, state="superseded", step=step - KEPT * SAVE_STEPS, path=committed.pop(0))
    if reason == "diverged":
        say("alert", code="nan_loss", step=reached, message="The loss became NaN.", fix="Lower learning_rate.")
    if reason in ("succeeded", "hub_error"):
        say("phase", phase="saving")
        final = f"{output}/final"
        say("checkpoint", 1, state="writing", step=reached, path=final)
        say("checkpoint", 5, state="committed", step=reached, path=final, manifest_sha256=sha256_text(final),
            files=7, bytes=rng.randrange(10**7, 10**9))  # fmt: skip
        say("artifact", kind="final_model", path=final)
        say("metrics", train_runtime=round(reached * step_s, 4), train_loss=f32(loss), global_step=reached,
            train_samples_per_second=round(rng.uniform(1, 50), 3), tokens_per_second=round(rng.uniform(2e3, 2e4), 3),
            peak_memory_bytes=rng.randrange(10**9, 8 * 10**10))  # fmt: skip
    if reason in ("succeeded", "oom", "diverged", "hub_error", "timeout", "unknown"):
        say("termination", reason=reason)
    return lines


def _timed(call: Callable[[], object], repeats: int) -> list[float]:
    call()  # the first call opens connections and fills caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _percentiles(times: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(times, n=100, method="inclusive")
    return statistics.median(times), cuts[98]


def _bytes(location: Path | str, ledger: Ledger) -> tuple[int, dict[str, int]]:
    """The ledger's size on disk and each table's (with its indexes)."""
    conn = ledger._conn()
    if isinstance(location, Path):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables: dict[str, int] = {}
        try:
            for row in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"):
                size = conn.execute("SELECT SUM(pgsize) AS n FROM dbstat WHERE name = ?", (row["name"],)).fetchone()
                tables[row["tbl_name"]] = tables.get(row["tbl_name"], 0) + int(size["n"] or 0)
        except Exception:  # noqa: BLE001 - a SQLite built without dbstat: the total alone
            tables = {}
        return sum(p.stat().st_size for p in location.parent.glob(location.name + "*")), tables
    rows = conn.execute(
        "SELECT tablename, pg_total_relation_size(quote_ident(tablename)) AS n FROM pg_tables"
        " WHERE schemaname = 'public'"
    ).fetchall()
    sizes = {r["tablename"]: int(r["n"]) for r in rows}
    return sum(sizes.values()), sizes


def bench(engine: str, location: Path | str, home: Path, attempts: int, seed: int) -> None:
    start = time.perf_counter()
    ledger = Ledger(location)
    held = ledger._conn().execute("SELECT COUNT(*) AS n FROM runs").fetchone()["n"]
    if held:  # --home with a ledger this bench filled before: measured as it is
        runs, attempts = held, ledger._conn().execute("SELECT COUNT(*) AS n FROM attempts").fetchone()["n"]
    else:
        runs = Filler(ledger, attempts, seed).fill()
    print(f"{engine} attempts {attempts}")
    print(f"{engine} runs {runs}")
    print(f"{engine} fill_s {time.perf_counter() - start:.0f}")
    total, tables = _bytes(location, ledger)
    print(f"{engine} bytes_per_attempt {total / attempts:.0f}")
    for table, size in sorted(tables.items(), key=lambda t: -t[1]):
        print(f"{engine} bytes_per_attempt.{table} {size / attempts:.0f}")
    if isinstance(location, str):
        os.environ[LEDGER_URL_ENV] = location
        # What autovacuum does minutes after a bulk fill, done before measuring: planner statistics, and the
        # visibility map that lets report's index-only scans skip the heap.
        ledger._conn().execute("VACUUM ANALYZE")  # the ledger's connections are in autocommit
    service = build_service(home)
    rng = random.Random(seed)
    jobs = [f"jt-{rng.randrange(1, runs + 1):08d}" for _ in range(200)]
    picks = iter(jobs * 2)
    repeats = 20 if attempts <= SMOKE_ATTEMPTS else 100
    figures = {
        "ps": _timed(service.ps, repeats),
        "inspect": _timed(lambda: service.inspect(next(picks)), repeats * 2),
        "report": _timed(service.report, repeats),
    }
    os.environ.pop(LEDGER_URL_ENV, None)
    for tool, times in figures.items():
        p50, p99 = _percentiles(times)
        print(f"{engine} {tool}_p50_ms {p50:.1f}")
        print(f"{engine} {tool}_p99_ms {p99:.1f}")
    sys.stdout.flush()


@contextmanager
def _postgres(url: str | None, start: bool) -> Iterator[str | None]:
    if url or not start:
        yield url
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.postgres import running_server

    with running_server() as server:
        yield server.url()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=100_000)
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_ATTEMPTS} attempts, quickly")
    parser.add_argument("--postgres-url", help="a PostgreSQL database to fill too (one filled before: measured as is)")
    parser.add_argument("--postgres", action="store_true", help="start a PostgreSQL for the run and fill it too")
    parser.add_argument("--no-sqlite", action="store_true", help="fill only the PostgreSQL (run beside a SQLite one)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--home", type=Path, help="keep the SQLite ledger here; one filled before is measured as it is")
    args = parser.parse_args()
    attempts = SMOKE_ATTEMPTS if args.smoke else args.attempts
    with tempfile.TemporaryDirectory(prefix="jobtrail-ledger-scale-") as tmp:
        home = args.home or Path(tmp) / "home"
        os.environ["JOBTRAIL_HOME"] = str(home)
        if not args.no_sqlite:
            bench("sqlite", home / "ledger.sqlite", home, attempts, args.seed)
        with _postgres(args.postgres_url, args.postgres) as url:
            if url:
                bench("postgresql", url, Path(tmp) / "pg-home", attempts, args.seed)


if __name__ == "__main__":
    main()
