"""The MCP tool surface: thin, typed and annotated. All the work happens in JobService.

Each tool returns markdown text for the agent to read first and structured content with the
stable field names of its result model. Anticipated failures become ToolErrors that say what
to fix; nothing else (no traceback) reaches the client.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from jobtrail import __version__
from jobtrail.errors import JobtrailError
from jobtrail.estimate import EstimateResult, HardwareResult
from jobtrail.models import JobSpec, JobStatus
from jobtrail.preflight.dataset import DatasetReport
from jobtrail.surface.results import (
    CancelResult,
    ConvertResult,
    EvaluateResult,
    InspectResult,
    LogsResult,
    PsResult,
    ReportResult,
    RetryResult,
    SubmitResult,
)
from jobtrail.service.facade import JobService
from jobtrail.util.timefmt import parse_duration

log = logging.getLogger("jobtrail.surface.server")
F = TypeVar("F", bound=Callable[..., Any])

INSTRUCTIONS = """jobtrail runs fine-tuning jobs (TRL) on this machine or on Hugging Face Jobs.
Typical flow: submit(dry_run=true) to see findings and the script → submit → logs / inspect
until the status is terminal → report the termination_reason, the loss and the checkpoint path.
Every job has a receipt: inspect(job_id) shows config sha256, data manifest, environment,
placement, checkpoints and why it ended."""

READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False)

JobId = Annotated[str, Field(description="Job id returned by submit or listed by ps, e.g. 'jt-4f9k2m7q'.")]


def result(model: BaseModel) -> CallToolResult:
    text = model.to_markdown()  # type: ignore[attr-defined]
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=model.model_dump(mode="json"))


def agent_errors(fn: F) -> F:
    """Anticipated errors carry their fix; anything else is logged here and summarised there."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except JobtrailError as exc:
            raise ToolError(str(exc)) from exc
        except ToolError:
            raise
        except Exception as exc:
            log.exception("tool %s failed", fn.__name__)
            raise ToolError(
                f"jobtrail hit an internal error ({type(exc).__name__}: {exc}). "
                "Nothing was lost: the ledger is unchanged. Retry once; if it repeats, report it with the server log."
            ) from exc

    return wrapper  # type: ignore[return-value]


