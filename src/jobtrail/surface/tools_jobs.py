"""Job tools: submit a training job, list and follow jobs, stop one, retry one."""

from __future__ import annotations

from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from jobtrail.results.jobs import CancelResult, InspectResult, LogsResult, PsResult, RetryResult
from jobtrail.results.release import ReleaseResult
from jobtrail.results.submit import SubmitResult
from jobtrail.surface import params as p
from jobtrail.surface.toolspec import READ_ONLY, STARTS_JOB, STOPS_JOB, ToolArea, tool
from jobtrail.util.timefmt import parse_duration


class JobTools(ToolArea):
    # Each tool's typed signature is its own input schema (arguments declared in params.py): alike, not copies.
    @tool(
        "Submit a training job",
        "Run a fine-tuning job (TRL) after a preflight check. Returns at once with job_id; it never waits "
        "for training. Use dry_run=true first to see the findings and the rendered script's path and sha256 "
        "(include_script=true returns its text). Blocking "
        "findings come back as a normal result with status 'rejected' and the exact fix for each.",
        STARTS_JOB,
    )
    def submit(
        self,
        method: p.Method,
        model: p.Model,
        dataset: p.Dataset,
        backend: p.Backend = p.DEFAULT_BACKEND,
        flavor: p.Flavor = None,
        timeout: p.Timeout = None,
        hyperparameters: p.Hyperparameters = None,
        output: p.Output = None,
        dataset_mapping: p.DatasetMapping = None,
        dry_run: p.DryRun = False,
        force: p.Force = False,
        eval_dataset: p.EvalDataset = None,
        reward_file: p.RewardFile = None,
        reward_function: p.RewardFunction = None,
        init_from: p.InitFrom = None,
        init_checkpoint: p.InitCheckpoint = None,
        secrets: p.Secrets = None,
        max_retries: p.MaxRetries = p.DEFAULT_MAX_RETRIES,
        include_script: p.IncludeScript = False,
        max_cost_usd: p.MaxCostUsd = None,
        idempotency_key: p.IdempotencyKey = None,
        after: p.After = None,
        smoke_steps: p.SmokeSteps = None,
        dependency_versions: p.LibraryVersions = p.DEFAULT_DEPENDENCY_VERSIONS,
    ) -> SubmitResult:
        spec = JobSpec(
            method=method,
            model=model,
            dataset=dataset,
            backend=backend,
            flavor=flavor,
            timeout_s=parse_duration(timeout),
            hyperparameters=hyperparameters or {},
            output=output,
            dataset_mapping=dataset_mapping,
            secrets=secrets or {},
            reward_file=reward_file,
            reward_function=reward_function,
            eval_dataset=eval_dataset,
            init_from=init_from,
            init_checkpoint=init_checkpoint,
            after=after,
            smoke_steps=smoke_steps,
            dependency_versions=dependency_versions,
        )
        options = SubmitOptions(
            dry_run=dry_run,
            force=force,
            max_retries=max_retries,
            include_script=include_script,
            max_cost_usd=max_cost_usd,
            idempotency_key=idempotency_key,
        )
        return self.service.submit(spec, options)

    @tool(
        "List jobs",
        "List recent jobs, newest first, with status, termination reason, step and loss. "
        "Use inspect for one job's receipt.",
        READ_ONLY,
    )
    def ps(self, status: p.Status = None, limit: p.Limit = p.DEFAULT_LIMIT) -> PsResult:
        return self.service.ps(status=status, limit=limit)

    @tool(
        "Inspect a job",
        "A job's status, termination_reason and full receipt: every attempt with placement (backend, host, pid), "
        "config and script sha256, data manifest, environment, checkpoints and last metrics.",
        READ_ONLY,
    )
    def inspect(self, job_id: p.JobId) -> InspectResult:
        return self.service.inspect(job_id)

    @tool(
        "Read job logs",
        "The last `tail` lines of the job's latest attempt (or of `attempt`), or with `cursor` the lines after "
        "that point. `finished` is true once the attempt has ended and everything has been read.",
        READ_ONLY,
    )
    def logs(
        self, job_id: p.JobId, tail: p.Tail = p.DEFAULT_TAIL, cursor: p.Cursor = None, attempt: p.Attempt = None
    ) -> LogsResult:
        return self.service.logs(job_id, tail=tail, cursor=cursor, attempt=attempt)

    @tool(
        "Cancel a job",
        "Stop a queued or running job (SIGTERM; SIGKILL if it still runs after the grace period). It ends "
        "'cancelled'; committed checkpoints stay; the result says which signal ended it.",
        STOPS_JOB,
    )
    def cancel(self, job_id: p.JobId) -> CancelResult:
        return self.service.cancel(job_id)

    @tool(
        "Release a held job",
        "Start a job that waits, held, behind a job that succeeded with a blocking alert (its rewards never varied, "
        "it learned nothing ...): it starts on that job's result anyway, and its receipt records that the alert was "
        "overruled. inspect's waiting_for says when a job is held and why. A job held behind one that ended "
        "diverged cannot be released: retry that job first.",
        STARTS_JOB,
    )
    def release(self, job_id: p.JobId) -> ReleaseResult:
        return self.service.release(job_id)

    @tool(
        "Retry a job",
        "Start a new attempt of a failed, timed-out or cancelled job. It continues from the last committed "
        "checkpoint and spends from the budget for the last failure's reason: preempted/lost/timeout resume; "
        "oom needs a changed memory shape (the refusal proposes one); bad_input, config, dependency and auth "
        "errors are not retried but answered with the diagnosis and the fix.",
        STARTS_JOB,
    )
    def retry(self, job_id: p.JobId, changes: p.Changes = None) -> RetryResult:
        return self.service.retry(job_id, changes)
