"""A run's metric series from its step events, joined across attempts, and each series' trend in a word.

Pure: the caller hands in each attempt's events as the ledger holds them.

Series are what the steps carried (outcomes.events.step_metrics: loss, learning_rate, grad_norm, epoch,
tokens and the method's metrics under TRL's names) plus what the job logged when it evaluated during
training (`eval` events with a step: eval_loss ...; an evaluation job's own `eval` events carry a state
instead), plus two derived ones: tokens_per_second (between consecutive steps) and
eval_gap (eval_loss minus the train loss at that step: the train-eval gap).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import fmean, pstdev
from typing import Any

from jobtrail.outcomes.events import step_metrics
from jobtrail.results.watch import MIN_TREND_POINTS, recent_half

Point = tuple[int, float | None]  # (step, value); None where the job logged NaN or inf
# Event kinds whose numbers are metric points: training steps, and evaluations during training.
SERIES_KINDS = ("step", "eval")
DERIVED = ("tokens_per_second", "eval_gap")
_NOT_METRICS = {"event", "time", "step", "metrics", "epoch"}
# A trend is a move of the recent points larger than their noise explains (about two standard errors) and
# larger than this share of their level; without one, a series scattering more than NOISY_SPREAD of its
# level is noisy, else stable.
MIN_MOVE = 0.005
NOISY_SPREAD = 0.25
THROUGHPUT_WINDOW = 5  # step intervals tokens_per_second is measured over: one interval jitters with the log


@dataclass
class AttemptSeries:
    number: int
    resumed_from: str | None
    series: dict[str, list[Point]] = field(default_factory=dict)

    @property
    def first_step(self) -> int | None:
        return min((p[0] for points in self.series.values() for p in points[:1]), default=None)

    @property
    def last_step(self) -> int | None:
        return max((p[0] for points in self.series.values() for p in points[-1:]), default=None)


def attempt_series(number: int, events: Iterable[dict[str, Any]], resumed_from: str | None = None) -> AttemptSeries:
    """One attempt's series, in the order the job logged them."""
    out = AttemptSeries(number, resumed_from)
    steps: list[dict[str, Any]] = []
    for event in events:
        kind, step = event.get("event"), event.get("step")
        if kind not in SERIES_KINDS or not isinstance(step, int) or "state" in event:
            continue
        for name, value in _numbers(event).items():
            out.series.setdefault(name, []).append((step, value))
        if kind == "step":
            rate = _tokens_per_second(steps[-THROUGHPUT_WINDOW:][:1], event)
            if rate is not None:
                out.series.setdefault("tokens_per_second", []).append((step, rate))
            steps.append(event)
    gap = _eval_gap(out.series.get("loss", []), out.series.get("eval_loss", []))
    if gap:
        out.series["eval_gap"] = gap
    return out


def join(attempts: Sequence[AttemptSeries]) -> dict[str, list[Point]]:
    """The run's series: each attempt continues the earlier ones, and replaces their points from its first step on
    (a resumed attempt repeats the steps after its checkpoint; a retry from scratch starts over at step 1)."""
    joined: dict[str, list[Point]] = {}
    for attempt in attempts:
        start = attempt.first_step
        if start is None:
            continue
        joined = {name: [p for p in points if p[0] < start] for name, points in joined.items()}
        for name, points in attempt.series.items():
            joined.setdefault(name, []).extend(points)
    return {name: points for name, points in joined.items() if points}


def trend(points: Sequence[Point]) -> str:
    """How a series moves over its recent points: falling, rising, stable, noisy, not_finite (its last value is
    NaN or inf) or too_few_points."""
    if points and points[-1][1] is None:
        return "not_finite"
    values = [v for _, v in points if v is not None]
    if len(values) < MIN_TREND_POINTS:
        return "too_few_points"
    recent = recent_half(values)
    third = max(2, len(recent) // 3)
    first, last = recent[:third], recent[-third:]
    move, level = fmean(last) - fmean(first), abs(fmean(recent))
    noise = math.sqrt((pstdev(first) ** 2 + pstdev(last) ** 2) / 2)
    if abs(move) > 2 * noise * math.sqrt(2 / third) and abs(move) > MIN_MOVE * level:
        return "falling" if move < 0 else "rising"
    spread = pstdev(recent)
    return "noisy" if spread > NOISY_SPREAD * level else "stable"


def _numbers(event: dict[str, Any]) -> dict[str, float | None]:
    if event.get("event") == "step":
        found = step_metrics({k: v for k, v in event.items() if k not in ("event", "time")})
    else:
        nested = event.get("metrics")
        found = {k: v for k, v in event.items() if k not in _NOT_METRICS}
        found.update(nested if isinstance(nested, dict) else {})
    found.pop("step", None)
    return {name: _finite(value) for name, value in found.items() if _is_number(value)}


def _tokens_per_second(earlier: list[dict[str, Any]], event: dict[str, Any]) -> float | None:
    """Tokens per second between an earlier step event (none: no rate yet) and this one."""
    if not earlier:
        return None
    tokens, seconds = _delta(earlier[0], event, "tokens"), _delta(earlier[0], event, "time")
    if tokens is None or seconds is None or seconds <= 0 or tokens < 0:
        return None
    return tokens / seconds


def _eval_gap(train: list[Point], evals: list[Point]) -> list[Point]:
    """eval_loss − the train loss last logged at or before each evaluation's step."""
    gap: list[Point] = []
    for step, value in evals:
        before = [v for s, v in train if s <= step and v is not None]
        if before and value is not None:
            gap.append((step, value - before[-1]))
    return gap


def _delta(before: dict[str, Any], after: dict[str, Any], name: str) -> float | None:
    a, b = before.get(name), after.get(name)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(b) - float(a)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
