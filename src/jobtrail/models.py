"""Pure types shared by every layer: no I/O, no heavy imports.

Wire names (tool arguments and result fields) are part of the contract agents rely on;
change them only together with SKILL.md, README.md and references/.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, computed_field, model_serializer

from jobtrail.methods import TrainingMethod

# What a run does: a training method (submit), or an evaluation or conversion started by its own tool.
Method = Literal[TrainingMethod, "evaluate", "convert_gguf"]
BackendName = Literal["local", "hf-jobs"]
# Which library versions a rendered job installs: "tested" (the job lock's, templates/versions.py) or "newest"
# (the template's lower bounds: whatever is newest when the job starts; untested).
DependencyVersions = Literal["tested", "newest"]
DEFAULT_DEPENDENCY_VERSIONS: DependencyVersions = "tested"
Severity = Literal["error", "warning", "info"]
# How a job trains the model's weights: LoRA adapters, LoRA over a 4-bit base, or all of them.
Peft = Literal["lora", "qlora", "none"]
# Where a measured tokens/s came from: a job's steady steps, its whole train_runtime (no steady state to read),
# or a bench's own steady-state figure.
RateSource = Literal["steady", "runtime", "bench"]


class JobStatus(enum.StrEnum):
    """Ordered life of an attempt (and of the run it belongs to); see references/jobs.md 'Status'."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def rank(self) -> int:
        return list(JobStatus).index(self)

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class TerminationReason(enum.StrEnum):
    """Why a terminal attempt ended; far more precise than 'failed' (references/jobs.md)."""

    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    OOM = "oom"
    DIVERGED = "diverged"  # the loss became NaN/inf: the job stopped itself (its nan_loss alert says why)
    BAD_INPUT = "bad_input"
    CONFIG_ERROR = "config_error"
    DEPENDENCY_ERROR = "dependency_error"
    AUTH_ERROR = "auth_error"
    HUB_ERROR = "hub_error"
    EVAL_FAILED = "eval_failed"
    INFRA_TRANSIENT = "infra_transient"
    # The disk filled up (No space left on device): the same disk would fill again, so it is retried (once) only
    # after space is freed or with a bigger disk (outcomes/retry.py).
    DISK_FULL = "disk_full"
    LOST = "lost"
    UNKNOWN = "unknown"
    # A spending cap stopped it (its own max_cost_usd or the daily budget): jobtrail cancelled it, so it
    # reads `cancelled`, and it is never retried automatically (outcomes/budget.py).
    BUDGET = "budget"

    @property
    def status(self) -> JobStatus:
        if self is TerminationReason.SUCCEEDED:
            return JobStatus.SUCCEEDED
        if self in (TerminationReason.CANCELLED, TerminationReason.BUDGET):
            return JobStatus.CANCELLED
        return JobStatus.FAILED


class Finding(BaseModel):
    """One preflight result: a stable code, what is wrong, and the exact fix."""

    code: str = Field(description="Stable identifier, e.g. 'dataset.missing'.")
    severity: Severity
    message: str
    fix: str | None = None


class Launcher(BaseModel):
    """How a training job's processes are started: one `python` process, or `torchrun` (torch's
    elastic launcher, run by the job script itself) with one worker per GPU (gloo workers on a CPU)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["python", "torchrun"] = Field(description='"python": one process; "torchrun": num_processes workers.')
    num_processes: int = Field(description="Worker processes: one per GPU used (or N CPU workers on request).")
    strategy: Literal["single", "ddp", "fsdp"] = Field(
        description='"single": one process; "ddp": every GPU holds the whole model; "fsdp": weights, gradients '
        "and optimizer state sharded across the GPUs (the model does not fit one)."
    )


SINGLE_PROCESS = Launcher(kind="python", num_processes=1, strategy="single")


class JobSpec(BaseModel):
    """What the caller asked for, validated and normalised; the input to render and preflight."""

    model_config = ConfigDict(frozen=True)

    method: Method
    model: str
    dataset: str
    backend: BackendName = "local"
    flavor: str | None = None
    timeout_s: int | None = None
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    dataset_mapping: dict[str, Any] | None = None
    output: str | None = None
    # NAME → "$ENV_VAR" of the server: references only, never values (see secrets.py).
    secrets: dict[str, str] = Field(default_factory=dict)
    # GRPO: a Python file whose function scores completions (checked, then inlined in the script).
    reward_file: str | None = None
    reward_function: str | None = None
    eval_dataset: str | None = None  # evaluated with the base model before and the final model after
    # Train further: a finished job's final model (or one of its committed checkpoints' weights) becomes
    # `model`, with a fresh schedule; the job id stays here for the receipt.
    init_from: str | None = None
    init_checkpoint: str | None = None  # "checkpoint-200" or "200"
    # A pipeline: the job waits (queued) until this job succeeds; `model` naming it means its final model.
    after: str | None = None
    smoke_steps: int | None = None  # a first attempt of this many steps; the full job starts if it succeeds
    dependency_versions: DependencyVersions = DEFAULT_DEPENDENCY_VERSIONS
    # A follower held because the job it follows raised a blocking alert, told to go on anyway (release(job_id)).
    released: bool = False


class Speedup(BaseModel):
    """One of the measures a training job takes for speed, as preflight decided it for the job's device."""

    on: bool = Field(description="Whether the job runs with it (gradient_checkpointing: whether it is on).")
    source: Literal["preflight", "user", "default"] = Field(
        description='"user": the caller\'s hyperparameter decided (it always wins); "preflight": chosen for this '
        'device and estimate; "default": left as TRL, transformers or the job\'s own precision rule have it.'
    )
    why: str
    sets: dict[str, Any] = Field(
        default_factory=dict, description="The training_args values it put into the job's config (preflight only)."
    )


