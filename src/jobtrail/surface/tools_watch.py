"""Watching tools: wait for a job's end (bounded), its metric series, a plot of them."""

from __future__ import annotations

from jobtrail.results.watch import MetricsResult, PlotResult, WaitResult
from jobtrail.surface import params as p
from jobtrail.surface.reporting import progress_sink
from jobtrail.surface.toolspec import READ_ONLY, ToolArea, tool


class WatchTools(ToolArea):
    # Each tool's typed signature is its own input schema (arguments declared in params.py): alike, not copies.
    @tool(
        "Wait for a job",
        "Wait until the job ends, or at most timeout_s seconds (at most 55: a larger value waits 55 s and says so in "
        "`note`, since clients cut tool calls near 60 s), then return its status and the current attempt's progress "
        "(step, rate, ETA, phase); after a retry or a smoke run, `attempt_note` says which attempt it is and where it "
        "started. Reports MCP progress while it waits. Call it again while `terminal` is false: no polling loop of "
        "your own is needed.",
        READ_ONLY,
    )
    def wait(self, job_id: p.JobId, timeout_s: p.WaitTimeout = p.DEFAULT_WAIT_S) -> WaitResult:
        return self.service.wait(job_id, timeout_s, on_progress=progress_sink())

    @tool(
        "Read a job's metrics",
        "The series of every metric the job's steps logged (loss, learning_rate, grad_norm, tokens, rewards and "
        "their std, DPO reward accuracies/margins, eval_loss ...) as {name: [[step, value], ...]}, with `last`, "
        "`trends` (falling, rising, stable, noisy ...) and derived tokens_per_second and eval_gap. A retried run's "
        "attempts are joined; attempt=N reads one; since_step reads on from an earlier call.",
        READ_ONLY,
    )
    def metrics(
        self,
        job_id: p.JobId,
        names: p.MetricNames = None,
        since_step: p.SinceStep = None,
        attempt: p.MetricsAttempt = None,
    ) -> MetricsResult:
        return self.service.metrics(job_id, names=names, since_step=since_step, attempt=attempt)

    @tool(
        "Plot a job's metrics",
        "A PNG of the job's series (steps on x; later attempts and resumes marked): by default train and eval "
        "loss, grad norm, learning rate, throughput, and rewards for GRPO. Returned as an image, and saved "
        "under the job's directory: the text gives the path, for clients that do not show images.",
        READ_ONLY,
    )
    def plot(self, job_id: p.JobId, metrics: p.PlotMetrics = None) -> PlotResult:
        return self.service.plot(job_id, metrics=metrics)
