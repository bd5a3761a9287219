"""Every tool argument's type, constraints, description and default, declared once.

The MCP tools (their JSON schema) and the CLI (its flags, choices, defaults and help) are both
built from these. Choices and defaults are the records' (requests.py: what each tool asks of the
service), referenced, not copied: methods from the method registry, statuses from the models.
Nothing here imports the service or what it plans with, so the server declares its tools quickly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import AfterValidator, BeforeValidator, Field

from jobtrail.methods import TrainingMethod
from jobtrail.models import BackendName, DependencyVersions, JobSpec, JobStatus, Peft
from jobtrail.requests import (
    DEFAULT_BACKEND as DEFAULT_BACKEND,
    DEFAULT_DAYS as DEFAULT_DAYS,
    DEFAULT_GROUP_BY as DEFAULT_GROUP_BY,
    DEFAULT_LIMIT as DEFAULT_LIMIT,
    DEFAULT_SPLIT as DEFAULT_SPLIT,
    DEFAULT_TAIL as DEFAULT_TAIL,
    DEFAULT_WAIT_S as DEFAULT_WAIT_S,
    EVAL_METRICS,
    MAX_COST_USD,
    REPORT_GROUPS,
    ConvertRequest,
    EstimateRequest,
    EvaluateRequest,
    SubmitOptions,
)


def _one_of(names: Iterable[str]) -> Any:
    """Literal[...] over names another module declares as data (a tuple, a dict's keys, an enum)."""
    return Literal[tuple(names)]


if TYPE_CHECKING:  # a Literal built at run time is opaque to a type checker
    StatusName: TypeAlias = str
    EvalMetric: TypeAlias = str
    GroupName: TypeAlias = str
else:
    StatusName = _one_of(status.value for status in JobStatus)
    EvalMetric = _one_of(EVAL_METRICS)
    GroupName = _one_of(REPORT_GROUPS)

# --- limits ---------------------------------------------------------------------------
# Every argument is bounded here, once: the MCP schemas publish the limits (maxLength, maxItems,
# maxProperties) and the SDK refuses an oversized or NUL-holding value before any tool runs, quoting a
# short excerpt of it, never the whole input. The CLI checks its flags with these same types.
MAX_PATH = 4096  # Linux's PATH_MAX: no longer path can be opened
MAX_NAME = 256  # a job id, a split, a flavor, a metric or quantization name
MAX_ITEMS = 64  # names in a list argument
MAX_KEYS = 256  # entries in an object argument (hyperparameters, a mapping, changes, secrets)
MAX_OBJECT_CHARS = 65_536  # an object argument written as JSON
_NO_NUL = {"pattern": "^[^\\x00]*$"}  # published; the validator says what is wrong in words


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("holds a NUL character (\\x00), which no path, id or name can contain")
    return text


def _small_object(value: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(value, default=str)
    if len(text) > MAX_OBJECT_CHARS:
        raise ValueError(f"is {len(text)} characters as JSON; at most {MAX_OBJECT_CHARS} are accepted")
    if "\\u0000" in text:
        raise ValueError("holds a NUL character (\\x00) in a key or value")
    return value


def _not_bool(value: Any) -> Any:
    """A number's lax parsing reads true as 1: for an amount of money, that is a mistake to name."""
    if isinstance(value, bool):
        raise ValueError("is true/false, not an amount: give US dollars as a number, e.g. 20")
    return value


def _steps_not_bool(value: Any) -> Any:
    """Lax parsing reads true as 1: smoke_steps=true means "yes, a smoke run", which says no number of steps."""
    if isinstance(value, bool):
        raise ValueError("is true/false, not a number of steps: give how many steps the smoke run trains, e.g. 5")
    return value


def _key(text: str) -> str:
    if not text.strip():
        raise ValueError("is blank: a key names one intended job, e.g. a UUID made once for it")
    if any(ord(c) < 32 for c in text):
        raise ValueError("holds a control character; use letters, digits, '-' and the like (a UUID is ideal)")
    return text


def _not_blank(text: str) -> str:
    """ "" would be read as the server's working directory (a path relative to it), which nobody means."""
    if not text.strip():
        raise ValueError("is empty: give a path or Hub id, or leave the argument out where it is optional")
    return text


PathText = Annotated[
    str, Field(max_length=MAX_PATH, json_schema_extra=_NO_NUL), AfterValidator(_no_nul), AfterValidator(_not_blank)
]
NameText = Annotated[str, Field(max_length=MAX_NAME, json_schema_extra=_NO_NUL), AfterValidator(_no_nul)]
KeyText = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME, json_schema_extra=_NO_NUL),
    AfterValidator(_no_nul),
    AfterValidator(_key),
]
JsonObject = Annotated[dict[str, Any], Field(max_length=MAX_KEYS), AfterValidator(_small_object)]
SecretRefs = Annotated[dict[NameText, NameText], Field(max_length=MAX_KEYS)]
# A list the caller gives must name something: [] is refused, never read as "the default".
NameList = Annotated[list[NameText], Field(min_length=1, max_length=MAX_ITEMS)]
MetricList = Annotated[list[EvalMetric], Field(min_length=1, max_length=MAX_ITEMS)]

