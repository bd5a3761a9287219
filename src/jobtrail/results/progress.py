"""A job's progress from the events it printed: where it is, what it is doing, how fast, and when it
will end; and the warning when that end lies past its timeout.

Where it is is the current (latest) attempt's own: a retry that resumes at step 10 is at step 10 and on,
never at the step the attempt before it died at, and a queued or starting attempt has no step yet (its phase
says so; attempt_note.py says what it follows and where it starts). Only the losses span the attempts the
current one continues.

Pure: the caller hands in the events the ledger holds (each stamped with the job's `time`) and the
attempt's facts, and the clock reading `now`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from jobtrail.util.timefmt import human_duration

# The rate is measured over the last this-many step intervals: recent enough to follow a change of pace
# (a resumed attempt, a slower phase), long enough that one slow step does not swing the ETA.
RATE_WINDOW = 10
ACTIVE = ("queued", "starting", "running")
# An ended job's phase is its end: the last phase a succeeded job announced (saving, pushing) is behind it; where a
# job that did not succeed stopped is kept apart, as stopped_in.
ENDED = ("succeeded", "failed", "cancelled")
STOPPED = ("failed", "cancelled")
TIMEOUT_MARGIN = 1.3  # a longer timeout proposed for a run that will not make it: its need + 30%
WARNING_CODE = "timeout.before_max_steps"


class Progress(BaseModel):
    """Where a job's current attempt is and how fast it goes, from its events (job_progress computes it)."""

    step: int | None = Field(
        None,
        description="The furthest step the current attempt has reached (a resumed one starts at its checkpoint's "
        "step); None while it is queued or starting, never an earlier attempt's step.",
    )
    max_steps: int | None = Field(
        None,
        description="The steps the run trains for: its max_steps, or the trainer's total when it trains by epochs.",
    )
    first_loss: float | None = Field(
        None, description="Over the attempts the current one continues (not a smoke run's)."
    )
    last_loss: float | None = None
    steps_logged: int = Field(0, description="Step events of those attempts.")
    fraction: float | None = Field(None, description="step / max_steps, 0 to 1.")
    steps_per_second: float | None = Field(None, description="Over the latest attempt's recent steps.")
    tokens_per_second: float | None = Field(None, description="Input tokens trained per second, recent steps.")
    eta_seconds: float | None = Field(None, description="Seconds until max_steps at the recent rate (running only).")
    phase: str | None = Field(
        None,
        description="What the job is doing: queued, starting, installing, loading_model, tokenizing, training, "
        "saving, pushing, evaluating; for an ended job, its end: succeeded, failed or cancelled.",
    )
    stopped_in: str | None = Field(
        None, description="A failed or cancelled job: the phase it was in when it stopped (None when unknown)."
    )


@dataclass(frozen=True)
class AttemptFacts:
    """What progress needs to know about the latest attempt besides its events."""

    status: str
    max_steps: int | None  # the config's max_steps (None, or -1 when it trains by epochs)
    num_train_epochs: float | None
    started_at: float | None
    timeout_s: int | None


def job_progress(
    all_steps: Sequence[dict[str, Any]], latest_events: Sequence[dict[str, Any]], facts: AttemptFacts, now: float
) -> Progress:
    """`all_steps`: the step events of the attempts the latest continues, in order (for the losses);
    `latest_events`: all events of the latest, the only ones where it is comes from."""
    steps = [e for e in latest_events if e.get("event") == "step"]
    losses = [e["loss"] for e in all_steps if isinstance(e.get("loss"), int | float)]
    step = reached_step(latest_events)
    max_steps = total_steps(latest_events, steps, facts)
    steps_per_second, tokens_per_second = rates(steps)
    running = facts.status in ACTIVE
    eta = None
    if running and step is not None and max_steps and steps_per_second:
        since_last = max(0.0, now - float(steps[-1]["time"]))
        eta = max(0.0, (max_steps - step) / steps_per_second - since_last)
    return Progress(
        step=step,
        max_steps=max_steps,
        first_loss=losses[0] if losses else None,
        last_loss=losses[-1] if losses else None,
        steps_logged=len(all_steps),
        fraction=min(1.0, step / max_steps) if step is not None and max_steps else None,
        steps_per_second=_round(steps_per_second),
        tokens_per_second=_round(tokens_per_second),
        eta_seconds=_round(eta, 1),
        phase=facts.status if facts.status in ENDED else phase(latest_events, facts.status),
        stopped_in=phase(latest_events, facts.status) if facts.status in STOPPED else None,
    )


