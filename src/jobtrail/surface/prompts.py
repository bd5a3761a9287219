"""MCP prompts for the common flows: each one is the plan an agent follows, as exact tool calls.

Their arguments are the tools' own (params.py), so a prompt's argument reads like the tool's, and they are
checked like the tools' arguments: an unknown name gets the closest real one, a missing one is named with what
it takes, and a value the tool would refuse ('SFT' for sft) is refused with the tool's own did-you-mean
(invalid_arguments.py), as an MCP error (invalid params) in words, never "Internal server error".
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts import Prompt
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, InputRequiredResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from jobtrail.backends.registry import traits_of
from jobtrail.results.endings import BLOCKING, NEVER
from jobtrail.surface import invalid_arguments, params as p
from jobtrail.surface.toolspec import unknown_arguments

if TYPE_CHECKING:
    from mcp.server.mcpserver.context import Context
    from mcp.server.mcpserver.prompts.base import Message

OtherJobId = Annotated[str, Field(description="The job to compare it with, e.g. 'jt-8h2k4m1p'.")]


class CheckedPrompt(Prompt):
    """A prompt whose arguments are checked before it is rendered, as a tool's are before it runs.

    The SDK raises a ValueError for a missing argument and lets pydantic's refusal of a wrong value escape;
    either reaches the client as "Internal server error", which names neither the argument nor the fix.
    """

    async def render(
        self, arguments: dict[str, Any] | None, context: Context[Any, Any]
    ) -> list[Message] | InputRequiredResult:
        _check(self.name, self.fn, arguments or {})
        return await super().render(arguments, context)


def known_prompt(name: str, prompts: list[str]) -> None:
    """Refuse a prompt name the server lacks with the closest one it has (the SDK's ValueError reads "Internal
    server error")."""
    if name in prompts:
        return
    close = difflib.get_close_matches(name, prompts, n=1)
    meant = f" Did you mean {close[0]!r}?" if close else ""
    raise MCPError(INVALID_PARAMS, f"No prompt {name!r}.{meant} The prompts: {', '.join(prompts)}.")


def add_prompts(server: MCPServer) -> None:
    for fn, title, description in (
        (
            fine_tune,
            "Fine-tune a model on a dataset",
            "Check the data, estimate, dry-run, a smoke run then the job (idempotent), watch it to its end, "
            "then evaluate and convert_gguf, chained with after= or once it succeeded.",
        ),
        (
            diagnose_failed_job,
            "Diagnose a failed job",
            "Why a job (training, evaluation or conversion) ended as it did, or succeeded with a blocking alert: "
            "termination reason, alerts, evidence, logs, curves, and the exact call that fixes it.",
        ),
        (
            compare_runs,
            "Compare two runs",
            "Two jobs side by side: configuration, data, loss curves, alerts, speed, cost and evaluations.",
        ),
    ):
        server.add_prompt(CheckedPrompt.from_function(fn, title=title, description=description))


class _PromptArguments(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")


def _check(name: str, fn: Callable[..., Any], arguments: dict[str, Any]) -> None:
    """Refuse `arguments` as the tools refuse theirs: MCPError(INVALID_PARAMS) whose message says what to fix."""
    parameters = inspect.signature(fn, eval_str=True).parameters.values()
    refusal = unknown_arguments(f"the {name} prompt", arguments, [q.name for q in parameters])
    if refusal is None:
        refusal = _missing(name, [q for q in parameters if q.default is q.empty and q.name not in arguments])
    if refusal is None:
        fields: dict[str, Any] = {
            q.name: q.annotation if q.default is q.empty else (q.annotation, q.default) for q in parameters
        }
        try:
            create_model(f"{name}Arguments", __base__=_PromptArguments, **fields).model_validate(arguments)
        except ValidationError as exc:
            refusal = invalid_arguments.explain(f"the {name} prompt", exc)
    if refusal is not None:
        raise MCPError(INVALID_PARAMS, refusal)


def _missing(name: str, missing: list[inspect.Parameter]) -> str | None:
    if not missing:
        return None
    noun = "argument" if len(missing) == 1 else "arguments"
    lines = [f"- {q.name}: {_description(q.annotation)}" for q in missing]
    fix = f"Fix: get the prompt again with {'it' if len(missing) == 1 else 'each of them'} given."
    return "\n".join([f"Missing {noun} for the {name} prompt:", *lines, fix])


def _description(annotation: Any) -> str:
    return next((m.description for m in getattr(annotation, "__metadata__", ()) if getattr(m, "description", None)), "")


def fine_tune(model: p.Model, dataset: p.Dataset, method: p.Method = "sft", backend: p.Backend = "local") -> str:
    traits = traits_of(backend)
    hardware = f"the recommended flavor and timeout (pass flavor= and timeout= on {backend})" if traits.flavors else ""
    cost = f"the cost (max_cost_usd= caps what the job may spend on {traits.place})" if traits.billed else ""
    notes = ", ".join(part for part in (hardware, cost) if part) or f"the time (on {traits.place} it costs nothing)"
    job = f'method="{method}", model="{model}", dataset="{dataset}", backend="{backend}"'
    return f"""Fine-tune {model} on {dataset} with {method} on the {backend} backend, using the jobtrail tools.
Each result's `next_steps` are exact calls that will be accepted; prefer them to calls of your own.

1. validate_dataset(dataset="{dataset}", method="{method}", model="{model}"): if the data NEEDS_MAPPING, pass
   the proposed `mapping` as dataset_mapping= below; if INCOMPATIBLE, stop and say why.
2. estimate_cost(model="{model}", method="{method}", dataset="{dataset}"): note the memory and
   {notes}.
3. submit({job}, dry_run=true): fix every error finding with its Fix (a value to pass back) and dry-run again
   until none is left. Pass force=true only where the result offers it, and say why.
4. submit({job}, smoke_steps=5, idempotency_key="<a UUID you make once for this job>"): the job trains 5 steps
   first (a smoke run: same backend, nothing pushed) and the full job starts, from step 0, only if they succeed,
   so a broken config costs minutes. smoke_steps must be fewer than the steps the run trains (preflight says if
   not). If this call times out or its answer is lost, send it again unchanged with the same idempotency_key: it
   returns the job the first call started (already_submitted=true), never a second one. Keep the job_id.
5. Queue what follows without waiting, each starting only once the job succeeds (after=; cancelled if it ends
   any other way): evaluate(dataset="<held-out data>", job_id="<job_id>", after="<job_id>") measures the trained
   model, convert_gguf(source="<job_id>", after="<job_id>") makes GGUF files for llama.cpp and Ollama, and
   submit(method="dpo", model="<job_id>", dataset="<preference pairs>") would train on its final model.
6. wait(job_id="<job_id>", timeout_s=55) again while `terminal` is false: read progress (step, ETA, phase),
   attempt_note (the smoke run ended and the full job started), warnings and alerts. metrics(job_id="<job_id>")
   shows whether the loss falls; plot(job_id="<job_id>") draws the curves.
7. When it ends, inspect(job_id="<job_id>"): report the verdict (a blocking alert turns "succeeded" into
   "succeeded, but ..."), the termination_reason, the loss first → last, the output (output_dir or
   output_repo) and its checkpoints; then the evaluation's metrics and the GGUF files with their sizes
   (inspect of each evaluate or convert_gguf job id). Not queued in step 5? evaluate(dataset="<held-out data>",
   job_id="<job_id>") and convert_gguf(source="<job_id>") run them now. If it failed, or succeeded with a
   blocking alert, follow the diagnose_failed_job prompt."""


def diagnose_failed_job(job_id: p.JobId) -> str:
    never = ", ".join(reason.value for reason in NEVER)
    return f"""Find out why jobtrail job {job_id} ended as it did, and what fixes it.

1. inspect(job_id="{job_id}"): read `method` (the job's kind: "evaluate" for an evaluation, "convert_gguf" for a
   conversion, else a training method), status, termination_reason, termination_message, `alerts` (what the job
   saw wrong in itself, each with step, message and fix; {", ".join(BLOCKING)} block: the result is not usable
   even when the status says succeeded), warnings, retries_stopped, the latest attempt's evidence, progress
   (the step it reached; stopped_in: the phase it stopped in), and next_steps (the calls that fit this ending:
   prefer them). A job not yet ended: wait(job_id="{job_id}", timeout_s=55) first.
2. logs(job_id="{job_id}", tail=100): the last lines before it ended (an earlier attempt: attempt=N; a smoke
   run is attempt 1).
3. By its kind:
   - training: metrics(job_id="{job_id}"): was the loss falling, NaN or spiking, the rewards varying (GRPO),
     before it ended or an alert fired? plot(job_id="{job_id}") if a picture helps.
   - evaluation: inspect's `evaluation` (the job or model it evaluated, the checkpoint, state, the record); it
     logs no training steps, so metrics and plot have nothing to show. Fix the data or the evaluated
     checkpoint and call evaluate(...) again with it.
   - conversion: inspect's `artifacts` (the files it made, with sizes) and the log's last lines; a converter
     that does not know the tokenizer names the pre-tokenizer to pass: convert_gguf(source="<its source>",
     pre_tokenizer="<name>"). No training steps are logged here either.
4. Read the reference for the reason or the alert (resource jobtrail://references/troubleshooting: every
   termination reason and alert, its evidence and its fix).
5. Say in two lines what happened and why, then the exact call that fixes it: inspect's next_steps name it
   (retry(job_id="{job_id}", changes={{...}}) with the change the diagnosis proposes, where a retry runs). A
   reason that is never retried ({never}) needs a new submit (or evaluate, convert_gguf) with the fix."""


def compare_runs(job_id: p.JobId, other_job_id: OtherJobId) -> str:
    return f"""Compare jobtrail jobs {job_id} and {other_job_id}.

1. inspect(job_id="{job_id}") and inspect(job_id="{other_job_id}"): method, model, dataset and its sha256,
   hyperparameters, config sha256, status, termination_reason, alerts, duration, cost, evaluations and eval_delta.
2. metrics(job_id="{job_id}") and metrics(job_id="{other_job_id}"): loss first → last and trends, eval_loss and
   the train-eval gap, tokens_per_second.
3. plot(job_id="{job_id}") and plot(job_id="{other_job_id}") for the curves.
4. Answer with a short table (one row per job: what differs in the config, final loss, eval loss, steps/s, cost,
   blocking alerts) and one paragraph: which run is better by which measure, and what explains the difference."""