# --- defaults: the records' ---------------------------------------------------------

DEFAULT_DEPENDENCY_VERSIONS: DependencyVersions = JobSpec.model_fields["dependency_versions"].default
DEFAULT_MAX_RETRIES = SubmitOptions.max_retries
DEFAULT_QUANTIZATIONS = list(ConvertRequest.quantizations)
DEFAULT_MAX_NEW_TOKENS = EvaluateRequest.max_new_tokens
DEFAULT_TEMPERATURE = EvaluateRequest.temperature
DEFAULT_ESTIMATE_METHOD = EstimateRequest.method

# --- what a job trains ----------------------------------------------------------------

Method = Annotated[
    TrainingMethod,
    Field(
        description=(
            "sft: supervised fine-tuning; dpo: preference pairs; grpo: RL with reward functions; "
            "reward: a reward model; "
            "kto: unpaired preferences."
        )
    ),
]
MethodFilter = Annotated[TrainingMethod | None, Field(description="Judge only this method.")]
Model = Annotated[
    PathText, Field(description="Local model directory (with config.json) or Hub id, e.g. 'Qwen/Qwen2.5-0.5B'.")
]
Dataset = Annotated[
    PathText,
    Field(
        description=(
            "Local .jsonl/.json/.csv/.parquet file or Hub dataset id. Formats: messages, text, prompt/completion."
        )
    ),
]
Split = Annotated[NameText, Field(description="Split to read, e.g. 'train'.")]
Hyperparameters = Annotated[
    JsonObject | None,
    Field(
        description=(
            'TRL config names for the method, e.g. {"max_steps": 100, "learning_rate": 2e-4, "lora_r": 16, '
            '"max_length": 1024}; "peft": "none" (full) or "qlora"; GRPO: "reward_funcs": ["exact_match", "format", '
            '"numeric_match", "length"], "num_generations". trackio (on by default): "report_to": "none" turns it '
            'off, "project" names its project (default: the model\'s name), "trackio_space_id" its Space on HF Jobs. '
            '"num_processes": worker processes (default one per GPU; N on a CPU runs N gloo workers).'
        )
    ),
]
DatasetMapping = Annotated[
    JsonObject | None,
    Field(
        description=(
            "Turns another data shape into a TRL format; validate_dataset proposes it, e.g. "
            '{"kind": "rename", "columns": {"question": "prompt", "answer": "completion"}}.'
        )
    ),
]
EvalDataset = Annotated[
    PathText | None,
    Field(
        description=(
            "Held-out data: the base model (queued behind training) and the final model are evaluated on it; "
            "inspect shows the delta."
        )
    ),
]
RewardFile = Annotated[
    PathText | None, Field(description="GRPO: a Python file defining the reward function (checked, then inlined).")
]
RewardFunction = Annotated[
    NameText | None,
    Field(description="GRPO: the function's name in reward_file, taking (prompts, completions, **kwargs)."),
]
InitFrom = Annotated[
    NameText | None,
    Field(
        description="Train further: a finished job's id; the new run starts from its final model (a LoRA adapter: "
        "base + adapter) with a fresh schedule. `model` stays that job's model."
    ),
]
InitCheckpoint = Annotated[
    PathText | None,
    Field(
        description="With init_from: start from this committed checkpoint's weights instead (checkpoint-200 or 200)."
    ),
]

# --- pipelines, resent calls, smoke runs ----------------------------------------------

IdempotencyKey = Annotated[
    KeyText | None,
    Field(
        description="A key you make once per intended job (a UUID) and send again if you resend this call: when a "
        "submit timed out or its answer was lost, the same call with the same key returns the job the first one "
        "started (already_submitted=true) instead of starting and paying for a second. The same key with other "
        "arguments is refused, naming them. A dry run ignores it; a rejected submit does not use it."
    ),
]
After = Annotated[
    NameText | None,
    Field(
        description="Start only once this job succeeds: it waits queued until then, and is cancelled, never "
        "trained, if that job ends any other way. model='<that job id>' trains on its final model (model naming a "
        "job implies after), e.g. DPO after SFT."
    ),
]
SmokeSteps = Annotated[
    int | None,
    BeforeValidator(_steps_not_bool),
    Field(
        ge=1,
        le=100_000,
        description="Run this many steps first (same backend and flavor, nothing pushed) and start the full job only "
        "if they succeed, so a broken config costs minutes, not hours. Fewer than max_steps. One receipt, two "
        "attempts; the full job starts from step 0, not from the smoke run's checkpoints.",
    ),
]
EvaluateAfter = Annotated[
    NameText | None,
    Field(
        description="Start only once this job succeeds (cancelled if it ends any other way); with job_id= the same "
        "job, evaluate its final model once it exists."
    ),
]
ConvertAfter = Annotated[
    NameText | None,
    Field(
        description="Start only once this job succeeds (cancelled if it ends any other way); with source= the same "
        "job id, convert its final model once it exists."
    ),
]