def reached_step(events: Sequence[dict[str, Any]]) -> int | None:
    """The furthest step an attempt is known to have reached: its last step event, or a committed checkpoint's,
    the final metrics' or the checkpoint it resumed from when further (a job that logs every 10 steps and trained 3
    printed no step event; a resumed attempt is at its checkpoint's step before its first new one)."""
    known = []
    for event in events:
        kind = event.get("event")
        if kind == "step" or kind == "resume" or (kind == "checkpoint" and event.get("state") == "committed"):
            known.append(event.get("step"))
        elif kind == "metrics":
            known.append(event.get("global_step"))
    steps = [s for s in known if isinstance(s, int) and not isinstance(s, bool)]
    return max(steps) if steps else None


def phase(events: Sequence[dict[str, Any]], status: str) -> str | None:
    """The job's own latest `phase` event; before (or between) them, what its events imply: nothing printed
    yet is installing (the job's environment), an environment is loading_model, a step is training. For an ended
    job, the phase it reached last (job_progress reports it as stopped_in)."""
    if status in ("queued", "starting"):
        return status
    current = None
    for event in events:
        kind = event.get("event")
        if kind == "phase" and isinstance(event.get("phase"), str):
            current = event["phase"]
        elif kind == "step":
            current = "training"
        elif kind == "environment" and current is None:
            current = "loading_model"
    if current is None and status == "running":
        return "installing"
    return current


def total_steps(events: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]], facts: AttemptFacts) -> int | None:
    """The steps the attempt trains for: the config's max_steps, else the trainer's total from a phase event,
    else (training by epochs) the steps per epoch the step events show times the epochs."""
    if facts.max_steps and facts.max_steps > 0:
        return facts.max_steps
    announced = [e["max_steps"] for e in events if e.get("event") == "phase" and isinstance(e.get("max_steps"), int)]
    if announced and announced[-1] > 0:
        return int(announced[-1])
    last = steps[-1] if steps else None
    epoch = last.get("epoch") if last else None
    if last and facts.num_train_epochs and isinstance(epoch, int | float) and epoch > 0:
        return max(int(last["step"]), round(int(last["step"]) / epoch * facts.num_train_epochs))
    return None


def rates(steps: Sequence[dict[str, Any]]) -> tuple[float | None, float | None]:
    """Steps and tokens per second over the last RATE_WINDOW intervals between step events."""
    timed = [e for e in steps if isinstance(e.get("time"), int | float) and isinstance(e.get("step"), int)]
    if len(timed) < 2:
        return None, None
    first, last = timed[max(0, len(timed) - RATE_WINDOW - 1)], timed[-1]
    seconds = float(last["time"]) - float(first["time"])
    if seconds <= 0 or last["step"] <= first["step"]:
        return None, None
    per_step = (last["step"] - first["step"]) / seconds
    counted = all(isinstance(e.get("tokens"), int | float) for e in (first, last))
    tokens = (last["tokens"] - first["tokens"]) / seconds if counted and last["tokens"] >= first["tokens"] else None
    return per_step, tokens


def timeout_warning(job_id: str, progress: Progress, facts: AttemptFacts, now: float) -> dict[str, Any] | None:
    """A running job whose ETA lies past its timeout: the step it will stop near, and the exact calls that fix it
    (code, step, message, fix, like the job's own warnings)."""
    if facts.status != "running" or not (facts.timeout_s and facts.started_at):
        return None
    eta, rate, step = progress.eta_seconds, progress.steps_per_second, progress.step
    if eta is None or not rate or step is None or progress.max_steps is None:
        return None
    left = facts.started_at + facts.timeout_s - now
    if eta <= left:
        return None
    stop_step = min(progress.max_steps, step + int(rate * max(0.0, left)))
    needed = (now - facts.started_at + eta) * TIMEOUT_MARGIN
    longer = _duration_argument(needed)
    return {
        "code": WARNING_CODE,
        "step": stop_step,
        "message": (
            f"At {rate:.3g} steps/s the job needs about {human_duration(eta)} more to reach step {progress.max_steps}, "
            f"but its timeout ({human_duration(facts.timeout_s)}) leaves {human_duration(max(0.0, left))}: "
            f"it will stop near step {stop_step}."
        ),
        "fix": (
            f"Let it run: it ends 'timeout' and keeps its committed checkpoints; then "
            f'retry(job_id="{job_id}", changes={{"timeout": "{longer}"}}) resumes from the last one. '
            f'Or cancel(job_id="{job_id}") and submit again with hyperparameters max_steps={stop_step}.'
        ),
    }


def _duration_argument(seconds: float) -> str:
    """A timeout as submit and retry read it, rounded up to whole minutes: "1h05m" reads as "1h5m"."""
    minutes = max(1, -(-int(seconds) // 60))
    hours, minutes = divmod(minutes, 60)
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes or not hours else "")


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
