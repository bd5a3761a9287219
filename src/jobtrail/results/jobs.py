"""Tool results: the structured content (stable field names) and the markdown text an agent
reads first. The CLI prints the same text, or the structured content with --json.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from jobtrail.backends.registry import traits_of
from jobtrail.models import CheckpointRecord, Finding, Launcher, Placement, Speedups, ToolResult, WebhookDelivery
from jobtrail.results.attempt_note import AttemptNote
from jobtrail.results.endings import BLOCKING, NextSteps, step_lines, verdict
from jobtrail.results.progress import Progress
from jobtrail.results.trackio_run import TrackioRun
from jobtrail.util.money import usd
from jobtrail.util.timefmt import ago, human_duration

_MARK = {"error": "✗", "warning": "!", "info": "·"}

# Where a job that a tool started stands in a pipeline, as submit, evaluate and convert_gguf each report it:
# described once, so the three results say the same.
AfterJob = Annotated[
    str | None, Field(description="The job this one waits for (after=...); it starts once that job succeeds.")
]
WaitingFor = Annotated[str | None, Field(description="What the queued job waits for, e.g. 'jt-... to succeed'.")]


def findings_markdown(findings: list[Finding]) -> list[str]:
    lines = []
    for f in findings:
        lines.append(f"{_MARK[f.severity]} {f.code}  {f.message}")
        if f.fix:
            lines.append(f"    Fix: {f.fix}")
    return lines


def error_findings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def refusal(lead: str, findings: list[Finding]) -> str:
    """A refused request's headline: 'Not submitted: 2 problems must be fixed first.', then each error and its fix."""
    errors = error_findings(findings)
    count = f"{len(errors)} problem{'s' if len(errors) != 1 else ''}"
    return "\n".join([f"{lead}: {count} must be fixed first.", *findings_markdown(errors)])


class ChainLink(BaseModel):
    """A job this one waits for (after=...), or one that waits for it."""

    job_id: str
    method: str
    status: str
    termination_reason: str | None = None

    def __str__(self) -> str:
        reason = f", {self.termination_reason}" if self.termination_reason not in (None, self.status) else ""
        return f"{self.job_id} ({self.method}, {self.status}{reason})"


def speedups_line(speedups: Speedups) -> str:
    """The speed measures in a line: what is on, what is off."""
    items = {name: value for name, value in speedups if name != "device"}
    on = [name for name, item in items.items() if item.on]
    off = [name for name, item in items.items() if not item.on]
    return f"Speedups on {speedups.device}: on {', '.join(on) or 'none'}; off {', '.join(off) or 'none'}."


HOST = (
    "Whose job this is. Local: its host (JOBTRAIL_HOST_ID of the server that submitted it). hf-jobs: the HF namespace "
    "(user or org) it runs and is billed in, the one of the server it was submitted through. Only a jobtrail server "
    "of that host, or launching HF Jobs in that namespace, starts, follows and stops it. None: a job recorded before "
    "hosts were, which any server with its backend reaches."
)


class JobRow(BaseModel):
    job_id: str
    status: str
    method: str
    model: str
    dataset: str
    backend: str
    created_at: float
    termination_reason: str | None = None
    attempts: int
    step: int | None = None
    loss: float | None = None
    progress: Progress | None = Field(None, description="phase, step of max_steps, rates and ETA, as inspect shows.")
    after: str | None = Field(default=None, description="The job this one waits for (or waited for): after=...")
    children: list[str] = Field(default_factory=list, description="The jobs that wait for this one.")
    host: str | None = Field(None, description=HOST)
    alerts: list[str] = Field(
        default_factory=list,
        description="The codes of the alerts the latest attempt raised; a blocking one (loss_diverged, collapsed, "
        "nan_loss, grpo_reward_std_zero, nothing_learned) on a succeeded job: its result is not usable as it is "
        "(inspect says why).",
    )

    @property
    def blocked(self) -> list[str]:
        return [code for code in self.alerts if code in BLOCKING]

    def cells(self) -> list[str]:
        loss = f"{self.loss:.4f}" if self.loss is not None else "-"
        step = str(self.step if self.step is not None else "-")
        if self.progress and self.progress.max_steps:
            step += f"/{self.progress.max_steps}"
        status = f"{self.status}, but {self.blocked[0]}" if self.status == "succeeded" and self.blocked else self.status
        return [
            self.job_id,
            status,
            self.termination_reason or "-",
            self.method,
            _short(self.model),
            self.backend + (f"@{self.host}" if self.host else ""),
            step,
            loss,
            self.after or "-",
            ago(self.created_at),
        ]


