"""A job's steady-state training speed, from its own step events. Pure.

What a user's long run pays per token is the pace of its steady steps, not its train_runtime: that also holds
the first steps (CUDA context, kernel autotuning, the allocator growing), every checkpoint's write and commit, and
evaluations, which a short calibrating run holds in another proportion than the run being estimated (on an H100 a
0.5B full fine-tuning's one checkpoint was half of a 30-step run's train_runtime). So the rate is the tokens over
the seconds between consecutive step events, leaving out:
  * warm-up: intervals that begin within the attempt's first WARMUP_STEPS steps;
  * pauses: a checkpoint from `writing` until training went on (the `committed` event's `written_at`: the commit
    hashes in the background while the job trains; an older job's `committed`, or a `withdrawn`, ends it where it
    is printed), and the time the job announced another phase than training (evaluating, pushing) until it
    announced training again, subtracted where they overlap an interval.
Step events carry `tokens`, the trainer's running count of non-padding input tokens (both sequences of a pair).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

# Steps after the attempt's start whose intervals are warm-up. The H100 bench's first step took 6.7 s, its next
# ones 0.3-0.5 s; with the default logging every 10 steps no interval begins this early anyway.
WARMUP_STEPS = 3
# Fewer steady steps than this measure a moment, not a pace: the caller falls back to train_runtime.
MIN_STEADY_STEPS = 4
# A checkpoint's states that end its writing window.
_CHECKPOINT_DONE = ("committed", "withdrawn")

Window = tuple[float, float]


class SteadyRate(BaseModel):
    """The steady steps of one attempt, and the tokens/s they ran at."""

    tokens_per_second: float
    steps: int = Field(description="Optimizer steps in the intervals counted.")
    seconds: float = Field(description="Their seconds, pauses taken out.")
    tokens: int = Field(description="Non-padding input tokens trained in them.")
    paused_s: float = Field(description="Checkpoint and evaluation seconds taken out of those intervals.")


def steady_rate(events: Iterable[dict[str, Any]]) -> SteadyRate | None:
    """The attempt's steady-state tokens/s from its events in the order it printed them; None when fewer than
    MIN_STEADY_STEPS steps lie in intervals after warm-up (a short or sparsely logged run), or its steps carry no
    token counts."""
    events = list(events)
    start = _start_step(events)
    pauses = _merged(_pauses(events))
    steps, seconds, tokens, paused = 0, 0.0, 0, 0.0
    for a, b in itertools.pairwise(_steps(events)):
        if a[0] < start + WARMUP_STEPS:
            continue
        taken = sum(_overlap(window, (a[1], b[1])) for window in pauses)
        elapsed = b[1] - a[1] - taken
        if elapsed <= 0 or b[2] <= a[2]:
            continue
        steps += b[0] - a[0]
        seconds += elapsed
        tokens += b[2] - a[2]
        paused += taken
    if steps < MIN_STEADY_STEPS or seconds <= 0:
        return None
    return SteadyRate(tokens_per_second=tokens / seconds, steps=steps, seconds=seconds, tokens=tokens, paused_s=paused)


def _steps(events: Sequence[dict[str, Any]]) -> list[tuple[int, float, int]]:
    """(step, time, tokens) of each step event that has all three, steps increasing."""
    out: list[tuple[int, float, int]] = []
    for e in events:
        step, at, tokens = e.get("step"), _time(e), e.get("tokens")
        if e.get("event") != "step" or not isinstance(step, int) or at is None or not isinstance(tokens, int):
            continue
        if out and step <= out[-1][0]:
            continue  # a repeated or out-of-order log line measures nothing
        out.append((step, at, tokens))
    return out


def _start_step(events: Sequence[dict[str, Any]]) -> int:
    """The step training began at: the `training` phase's step (a resumed attempt's checkpoint), else 0."""
    for e in events:
        if e.get("event") == "phase" and e.get("phase") == "training" and _is_int(e.get("step")):
            return int(e["step"])
    return 0


def _pauses(events: Sequence[dict[str, Any]]) -> list[Window]:
    """The windows the job spent on checkpoints and in phases other than training, while it trained."""
    windows: list[Window] = []
    writing: dict[Any, float] = {}
    away: float | None = None  # since when the job is in another phase than training
    for e in events:
        at = _time(e)
        if at is None:
            continue
        if e.get("event") == "checkpoint":
            key = e.get("path") or e.get("step")
            if e.get("state") == "writing":
                writing[key] = at
            elif e.get("state") in _CHECKPOINT_DONE and key in writing:
                begin = writing.pop(key)
                went_on = _number(e.get("written_at")) if e.get("state") == "committed" else None
                windows.append((begin, at if went_on is None else min(at, max(begin, went_on))))
        elif e.get("event") == "phase":
            if e.get("phase") == "training":
                if away is not None:
                    windows.append((away, at))
                away = None
            elif away is None:
                away = at
    return windows


def _merged(windows: list[Window]) -> list[Window]:
    """Overlapping windows joined (a push inside a checkpoint's commit is counted once)."""
    merged: list[Window] = []
    for begin, end in sorted(windows):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def _overlap(window: Window, interval: Window) -> float:
    return max(0.0, min(window[1], interval[1]) - max(window[0], interval[0]))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _time(event: dict[str, Any]) -> float | None:
    return _number(event.get("time"))
