"""Evaluations, server side: the evaluate job's config, and its record rebuilt from events.

Pure: no I/O. scripts/evaluate.py runs the evaluation and prints `eval` events (state started,
then finished or failed); `EvalRecord.from_events` turns an attempt's events into the record an
evals ledger row and the evaluate/inspect tools show, and `delta` compares two records (the
base model before training and the final checkpoint after it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any, Literal

from pydantic import BaseModel, Field

from jobtrail.errors import InvalidRequestError
from jobtrail.requests import EVAL_METRICS, EvaluateRequest

EVAL_TEMPLATE = "evaluate"
EVAL_TEMPLATE_VERSION = 1
DEFAULT_SEED = 42


class Evaluator(BaseModel):
    """Which evaluator ran: its identity, the rendered script (its sha256 covers the config) and its packages."""

    template: str
    template_version: int
    sha256: str | None = Field(
        default=None,
        description="The evaluator's identity: its code without the per-job CONFIG, and its packages; the same "
        "for the base and final evaluations of one submit (None in records from before it existed).",
    )
    script_sha256: str
    packages: dict[str, str | None] = Field(default_factory=dict)


class TaskSet(BaseModel):
    """Which data was evaluated: the dataset pinned by revision (Hub) or file sha256, and rows."""

    dataset: str
    revision_or_sha256: str | None = Field(default=None, description="A Hub dataset's commit, or a file's sha256.")
    split: str | None = None
    rows: int = Field(description="Rows evaluated.")
    rows_available: int | None = Field(default=None, description="Rows the split holds (evaluation may stop sooner).")
    format: str | None = None
    mapping: dict[str, Any] | None = None


class Decoding(BaseModel):
    """How outputs were generated; the job overrides the model's own settings with these."""

    max_new_tokens: int
    temperature: float
    do_sample: bool
    seed: int
    num_beams: int = 1
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0


class EvaluatedCheckpoint(BaseModel):
    """The weights evaluated; manifest_sha256 and step tie them to a committed checkpoint."""

    label: str
    model: str
    adapter: str | None = Field(
        default=None, description="The adapter (or whole model) directory, or the Hub repo a remote job pushed to."
    )
    revision: str | None = Field(
        default=None, description="The Hub commit the weights were read at (a remote job's pushed model)."
    )
    subfolder: str | None = Field(
        default=None, description="Their folder in that repo: last-checkpoint (a checkpoint), None (the final model)."
    )
    manifest_sha256: str | None = None
    step: int | None = None


class EvalRecord(BaseModel):
    """One evaluation as its job reported it.

    state "started" on an attempt that has ended means the job died without a word (killed,
    lost): the attempt's termination reason says why.
    """

    state: Literal["started", "finished", "failed"]
    evaluator: Evaluator | None = None
    task_set: TaskSet | None = None
    decoding: Decoding | None = None
    checkpoint: EvaluatedCheckpoint | None = None
    scorer: Literal["log_likelihood", "reward_head"] | None = Field(
        default=None, description="What scores a response: the LM's log-likelihood or a reward head."
    )
    metric_names: list[str] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)
    raw_outputs: str | None = Field(
        default=None,
        description="The jsonl file, one line per row: its path, or for a remote evaluation its URL in the evaluated "
        "Hub repo (None when it could not be uploaded there: an alert says why).",
    )
    raw_outputs_sha256: str | None = None
    sampled_failures: list[dict[str, Any]] = Field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None
    failure: str | None = Field(default=None, description="The evaluator's error, when state is failed.")
    failure_cause: str | None = Field(
        default=None, description="What the error would be outside an evaluation (bad_input, oom ...)."
    )

    @classmethod
    def from_events(cls, events: list[dict[str, Any]]) -> EvalRecord | None:
        """The evaluation the `eval` events describe (the last one, if several); None without any."""
        fields: dict[str, Any] | None = None
        for event in events:
            if event.get("event") != "eval":
                continue
            payload = {k: v for k, v in event.items() if k not in ("event", "time", "state")}
            state = event.get("state")
            if state == "started":
                fields = {**payload, "state": "started", "started_at": event.get("time")}
            elif state in ("finished", "failed"):
                fields = {**(fields or {}), **_ending(state, payload), "finished_at": event.get("time")}
        return None if fields is None else cls.model_validate(fields)


