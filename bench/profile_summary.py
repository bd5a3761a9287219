"""Where a steady training step's time goes: a torch profiler over a few steps, summarised.

bench/step_hook.py starts the profiler at the first profiled step and marks each step with a
torch.profiler.record_function named STEP_MARK + its number (from on_step_begin to on_step_end); `finish`
waits for the GPU, stops the profiler and returns:

  window_ms            from the first marked step's begin to the end of the last step's last kernel
  steps                the marked steps, and the mean of each one's CPU time (begin to end)
  between_steps_ms     the mean CPU time from one step's end to the next one's begin: the Trainer's logging,
                       saving and callbacks, and fetching and collating the next batch
  gpu                  (CUDA only) busy_ms: the union of the kernels' (and copies') intervals in the window;
                       idle_fraction: 1 - busy / window; idle_ms_in_steps and idle_ms_between_steps: where the
                       idle time falls; largest_gaps: the longest idle stretches, each with its offset into the
                       window and the CPU ops that ran the longest during it
  top_kernels          (CUDA only) by total time: name, calls, total ms, share of the busy time
  top_cpu_ops          by self CPU time: name, calls, self ms, total ms (inclusive)
Kernel times are the GPU's; CPU times include the profiler's own overhead, which is why the bench keeps the
profiled steps out of its steady-state figures.

Nothing here imports torch at import time: step_hook imports this module before the training script runs.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

STEP_MARK = "jobtrail_bench_step_"
TOP = 15
GAPS = 5

Interval = tuple[str, float, float]  # name, start µs, end µs (the profiler's clock)


def start() -> Any:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    profiler = profile(activities=activities, record_shapes=False, with_stack=False)
    profiler.start()
    return profiler


def finish(profiler: Any) -> dict[str, Any]:
    import torch
    from torch.autograd import DeviceType

    if torch.cuda.is_available():
        torch.cuda.synchronize()  # the last step's kernels end inside the window
    profiler.stop()
    steps: list[Interval] = []
    kernels: list[Interval] = []
    cpu_ops: list[Interval] = []
    events = list(profiler.events())
    # A range named by code (Optimizer.step#AdamW.step ...) is mirrored on the GPU's timeline around the kernels
    # it launched: no GPU work of its own. Known by its flag, or by the name of its CPU side where a torch
    # does not flag the mirror.
    named = {e.name for e in events if e.device_type == DeviceType.CPU and getattr(e, "is_user_annotation", False)}
    for event in events:
        interval = (event.name, float(event.time_range.start), float(event.time_range.end))
        if event.name.startswith(STEP_MARK):
            if event.device_type == DeviceType.CPU:
                steps.append(interval)
        elif event.device_type == DeviceType.CUDA:
            if not getattr(event, "is_user_annotation", False) and event.name not in named:
                kernels.append(interval)
        elif event.device_type == DeviceType.CPU:
            cpu_ops.append(interval)  # named ranges included: their self time is the Python between their ops
    averages = [
        a for a in profiler.key_averages() if a.device_type == DeviceType.CPU and not a.key.startswith(STEP_MARK)
    ]
    averages.sort(key=lambda a: a.self_cpu_time_total, reverse=True)
    top_cpu = [
        {"name": a.key, "calls": a.count, "self_ms": a.self_cpu_time_total / 1e3, "total_ms": a.cpu_time_total / 1e3}
        for a in averages[:TOP]
    ]
    return summarise(steps, kernels, cpu_ops, top_cpu, cuda=torch.cuda.is_available())


def summarise(
    steps: list[Interval], kernels: list[Interval], cpu_ops: list[Interval], top_cpu: list[dict[str, Any]], cuda: bool
) -> dict[str, Any]:
    """The summary from the profiler's intervals (µs); pure, so that its arithmetic is tested without a GPU."""
    if not steps:
        return {"error": "no profiled step was marked"}
    steps = sorted(steps, key=lambda s: s[1])
    begin = steps[0][1]
    end = max([steps[-1][2], *(k[2] for k in kernels)])
    between = [(a[2], b[1]) for a, b in itertools.pairwise(steps)]
    summary: dict[str, Any] = {
        "window_ms": (end - begin) / 1e3,
        "steps": {
            "numbers": [int(name[len(STEP_MARK) :]) for name, _, _ in steps],
            "mean_cpu_ms": sum(e - s for _, s, e in steps) / len(steps) / 1e3,
        },
        "between_steps_ms": (sum(b - a for a, b in between) / len(between) / 1e3) if between else None,
        "top_cpu_ops": top_cpu,
        "gpu": None,
        "top_kernels": None,
    }
    if not cuda:
        return summary
    if not kernels:
        summary["gpu"] = {"error": "the profiler saw no CUDA kernel (is CUPTI missing?)"}
        return summary
    busy = union([(max(s, begin), min(e, end)) for _, s, e in kernels if e > begin and s < end])
    gaps = complement(busy, begin, end)
    summary["gpu"] = {
        "busy_ms": sum(e - s for s, e in busy) / 1e3,
        "idle_fraction": sum(e - s for s, e in gaps) / (end - begin) if end > begin else None,
        "idle_ms_between_steps": overlap_total(gaps, between) / 1e3,
        "idle_ms_in_steps": (sum(e - s for s, e in gaps) - overlap_total(gaps, between)) / 1e3,
        "largest_gaps": [
            {"at_ms": (s - begin) / 1e3, "ms": (e - s) / 1e3, "cpu_ops": ops_during(cpu_ops, s, e)}
            for s, e in sorted(gaps, key=lambda g: g[0] - g[1])[:GAPS]
        ],
    }
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for name, s, e in kernels:
        totals[name][0] += 1
        totals[name][1] += e - s
    all_kernels = sum(t for _, t in totals.values()) or 1.0
    summary["top_kernels"] = [
        {"name": name, "calls": int(calls), "total_ms": total / 1e3, "share": total / all_kernels}
        for name, (calls, total) in sorted(totals.items(), key=lambda kv: kv[1][1], reverse=True)[:TOP]
    ]
    return summary


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def complement(busy: list[tuple[float, float]], begin: float, end: float) -> list[tuple[float, float]]:
    """The stretches of [begin, end] that no interval of `busy` (sorted, disjoint) covers."""
    gaps, at = [], begin
    for s, e in busy:
        if s > at:
            gaps.append((at, s))
        at = max(at, e)
    if end > at:
        gaps.append((at, end))
    return gaps


def overlap_total(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def ops_during(cpu_ops: list[Interval], start: float, end: float, top: int = 3) -> list[str]:
    """The CPU ops that overlapped [start, end] the longest (an op and the ops it called can all show)."""
    overlaps: dict[str, float] = defaultdict(float)
    for name, s, e in cpu_ops:
        if e > start and s < end:
            overlaps[name] += min(e, end) - max(s, start)
    return [name for name, _ in sorted(overlaps.items(), key=lambda kv: kv[1], reverse=True)[:top]]