NOT_RECORDED = "not recorded: chosen before jobtrail recorded this measure"


class Speedups(BaseModel):
    """What preflight turned on for speed, and why each measure is off where it is off."""

    device: str = Field(description='What they were chosen for, e.g. "H100 (h200)" or "CPU (local)".')
    padding_free: Speedup = Field(
        description="Padding-free batching (SFT): each micro-batch's rows flattened into one sequence, no padding."
    )
    liger_kernel: Speedup = Field(description="Liger's Triton kernels for RMSNorm, RoPE and SwiGLU (SFT).")
    fused_adamw: Speedup = Field(description='optim="adamw_torch_fused": one fused kernel per optimizer step.')
    bf16: Speedup = Field(description="bf16 autocast (the job turns it on where its GPU supports bf16).")
    gradient_checkpointing: Speedup = Field(description="Recomputing activations in backward: only when needed.")
    micro_batch: Speedup = Field(
        description="per_device_train_batch_size (and gradient_accumulation_steps, keeping the effective batch) "
        "chosen from the estimate to fill the GPU's memory with headroom."
    )
    # Recorded since issue 29; a receipt written before says so.
    dataloader: Speedup = Field(
        default_factory=lambda: Speedup(on=False, source="default", why=NOT_RECORDED),
        description="DataLoader workers collating the next micro-batches while the GPU trains.",
    )
    step_metrics: Speedup = Field(
        default_factory=lambda: Speedup(on=False, source="default", why=NOT_RECORDED),
        description="Skipping TRL's per-step entropy and token accuracy (kept: the step events report them).",
    )
    # Recorded since the H200 profile of issue 29; a receipt written before says so.
    length_buckets: Speedup = Field(
        default_factory=lambda: Speedup(on=False, source="default", why=NOT_RECORDED),
        description="Padded micro-batches padded to a multiple of 64 tokens, so attention meets few distinct lengths.",
    )


class Placement(BaseModel):
    """Where a backend put an attempt; enough to find it again after a server restart."""

    backend: str
    host: str
    pid: int | None = None
    pgid: int | None = None
    workdir: str
    started_at: float
    # Remote backends (HF Jobs): what only the service knows about the attempt.
    remote_id: str | None = None
    namespace: str | None = None
    url: str | None = None
    flavor: str | None = None
    image: str | None = None
    # The server's environment variables the attempt's secrets came from (names, never values): a backend
    # that stores the job's output itself looks their values up to hide them, after a restart too.
    secret_sources: list[str] = Field(default_factory=list)


class LaunchRequest(BaseModel):
    """Everything a backend needs to start one attempt. Secrets travel only in `secrets`."""

    attempt_id: str
    script: str
    workdir: str
    env: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict)
    secret_sources: list[str] = Field(default_factory=list)  # see Placement.secret_sources
    timeout_s: int | None = None
    flavor: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    # Where the job writes when its CONFIG names no directory (a local job's own run directory): the local
    # backend gives it to the job as JOBTRAIL_OUTPUT_DIR, so the script itself never holds the job id.
    output_dir: str | None = None


