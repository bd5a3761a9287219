"""Results of the watching tools: wait (a bounded wait for the end), metrics (the series) and plot (a PNG)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from jobtrail.models import ToolResult
from jobtrail.results.attempt_note import AttemptNote
from jobtrail.results.endings import NextSteps, blocking, step_lines, verdict
from jobtrail.results.progress import Progress
from jobtrail.util.timefmt import human_duration

TERMINAL = ("succeeded", "failed", "cancelled")
# The metrics a summary line names, in this order, when the run has them.
KEY_METRICS = ("loss", "eval_loss", "eval_gap", "grad_norm", "reward", "reward_std", "rewards/margins")
MIN_TREND_POINTS = 5


def recent_half(values: Sequence[float]) -> list[float]:
    """The points a trend is judged over (series.trend) and shown over (metrics' summary): the latter half, at least
    MIN_TREND_POINTS."""
    return list(values[-max(MIN_TREND_POINTS, len(values) // 2) :])


# (progress made, total, message) for the MCP client's progress bar while wait waits.
ProgressSink = Callable[[float, float, str], None]


def progress_line(p: Progress) -> str:
    """ "step 16/60 (27%), 3.1 steps/s, about 14s to go, phase training" — what is known of it."""
    parts = []
    if p.step is not None:
        of = f"/{p.max_steps}" if p.max_steps else ""
        share = f" ({p.fraction:.0%})" if p.fraction is not None else ""
        parts.append(f"step {p.step}{of}{share}")
    if p.steps_per_second:
        parts.append(f"{p.steps_per_second:.3g} steps/s")
    if p.eta_seconds is not None:
        parts.append(f"about {human_duration(p.eta_seconds)} to go")
    if p.phase:
        parts.append(f"phase {p.phase}")
    return ", ".join(parts) or "no step yet"


class WaitResult(ToolResult):
    job_id: str
    status: str
    terminal: bool = Field(description="True once the job has ended (succeeded, failed or cancelled).")
    termination_reason: str | None = None
    termination_message: str | None = None
    attempts: int
    progress: Progress
    attempt_note: AttemptNote = None
    waited_s: float = Field(description="How long this call waited.")
    timed_out: bool = Field(description="True when timeout_s ran out before the job ended: call wait again.")
    warnings: list[dict[str, Any]] = Field(
        default_factory=list, description="E.g. timeout.before_max_steps: the ETA passes the job's timeout (fix)."
    )
    alerts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="What the job saw wrong in itself (code, step, message, fix), the latest attempt's: a blocking "
        "one (loss_diverged, collapsed, nan_loss, grpo_reward_std_zero, nothing_learned) means the result is not "
        "usable as it is.",
    )
    note: str | None = Field(None, description="timeout_s was more than a call may wait: what was waited instead.")
    waiting_for: str | None = Field(
        default=None, description="A queued job: what it waits for (the job it follows, the backend's slots)."
    )
    evaluation: dict[str, Any] | None = Field(
        None,
        description="An evaluation job that ended: what it evaluated (evaluates, checkpoint), its state and metrics.",
    )
    files: list[dict[str, Any]] = Field(
        default_factory=list, description="A conversion that ended: its GGUF files (quantization, path, bytes, sha256)."
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        if self.terminal:
            line = self._ended()
        else:
            waited = human_duration(self.waited_s)
            line = f"**{self.job_id}**: still {self.status} after waiting {waited}: {progress_line(self.progress)}."
            if self.waiting_for:
                line += f" It waits for {self.waiting_for}."
        extra = [self.attempt_note] if self.attempt_note else []
        extra += [f"Warning ({w['code']}): {w['message']} {w['fix']}" for w in self.warnings]
        extra += [f"Alert ({a['code']}, step {a['step']}): {a['message']} Fix: {a['fix']}" for a in self.alerts]
        return "\n".join([line, *extra, *([self.note] if self.note else [])])

    def _ended(self) -> str:
        """ "**jt-x**: failed (oom) at step 40/100, while training. Loss 6.7 → 5.8." and why."""
        p = self.progress
        line = f"**{self.job_id}**: " + verdict(self.status, self.termination_reason, [])
        if p.step is not None:
            line += f" at step {p.step}" + (f"/{p.max_steps}" if p.max_steps else "")
        if p.stopped_in:
            line += f", while {p.stopped_in}"
        line += "."
        if p.first_loss is not None and p.last_loss is not None:
            line += f" Loss {p.first_loss:.4g} → {p.last_loss:.4g}."
        stops = blocking(self.alerts)
        if self.status == "succeeded" and stops:
            line += f" But: {stops[0]['code']} at step {stops[0]['step']}, so its result is not usable as it is."
        if self.evaluation:
            ev = self.evaluation
            scores = ", ".join(f"{k} {v:.4g}" for k, v in (ev.get("metrics") or {}).items()) or ev.get("state")
            line += f" Evaluation of {ev.get('evaluates')} [{ev.get('checkpoint')}]: {scores}."
        if self.files:
            sizes = ", ".join(
                f"{f.get('quantization')} {f.get('path')} ({_megabytes(f.get('bytes'))})" for f in self.files
            )
            line += f" {len(self.files)} GGUF file{'s' if len(self.files) != 1 else ''}: {sizes}."
        if self.termination_message and self.status != "succeeded":
            line += f"\nWhy: {self.termination_message}"
        return line

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)


class AttemptSpan(BaseModel):
    """Where one attempt's points lie in the joined series."""

    attempt: int
    first_step: int | None
    last_step: int | None
    resumed_from: str | None = Field(None, description="The checkpoint it continued from; None: from the start.")


class MetricsResult(ToolResult):
    job_id: str
    status: str
    attempt: int | None = Field(None, description="The attempt the series are restricted to; None: the whole run.")
    series: dict[str, list[tuple[int, float | None]]] = Field(
        description="[[step, value], ...] per metric; null where the job logged NaN/inf. Attempts are joined: "
        "a resumed attempt's points replace the earlier attempt's from its first step on."
    )
    last: dict[str, float | None] = Field(description="Each series' last value.")
    trends: dict[str, str] = Field(
        description="Each series over its recent points: falling, rising, stable, noisy, not_finite, too_few_points."
    )
    available: list[str] = Field(description="Every metric this run logged (names= picks among them).")
    derived: list[str] = Field(
        default_factory=list, description="Series computed here, not logged: tokens_per_second, eval_gap."
    )
    attempts: list[AttemptSpan] = Field(default_factory=list)
    last_step: int | None = Field(None, description="The last step in the series: pass it as since_step to read on.")
    downsampled_to: int | None = Field(None, description="Set when long series were thinned to this many points.")
    note: str | None = Field(
        None,
        description="Why an ended job has no series at all, and what logs one; or that the series are the ledger's "
        "as last recorded (a full disk, a read-only ledger) and why.",
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        if not self.series:
            if self.available:
                return f"**{self.job_id}** ({self.status}): no new points after the steps already read."
            if self.note:
                return self.note
            return f"**{self.job_id}** ({self.status}): no step logged yet."
        moving = [self._phrase(name) for name in KEY_METRICS if name in self.series]
        rest = [n for n in self.series if n not in KEY_METRICS and n not in ("epoch", "tokens")]
        if not moving:
            moving = [self._phrase(name) for name in rest[:3]]
        span = self.attempts[-1].last_step if self.attempts else self.last_step
        said = f" {self.note}" if self.note else ""  # with series, only a ledger shown as last recorded
        return f"**{self.job_id}** ({self.status}, step {span}): " + "; ".join(moving) + "." + said

    def _phrase(self, name: str) -> str:
        points = [v for _, v in self.series[name] if v is not None]
        word = self.trends.get(name, "")
        if word == "falling" and self.status not in TERMINAL:
            word = "still falling"
        word = word.replace("_", " ")
        if name in ("loss", "eval_loss", "reward") and points:
            # A trend word says what it compares: it judges the latter half, which may move against the whole run.
            phrase = f"{name} {points[0]:.4g} → {points[-1]:.4g}, {word}"
            if word.endswith(("falling", "rising")):
                half = recent_half(points)
                phrase += f" over the last half ({half[0]:.4g} → {half[-1]:.4g})"
            if name != "reward" and points[0] > 0 and points[-1] >= 1.5 * points[0]:
                phrase += f"; {points[-1] / points[0]:.3g}× its first value"
            return phrase
        return f"{name} {word}"

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        rows = [
            f"| {n} | {len(p)} | {_number(self.last.get(n))} | {self.trends.get(n, '-')} |"
            for n, p in self.series.items()
        ]
        return ["| metric | points | last | trend |", "|---|---|---|---|", *rows] if rows else []


class ImageResult(ToolResult):
    """A result the MCP server returns as image content (the PNG at `path`) and its text, without structured
    content or an output schema: clients drop images that sit beside structured content."""

    path: str = Field(description="The PNG, saved under the job's directory.")


class PlotResult(ImageResult):
    job_id: str
    status: str
    panels: list[str] = Field(description="One panel per entry: the metrics drawn in it.")
    last_step: int | None = None
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        return (
            f"Plot of **{self.job_id}** ({self.status}, step {self.last_step}): {', '.join(self.panels)}. "
            f"Saved to {self.path}"
        )

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)


def _megabytes(size: Any) -> str:
    return f"{size / 1e6:.1f} MB" if isinstance(size, int | float) else "size unknown"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
