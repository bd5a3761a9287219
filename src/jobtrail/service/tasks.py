"""Jobs that work on a model rather than train it: evaluations (of a model, a job's final model or
one of its committed checkpoints; also the base/final pair of submit(eval_dataset=...)) and GGUF
conversions. Each is one queued attempt, planned by the same preflight pass as training.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, cast

from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.models import AttemptRecord, BackendName, JobSpec, RunRecord
from jobtrail.outcomes.evals import EvalRecord
from jobtrail.preflight.plan import Conversion, Evaluation, PlanEnv, plan
from jobtrail.service.context import ServiceContext, local_path, new_run, new_run_id, queued_attempt
from jobtrail.service.task_results import ConvertResult, EvaluateResult
from jobtrail.service.tracker import Tracker
from jobtrail.templates.llama_cpp import DEFAULT_QUANTIZATIONS


class Tasks:
    def __init__(self, context: ServiceContext, tracker: Tracker) -> None:
        self.context = context
        self.ledger = context.ledger
        self.tracker = tracker

    # --- evaluate ---------------------------------------------------------------------

    def evaluate(
        self,
        dataset: str,
        *,
        job_id: str | None,
        model: str | None,
        split: str | None,
        checkpoint: str | None,
        metrics: list[str] | None,
        max_new_tokens: int,
        temperature: float,
    ) -> EvaluateResult:
        """An evaluation job on the evaluated job's backend; its record is tied to the checkpoint."""
        if (job_id is None) == (model is None):
            raise InvalidRequestError(
                "Give exactly one of job_id or model.",
                fix='evaluate(job_id="jt-...", dataset=...) or evaluate(model="org/name", dataset=...)',
            )
        target, backend_name, base, adapter, label = None, "local", model, None, "base"
        if job_id is not None:
            target = self.context.run(job_id)
            self.tracker.refresh()
            base, adapter, label = self.evaluated_checkpoint(target, checkpoint)
            backend_name = target.backend
        assert base is not None
        task = Evaluation(label, adapter, split, metrics, max_new_tokens, temperature)
        return self.start_eval(dataset, base, task, target, backend_name)

    def start_eval(
        self, dataset: str, base: str, task: Evaluation, target: RunRecord | None, backend_name: str
    ) -> EvaluateResult:
        """Plan and queue the evaluation of `base` (with `task.adapter` on top) on `dataset`."""
        run_id = new_run_id()
        spec = JobSpec(
            method="evaluate",
            model=local_path(base),
            dataset=local_path(dataset),
            backend=cast(BackendName, backend_name),
            flavor=target.flavor if target else None,
        )
        planned = plan(spec, plan_env(self.context, run_id), task)
        evaluates = target.run_id if target else base
        if planned.config is None or planned.blocked:
            return EvaluateResult(
                job_id=None,
                status="rejected",
                evaluates=evaluates,
                checkpoint=task.label,
                backend=backend_name,
                findings=planned.findings,
            )
        attempt = self._add_job(run_id, spec, planned.config, planned.script, target)
        self.ledger.add_eval(attempt.attempt_id, target.run_id if target else None, task.label)
        self.tracker.dispatch()
        return EvaluateResult(
            job_id=run_id,
            status=self.context.latest(run_id).status.value,
            evaluates=evaluates,
            checkpoint=task.label,
            backend=backend_name,
            findings=planned.findings,
        )

    def evaluated_checkpoint(self, run: RunRecord, checkpoint: str | None) -> tuple[str, str | None, str]:
        """(base model, adapter dir or Hub repo, label) for a job's final model or one of its committed checkpoints."""
        latest = self.context.latest(run.run_id)
        if not latest.status.is_terminal and checkpoint is None:
            raise InvalidRequestError(
                f"{run.run_id} is still {latest.status.value}: its final model does not exist yet.",
                fix="Wait for it to succeed, or pass checkpoint= (a committed one, see inspect).",
            )
        if run.backend != "local":
            return latest.config["model"], latest.config.get("hub_model_id"), checkpoint or "final"
        output = Path(latest.config["output_dir"])
        if checkpoint is None:
            return latest.config["model"], str(output / "final"), "final"
        committed = self.ledger.committed_checkpoints(run.run_id)
        for c in committed:
            if checkpoint in (c.path, Path(c.path).name, str(c.step)):
                return latest.config["model"], c.path, Path(c.path).name
        names = ", ".join(sorted({Path(c.path).name for c in committed})) or "none yet"
        raise NotFoundError(f"{run.run_id} has no committed checkpoint {checkpoint!r}.", fix=f"Use one of: {names}.")

    def evaluate_after_training(self, run_id: str) -> None:
        """submit(eval_dataset=...): the final model is measured on the same data as the base."""
        run = self.ledger.get_run(run_id)
        if run is None or not run.spec.eval_dataset:
            return
        if any(e["checkpoint"] == "final" for e in self.ledger.evals_of(run_id)):
            return  # another process got here first
        base, adapter, label = self.evaluated_checkpoint(run, None)
        self.start_eval(run.spec.eval_dataset, base, Evaluation(label, adapter), run, run.backend)

    def record_evaluation(self, attempt: AttemptRecord) -> None:
        """An evaluation attempt ended: its record (or its failure) goes into the evals table."""
        record = EvalRecord.from_events(self.ledger.events(attempt.attempt_id, "eval"))
        state = record.state if record and record.state != "started" else "failed"
        self.ledger.finish_eval(attempt.attempt_id, state, record.model_dump(mode="json") if record else None)

    # --- convert to GGUF --------------------------------------------------------------

    def convert_gguf(
        self,
        source: str,
        quantizations: list[str] | None,
        output: str | None,
        backend: str,
        checkpoint: str | None,
        pre_tokenizer: str | None,
    ) -> ConvertResult:
        """A conversion job: merge, convert to F16, quantize, verify (scripts/convert_gguf.py)."""
        self.context.backend(backend)
        if quantizations is not None and not quantizations:  # [] is a mistake, never "the defaults"
            raise InvalidRequestError(
                "quantizations is empty: there is nothing to quantize to.",
                fix=f"Pass quantizations={list(DEFAULT_QUANTIZATIONS)!r}, or leave it out for those defaults.",
            )
        quants = list(quantizations or DEFAULT_QUANTIZATIONS)
        target = self.ledger.get_run(source.strip())
        if target is not None:
            self.tracker.refresh()
            _, adapter, _ = self.evaluated_checkpoint(target, checkpoint)
            if adapter is None:
                raise NotFoundError(
                    f"{target.run_id} pushed no model to the Hub: there is nothing to convert.",
                    fix="Convert a local model directory or a Hub model id instead.",
                )
            resolved, backend = adapter, target.backend
        else:
            resolved = local_path(source)
        spec = JobSpec(
            method="convert_gguf", model=resolved, dataset="", backend=cast(BackendName, backend), output=output
        )
        run_id = new_run_id()
        planned = plan(spec, plan_env(self.context, run_id), Conversion(quants, pre_tokenizer))
        base: dict[str, Any] = dict(
            findings=planned.findings, source=resolved, quantizations=quants, output_repo=planned.push_to
        )
        if planned.config is None or planned.blocked:
            return ConvertResult(job_id=None, status="rejected", **base)
        self._add_job(run_id, spec, planned.config, planned.script)
        self.tracker.dispatch()
        return ConvertResult(
            job_id=run_id,
            status=self.context.latest(run_id).status.value,
            output_dir=planned.config["output_dir"] if backend == "local" else None,
            **base,
        )

    def _add_job(
        self, run_id: str, spec: JobSpec, config: dict[str, Any], script: str, target: RunRecord | None = None
    ) -> AttemptRecord:
        """A tool-started job (evaluation, conversion): one queued attempt with its planned config and script."""
        now = time.time()
        flavor = spec.flavor or (target.flavor if target else None)
        attempt = queued_attempt(run_id, 1, spec, config, script, created_at=now, flavor=flavor)
        self.ledger.add_run(new_run(run_id, spec, now, flavor=flavor), attempt)
        return attempt


def plan_env(context: ServiceContext, run_id: str) -> PlanEnv:
    """What preflight planning needs from the service for run `run_id`."""
    cache = Path(os.environ.get("JOBTRAIL_LLAMA_CPP_CACHE") or context.home / "cache" / "llama.cpp")
    return PlanEnv(
        job_python=context.job_python,
        output_dir=str(context.local_output_dir(run_id)),
        llama_cpp_cache=cache,
        hub_token=context.hub_token,
        ledger=context.ledger,
        hub_api=context.hub_api,
        run_id=run_id,
        home=context.home,
    )
