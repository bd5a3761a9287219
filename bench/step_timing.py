"""Per-step figures of one side of bench/train_throughput.py, from what bench/step_hook.py recorded.

Both sides log every step. A step's time is the time between its log and the previous step's (the first
step's: from the start of training), both taken in on_log, after the Trainer has synchronised on the loss; its
tokens are the growth of TRL's num_tokens (the non-padding tokens SFTTrainer counts) over the same steps.
Each logged step is then one of:

  warm-up     the first `warmup_steps` steps: compilation, allocator growth, first kernels
  profiled    inside the profiler's window (its start, its overhead, and reading it, at the last step's end)
  checkpoint  a step whose time holds a checkpoint: its save (and, in the rendered job, its commit) began
              before the step and ended after the step before it had been logged
  steady      every other step: what a long run spends on a step
Steady-state tokens/s = the steady steps' tokens ÷ their time. A checkpoint's write is the Trainer's save
(the step's log to on_save) and, for the rendered job, its commit the checkpoint events' `writing` to
`committed` (the runtime's hashing included); the time the checkpoint steps took beyond steady steps is the
run's `checkpoint_stall_s`.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def checkpoint_commits(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rendered job's checkpoint events paired: folder name → {step, writing, committed, bytes}."""
    commits: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("event") != "checkpoint" or event.get("state") not in ("writing", "committed"):
            continue
        entry = commits.setdefault(Path(event["path"]).name, {"step": event.get("step")})
        entry[event["state"]] = float(event["time"])
        if event["state"] == "committed":
            entry["bytes"] = event.get("bytes")
    return commits


def step_figures(
    record: dict[str, Any],
    *,
    warmup_steps: int,
    profile_window: tuple[int, int] | None,
    commits: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Warm-up, steady state and checkpoints of one side (see the module's docstring)."""
    logged = sorted(
        (int(n), s)
        for n, s in record["steps"].items()
        if s.get("logged") is not None and s.get("num_tokens") is not None
    )
    if not logged:
        raise ValueError("no step was logged with TRL's num_tokens")
    saves = checkpoint_windows(record.get("saves") or [], commits or {})
    profiled = set(range(profile_window[0], profile_window[1] + 1)) if profile_window else set()
    rows: list[dict[str, Any]] = []
    before_step, before_time, before_tokens = 0, float(record["train_begin"]), 0
    for number, step in logged:
        covered = range(before_step + 1, number + 1)
        if number <= warmup_steps:
            kind = "warmup"
        elif profiled & set(covered):
            kind = "profiled"
        elif any(save["step"] < number and save["end"] > before_time for save in saves):
            kind = "checkpoint"
        else:
            kind = "steady"
        rows.append(
            {
                "step": number,
                "steps": len(covered),
                "seconds": step["logged"] - before_time,
                "tokens": int(step["num_tokens"]) - before_tokens,
                "kind": kind,
            }
        )
        before_step, before_time, before_tokens = number, step["logged"], int(step["num_tokens"])
    steady = [row for row in rows if row["kind"] == "steady"]
    warmup = [row for row in rows if row["kind"] == "warmup"]
    steady_s = sum(row["seconds"] for row in steady)
    per_step = [row["seconds"] / row["steps"] for row in steady]
    typical = statistics.median(per_step) if per_step else None
    held = [row for row in rows if row["kind"] == "checkpoint"]
    return {
        "steps_trained": logged[-1][0],
        "tokens": int(logged[-1][1]["num_tokens"]),
        "losses": {str(number): float(step["loss"]) for number, step in logged},
        "warmup": {
            "steps": sum(row["steps"] for row in warmup),
            "seconds": sum(row["seconds"] for row in warmup),
            "tokens": sum(row["tokens"] for row in warmup),
        },
        "steady": {
            "steps": sum(row["steps"] for row in steady),
            "seconds": steady_s,
            "tokens": sum(row["tokens"] for row in steady),
            "tokens_per_s": sum(row["tokens"] for row in steady) / steady_s if steady_s > 0 else None,
            "step_s_median": typical,
            "step_s_min": min(per_step) if per_step else None,
            "step_s_max": max(per_step) if per_step else None,
        },
        "excluded": {kind: [row["step"] for row in rows if row["kind"] == kind] for kind in ("profiled", "checkpoint")},
        "checkpoints": [{key: value for key, value in save.items() if key != "end"} for save in saves],
        "checkpoint_stall_s": (
            sum(row["seconds"] - row["steps"] * typical for row in held) if held and typical is not None else None
        ),
        "step_seconds": {str(row["step"]): row["seconds"] for row in rows},
    }


def checkpoint_windows(saves: list[dict[str, Any]], commits: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each save in training: its write (and commit, where the job commits), its size; `end` is when the
    last of them ended (what the step after it waited for)."""
    windows = []
    for save in saves:
        size = save.get("bytes")
        write_s = float(save["end"]) - float(save["begin"])
        window: dict[str, Any] = {
            "step": int(save["step"]),
            "write_s": write_s,
            "gb": size / 1e9 if size else None,
            "write_s_per_gb": write_s / (size / 1e9) if size else None,
            "end": float(save["end"]),
        }
        commit = commits.get(f"checkpoint-{save['step']}")
        if commit and "writing" in commit and "committed" in commit:
            commit_s = commit["committed"] - commit["writing"]
            committed_bytes = commit.get("bytes") or size
            window |= {
                "commit_s": commit_s,
                "commit_gb": committed_bytes / 1e9 if committed_bytes else None,
                "commit_s_per_gb": commit_s / (committed_bytes / 1e9) if committed_bytes else None,
                "end": max(window["end"], commit["committed"]),
            }
        windows.append(window)
    return windows


def final_commit(commits: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The rendered job's final model: writing → committed, after training (outside every step)."""
    final = commits.get("final")
    if not final or "writing" not in final or "committed" not in final:
        return None
    size = final.get("bytes")
    return {"commit_s": final["committed"] - final["writing"], "gb": size / 1e9 if size else None}
