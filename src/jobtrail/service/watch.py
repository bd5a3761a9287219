"""Watching a run: wait for its end (bounded), read its metric series, plot them.

Each reads the ledger after a tracker refresh, like the queries; wait repeats that every
WAIT_INTERVAL_S until the job ends or its time is up. It blocks the thread it runs on, never an event
loop: the MCP SDK runs a synchronous tool in a worker thread.
"""

from __future__ import annotations

import difflib
import time
from pathlib import Path
from typing import Any

from jobtrail.errors import InvalidRequestError
from jobtrail.methods import METHODS
from jobtrail.models import AttemptRecord, RunRecord
from jobtrail.outcomes import events
from jobtrail.results.progress import timeout_warning
from jobtrail.results.watch import AttemptSpan, MetricsResult, PlotResult, ProgressSink, WaitResult, progress_line
from jobtrail.service import next_steps, request_steps, series as metric_series
from jobtrail.service.context import ServiceContext
from jobtrail.service.queries import Queries, attempt_facts, numbered_attempt
from jobtrail.service.tracker import Tracker
from jobtrail.service.use_case import UseCase

# Clients cut a tool call near 60 s (Claude Code, the Inspector): a wait ends before that, with the status.
MAX_WAIT_S = 55.0
WAIT_INTERVAL_S = 1.0
MAX_POINTS = 500  # per series in one answer; longer ones are thinned evenly (since_step pages exactly)


