"""Metric series from step events: every number a step carried, attempts joined, derived series, trends."""

from __future__ import annotations

import math

from jobtrail.service.series import AttemptSeries, attempt_series, join, trend


def _step(step: int, loss: float, t: float, **extra) -> dict:
    return {
        "event": "step",
        "time": t,
        "step": step,
        "loss": loss,
        "learning_rate": 1e-3,
        "tokens": 100 * step,
        **extra,
    }


def test_every_number_a_step_carried_is_a_series_with_tokens_per_second_derived():
    events = [
        {"event": "environment", "python": "3.11"},
        _step(1, 2.0, 10.0, metrics={"rewards/margins": 0.1, "rewards/accuracies": 0.5}),
        {"event": "checkpoint", "step": 1, "state": "committed", "path": "x"},
        _step(2, 1.5, 11.0, grad_norm=0.7, metrics={"rewards/margins": 0.3, "rewards/accuracies": 0.75}),
    ]
    series = attempt_series(1, events).series
    assert series["loss"] == [(1, 2.0), (2, 1.5)]
    assert series["rewards/margins"] == [(1, 0.1), (2, 0.3)]
    assert series["grad_norm"] == [(2, 0.7)]
    assert series["tokens_per_second"] == [(2, 100.0)]
    assert "step" not in series and "time" not in series


def test_eval_steps_add_eval_series_and_the_train_eval_gap():
    events = [_step(s, 3.0 - 0.1 * s, float(s)) for s in range(1, 11)]
    events.insert(
        5, {"event": "eval", "time": 5.5, "step": 5, "epoch": 0.5, "metrics": {"eval_loss": 2.9, "eval_runtime": 0.2}}
    )
    events.append({"event": "eval", "time": 10.5, "step": 10, "eval_loss": 2.6})
    events.append({"event": "eval", "state": "started", "metric_names": ["loss"]})  # an evaluation job's own
    series = attempt_series(1, events).series
    assert series["eval_loss"] == [(5, 2.9), (10, 2.6)] and series["eval_runtime"] == [(5, 0.2)]
    assert "epoch" not in series  # an evaluation's epoch is no metric of its own
    assert [(s, round(v, 6)) for s, v in series["eval_gap"]] == [(5, 0.4), (10, 0.6)]


def test_nan_and_inf_are_null_points_and_the_trend_says_so():
    series = attempt_series(1, [_step(1, 2.0, 1.0), _step(2, math.nan, 2.0), _step(3, math.inf, 3.0)]).series
    assert series["loss"] == [(1, 2.0), (2, None), (3, None)]
    assert trend(series["loss"]) == "not_finite"


def test_a_resumed_attempt_replaces_the_steps_it_repeats_and_continues_the_series():
    first = AttemptSeries(1, None, {"loss": [(s, 5.0 - s * 0.1) for s in range(1, 13)]})  # died after step 12
    second = AttemptSeries(2, "checkpoint-10", {"loss": [(s, 9.0) for s in range(11, 21)]})  # resumed at 10
    joined = join([first, second])
    assert [s for s, _ in joined["loss"]] == list(range(1, 21))
    assert dict(joined["loss"])[11] == 9.0 and dict(joined["loss"])[10] == 4.0
    scratch = AttemptSeries(3, None, {"loss": [(1, 7.0), (2, 6.0)]})  # a retry from scratch starts over
    assert join([first, second, scratch])["loss"] == [(1, 7.0), (2, 6.0)]
    assert join([first, AttemptSeries(2, None)]) == join([first])  # an attempt that logged nothing changes nothing


def test_trends():
    steps = range(1, 41)
    assert trend([(s, 6.0 - 0.05 * s) for s in steps]) == "falling"
    assert trend([(s, 1.0 + 0.05 * s) for s in steps]) == "rising"
    assert trend([(s, 0.5 + (0.001 if s % 2 else -0.001)) for s in steps]) == "stable"
    assert trend([(s, 0.0) for s in steps]) == "stable"
    assert trend([(s, 2.0 + (1.0 if s % 2 else -1.0) - 0.01 * s) for s in steps]) == "noisy"
    assert trend([(1, 1.0), (2, 0.5)]) == "too_few_points"


def test_a_trend_word_says_what_it_compares():
    """ "falling" judged over the latter half, beside a loss three times its first value, says both."""
    from jobtrail.results.watch import MetricsResult

    points = [(1, 6.674), (2, 36.3), (3, 31.0), (4, 27.0), (5, 24.0), (6, 22.0), (7, 20.2)]
    result = MetricsResult(
        job_id="jt-1",
        status="succeeded",
        series={"loss": points},
        last={"loss": 20.2},
        trends={"loss": trend(points)},
        available=["loss"],
    )
    assert result.trends["loss"] == "falling"
    assert "loss 6.674 → 20.2, falling over the last half (31 → 20.2); 3.03× its first value" in result.summary