# --- where and how it runs ------------------------------------------------------------

LibraryVersions = Annotated[
    DependencyVersions,
    Field(
        description='"tested" (default): the job installs the exact library versions jobtrail tested (TRL, '
        'transformers, PEFT, torch, ...: its script\'s header pins them). "newest": the newest releases when the '
        "job starts, which nobody tested (preflight warns). A local job runs in the server's Python (or "
        "JOBTRAIL_PYTHON) either way; preflight warns where that Python's versions are not the tested ones."
    ),
]

Backend = Annotated[
    BackendName,
    Field(
        description=(
            "'local' runs on this machine (no account needed); 'hf-jobs' runs on Hugging Face Jobs (needs HF_TOKEN; "
            "model, dataset and output are Hub repos)."
        )
    ),
]
Flavor = Annotated[NameText | None, Field(description="HF Jobs hardware, e.g. 'a10g-large' (see the hardware tool).")]
Timeout = Annotated[NameText | int | None, Field(description="Stop the job after this long: '45m', '2h', or seconds.")]
Output = Annotated[
    PathText | None,
    Field(
        description=(
            "Where the trained model goes: a directory for 'local', a Hub repo id for 'hf-jobs' "
            "(default <user>/<model>-<method>-<date>)."
        )
    ),
]
Secrets = Annotated[
    SecretRefs | None,
    Field(
        description=(
            "Secrets for the job as references to the server's environment, e.g. "
            '{"WANDB_API_KEY": "$WANDB_API_KEY"}; values are never accepted, stored or shown.'
        )
    ),
]
DryRun = Annotated[
    bool, Field(description="Only run preflight and render the script; submit nothing. Returns the script's path.")
]
IncludeScript = Annotated[
    bool, Field(description="With dry_run: return the rendered script's text too (it is long; default: path only).")
]
Force = Annotated[bool, Field(description="Submit despite blocking findings (recorded in the receipt).")]
MaxRetries = Annotated[
    int,
    Field(ge=0, le=10, description=("Retry automatically up to this many times, within each failure reason's budget.")),
]

MaxCostUsd = Annotated[
    float | None,
    BeforeValidator(_not_bool),
    Field(
        gt=0,
        le=MAX_COST_USD,
        allow_inf_nan=False,
        description=(
            "Spend at most this many US dollars of HF Jobs time on this job, every attempt together: preflight "
            "refuses it when the estimate (once per attempt max_retries allows) is above, and a running job that "
            "reaches it is cancelled with termination_reason 'budget'. Default: the server's JOBTRAIL_MAX_COST_USD "
            "(none if unset). Local jobs cost nothing."
        ),
    ),
]

# --- following jobs -------------------------------------------------------------------

JobId = Annotated[NameText, Field(description="Job id returned by submit or listed by ps, e.g. 'jt-4f9k2m7q'.")]
Status = Annotated[StatusName | None, Field(description="Only jobs in this status.")]
Limit = Annotated[int, Field(ge=1, le=500, description="At most this many jobs.")]
Tail = Annotated[int, Field(ge=1, le=5000, description="How many lines to return.")]
Cursor = Annotated[int | None, Field(ge=0, description="Cursor from a previous logs call: read on from there.")]
Attempt = Annotated[
    int | None, Field(ge=1, description="Which attempt's log to read: 1 is the first (default: the latest).")
]
Changes = Annotated[
    JsonObject | None,
    Field(
        description=(
            "Hyperparameters (and timeout, flavor, dataset_mapping, max_cost_usd) to change, e.g. "
            '{"per_device_train_batch_size": 2, "gradient_accumulation_steps": 8}.'
        )
    ),
]
WaitTimeout = Annotated[
    float,
    Field(
        ge=0,
        description="Return after this many seconds if the job has not ended (0: at once). At most 55: a larger "
        "value waits 55 s and says so in `note` (clients cut tool calls near 60 s).",
    ),
]
MetricNames = Annotated[
    NameList | None,
    Field(description='Only these metrics, e.g. ["loss", "grad_norm"] (default: every one the run logged).'),
]
SinceStep = Annotated[
    int | None, Field(ge=0, description="Only points after this step: pass last_step from the previous call.")
]
MetricsAttempt = Annotated[
    int | None, Field(ge=1, description="Only this attempt's points (default: the whole run, attempts joined).")
]
PlotMetrics = Annotated[
    NameList | None,
    Field(
        description='One panel per metric (loss with eval_loss), e.g. ["loss", "grad_norm"]. Default: train and '
        "eval loss, grad norm, learning rate, throughput; rewards for GRPO."
    ),
]
Days = Annotated[float, Field(gt=0, le=36500, description="Look back this many days.")]
GroupBy = Annotated[GroupName, Field(description="Group rows by this.")]