class Watch(UseCase):
    def __init__(self, context: ServiceContext, tracker: Tracker, queries: Queries) -> None:
        super().__init__(context, tracker)
        self.queries = queries

    def wait(self, job_id: str, timeout_s: float, on_progress: ProgressSink | None = None) -> WaitResult:
        """Return as soon as the job has ended, or after timeout_s (at most MAX_WAIT_S) with where it is."""
        if not timeout_s >= 0:
            raise InvalidRequestError(f"timeout_s={timeout_s} is negative.", fix="Pass timeout_s=30 (0 to 55).")
        run = self.context.run(job_id)
        limit = min(float(timeout_s), MAX_WAIT_S)
        began = time.monotonic()
        first_seen: int | None = None  # the attempt this wait began on: a later one is announced as it comes
        while True:
            unrecorded = self.tracker.refresh()
            attempts = self.ledger.attempts(run.run_id)
            now, waited = time.time(), time.monotonic() - began
            logged = self.ledger.events_of([a.attempt_id for a in attempts])
            progress = self.queries.progress(attempts, now, logged)
            note = self.queries.attempt_note(attempts, logged)
            latest = attempts[-1]
            first_seen = latest.number if first_seen is None else first_seen
            if latest.status.is_terminal or waited >= limit:
                break
            if on_progress is not None:
                message = f"{latest.status.value}: {progress_line(progress)}"
                changed = latest.number != first_seen and note
                on_progress(round(waited, 1), limit, f"{note} {message}" if changed else message)
            time.sleep(min(WAIT_INTERVAL_S, max(0.0, limit - waited)))
        clamped = None
        if timeout_s > MAX_WAIT_S:
            clamped = (
                f"timeout_s={timeout_s:g} is more than one call may wait (clients cut tool calls near 60 s): "
                f"a call waits at most {MAX_WAIT_S:g} s."
            )
            if not latest.status.is_terminal:  # an ended job has nothing left to wait for
                clamped += " Call wait again to keep waiting."
        late = timeout_warning(run.run_id, progress, attempt_facts(latest), now)
        ended = latest.status.is_terminal
        return WaitResult(
            job_id=run.run_id,
            status=latest.status.value,
            terminal=latest.status.is_terminal,
            termination_reason=latest.termination_reason.value if latest.termination_reason else None,
            termination_message=latest.termination_message,
            attempts=latest.number,
            progress=progress,
            attempt_note=note,
            waited_s=round(waited, 1),
            timed_out=not latest.status.is_terminal,
            warnings=[w for w in (late, unrecorded.warning if unrecorded else None) if w],
            alerts=events.alerts(self.ledger.events(latest.attempt_id, "alert")),
            note=clamped,
            waiting_for=self.queries.waiting_for(latest),
            evaluation=self.queries.own_evaluation(run) if ended else None,
            files=self._files(attempts) if ended and run.method == "convert_gguf" else [],
            next_steps=next_steps.now(self.context, run, attempts, "wait"),
        )

    def _files(self, attempts: list[AttemptRecord]) -> list[dict[str, Any]]:
        """A conversion's GGUF files, as its artifact events record them."""
        found = [e for a in attempts for e in self.ledger.events(a.attempt_id, "artifact") if e.get("kind") == "gguf"]
        keep = ("quantization", "path", "bytes", "sha256")
        return [{name: e.get(name) for name in keep} for e in found]

    def metrics(
        self, job_id: str, names: list[str] | None, since_step: int | None, attempt: int | None
    ) -> MetricsResult:
        run = self.context.run(job_id)
        unrecorded = self.tracker.refresh()
        attempts = self.ledger.attempts(run.run_id)
        chosen = [numbered_attempt(attempts, attempt, run.run_id)] if attempt is not None else attempts
        per_attempt = [self._attempt_series(a) for a in chosen]
        joined = metric_series.join(per_attempt)
        wanted = _known(names, joined, run) if names else list(joined)
        series = {
            name: [p for p in joined[name] if since_step is None or p[0] > since_step]
            for name in wanted
            if name in joined
        }
        series = {name: points for name, points in series.items() if points}
        thinned = {name: _thin(points) for name, points in series.items()}
        ended = not joined and chosen[-1].status.is_terminal
        none_logged = self._no_series(run, chosen[-1]) if ended or run.method not in METHODS else None
        last_step = max((points[-1][0] for points in series.values()), default=None)
        return MetricsResult(
            job_id=run.run_id,
            status=attempts[-1].status.value,
            attempt=attempt,
            series=thinned,
            last={name: points[-1][1] for name, points in series.items()},
            # The trend reads the whole run's series, not the page since_step cut from it.
            trends={name: metric_series.trend(joined[name]) for name in series},
            available=sorted(joined),
            derived=[name for name in metric_series.DERIVED if name in joined],
            attempts=[
                AttemptSpan(
                    attempt=a.number, first_step=a.first_step, last_step=a.last_step, resumed_from=a.resumed_from
                )
                for a in per_attempt
                if a.series
            ],
            last_step=last_step,
            downsampled_to=MAX_POINTS if any(len(p) > MAX_POINTS for p in series.values()) else None,
            note=unrecorded.note if unrecorded else none_logged,
            next_steps=request_steps.series(run, attempts[-1], bool(joined), last_step),
        )

    def plot(self, job_id: str, metrics: list[str] | None) -> PlotResult:
        from jobtrail.service import plotting  # matplotlib: imported when a plot is drawn, never at start

        run = self.context.run(job_id)
        self.tracker.refresh()
        attempts = self.ledger.attempts(run.run_id)
        per_attempt = [self._attempt_series(a) for a in attempts]
        joined = metric_series.join(per_attempt)
        if not joined:
            if attempts[-1].status.is_terminal or run.method not in METHODS:
                raise InvalidRequestError(
                    f"{self._no_series(run, attempts[-1])} There is nothing to plot.",
                    fix=" ".join(step.as_line() for step in request_steps.series(run, attempts[-1], False, None)),
                )
            progress = self.queries.progress(attempts, time.time())
            raise InvalidRequestError(
                f"{run.run_id} has logged no step yet ({progress_line(progress)}): there is nothing to plot.",
                fix=f'wait(job_id="{run.run_id}") until steps are logged, then plot again.',
            )
        panels = plotting.panels(joined, _known(metrics, joined, run) if metrics else None, run.method)
        status = attempts[-1].status.value
        path = self.context.home / "runs" / run.run_id / "plots" / f"{plotting.file_stem(panels)}.png"
        title = f"{run.run_id} · {run.method} · {Path(run.model).name or run.model} · {status}"
        marks = [(a.first_step, _mark(a)) for a in per_attempt[1:] if a.first_step is not None]
        plotting.render(joined, panels, marks, title, path)
        return PlotResult(
            job_id=run.run_id,
            status=status,
            path=str(path),
            panels=[" & ".join(panel) for panel in panels],
            last_step=max(points[-1][0] for points in joined.values()),
            next_steps=request_steps.drawn(run.run_id),
        )

    def _no_series(self, run: RunRecord, latest: AttemptRecord) -> str:
        """Why a run has no series: an evaluation or a conversion logs no training step (its result is in its
        receipt); a training run that ended was mostly shorter than logging_steps (the trainer logs the loss every
        logging_steps steps, and a 3-step run with the default 10 never reaches the first)."""
        if run.method == "evaluate":
            return f"{run.run_id} is an evaluation: it logs no training steps; its metrics are in its receipt."
        if run.method == "convert_gguf":
            return f"{run.run_id} is a GGUF conversion: it logs no training steps; its files are in its receipt."
        every = latest.config.get("training_args", {}).get("logging_steps")
        trained = [e["global_step"] for e in self.ledger.events(latest.attempt_id, "metrics") if "global_step" in e]
        ended = f"{run.run_id} ended ({latest.status.value}) without logging a training step"
        if trained and isinstance(every, int | float) and trained[-1] < every:
            ended += f": it trained {trained[-1]} steps, and a step is logged every logging_steps={every:g}"
        return ended + "."

    def _attempt_series(self, attempt: AttemptRecord) -> metric_series.AttemptSeries:
        events = self.ledger.events(attempt.attempt_id)
        return metric_series.attempt_series(attempt.number, events, attempt.resumed_from)


def _known(names: list[str], joined: dict[str, list[metric_series.Point]], run: RunRecord) -> list[str]:
    """The names asked for, each one the run logged; else a refusal naming the closest and all of them."""
    if not joined:
        return names  # nothing logged yet: every name may still come
    unknown = [name for name in names if name not in joined]
    if not unknown:
        return names
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(joined), n=1, cutoff=0.5)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    raise InvalidRequestError(
        f"{run.run_id} logged no metric {', '.join(hints)}.",
        fix=f"Use names from: {', '.join(sorted(joined))}; or leave names out for all of them.",
    )


def _thin(points: list[metric_series.Point]) -> list[metric_series.Point]:
    """At most MAX_POINTS, evenly spread, the last point kept."""
    if len(points) <= MAX_POINTS:
        return points
    stride = len(points) / MAX_POINTS
    kept = [points[int(i * stride)] for i in range(MAX_POINTS - 1)]
    return [*kept, points[-1]]


def _mark(attempt: metric_series.AttemptSeries) -> str:
    start = f"from {Path(attempt.resumed_from).name}" if attempt.resumed_from else "from scratch"
    return f"attempt {attempt.number} ({start})"
