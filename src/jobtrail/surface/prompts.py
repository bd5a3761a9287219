"""MCP prompts for the common flows: each one is the plan an agent follows, as exact tool calls.

Their arguments are the tools' own (params.py), so a prompt's argument reads like the tool's.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from jobtrail.backends.registry import traits_of
from jobtrail.surface import params as p

OtherJobId = Annotated[str, Field(description="The job to compare it with, e.g. 'jt-8h2k4m1p'.")]


def add_prompts(server: MCPServer) -> None:
    server.prompt(
        name="fine_tune",
        title="Fine-tune a model on a dataset",
        description="Check the data, estimate, dry-run, submit, watch until it ends, and report the result.",
    )(fine_tune)
    server.prompt(
        name="diagnose_failed_job",
        title="Diagnose a failed job",
        description="Why a job ended as it did (termination reason, evidence, logs, curves) and the exact fix.",
    )(diagnose_failed_job)
    server.prompt(
        name="compare_runs",
        title="Compare two runs",
        description="Two jobs side by side: configuration, data, loss curves, speed, cost and evaluations.",
    )(compare_runs)


def fine_tune(model: p.Model, dataset: p.Dataset, method: p.Method = "sft", backend: p.Backend = "local") -> str:
    return f"""Fine-tune {model} on {dataset} with {method} on the {backend} backend, using the jobtrail tools.

1. validate_dataset(dataset="{dataset}", method="{method}", model="{model}"): if the method is NEEDS_MAPPING,
   pass the proposed `mapping` as dataset_mapping below; if INCOMPATIBLE, stop and say why.
2. estimate_cost(model="{model}", method="{method}", dataset="{dataset}"): note the memory, the recommended
   flavor and timeout{f" (pass flavor= and timeout= on {backend})" if traits_of(backend).flavors else ""}.
3. submit(method="{method}", model="{model}", dataset="{dataset}", backend="{backend}", dry_run=true): fix every
   error finding (each says how) before going on.
4. submit(...) the same arguments without dry_run; keep the job_id.
5. wait(job_id=...) while `terminal` is false; read progress (step, ETA, phase) and any warnings;
   metrics(job_id=...) shows whether the loss is falling; plot(job_id=...) draws the curves.
6. When it ends: inspect(job_id=...) and report the termination_reason, the loss first → last, the output
   (output_dir or output_repo) and its checkpoints. If it failed, follow the diagnose_failed_job prompt."""


def diagnose_failed_job(job_id: p.JobId) -> str:
    return f"""Find out why jobtrail job {job_id} ended as it did, and what fixes it.

1. inspect(job_id="{job_id}"): read status, termination_reason, termination_message, the latest attempt's
   evidence, warnings, retries_stopped and progress (the step and phase it reached).
2. logs(job_id="{job_id}", tail=100): the last lines before it ended (for an earlier attempt: attempt=N).
3. metrics(job_id="{job_id}"): was the loss falling, NaN (not_finite) or spiking before it ended?
   plot(job_id="{job_id}") if a picture helps.
4. Read the reference for the reason (resource jobtrail://references/jobs lists every termination reason).
5. Say in two lines what happened and why, then the exact call that fixes it, e.g.
   retry(job_id="{job_id}", changes={{...}}) with the change the diagnosis proposes; a reason that is never
   retried (bad_input, config_error, dependency_error, auth_error) needs a new submit with the fix."""


def compare_runs(job_id: p.JobId, other_job_id: OtherJobId) -> str:
    return f"""Compare jobtrail jobs {job_id} and {other_job_id}.

1. inspect(job_id="{job_id}") and inspect(job_id="{other_job_id}"): method, model, dataset and its sha256,
   hyperparameters, config sha256, status, termination_reason, duration, cost, evaluations and eval_delta.
2. metrics(job_id="{job_id}") and metrics(job_id="{other_job_id}"): loss first → last and trends, eval_loss and
   the train-eval gap, tokens_per_second.
3. plot(job_id="{job_id}") and plot(job_id="{other_job_id}") for the curves.
4. Answer with a short table (one row per job: what differs in the config, final loss, eval loss, steps/s, cost)
   and one paragraph: which run is better by which measure, and what explains the difference."""
