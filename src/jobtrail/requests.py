"""What each tool asks of the service, declared once below the layers that read it.

A tool with many arguments hands the service one typed record (`SubmitOptions` beside the
`JobSpec`, `EvaluateRequest`, `ConvertRequest`, `EstimateRequest`): the surface builds it once
from the call, and the facade and the use case take it as it is. Every tool default lives here,
on the record or beside it for the tools of a few arguments: the tools' parameters
(surface/params.py), the CLI's flags and the service's own defaults read these, and so do the
layers that act on them (the evaluator, the llama.cpp facts, the ledger's report). Nothing here
imports more than the types it names, so the server can declare its tools from it at start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from jobtrail.methods import TrainingMethod
from jobtrail.models import BackendName, JobSpec, Peft

# --- choices the tools offer ------------------------------------------------------------

# The evaluator's metrics (scripts/evaluate.py's METRIC_NAMES: a test keeps them in step).
EvalMetric = Literal["loss", "perplexity", "exact_match", "pairwise_accuracy"]
EVAL_METRICS: tuple[EvalMetric, ...] = get_args(EvalMetric)
# What report(group_by=...) groups attempts by (the ledger maps each to its column).
ReportGroup = Literal["termination_reason", "method", "backend", "flavor", "model"]
REPORT_GROUPS: tuple[ReportGroup, ...] = get_args(ReportGroup)
DEFAULT_QUANTIZATIONS: tuple[str, ...] = ("Q4_K_M",)  # what convert_gguf makes besides F16 unless told otherwise
# The most max_cost_usd (or JOBTRAIL_MAX_COST_USD) may say: a larger figure is a typo, not a budget.
MAX_COST_USD = 100_000.0

# --- the tools of a few arguments: their defaults --------------------------------------

DEFAULT_BACKEND: BackendName = JobSpec.model_fields["backend"].default
DEFAULT_SPLIT = "train"  # validate_dataset
DEFAULT_LIMIT = 20  # ps
DEFAULT_TAIL = 50  # logs
DEFAULT_WAIT_S: float = 30  # wait
DEFAULT_DAYS: float = 7  # report
DEFAULT_GROUP_BY: ReportGroup = "termination_reason"  # report

# --- the tools of many arguments: their records -----------------------------------------


@dataclass(frozen=True)
class SubmitOptions:
    """How to submit a job; the JobSpec beside it says what the job is."""

    dry_run: bool = False
    force: bool = False
    max_retries: int = 0
    include_script: bool = False
    max_cost_usd: float | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class EvaluateRequest:
    """An evaluation: of a job's final model or one of its checkpoints (job_id), or of a model as it is."""

    dataset: str
    job_id: str | None = None
    model: str | None = None
    split: str | None = None
    checkpoint: str | None = None
    metrics: list[str] | None = None
    max_new_tokens: int = 64
    temperature: float = 0.0  # greedy: the same checkpoint always gets the same score
    after: str | None = None


@dataclass(frozen=True)
class ConvertRequest:
    """A GGUF conversion of a job's model, a local directory or a Hub id."""

    source: str
    quantizations: Sequence[str] = DEFAULT_QUANTIZATIONS
    output: str | None = None
    backend: str = DEFAULT_BACKEND
    checkpoint: str | None = None
    pre_tokenizer: str | None = None
    after: str | None = None


@dataclass(frozen=True)
class EstimateRequest:
    """estimate_cost without a job: the job submit would run with these hyperparameters, by submit's names
    (None: left out, so what submit would use), on a dataset or a data size."""

    model: str
    method: TrainingMethod = "sft"
    peft: Peft | None = None
    dataset: str | None = None
    num_examples: int | None = None
    avg_tokens: float | None = None
    max_length: int | None = None
    per_device_train_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    num_train_epochs: float | None = None
    max_steps: int | None = None
    gradient_checkpointing: bool | None = None
    flavor: str | None = None
    lora_r: int | None = None
    optim: str | None = None
    num_processes: int | None = None

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters asked for, by submit's names; one left out is not there."""
        asked = {
            "peft": self.peft,
            "max_length": self.max_length,
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "num_train_epochs": self.num_train_epochs,
            "max_steps": self.max_steps,
            "gradient_checkpointing": self.gradient_checkpointing,
            "lora_r": self.lora_r,
            "optim": self.optim,
            "num_processes": self.num_processes,
        }
        return {name: value for name, value in asked.items() if value is not None}