class ExitRecord(BaseModel):
    """How a backend saw an attempt end (before any log-based classification)."""

    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    cancelled: bool = False
    ended_at: float
    message: str | None = None  # the backend's own words (an HF status message)


class Probe(BaseModel):
    """A backend's answer to 'what is this attempt doing now?'."""

    phase: Literal["starting", "running", "exited", "lost"]
    exit: ExitRecord | None = None
    started_at: float | None = None  # when the backend says the job began running


class LogChunk(BaseModel):
    lines: list[str]
    offset: int = Field(description="Byte offset to pass back to read what follows.")
    end: int | None = Field(default=None, description="The offset where the log ends at this read (None: not known).")


class RunRecord(BaseModel):
    """A run: what somebody planned. Its attempts are what backends did."""

    run_id: str
    created_at: float
    method: str
    model: str
    dataset: str
    backend: str
    flavor: str | None = None
    spec: JobSpec
    max_retries: int = 0
    max_cost_usd: float | None = None  # the job's spending cap over all its attempts (None: no cap)
    idempotency_key: str | None = None  # submit(idempotency_key=...): the same key returns this run


@dataclass(frozen=True)
class CapState:
    """A remote run with a spending cap, as the ledger reads it for report: its latest attempt's status and
    termination_reason, and what its ended attempts cost (a running attempt's share is the tracker's)."""

    run_id: str
    max_cost_usd: float
    status: str
    termination_reason: str | None
    spent_ended: float


@dataclass(frozen=True)
class SpendGroup:
    """One group of report's table as the ledger sums it: the attempts that ended in the window with one value of
    the column grouped on (a termination reason, method, backend, flavor or model; None where the attempts have
    none), their GPU-hours and cost in US dollars."""

    group: str | None
    attempts: int
    gpu_hours: float
    cost_usd: float


@dataclass(frozen=True)
class CalibrationRow:
    """One attempt's (or a bench's) measured throughput and peak memory, as the ledger's calibration table holds it:
    its key (architecture, exact params, method, peft, flavor), the shape it ran at, where its tokens/s came from
    (None: no rate) and whether it recomputed activations (None: not recorded).
    recorded_at is the ledger's, stamped when it stores the row."""

    attempt_id: str
    architecture: str
    params: int
    method: str
    peft: str
    flavor: str
    tokens_per_second: float | None
    peak_memory_bytes: int | None = None
    max_length: int | None = None
    batch: int | None = None
    source: RateSource | None = None
    gradient_checkpointing: bool | None = None
    recorded_at: float | None = None


@dataclass(frozen=True)
class EvalRow:
    """One evaluation as the ledger's evals table holds it: the evaluation job, the checkpoint it measured ("base",
    "final" or the checkpoint's name), its state and metrics, the digests of its task set and evaluator, and the
    job's whole record as it reported it (outcomes/evals.EvalRecord's JSON; None until it ended). inspect shows it
    field for field (evaluations, evaluation)."""

    eval_job_id: str
    checkpoint: str
    state: str
    metrics: dict[str, float]
    task_set_sha256: str | None
    evaluator_sha256: str | None
    record: dict[str, Any] | None


class WebhookDelivery(BaseModel):
    """One notice sent to the job's webhook (JOBTRAIL_WEBHOOK_URL), as the receipt records it (ledger/deliveries.py)."""

    notice: str = Field(description='Which notice: "ended:2" (attempt 2 ended), "alert:2:nan_loss:40", "held:1".')
    event: Literal["ended", "alert", "held"]
    attempt: int = Field(description="The job's attempt the notice is about.")
    sent: bool = Field(description="The endpoint answered 2xx.")
    state: Literal["sending", "sent", "failed"]
    status_code: int | None = Field(description="The endpoint's last HTTP status (None: it never answered).")
    tries: int = Field(description="POSTs made: 1, then one per retry (after a 5xx, a 429, a timeout, no connection).")
    error: str | None = Field(description="Why the last try failed (never the URL, which may hold a secret).")
    at: float = Field(description="When it was last sent or tried (seconds since the epoch).")


class CheckpointRecord(BaseModel):
    path: str
    step: int | None = None
    # withdrawn: committed, then taken back by the job once a blown-up loss showed its weights were destroyed.
    state: Literal["writing", "committed", "superseded", "withdrawn"]
    manifest_sha256: str | None = None
    updated_at: float