def build_server(service: JobService) -> MCPServer:
    server = MCPServer(name="jobtrail", version=__version__, instructions=INSTRUCTIONS)

    @server.tool(
        title="Submit a training job",
        description=(
            "Run a fine-tuning job (TRL) after a preflight check. Returns at once with job_id; it never waits "
            "for training. Use dry_run=true first to see the findings and the rendered script. Blocking "
            "findings come back as a normal result with status 'rejected' and the exact fix for each."
        ),
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True),
    )
    @agent_errors
    def submit(
        method: Annotated[
            Literal["sft", "dpo", "grpo", "reward", "kto"],
            Field(description="sft: supervised fine-tuning; dpo: preference pairs; grpo: RL with reward functions; reward: a reward model; kto: unpaired preferences."),
        ],
        model: Annotated[str, Field(description="Local model directory (with config.json) or Hub id, e.g. 'Qwen/Qwen2.5-0.5B'.")],
        dataset: Annotated[str, Field(description="Local .jsonl/.json/.csv/.parquet file or Hub dataset id. Formats: messages, text, prompt/completion.")],
        backend: Annotated[
            Literal["local", "hf-jobs"],
            Field(description="'local' runs on this machine (no account needed); 'hf-jobs' runs on Hugging Face Jobs (needs HF_TOKEN; model, dataset and output are Hub repos)."),
        ] = "local",
        flavor: Annotated[str | None, Field(description="HF Jobs hardware, e.g. 'a10g-large' (see the hardware tool).")] = None,
        timeout: Annotated[str | int | None, Field(description="Stop the job after this long: '45m', '2h', or seconds.")] = None,
        hyperparameters: Annotated[
            dict[str, Any] | None,
            Field(description="TRL config names for the method, e.g. {'max_steps': 100, 'learning_rate': 2e-4, 'lora_r': 16, 'max_length': 1024}; peft='none' (full) or 'qlora'; GRPO: reward_funcs=['exact_match', 'format', 'numeric_match', 'length'], num_generations."),
        ] = None,
        output: Annotated[
            str | None,
            Field(description="Where the trained model goes: a directory for 'local', a Hub repo id for 'hf-jobs' (default <user>/<model>-<method>-<date>)."),
        ] = None,
        dataset_mapping: Annotated[
            dict[str, Any] | None,
            Field(description="Turns another data shape into a TRL format; validate_dataset proposes it, e.g. {'kind': 'rename', 'columns': {'question': 'prompt', 'answer': 'completion'}}."),
        ] = None,
        dry_run: Annotated[bool, Field(description="Only run preflight and render the script; submit nothing.")] = False,
        force: Annotated[bool, Field(description="Submit despite blocking findings (recorded in the receipt).")] = False,
        eval_dataset: Annotated[
            str | None, Field(description="Held-out data: the base model is evaluated before training and the final model after; inspect shows the delta.")
        ] = None,
        reward_file: Annotated[
            str | None, Field(description="GRPO: a Python file defining the reward function (checked, then inlined).")
        ] = None,
        reward_function: Annotated[
            str | None, Field(description="GRPO: the function's name in reward_file, taking (prompts, completions, **kwargs).")
        ] = None,
        secrets: Annotated[
            dict[str, str] | None,
            Field(description="Secrets for the job as references to the server's environment, e.g. {'WANDB_API_KEY': '$WANDB_API_KEY'}; values are never accepted, stored or shown."),
        ] = None,
        max_retries: Annotated[
            int, Field(ge=0, le=10, description="Retry automatically up to this many times, within each failure reason's budget.")
        ] = 0,
    ) -> Annotated[CallToolResult, SubmitResult]:
        spec = JobSpec(
            method=method,
            model=model,
            dataset=dataset,
            backend=backend,
            flavor=flavor,
            timeout_s=parse_duration(timeout),
            hyperparameters=hyperparameters or {},
            dataset_mapping=dataset_mapping,
            output=output,
            secrets=secrets or {},
            reward_file=reward_file,
            reward_function=reward_function,
            eval_dataset=eval_dataset,
        )
        return result(service.submit(spec, dry_run=dry_run, force=force, max_retries=max_retries))

    @server.tool(
        title="Validate a dataset",
        description=(
            "Check a dataset before training: rows, columns, and for each method (sft, dpo, grpo, reward, kto) "
            "READY, NEEDS_MAPPING (with the dataset_mapping to pass to submit) or INCOMPATIBLE, with row-level "
            "problems and samples. With model=, token-length percentiles and rows over max_length."
        ),
        annotations=READ_ONLY,
    )
    @agent_errors
    def validate_dataset(
        dataset: Annotated[str, Field(description="Local .jsonl/.json/.csv/.parquet file or Hub dataset id.")],
        method: Annotated[
            Literal["sft", "dpo", "grpo", "reward", "kto"] | None, Field(description="Judge only this method.")
        ] = None,
        split: Annotated[str, Field(description="Split to read, e.g. 'train'.")] = "train",
        model: Annotated[str | None, Field(description="Local model directory: measure token lengths with its tokenizer.")] = None,
        max_length: Annotated[int | None, Field(ge=1, description="Count rows longer than this many tokens.")] = None,
    ) -> Annotated[CallToolResult, DatasetReport]:
        return result(service.validate_dataset(dataset, method, split, model, max_length))

    @server.tool(
        title="List hardware",
        description="HF Jobs flavors with GPU, count, memory, price per hour, bf16 and peak TFLOPS; live from the Hub when reachable, else a bundled snapshot (source and date say which).",
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=True),
    )
    @agent_errors
    def hardware() -> Annotated[CallToolResult, HardwareResult]:
        return result(service.hardware())

    @server.tool(
        title="Estimate memory, time and cost",
        description=(
            "Before renting a GPU: parameters, a memory breakdown (weights, gradients, optimizer, activations, "
            "logits, overhead), which flavors fit, the cheapest that does, hours, cost and a timeout with a 30% "
            "buffer. Weights are never downloaded (config.json only). Uses measurements of earlier jobs when they exist."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=True),
    )
    @agent_errors
    def estimate_cost(
        model: Annotated[str, Field(description="Hub id or local directory with config.json.")],
        method: Annotated[Literal["sft", "dpo", "grpo", "reward", "kto"], Field(description="Training method.")] = "sft",
        peft: Annotated[Literal["lora", "qlora", "none"], Field(description="'qlora' = 4-bit base; 'none' = full fine-tuning.")] = "lora",
        dataset: Annotated[str | None, Field(description="Local .jsonl file to take rows and lengths from.")] = None,
        num_examples: Annotated[int | None, Field(ge=1, description="Rows, when no dataset is given.")] = None,
        avg_tokens: Annotated[float | None, Field(gt=0, description="Mean tokens per row, when no dataset is given.")] = None,
        max_length: Annotated[int, Field(ge=1)] = 1024,
        per_device_batch_size: Annotated[int, Field(ge=1)] = 1,
        gradient_accumulation_steps: Annotated[int, Field(ge=1)] = 1,
        epochs: Annotated[int, Field(ge=1)] = 1,
        gradient_checkpointing: bool = True,
        flavor: Annotated[str | None, Field(description="Describe this flavor (default: the recommended one).")] = None,
        lora_r: Annotated[int, Field(ge=1)] = 16,
        optimizer: Annotated[str, Field(description="adamw, adamw_8bit, lion or sgd (TRL `optim` names are accepted too).")] = "adamw",
    ) -> Annotated[CallToolResult, EstimateResult]:
        return result(service.estimate_cost(
            model, method=method, peft=peft, dataset=dataset, num_examples=num_examples, avg_tokens=avg_tokens,
            max_length=max_length, per_device_batch_size=per_device_batch_size,
            gradient_accumulation_steps=gradient_accumulation_steps, epochs=epochs,
            gradient_checkpointing=gradient_checkpointing, flavor=flavor, lora_r=lora_r, optimizer=optimizer,
        ))

    @server.tool(
        title="List jobs",
        description="List recent jobs, newest first, with status, termination reason, step and loss. Use inspect for one job's receipt.",
        annotations=READ_ONLY,
    )
    @agent_errors
    def ps(
        status: Annotated[
            Literal["queued", "starting", "running", "succeeded", "failed", "cancelled"] | None,
            Field(description="Only jobs in this status."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=500, description="At most this many jobs.")] = 20,
    ) -> Annotated[CallToolResult, PsResult]:
        return result(service.ps(status=JobStatus(status).value if status else None, limit=limit))

    @server.tool(
        title="Inspect a job",
        description=(
            "A job's status, termination_reason and full receipt: every attempt with placement (backend, host, pid), "
            "config and script sha256, data manifest, environment, checkpoints and last metrics."
        ),
        annotations=READ_ONLY,
    )
    @agent_errors
    def inspect(job_id: JobId) -> Annotated[CallToolResult, InspectResult]:
        return result(service.inspect(job_id))

    @server.tool(
        title="Read job logs",
        description=(
            "The last `tail` lines of the job's latest attempt, or with `cursor` the lines after that point. "
            "`finished` is true once the job has ended and everything has been read."
        ),
        annotations=READ_ONLY,
    )
    @agent_errors
    def logs(
        job_id: JobId,
        tail: Annotated[int, Field(ge=1, le=5000, description="How many lines to return.")] = 50,
        cursor: Annotated[int | None, Field(ge=0, description="Cursor from a previous logs call: read on from there.")] = None,
    ) -> Annotated[CallToolResult, LogsResult]:
        return result(service.logs(job_id, tail=tail, cursor=cursor))

    @server.tool(
        title="Cancel a job",
        description="Stop a queued or running job (SIGTERM, then SIGKILL). It ends 'cancelled'; committed checkpoints stay.",
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False),
    )
    @agent_errors
    def cancel(job_id: JobId) -> Annotated[CallToolResult, CancelResult]:
        return result(service.cancel(job_id))

    @server.tool(
        title="Retry a job",
        description=(
            "Start a new attempt of a failed, timed-out or cancelled job. It continues from the last committed "
            "checkpoint and spends from the budget for the last failure's reason: preempted/lost/timeout resume; "
            "oom needs a changed memory shape (the refusal proposes one); bad_input, config, dependency and auth "
            "errors are not retried but answered with the diagnosis and the fix."
        ),
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True),
    )
    @agent_errors
    def retry(
        job_id: JobId,
        changes: Annotated[
            dict[str, Any] | None,
            Field(description="Hyperparameters (and timeout, flavor, dataset_mapping) to change, e.g. {'per_device_train_batch_size': 2, 'gradient_accumulation_steps': 8}."),
        ] = None,
    ) -> Annotated[CallToolResult, RetryResult]:
        return result(service.retry(job_id, changes))

    @server.tool(
        title="Evaluate a model or a job's checkpoint",
        description=(
            "Run an evaluation job (same backend as the job): loss/perplexity on held-out data, exact match for "
            "question-answer data (greedy generation), pairwise accuracy for preference data. Give job_id (its final "
            "model, or checkpoint= one of its committed checkpoints) or model (a base model). The record keeps the "
            "evaluator's script sha256 and package versions, the task set's sha256 and rows, decoding parameters, "
            "raw outputs and sampled failures; inspect of the evaluated job lists it."
        ),
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True),
    )
    @agent_errors
    def evaluate(
        dataset: Annotated[str, Field(description="Held-out data: a local file or Hub dataset id.")],
        job_id: Annotated[str | None, Field(description="Evaluate this job's final model (or checkpoint=...).")] = None,
        model: Annotated[str | None, Field(description="Or evaluate this model (local dir or Hub id) as it is.")] = None,
        split: Annotated[str | None, Field(description="Split of a Hub dataset (default 'test').")] = None,
        checkpoint: Annotated[str | None, Field(description="A committed checkpoint of the job: name (checkpoint-40), step or path.")] = None,
        metrics: Annotated[
            list[Literal["loss", "perplexity", "exact_match", "pairwise_accuracy"]] | None,
            Field(description="Default: chosen from the data's format."),
        ] = None,
        max_new_tokens: Annotated[int, Field(ge=1, le=4096)] = 64,
        temperature: Annotated[float, Field(ge=0.0, le=2.0, description="0 = greedy (reproducible).")] = 0.0,
    ) -> Annotated[CallToolResult, EvaluateResult]:
        return result(service.evaluate(dataset, job_id=job_id, model=model, split=split, checkpoint=checkpoint,
                                       metrics=metrics, max_new_tokens=max_new_tokens, temperature=temperature))

    @server.tool(
        title="Convert to GGUF",
        description=(
            "Turn a trained adapter or model into GGUF files for llama.cpp, Ollama and LM Studio: merge the LoRA "
            "adapter, convert with llama.cpp's converter to F16 (always kept), quantize (Q4_K_M, Q5_K_M, Q8_0, ...), "
            "and verify every file (read back; F16/Q8_0 logits compared with the merged model). source: a job id "
            "(its final model, or checkpoint=...), a local model/adapter directory, or a Hub id. Runs as a job."
        ),
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True),
    )
    @agent_errors
    def convert_gguf(
        source: Annotated[str, Field(description="A jobtrail job id, a local model/adapter directory, or a Hub id.")],
        quantizations: Annotated[list[str], Field(description="e.g. ['Q4_K_M', 'Q8_0']; F16 is always produced.")] = ["Q4_K_M"],  # noqa: B006 - pydantic copies defaults
        output: Annotated[str | None, Field(description="local: a directory; hf-jobs: the Hub repo to upload to.")] = None,
        backend: Annotated[Literal["local", "hf-jobs"], Field(description="Where the conversion runs.")] = "local",
        checkpoint: Annotated[str | None, Field(description="With a job id: a committed checkpoint instead of the final model.")] = None,
        pre_tokenizer: Annotated[str | None, Field(description="llama.cpp pre-tokenizer name for a tokenizer it does not recognise, e.g. 'qwen2'.")] = None,
    ) -> Annotated[CallToolResult, ConvertResult]:
        return result(service.convert_gguf(source, quantizations, output=output, backend=backend,
                                           checkpoint=checkpoint, pre_tokenizer=pre_tokenizer))

    @server.tool(
        title="Report on recent attempts",
        description=(
            "Attempts, GPU-hours and cost of attempts that ended in the last `days`, grouped by termination_reason "
            "(default), method, backend, flavor or model. Use it to see what failures cost."
        ),
        annotations=READ_ONLY,
    )
    @agent_errors
    def report(
        days: Annotated[float, Field(gt=0, description="Look back this many days.")] = 7,
        group_by: Annotated[
            Literal["termination_reason", "method", "backend", "flavor", "model"], Field(description="Group rows by this.")
        ] = "termination_reason",
    ) -> Annotated[CallToolResult, ReportResult]:
        return result(service.report(days=days, group_by=group_by))

    _add_references(server)
    return server


def _add_references(server: MCPServer) -> None:
    """Serve each references/*.md page as a resource, so agents can read them on demand."""
    from jobtrail.templates.render import scripts_dir

    root = scripts_dir().parent / "references"
    for page in sorted(root.glob("*.md")):
        _add_page(server, page)


def _add_page(server: MCPServer, page: Path) -> None:
    @server.resource(f"jobtrail://references/{page.stem}", name=page.stem, mime_type="text/markdown")
    def read() -> str:
        return page.read_text()