class PsResult(ToolResult):
    jobs: list[JobRow]
    status_filter: str | None = Field(None, description="The status asked for, when ps was filtered.")
    note: str | None = Field(
        None,
        description="Why the list is empty, when it is; or that it is the ledger as last recorded (a full disk, a "
        "read-only ledger) and why.",
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        if not self.jobs:
            return self.note or NO_JOBS_YET
        counts: dict[str, int] = {}
        for job in self.jobs:
            label = f"{job.status} ({job.termination_reason})" if job.status == "failed" else job.status
            if job.status == "succeeded" and job.blocked:
                label = f"succeeded, but {job.blocked[0]}"
            counts[label] = counts.get(label, 0) + 1
        states = ", ".join(f"{n} {label}" for label, n in counts.items())
        said = f" {self.note}" if self.note else ""  # with jobs listed, only a ledger shown as last recorded
        return f"{len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''}, newest first: {states}.{said}"

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        if not self.jobs:
            return []
        header = ["job_id", "status", "reason", "method", "model", "backend", "step", "loss", "after", "created"]
        return [markdown_table(header, [j.cells() for j in self.jobs])]


NO_JOBS_YET = "No jobs yet."


def empty_list_note(status_filter: str | None, any_jobs: bool) -> str:
    """What an empty job list means: nothing submitted yet, or nothing in the status asked for."""
    if not status_filter or not any_jobs:
        return NO_JOBS_YET
    return f"No jobs with status {status_filter!r}; other jobs exist."


class AttemptView(BaseModel):
    """One attempt's receipt, as far as it exists yet."""

    attempt_id: str
    number: int
    status: str
    termination_reason: str | None
    termination_message: str | None
    evidence: str | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    duration_s: float | None
    placement: Placement | None
    config_sha256: str
    script_sha256: str
    forced: bool
    findings: list[Finding]
    exit_code: int | None
    signal: int | None
    environment: dict[str, Any] | None = Field(
        description="Where the attempt ran, as rank 0 saw it: python, packages, device, gpu, world_size (workers)."
    )
    launcher: Launcher = Field(description="How its processes were started (kind, num_processes, strategy).")
    data_manifest: dict[str, Any] | None
    resumed_from: str | None
    checkpoints: list[CheckpointRecord]
    last_metrics: dict[str, Any] | None
    summary: dict[str, Any] | None
    gpu_seconds: float | None
    cost_usd: float | None
    workdir: str | None
    output_dir: str | None
    retry_note: str | None = Field(None, description="Why this attempt was started, for retries.")
    timeout_s: int | None = Field(
        None, description="The timeout it runs with, in seconds: the job's, or shorter where a spending cap buys less."
    )
    trackio: TrackioRun | None = Field(None, description="Where this attempt's trackio run is, once it logs there.")
    smoke_steps: int | None = Field(
        default=None,
        description="A smoke run: the job's config for this many steps, in its own directory, pushing nothing.",
    )
    host: str | None = Field(None, description=HOST)
    cancel_requested_at: float | None = Field(None, description="When a cancel was asked for.")
    cancel_sent_at: float | None = Field(
        None, description="When the cancel reached the backend (None while it waits for the host's server)."
    )


def _eval_outcome(evaluation: dict[str, Any]) -> str:
    """An evaluation's metrics in a line, or its state while it has none."""
    return ", ".join(f"{k} {v:.4g}" for k, v in evaluation["metrics"].items()) or evaluation["state"]


class InspectResult(ToolResult):
    job_id: str
    status: str
    termination_reason: str | None
    termination_message: str | None
    method: str
    model: str
    dataset: str
    backend: str
    created_at: float
    hyperparameters: dict[str, Any]
    progress: Progress
    attempt_note: AttemptNote = None
    last_metrics: dict[str, Any] | None
    checkpoints: list[CheckpointRecord] = Field(description="Every attempt's, a smoke run's (its own) included.")
    last_committed_checkpoint: CheckpointRecord | None = Field(
        None,
        description="The job's newest committed checkpoint (or final model), never a smoke run's: retry resumes "
        "from the newest checkpoint-N, evaluate and convert_gguf take checkpoint= among these.",
    )
    attempts: list[AttemptView]
    evaluations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Evaluations of this job's checkpoints: checkpoint, state, metrics, provenance.",
    )
    artifacts: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "Files the job produced: final model, GGUF files (path, quantization, bytes, sha256), llama.cpp version."
        ),
    )
    eval_delta: dict[str, float] | None = Field(
        None, description="submit(eval_dataset=...): final − base per metric, once both evaluations finished."
    )
    evaluation: dict[str, Any] | None = Field(
        None,
        description="An evaluation job's own result: evaluates (the job id, or the model evaluated alone), "
        "checkpoint, state, metrics, evaluator_sha256 and the full record.",
    )
    warnings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="What the server sees coming for the latest attempt, success or not (code, step, message, fix): "
        "e.g. an ETA past its timeout.",
    )
    alerts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="What the latest attempt's job saw wrong in itself while it ran, each as soon as seen (code, "
        "step, message, fix): nan_loss, nan_weights, loss_diverged or collapsed (it then ends 'diverged'), loss_spike, "
        "grad_norm_exploding, stalled, overfitting, grpo_reward_std_zero, grpo_completions_clipped, nothing_learned "
        "(it ended without moving its weights), loss_not_falling.",
    )
    waiting_for: str | None = Field(
        default=None,
        description="A queued job: what it waits behind (the jobs holding the backend's slots, a retry's backoff).",
    )
    retries_stopped: str | None = Field(
        None,
        description="submit(max_retries=N) and the latest attempt failed without a new one: why "
        "(max_retries spent, the reason's budget spent, the storm guard, a reason never retried) and the fix.",
    )
    init_from: str | None = Field(
        None, description="submit(init_from=...): the job this one trained further from; `model` is where it started."
    )
    max_cost_usd: float | None = Field(
        None, description="The job's spending cap in US dollars, over all its attempts (None: no cap)."
    )
    spent_usd: float = Field(
        0.0, description="What all its attempts cost so far (a running one: its time so far at the flavor's price)."
    )
    speedups: Speedups | None = Field(
        None,
        description="The latest attempt's speed measures (training jobs): each on/off, who decided (preflight, user, "
        "default), why, and the training_args it set.",
    )
    after: ChainLink | None = Field(
        default=None, description="The job this one waits for (after=...): it starts once that job succeeds."
    )
    children: list[ChainLink] = Field(default_factory=list, description="The jobs that wait for this one.")
    host: str | None = Field(None, description=HOST)
    followed_here: bool = Field(
        True,
        description="Whether this server follows the job itself. False: another host's local job, or a remote job "
        "in another HF namespace; its state is what its server last recorded, and cancel from here is carried out by "
        "that server at its next refresh.",
    )
    trackio: TrackioRun | None = Field(
        None,
        description="The trackio run of the latest attempt that has one: project, run, the local folder or the "
        "private Space, and how to open it (`jobtrail dashboard --project ...` or the Space's URL).",
    )
    webhooks: list[WebhookDelivery] = Field(
        default_factory=list,
        description="What `serve` told JOBTRAIL_WEBHOOK_URL about this job (its end, alerts, a hold): each notice, "
        "whether it was sent, the endpoint's status and the tries.",
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        """The state and why, progress, warnings and the result that matters (an evaluation's metrics, files)."""
        latest = self.attempts[-1]
        state = verdict(self.status, self.termination_reason, [])
        lines = [f"**{self.job_id}**: {state}; {self.method} of {_short(self.model)} on {self.backend}."]
        lines += [self.attempt_note] if self.attempt_note else []
        stops = [a for a in self.alerts if a.get("code") in BLOCKING]
        if self.status == "succeeded" and stops:
            lines.append(f"But: {verdict(self.status, None, stops)} Fix: {stops[0].get('fix')}")
        if self.waiting_for:
            lines.append(f"Waiting for {self.waiting_for}.")
        if not self.followed_here:
            whose = f"{traits_of(self.backend).host_title} {self.host}"
            lines.append(
                f"{whose if self.host else 'Another server'}'s job: this server shows what the server there recorded; "
                "a cancel from here is carried out there."
            )
        if self.after and not self.waiting_for:
            lines.append(f"After {self.after}.")
        if self.children:
            lines.append("Followed by " + ", ".join(str(c) for c in self.children) + ".")
        if latest.smoke_steps and not self.status_is_terminal:
            lines.append(f"Smoke run ({latest.smoke_steps} steps): the full job starts when it succeeds.")
        if self.termination_message and self.status != "succeeded":
            lines.append(f"Why: {self.termination_message}")
            if latest.evidence:
                lines.append(f"Evidence: `{latest.evidence[:300]}`")
        if self.retries_stopped:
            lines.append(f"Automatic retries stopped: {self.retries_stopped}")
        if self.max_cost_usd is not None and traits_of(self.backend).billed:
            lines.append(f"Spent {usd(self.spent_usd)} of its max_cost_usd {usd(self.max_cost_usd)}.")
        elif self.spent_usd:
            lines.append(f"Spent {usd(self.spent_usd)}.")
        p = self.progress
        if p.step is not None:
            of = f"/{p.max_steps}" if p.max_steps else ""
            loss = f"; loss {p.first_loss:.4f} → {p.last_loss:.4f}" if p.first_loss is not None else ""
            pace = f"; {p.steps_per_second:.3g} steps/s" if p.steps_per_second else ""
            eta = f", about {human_duration(p.eta_seconds)} to go" if p.eta_seconds is not None else ""
            lines.append(f"Step {p.step}{of}{loss}{pace}{eta}.")
        if p.phase and not self.status_is_terminal:
            lines.append(f"Phase: {p.phase}.")
        for warning in self.warnings:
            lines.append(f"Warning ({warning['code']}, step {warning['step']}): {warning['message']} {warning['fix']}")
        for alert in self.alerts:
            lines.append(f"Alert ({alert['code']}, step {alert['step']}): {alert['message']} {alert['fix']}")
        if last := self.last_committed_checkpoint:
            lines.append(f"Last committed checkpoint: {last.path} (step {last.step}).")
        if self.evaluation:
            ev = self.evaluation
            lines.append(f"Evaluates {ev['evaluates']} at {ev['checkpoint']}: {_eval_outcome(ev)}.")
        if self.eval_delta:
            changes = ", ".join(f"{k} {v:+.4g}" for k, v in self.eval_delta.items())
            lines.append(f"Change from the base model: {changes}.")
        gguf = [str(a.get("quantization")) for a in self.artifacts if a.get("kind") == "gguf"]
        if gguf:
            files = "GGUF file" + ("s" if len(gguf) != 1 else "")
            lines.append(f"{len(gguf)} {files} ({', '.join(gguf)}), listed in `artifacts` with paths.")
        return "\n".join(lines)

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        """The receipt: attempts, data, environment, evaluations and files."""
        latest = self.attempts[-1]
        lines = [
            "| attempt | status | reason | started | duration | placement | config sha256 |",
            "|---|---|---|---|---|---|---|",
        ]
        for a in self.attempts:
            where = f"{a.placement.backend}@{a.placement.host} pid {a.placement.pid}" if a.placement else "-"
            number = f"{a.number} (smoke, {a.smoke_steps} steps)" if a.smoke_steps else str(a.number)
            lines.append(
                f"| {number} | {a.status} | {a.termination_reason or '-'} | {ago(a.started_at)} | "
                f"{human_duration(a.duration_s)} | {where} | {a.config_sha256[:12]} |"
            )
        if latest.data_manifest:
            dm = latest.data_manifest
            pin = str(dm.get("sha256") or dm.get("revision"))[:12]
            lines.append(f"\nData: {dm.get('source')} ({dm.get('rows')} rows, sha256 {pin}).")
        if latest.environment:
            env = latest.environment
            pk = env.get("packages", {})
            launcher = latest.launcher
            workers = f", {launcher.num_processes} workers ({launcher.strategy})" if launcher.num_processes > 1 else ""
            lines.append(
                f"Environment: python {env.get('python')}, torch {pk.get('torch')}, trl {pk.get('trl')}, "
                f"device {env.get('device')}{workers}."
            )
        if self.speedups:
            lines.append(speedups_line(self.speedups))
        for ev in self.evaluations:
            lines.append(f"Evaluation {ev['eval_job_id']} of {ev['checkpoint']}: {_eval_outcome(ev)}.")
        for art in self.artifacts:
            if art.get("kind") == "gguf":
                size_mb, sha = art.get("bytes", 0) / 1e6, str(art.get("sha256"))[:12]
                lines.append(f"GGUF {art.get('quantization')}: {art.get('path')} ({size_mb:.1f} MB, sha256 {sha}).")
        for hook in self.webhooks:
            answer = f"HTTP {hook.status_code}" if hook.status_code else "no answer"
            why = f"; {hook.error}" if hook.error and not hook.sent else ""
            tries = "1 try" if hook.tries == 1 else f"{hook.tries} tries"
            lines.append(f"Webhook {hook.notice}: {hook.state} ({answer}, {tries}{why}).")
        return lines

    @property
    def status_is_terminal(self) -> bool:
        return self.status in ("succeeded", "failed", "cancelled")


class LogsResult(ToolResult):
    job_id: str
    attempt: int
    lines: list[str]
    finished: bool = Field(description="True once the attempt has ended and every line has been read.")
    cursor: int = Field(description="Byte offset after the last line returned; pass it back to read on.")
    truncated_lines: int = Field(0, description="How many returned lines were cut to the line-length limit.")
    status: str | None = Field(None, description="The attempt's status (queued, running, succeeded, failed, ...).")
    latest_attempt: int | None = Field(None, description="The job's newest attempt; logs(attempt=N) reads another.")
    waiting_for: str | None = Field(None, description="A queued attempt: what it waits behind.")
    note: str | None = Field(
        None,
        description="Why there are no lines where the log is another host's; or that the job's state is the ledger's "
        "as last recorded (a full disk, a read-only ledger) and why.",
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        cut = f"; {self.truncated_lines} cut to the line limit" if self.truncated_lines else ""
        said = f" {self.note}" if self.note else ""
        return f"Logs of {self.job_id} attempt {self.attempt} ({len(self.lines)} lines{cut}, {self._state()}).{said}"

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        return ["```", *(self.lines or ["(no output yet)"]), "```"]

    def _state(self) -> str:
        if self.finished:
            return f"{self.status}, all read" if self.status else "finished"
        if self.status == "queued":
            return "queued, not started yet"
        if self.status in ("starting", "running") or self.status is None:
            return "still running"
        return f"{self.status}, more to read"  # ended, but the tail did not reach the end of the log


class CancelResult(ToolResult):
    job_id: str
    status: str
    termination_reason: str | None
    message: str
    # Shape shared with InspectResult's host and followed_here: the same two facts (where the job runs, whether this
    # server reaches it), each result saying them in its own words.
    host: str | None = Field(None, description=HOST)
    pending: bool = Field(
        False,
        description="True: this server cannot reach the job (another host's local job, or a remote job in another HF "
        "namespace); the cancel is recorded and the server that reaches it (see message and host) stops it at its "
        "next refresh. wait(job_id) returns once it has ended.",
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        return f"**{self.job_id}**: {verdict(self.status, self.termination_reason, [])}. {self.message}"

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)


def _short(ref: str, width: int = 40) -> str:
    return ref if len(ref) <= width else "…" + ref[-(width - 1) :]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


class RetryResult(ToolResult):
    job_id: str
    retried: bool
    attempt: int | None = Field(description="Number of the new attempt, when one was started.")
    status: str
    message: str
    diagnosis: str | None = Field(None, description="Why the last attempt ended, when the retry was refused.")
    fix: str | None = None
    changes: dict[str, Any] = Field(default_factory=dict)
    resume_from: str | None = Field(None, description="The committed checkpoint the new attempt continues from.")
    delay_s: float = 0.0
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        if not self.retried:
            lines = [f"Not retried: {self.message.removeprefix('Not retried: ')}"]  # said once, not twice
            if self.diagnosis:
                lines.append(f"Diagnosis: {self.diagnosis}")
            if self.fix:
                lines.append(f"Fix: {self.fix}")
            return "\n".join(lines)
        start = f"resuming from {self.resume_from}" if self.resume_from else "from scratch (no committed checkpoint)"
        wait = f" after {human_duration(self.delay_s)}" if self.delay_s else ""
        change = f" with changes {self.changes}" if self.changes else ""
        return f"**{self.job_id}** attempt {self.attempt} {self.status}{wait}{change}, {start}. {self.message}"

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)