# --- checking data, estimating --------------------------------------------------------

TokenizerModel = Annotated[
    PathText | None, Field(description="Local model directory: measure token lengths with its tokenizer.")
]
LengthLimit = Annotated[int | None, Field(ge=1, description="Count rows longer than this many tokens.")]
# estimate_cost's hyperparameters are submit's, by the same names; one left out is what submit would use.
_SUBMITS = " (default: what submit uses for the method)"
PeftKind = Annotated[Peft | None, Field(description="'qlora' = 4-bit base; 'none' = full fine-tuning" + _SUBMITS)]
StatsDataset = Annotated[PathText | None, Field(description="Local .jsonl file to take rows and lengths from.")]
NumExamples = Annotated[int | None, Field(ge=1, description="Rows, when no dataset is given.")]
AvgTokens = Annotated[float | None, Field(gt=0, description="Mean tokens per row, when no dataset is given.")]
MaxLength = Annotated[int | None, Field(ge=1, description="Longest sequence in tokens (TRL max_length)" + _SUBMITS)]
BatchSize = Annotated[int | None, Field(ge=1, description="Rows per device per forward pass" + _SUBMITS)]
GradientAccumulation = Annotated[int | None, Field(ge=1, description="Forward passes per optimizer step" + _SUBMITS)]
Epochs = Annotated[float | None, Field(gt=0, description="Passes over the dataset" + _SUBMITS)]
MaxSteps = Annotated[
    int | None, Field(ge=1, description="Optimizer steps; fixes the rows trained on, so no data size is needed.")
]
GradientCheckpointing = Annotated[
    bool | None, Field(description="Recompute activations in backward to save memory" + _SUBMITS)
]
EstimateFlavor = Annotated[NameText | None, Field(description="Describe this flavor (default: the recommended one).")]
LoraRank = Annotated[int | None, Field(ge=1, description="LoRA rank r" + _SUBMITS)]
NumProcesses = Annotated[
    int | None, Field(ge=1, description="Worker processes, at most one per GPU (default: one per GPU)")
]
Optimizer = Annotated[
    NameText | None, Field(description="TRL `optim` (adamw_torch, adamw_8bit, lion_32bit, sgd ...)" + _SUBMITS)
]

# --- evaluating and converting --------------------------------------------------------

HeldOutDataset = Annotated[PathText, Field(description="Held-out data: a local file or Hub dataset id.")]
EvaluatedJob = Annotated[NameText | None, Field(description="Evaluate this job's final model (or checkpoint=...).")]
EvaluatedModel = Annotated[PathText | None, Field(description="Or evaluate this model (local dir or Hub id) as it is.")]
EvalSplit = Annotated[NameText | None, Field(description="Split of a Hub dataset (default 'test').")]
EvalCheckpoint = Annotated[
    PathText | None, Field(description="A committed checkpoint of the job: name (checkpoint-40), step or path.")
]
Metrics = Annotated[MetricList | None, Field(description="Default: chosen from the data's format.")]
MaxNewTokens = Annotated[int, Field(ge=1, le=4096, description="Longest generated answer, in tokens.")]
Temperature = Annotated[float, Field(ge=0.0, le=2.0, description="0 = greedy (reproducible).")]
ConvertSource = Annotated[
    PathText, Field(description="A jobtrail job id, a local model/adapter directory, or a Hub id.")
]
Quantizations = Annotated[NameList, Field(description='e.g. ["Q4_K_M", "Q8_0"]; F16 is always produced.')]
ConvertOutput = Annotated[PathText | None, Field(description="local: a directory; hf-jobs: the Hub repo to upload to.")]
ConvertBackend = Annotated[BackendName, Field(description="Where the conversion runs.")]
ConvertCheckpoint = Annotated[
    PathText | None, Field(description="With a job id: a committed checkpoint instead of the final model.")
]
PreTokenizer = Annotated[
    NameText | None,
    Field(description=("llama.cpp pre-tokenizer name for a tokenizer it does not recognise, e.g. 'qwen2'.")),
]
