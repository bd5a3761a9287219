"""How many rows a training job trains on and how many steps that makes, and what follows from it. Pure.

    run_length(values, rows, processes) -> RunLength     the rows it trains on, its steps per epoch and in all
    fit_logging(values, length) -> (values, findings)     jobtrail's default logging_steps fitted to a short run
    check_run_length(spec, facts) -> findings             a rule: the held-out slice, a tiny dataset, logging
    smoke_too_long(smoke_steps, length) -> str | None     why a smoke run would be the whole job

The steps are counted as transformers' Trainer counts them: the rows a worker gets, in micro-batches of
per_device_train_batch_size, an optimizer step every gradient_accumulation_steps of them (rounded up, at
least one), times num_train_epochs (rounded up); max_steps, when set, is the count. eval_split_ratio holds
out ceil(ratio x rows) rows first, as `datasets`' train_test_split does in the job.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from jobtrail.methods.effective import Effective
from jobtrail.methods.registry import method_spec
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight.facts import Facts
from jobtrail.results.dataset import count

# Fewer rows than this teach a model next to nothing: worth saying, though a smoke test may mean it.
FEW_ROWS = 10
# Loss points a short run logs once jobtrail fits logging_steps to it (or the fix proposes): about this many.
LOGGED_POINTS = 10


@dataclass(frozen=True)
class RunLength:
    rows: int | None  # the data's rows (None: unknown, e.g. a Hub dataset read from one of its files)
    train_rows: int | None  # those it trains on: the rows less the held-out slice
    held_out: int  # rows eval_split_ratio holds out
    steps_per_epoch: int | None  # None where the rows or the batch arithmetic are unknown
    steps: int | None  # optimizer steps in all: max_steps when set, else from the epochs
    counted: str  # how `steps` was counted, in words

    @property
    def logging_steps_for(self) -> int:
        """The logging_steps that logs this run's loss about LOGGED_POINTS times."""
        return max(1, (self.steps or 0) // LOGGED_POINTS)


def run_length(values: Effective, rows: int | None, processes: int) -> RunLength:
    """The rows and steps of a job with `values` on `rows` rows, run by `processes` workers."""
    args = values.training_args
    max_steps, ratio = _whole(args.get("max_steps")), values.job["eval_split_ratio"]
    # A ratio the rules refuse (out of (0, 0.5)) is theirs to report; the job would not split with it anyway.
    split = isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0 < ratio < 1
    held_out = math.ceil(ratio * rows) if split and rows else 0
    train_rows = None if rows is None else rows - held_out
    per_epoch = _steps_per_epoch(values, train_rows, processes)
    epochs = args.get("num_train_epochs")
    if max_steps:
        return RunLength(rows, train_rows, held_out, per_epoch, max_steps, f"max_steps={max_steps}")
    if per_epoch is None or not _positive(epochs):
        return RunLength(rows, train_rows, held_out, per_epoch, None, "unknown")
    batch = _whole(args.get("per_device_train_batch_size")) * _whole(args.get("gradient_accumulation_steps"))
    trained = count(train_rows or 0, "row") + (f" ({held_out} held out)" if held_out else "")
    workers = f" on each of {processes} workers" if processes > 1 else ""
    counted = (
        f"{trained} / {batch} a step{workers} = {count(per_epoch, 'step')} an epoch, x num_train_epochs={epochs:g}"
    )
    return RunLength(rows, train_rows, held_out, per_epoch, math.ceil(epochs * per_epoch), counted)


def _steps_per_epoch(values: Effective, train_rows: int | None, processes: int) -> int | None:
    args = values.training_args
    batch, accumulation = (
        _whole(args.get("per_device_train_batch_size")),
        _whole(args.get("gradient_accumulation_steps")),
    )
    if not train_rows or not batch or not accumulation:
        return None
    # A generating method's batch counts completions, which its own sampler groups by prompt, and packing joins rows
    # into sequences of max_length: neither is a count of rows, so their steps are not counted here.
    if method_spec(values.method).flops.completion_tokens or args.get("packing"):
        return None
    per_worker = math.ceil(train_rows / max(1, processes))
    micro = per_worker // batch if args.get("dataloader_drop_last") else math.ceil(per_worker / batch)
    return max(math.ceil(micro / accumulation), 1)


def fit_logging(values: Effective, length: RunLength) -> tuple[Effective, list[Finding]]:
    """A run shorter than jobtrail's default logging_steps would log no loss at all (the demo's own 64 rows with the
    defaults train 8 steps; the default logs every 10): the default is lowered to fit, with an info finding.
    A logging_steps the caller gave is theirs, and is only warned about (check_run_length): jobtrail chooses its
    own defaults to suit the job and says so, but never overrides what it was asked for."""
    every = values.training_args.get("logging_steps")
    if "logging_steps" in values.given or not _short(values, length, every):
        return values, []
    assert length.steps is not None
    fitted = length.logging_steps_for
    finding = Finding(
        code="config.logging_steps",
        severity="info",
        message=f"The job trains {count(length.steps, 'step')} ({length.counted}), fewer than the default "
        f"logging_steps={every}: it logs its loss every {count(fitted, 'step')} instead, so metrics, plot and "
        "trackio show a loss curve.",
    )
    return replace(values, training_args={**values.training_args, "logging_steps": fitted}), [finding]


def check_run_length(spec: JobSpec, facts: Facts) -> list[Finding]:
    """The rows and steps against what the job asks of them: a held-out slice that leaves nothing to train on, a
    dataset too small to learn from, a logging_steps the run never reaches."""
    report = facts.dataset
    rows = report.rows if report is not None else None
    values = facts.job_values
    length = run_length(values, rows, facts.launcher.num_processes)
    findings: list[Finding] = []
    if length.train_rows == 0 and length.held_out:
        # ceil(ratio x rows) holds out at least one row whenever there is a ratio, so only a training side can be
        # empty: one row, which no ratio splits.
        findings.append(
            Finding(
                code="dataset.nothing_to_train",
                severity="error",
                message=f"eval_split_ratio={values.job['eval_split_ratio']} holds out {length.held_out} of the data's "
                f"{count(rows or 0, 'row')} (the held-out slice rounds up): no row is left to train on, and the job "
                "would fail splitting it.",
                fix='Pass hyperparameters={"eval_split_ratio": null} (no held-out slice; eval_dataset=... evaluates '
                "on a file of held-out rows), or add rows: any ratio splits two rows or more.",
            )
        )
    elif rows is not None and 0 < rows < FEW_ROWS:
        findings.append(
            Finding(
                code="dataset.few_rows",
                severity="warning",
                message=f"The data has {count(rows, 'row')}: enough to test that the job runs, too few for the model "
                "to learn anything from.",
                fix="For a real fine-tune, add rows (hundreds at least); for a test of the job itself, go on.",
            )
        )
    every = values.training_args.get("logging_steps")
    if "logging_steps" in values.given and _short(values, length, every):
        assert length.steps is not None
        findings.append(
            Finding(
                code="config.no_step_logged",
                severity="warning",
                message=f"The job trains {count(length.steps, 'step')} ({length.counted}), fewer than "
                f"logging_steps={every}: it logs no training step, so metrics, plot and trackio will show no loss "
                "curve (its final metrics still hold train_loss).",
                fix=f"Pass hyperparameters={json.dumps({'logging_steps': length.logging_steps_for})} to log it.",
            )
        )
    return findings


def smoke_too_long(smoke_steps: int, length: RunLength) -> str | None:
    """Why a smoke run of `smoke_steps` would be no smoke run: as long as the whole job, or longer (a smoke run runs
    its steps whatever the epochs, so on a short dataset it would train more than the job). None when it is shorter."""
    if length.steps is None or smoke_steps < length.steps:
        return None
    return f"smoke_steps={smoke_steps} is not fewer than the job's {count(length.steps, 'step')} ({length.counted})"


def _short(values: Effective, length: RunLength, every: Any) -> bool:
    """Whether the run ends before its first logged step: logging by steps, every `every` (below 1: a fraction of
    the run, which always logs), more steps apart than the run has."""
    by_steps = values.runs_with("logging_strategy") in (None, "steps")
    return by_steps and length.steps is not None and _positive(every) and every >= 1 and length.steps < every


def _whole(value: Any) -> int:
    """A count as the job reads it; 0 for one the rules refuse (they say why)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _positive(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
