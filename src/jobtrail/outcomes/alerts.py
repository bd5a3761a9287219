"""What a run's alerts mean for its verdict. Pure.

A job's own watch (scripts/_watch.py) prints `alert` events while it trains. Most are advice (a spike that
may settle, a stall); a few say the run's result cannot be used as it is: its weights are gone (the run
stopped itself and ended `diverged`), or it learned nothing though it ended `succeeded` (GRPO rewards that
never told completions apart; `nothing_learned`: a learning rate of 0, or weights that no logged step moved).
Those are blocking: the verdict reads "succeeded, but ...", and a job chained
after it with `after=` is held instead of training on it.
"""

from __future__ import annotations

from typing import Any

# The job-side codes (scripts/_watch.py STOPPING, and the methods' check_steps) whose run is not usable as is.
BLOCKING = ("nan_loss", "nan_weights", "loss_diverged", "collapsed", "grpo_reward_std_zero", "nothing_learned")


def blocking(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in alerts if a.get("code") in BLOCKING]


def verdict(status: str, reason: str | None, alerts: list[dict[str, Any]]) -> str:
    """The state as an agent should repeat it: "succeeded, but grpo_reward_std_zero at step 4: ..."."""
    said = status + (f" ({reason})" if reason and reason != status else "")
    stops = blocking(alerts)
    if status != "succeeded" or not stops:
        return said
    first = stops[0]
    return f"{said}, but {first['code']} at step {first.get('step')}: {first.get('message')}"