class AttemptRecord(BaseModel):
    """One attempt and its receipt, as far as it exists yet."""

    attempt_id: str
    run_id: str
    number: int
    status: JobStatus
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    backend: str
    flavor: str | None = None
    timeout_s: int | None = None
    config: dict[str, Any]
    config_sha256: str
    # The rendered script is stored once by its sha256 (the ledger's blobs); read it with Ledger.script where it
    # is used (a launch, a retry), so listing and inspecting attempts never loads ~120 KB each.
    script_sha256: str
    # Where it writes: its CONFIG's output_dir (chosen, or a remote job's own), else its run's directory.
    output_dir: str
    forced: bool = False
    findings: list[Finding] = Field(default_factory=list)
    # Optional fields alike in shape: each a fact the attempt gains as it runs, None until it has it.
    placement: Placement | None = None
    exit_code: int | None = None
    signal: int | None = None
    termination_reason: TerminationReason | None = None
    termination_message: str | None = None
    evidence: str | None = None
    environment: dict[str, Any] | None = None
    data_manifest: dict[str, Any] | None = None
    resumed_from: str | None = None
    last_metrics: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    log_offset: int = 0
    # A local attempt's host (JOBTRAIL_HOST_ID of the server that submitted its job): only a server there starts,
    # follows and stops it. None for a remote backend, which every server reaches.
    host: str | None = None
    cancel_requested_at: float | None = None
    # When the cancel reached the backend; None while a request waits for the host that can carry it out.
    cancel_sent_at: float | None = None
    # Why jobtrail itself asked the backend to stop it (a spending cap: budget); None when a caller cancelled.
    stop_reason: TerminationReason | None = None
    gpu_seconds: float | None = None
    cost_usd: float | None = None
    spec: JobSpec | None = None  # what this attempt ran: the run's spec plus any retry changes
    not_before: float | None = None  # a retry's backoff: do not start before this time
    retry_note: str | None = None  # why this attempt was started
    smoke_steps: int | None = None  # a smoke run: `spec` for this many steps, pushing nothing (submit(smoke_steps=N))


class NewAttempt(AttemptRecord):
    """An attempt on its way into the ledger, with the script it will run (script_sha256 is its sha256)."""

    script: str


class ToolResult(BaseModel):
    """The base of every tool's result: its stable fields plus `summary`, the markdown a person would read.

    Claude Code and VS Code give the model only the JSON of a result's structured content, never its text, so
    the answer and the next call must be in that JSON. `summary` carries them: a pydantic computed field,
    worked out from the fields whenever the result is dumped (never stale), and dumped first.

    A result model says:
    - `headline()`: the answer, in one to three short lines: the job id and its state with the reason, the
      verdict, the numbers that matter ('**jt-ab12**: failed (oom) at step 40/100.'). A refusal names
      each problem with its fix here, since the fix is the answer.
    - `next_calls()`: what to do next, each an exact call the agent can make with its arguments, then a few
      words on why: 'inspect(job_id="jt-ab12") for its receipt'. Empty when nothing is left to do.
    - `details()`: the lines the text content shows after the summary (tables, the receipt); optional.

    to_markdown() (the text content, and what the CLI prints) is the summary, then the details: one
    source for the headline. Leave `summary` and to_markdown() alone in a subclass.

    The published outputSchema lists `summary` too: the MCP SDK derives a tool's schema in pydantic's
    validation mode, which leaves computed fields out, so surface/server.py publishes the serialization
    schema of the result model instead. Validation ignores `summary` in the input (it is recomputed).
    """

    @computed_field(  # type: ignore[prop-decorator]
        description="What a person would read: the answer (state, reason, numbers), then the next calls to make."
    )
    @property
    def summary(self) -> str:
        calls = self.next_calls()
        lines = [self.headline()]
        if len(calls) == 1:
            lines.append(f"Next: {calls[0]}")
        elif calls:
            lines += ["Next:", *(f"- {call}" for call in calls)]
        return "\n".join(lines)

    def headline(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must say its headline")

    def next_calls(self) -> list[str]:
        return []

    def details(self) -> list[str]:
        return []

    def to_markdown(self) -> str:
        details = self.details()
        return self.summary + ("\n\n" + "\n".join(details) if details else "")

    # No return annotation on purpose: pydantic would take it as the serialization schema (`Any` publishes `{}`),
    # while without one the model's own schema, `summary` included, stays the published one.
    @model_serializer(mode="wrap")
    def _summary_first(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """`summary` leads the JSON: an agent reading the structured content meets the answer first."""
        data = handler(self)
        if isinstance(data, dict) and "summary" in data:
            return {"summary": data.pop("summary"), **data}
        return data