def _ending(state: str, payload: dict[str, Any]) -> dict[str, Any]:
    if state == "finished":
        return {**payload, "state": "finished"}
    return {"state": "failed", "failure": payload.get("message"), "failure_cause": payload.get("cause")}


def delta(before: EvalRecord, after: EvalRecord) -> dict[str, float]:
    """after − before for each metric both records have (e.g. base model → trained checkpoint)."""
    return {name: after.metrics[name] - before.metrics[name] for name in after.metrics if name in before.metrics}


@dataclass(frozen=True)
class HubWeights:
    """Where in its Hub repo (the Evaluation's adapter) remote job `job_id` left its model: the final model at the
    root (subfolder None) or its pushed checkpoint folder, read at `revision` (None: the head when read)."""

    job_id: str
    revision: str | None = None
    subfolder: str | None = None


@dataclass(frozen=True)
class Evaluation:
    """What an evaluation measures, beyond the model (the base) and the data: evaluate's options, carried
    from the tool to the job's CONFIG as one value (and read back from it, service/chaining.py's task_of).

    metrics None lets the job choose by the data's format; split None means the job's default
    ("test"; a data file is always its own single split).
    """

    label: str  # "base", "final" or the checkpoint's name
    adapter: str | None = None  # a local adapter directory or a Hub repo, on top of the base
    split: str | None = None
    metrics: list[str] | None = None
    max_new_tokens: int = EvaluateRequest.max_new_tokens
    temperature: float = EvaluateRequest.temperature
    hub: HubWeights | None = None  # the adapter is a remote job's Hub repo: where in it, at which commit
    outputs_repo: str | None = None  # a remote evaluation's: the evaluated job's Hub repo, where its raw outputs go


def eval_config(
    model: str,
    dataset: str,
    task: Evaluation,
    *,
    output_dir: str | None,
    remote: bool = False,
    mapping: dict[str, Any] | None = None,
    max_rows: int | None = None,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """The CONFIG of scripts/evaluate.py; InvalidRequestError (with the fix) for what cannot run.
    output_dir None: where its backend says at launch; `remote`: it is in the remote job's own working
    directory (its machine is its own), so it may be relative."""
    _check_request(task.metrics, task.max_new_tokens, task.temperature, max_rows)
    if output_dir is not None and not remote and not PurePath(output_dir).is_absolute():
        # A local job may run in another directory: a relative path would land elsewhere.
        raise InvalidRequestError(f"output_dir {output_dir!r} is relative.", fix="Give an absolute directory.")
    return {
        "template": EVAL_TEMPLATE,
        "template_version": EVAL_TEMPLATE_VERSION,
        "model": model,
        "adapter": task.adapter,
        "adapter_hub": asdict(task.hub) if task.hub else None,
        "outputs_repo": task.outputs_repo,
        "checkpoint_label": task.label,
        "dataset": {"source": dataset, "split": task.split, "mapping": mapping},
        "metrics": list(task.metrics) if task.metrics else None,
        "max_new_tokens": task.max_new_tokens,
        "temperature": task.temperature,
        "max_rows": max_rows,
        "output_dir": output_dir,
        "seed": seed,
    }


def _check_request(metrics: list[str] | None, max_new_tokens: int, temperature: float, max_rows: int | None) -> None:
    unknown = [name for name in metrics or [] if name not in EVAL_METRICS]
    if unknown:
        raise InvalidRequestError(
            f"Unknown metric(s) {unknown}.", fix=f"Use any of {list(EVAL_METRICS)}, or none to choose by the data."
        )
    if max_new_tokens < 1:
        raise InvalidRequestError(f"max_new_tokens is {max_new_tokens}.", fix="Use max_new_tokens >= 1.")
    if temperature < 0:
        raise InvalidRequestError(f"temperature is {temperature}.", fix="Use 0 (greedy) or more (sampling).")
    if max_rows is not None and max_rows < 1:
        raise InvalidRequestError(f"max_rows is {max_rows}.", fix="Use max_rows >= 1, or none for every row.")
