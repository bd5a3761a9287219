"""Results of the task tools: evaluate and convert_gguf (each starts a job), and report (what attempts cost)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, Field

from jobtrail.models import Finding, ToolResult
from jobtrail.results.endings import NextStep, NextSteps, step_lines
from jobtrail.results.jobs import AfterJob, WaitingFor, findings_markdown, markdown_table, refusal
from jobtrail.util.money import DAILY_ENV, usd


class _TaskJobResult(ToolResult):
    """A task tool's result: the job it started, or (job_id None) the preflight errors that refused it. Its warnings
    are part of the answer (a conversion that would stop without a pre-tokenizer, a template it lacks)."""

    NOT_DONE: ClassVar[str]  # the refusal's lead: 'Not evaluated'
    if TYPE_CHECKING:  # declared by each result, where they take their place among its fields
        job_id: str | None
        findings: list[Finding]
        waiting_for: str | None
        next_steps: list[NextStep]

    def headline(self) -> str:
        if self.job_id is None:
            return refusal(self.NOT_DONE, self.findings)
        wait = [f"It waits for {self.waiting_for}, then starts."] if self.waiting_for else []
        warnings = findings_markdown([f for f in self.findings if f.severity == "warning"])
        return "\n".join([self.started(self.job_id), *wait, *warnings])

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        return findings_markdown([f for f in self.findings if f.severity == "info"])

    def started(self, job_id: str) -> str:
        raise NotImplementedError


class EvaluateResult(_TaskJobResult):
    NOT_DONE = "Not evaluated"

    job_id: str | None = Field(
        description="The evaluation job's id: follow it with logs/inspect; None when preflight refused it."
    )
    status: str
    evaluates: str = Field(description="The job id or model evaluated.")
    checkpoint: str = Field(description="'base', or the checkpoint/adapter evaluated.")
    backend: str
    findings: list[Finding] = Field(default_factory=list)
    after: AfterJob = None
    waiting_for: WaitingFor = None
    next_steps: NextSteps = Field(default_factory=list)

    def started(self, job_id: str) -> str:
        return f"Evaluation **{job_id}** ({self.status}) of {self.evaluates} [{self.checkpoint}] on {self.backend}."


class ConvertResult(_TaskJobResult):
    NOT_DONE = "Not converted"

    job_id: str | None = Field(description="The conversion job's id; None when preflight refused it.")
    status: str
    findings: list[Finding]
    source: str = Field(description="What is converted: an adapter/model directory or a Hub id.")
    quantizations: list[str] = Field(
        description="What it quantizes to besides the F16 base (always made): llama-quantize's names, each once."
    )
    builds_quantizer: bool = Field(
        False, description="True: the job builds llama-quantize before it quantizes, which takes minutes."
    )
    output_dir: str | None = None
    output_repo: str | None = None
    pre_tokenizer: str | None = Field(
        None,
        description="The llama.cpp pre-tokenizer the converter is told to use: the one asked for, or the one jobtrail "
        "recognised where the converter does not know the tokenizer (applied_pre_tokenizer).",
    )
    applied_pre_tokenizer: bool = Field(
        False,
        description="True: jobtrail chose pre_tokenizer itself, from the tokenizer's split regex: without one the "
        "conversion would stop (gguf.pre_tokenizer_needed).",
    )
    after: AfterJob = None
    waiting_for: WaitingFor = None
    next_steps: NextSteps = Field(default_factory=list)

    def started(self, job_id: str) -> str:
        where = self.output_repo or self.output_dir
        made = " + ".join(["F16", *self.quantizations])
        source = f"{self.source}'s final model" if self.source == self.after else self.source
        build = " It builds llama-quantize first, which takes minutes." if self.builds_quantizer else ""
        line = f"Conversion **{job_id}** ({self.status}): {source} → {made} in {where}.{build}"
        if self.applied_pre_tokenizer:
            line += (
                f"\npre_tokenizer={self.pre_tokenizer!r} applied: llama.cpp's converter does not know this tokenizer, "
                "and its split regex is that family's."
            )
        return line


class ReportRow(BaseModel):
    termination_reason: str | None = Field(None, description="Set when grouped by termination_reason.")
    group: str | None = Field(description="The value grouped on (reason, method, backend, flavor or model).")
    attempts: int
    gpu_hours: float
    cost_usd: float


class JobCap(BaseModel):
    """One remote job's spend against its own cap (max_cost_usd)."""

    job_id: str
    status: str
    termination_reason: str | None
    max_cost_usd: float
    spent_usd: float = Field(description="Every attempt together; a running one so far.")


