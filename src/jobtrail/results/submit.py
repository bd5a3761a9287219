"""submit's result: the job it started (or the earlier one an idempotency_key returns), a dry run's
script, or the refusal with each problem's fix."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from pydantic import Field

from jobtrail.backends.registry import traits_of
from jobtrail.models import Finding, Launcher, Speedups, ToolResult
from jobtrail.results.endings import NextSteps, step_lines
from jobtrail.results.jobs import AfterJob, WaitingFor, error_findings, findings_markdown, refusal, speedups_line
from jobtrail.util.money import usd


@dataclass(frozen=True)
class PlanSummary:
    """What submit says of its plan however it ends (a dry run, a refusal, the job started): its fingerprints
    ("" without a script or config), output, processes, cap and speed measures, and the chain and smoke run it
    asked for. Each is the SubmitResult field of its name."""

    script_sha256: str
    config_sha256: str
    backend: str
    output_repo: str | None
    launcher: Launcher | None
    max_cost_usd: float | None
    speedups: Speedups | None
    after: str | None
    smoke_steps: int | None

    def result_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class SubmitResult(ToolResult):
    job_id: str | None = Field(description="Short stable id of the run; None when nothing was submitted.")
    status: Literal["queued", "starting", "running", "rejected", "dry_run", "succeeded", "failed", "cancelled"] = Field(
        description="The job's state; an ended one only when already_submitted returns an earlier job."
    )
    findings: list[Finding]
    script_sha256: str
    config_sha256: str
    forced: bool = Field(
        default=False,
        description="Started (a dry run: would start) past preflight errors because force=true; the receipt says so.",
    )
    backend: str
    workdir: str | None = None
    output_dir: str | None = None
    output_repo: str | None = Field(
        default=None, description="Hub repo a remote job pushes its checkpoints and model to."
    )
    launcher: Launcher | None = Field(
        default=None,
        description="How the job's processes start: kind (python, torchrun), num_processes (one per GPU), "
        "strategy (single, ddp, fsdp); None when no config could be built.",
    )
    script: str | None = Field(default=None, description="The rendered script (dry_run with include_script only).")
    script_path: str | None = Field(default=None, description="A dry run's rendered script, as a file.")
    max_cost_usd: float | None = Field(
        default=None,
        description="The job's spending cap in US dollars (max_cost_usd, else JOBTRAIL_MAX_COST_USD); None: none.",
    )
    termination_message: str | None = Field(
        default=None, description="A job that ended at once (failed, cancelled): why, e.g. the daily budget is spent."
    )
    speedups: Speedups | None = Field(
        default=None,
        description="A training job's speed measures for its device (each on/off, who decided, why, what it sets).",
    )
    already_submitted: bool = Field(
        default=False,
        description="True: idempotency_key was used before with the same arguments; this is that job, and "
        "nothing was submitted again.",
    )
    idempotency_key: str | None = Field(default=None, description="The key this job was submitted with.")
    after: AfterJob = None
    waiting_for: WaitingFor = None
    smoke_steps: int | None = Field(
        default=None,
        description="A smoke run of this many steps comes first (attempt 1); the full job starts if it succeeds.",
    )
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        if self.already_submitted:
            return (
                f"Not submitted again: idempotency_key {self.idempotency_key!r} started **{self.job_id}** "
                f"earlier with the same arguments; it is {self.status}."
            )
        errors = error_findings(self.findings)
        if self.status == "dry_run" and self.forced:  # force=true passes these errors: so would the submit
            count = f"{len(errors)} preflight error{'s' if len(errors) != 1 else ''}"
            lead = f"Dry run, nothing submitted: forced, the job would be accepted past {count} (its receipt says so)."
            return "\n".join([lead, *findings_markdown(errors)])
        if self.status in ("rejected", "dry_run") and errors:
            return refusal(
                "Not submitted" if self.status == "rejected" else "Dry run, nothing submitted", self.findings
            )
        # Warnings are part of the answer (a timeout too short, a run that logs no step): the summary names them.
        warnings = findings_markdown([f for f in self.findings if f.severity == "warning"])
        if self.status == "dry_run":
            accepted = f"the job would be accepted (script sha256 {self.script_sha256[:12]})"
            return "\n".join([f"Dry run, nothing submitted: {accepted}.", *warnings])
        lines = [f"Submitted **{self.job_id}** ({self.status}) on {self.backend}."]
        if self.termination_message:
            lines.append(f"Why: {self.termination_message}")
        if self.output_repo:
            lines.append(
                f"Checkpoints and the final model are pushed to https://huggingface.co/{self.output_repo} (private)."
            )
        if self.forced:
            lines.append("Forced past preflight errors; the receipt records it.")
        if self.max_cost_usd is not None and traits_of(self.backend).billed:
            lines.append(f"It is stopped (termination_reason budget) if its spend reaches {usd(self.max_cost_usd)}.")
        if self.waiting_for:
            lines.append(f"It waits for {self.waiting_for}, then starts.")
        if self.smoke_steps:
            lines.append(
                f"A smoke run of {self.smoke_steps} steps goes first; the full job starts only if it succeeds."
            )
        return "\n".join([*lines, *warnings])

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        lines = findings_markdown([f for f in self.findings if f.severity == "info"])  # the summary has the rest
        if self.status != "dry_run":
            return lines
        if not self.findings:
            lines.append("No findings.")
        if self.speedups:
            lines.append(speedups_line(self.speedups))
        if self.script_path:
            lines.append(f"Script: {self.script_path} (include_script=true returns its text).")
        return lines + (["", "```python", self.script, "```"] if self.script else [])