# report lists the capped jobs that need a look, newest first, up to this many (a busy week holds thousands).
JOB_CAPS_LISTED = 20


class ReportResult(ToolResult):
    days: float
    group_by: str
    rows: list[ReportRow]
    total_attempts: int
    total_gpu_hours: float
    total_cost_usd: float
    spent_last_24h_usd: float = Field(
        0.0,
        description="Every job's spend on HF Jobs in the last 24 hours, a rolling window (running jobs so far): "
        "what the daily budget is checked against.",
    )
    daily_budget_usd: float | None = Field(None, description="JOBTRAIL_DAILY_BUDGET_USD; None: no daily budget.")
    default_max_cost_usd: float | None = Field(
        None, description="JOBTRAIL_MAX_COST_USD: a job's cap when submit passes no max_cost_usd; None: no default."
    )
    capped_jobs: int = Field(0, description="Remote jobs with a cap, created in the report's window or still running.")
    job_caps: list[JobCap] = Field(
        default_factory=list,
        description=f"The capped jobs to look at, newest first, at most {JOB_CAPS_LISTED}: still running, or stopped by"
        " their cap (budget). The others finished.",
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        return "\n".join([self._totals(), self._spending()])

    def _spending(self) -> str:
        """Spend against the caps: the daily budget, then the jobs at or past their own cap."""
        spent = f"Spent {usd(self.spent_last_24h_usd)} on HF Jobs in the last 24 hours"
        line = (
            f"{spent} of the daily budget of {usd(self.daily_budget_usd)}."
            if self.daily_budget_usd is not None
            else f"{spent} (no daily budget: {DAILY_ENV} is unset)."
        )
        stopped = [c for c in self.job_caps if c.termination_reason == "budget"]
        if self.capped_jobs:
            line += f" {self.capped_jobs} capped job{'s' if self.capped_jobs != 1 else ''}"
            line += f", {len(stopped)} stopped by its cap (budget)" if stopped else ""
            more = len(self.job_caps) == JOB_CAPS_LISTED
            line += f"; the newest {JOB_CAPS_LISTED} to look at are listed." if more else "."
        return line

    def _totals(self) -> str:
        head = (
            f"{_attempts(self.total_attempts)} ended in the last {self.days:g} days: "
            f"{self.total_gpu_hours:.2f} GPU-hours, ${self.total_cost_usd:.2f}."
        )
        if not self.rows:
            return head
        if self.group_by == "termination_reason":  # what failures cost is the point of this grouping
            lost = [r for r in self.rows if r.group != "succeeded"]
            if not lost:
                return f"{head} All succeeded."
            reasons = ", ".join(f"{r.group} {r.attempts}" for r in lost)
            cost = f"{sum(r.gpu_hours for r in lost):.2f} GPU-hours, ${sum(r.cost_usd for r in lost):.2f}"
            return f"{head} Not succeeded: {_attempts(sum(r.attempts for r in lost))}, {cost} ({reasons})."
        top = max(self.rows, key=lambda r: (r.cost_usd, r.gpu_hours, r.attempts))
        share = f"{_attempts(top.attempts)}, {top.gpu_hours:.2f} GPU-hours, ${top.cost_usd:.2f}"
        return f"{head} Largest {self.group_by}: {top.group or '-'} ({share})."

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        lines = []
        if self.rows:
            rows = [[r.group or "-", str(r.attempts), f"{r.gpu_hours:.2f}", f"${r.cost_usd:.2f}"] for r in self.rows]
            lines.append(markdown_table([self.group_by, "attempts", "GPU-hours", "cost"], rows))
        if self.job_caps:
            caps = [
                [c.job_id, c.termination_reason or c.status, usd(c.spent_usd), usd(c.max_cost_usd)]
                for c in self.job_caps
            ]
            lines.append(markdown_table(["job", "state", "spent", "max_cost_usd"], caps))
        return lines


def _attempts(n: int) -> str:
    return f"{n} attempt" + ("" if n == 1 else "s")
