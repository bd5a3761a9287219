"""Jobs that work on a model rather than train it: evaluations (of a model, a job's final model or
one of its committed checkpoints; also the base/final pair of submit(eval_dataset=...)) and GGUF
conversions. Each is one queued attempt without training's preflight.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, cast

from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.models import AttemptRecord, BackendName, Finding, JobSpec, RunRecord
from jobtrail.outcomes.evals import DEFAULT_MAX_NEW_TOKENS, EvalRecord, eval_config
from jobtrail.preflight import conversion as gguf
from jobtrail.preflight import probes
from jobtrail.preflight import rules as checks
from jobtrail.preflight.llama_cpp import LLAMA_CPP_PYTHON_VERSION
from jobtrail.service.context import REMOTE_OUTPUT_DIR, ServiceContext, local_path, new_run, new_run_id, queued_attempt
from jobtrail.service.tracker import Tracker
from jobtrail.surface.results import ConvertResult, EvaluateResult
from jobtrail.templates.configs import conversion_config
from jobtrail.templates.render import render_script

# Where a remote conversion job builds llama.cpp: its machine is fresh, so no cache survives it.
_REMOTE_LLAMA_CPP_CACHE = Path("/tmp/jobtrail-llama-cpp")


class Tasks:
    def __init__(self, context: ServiceContext, tracker: Tracker) -> None:
        self.context = context
        self.ledger = context.ledger
        self.tracker = tracker

    # --- evaluate ---------------------------------------------------------------------

    def evaluate(
        self, dataset: str, *, job_id: str | None = None, model: str | None = None, split: str | None = None,
        checkpoint: str | None = None, metrics: list[str] | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.0,
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
        return self.start_eval(dataset, base=base, adapter=adapter, label=label, target=target,
                               backend_name=backend_name, split=split, metrics=metrics,
                               max_new_tokens=max_new_tokens, temperature=temperature)

    def start_eval(
        self, dataset: str, *, base: str, adapter: str | None, label: str, target: RunRecord | None,
        backend_name: str, split: str | None = None, metrics: list[str] | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.0,
    ) -> EvaluateResult:
        run_id = new_run_id()
        output_dir = str(self.context.local_output_dir(run_id)) if backend_name == "local" else REMOTE_OUTPUT_DIR
        config = eval_config(local_path(base), local_path(dataset), output_dir=output_dir, adapter=adapter,
                             checkpoint_label=label, metrics=metrics, max_new_tokens=max_new_tokens,
                             temperature=temperature, split=split)
        script = render_script("evaluate", config)
        spec = JobSpec(method="evaluate", model=config["model"], dataset=config["dataset"]["source"],
                       backend=cast(BackendName, backend_name), flavor=target.flavor if target else None)
        attempt = self._add_job(run_id, spec, config, script, target)
        self.ledger.add_eval(attempt.attempt_id, target.run_id if target else None, label)
        self.tracker.dispatch()
        return EvaluateResult(job_id=run_id, status=self.context.latest(run_id).status.value,
                              evaluates=target.run_id if target else base, checkpoint=label, backend=backend_name)

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
        self.start_eval(run.spec.eval_dataset, base=base, adapter=adapter, label=label, target=run,
                        backend_name=run.backend)

    def record_evaluation(self, attempt: AttemptRecord) -> None:
        """An evaluation attempt ended: its record (or its failure) goes into the evals table."""
        record = EvalRecord.from_events(self.ledger.events(attempt.attempt_id, "eval"))
        state = record.state if record and record.state != "started" else "failed"
        self.ledger.finish_eval(attempt.attempt_id, state, record.model_dump(mode="json") if record else None)

    # --- convert to GGUF --------------------------------------------------------------

    def convert_gguf(
        self, source: str, quantizations: list[str] | None = None, output: str | None = None,
        backend: str = "local", checkpoint: str | None = None, pre_tokenizer: str | None = None,
    ) -> ConvertResult:
        """A conversion job: merge, convert to F16, quantize, verify (scripts/convert_gguf.py)."""
        self.context.backend(backend)
        quants = list(quantizations or gguf.DEFAULT_QUANTIZATIONS)
        target = self.ledger.get_run(source.strip())
        if target is not None:
            self.tracker.refresh()
            _, adapter, _ = self.evaluated_checkpoint(target, checkpoint)
            if adapter is None:
                raise NotFoundError(f"{target.run_id} pushed no model to the Hub: there is nothing to convert.",
                                    fix="Convert a local model directory or a Hub model id instead.")
            resolved, backend = adapter, target.backend
        else:
            resolved = local_path(source)
        findings = gguf.check_conversion(gguf.conversion_facts(resolved), quants, pre_tokenizer)
        run_id = new_run_id()
        push_to: str | None = None
        if backend == "local":
            output_dir = Path(output).expanduser().resolve() if output else self.context.local_output_dir(run_id)
            cache = Path(os.environ.get("JOBTRAIL_LLAMA_CPP_CACHE") or self.context.home / "cache" / "llama.cpp")
        else:
            if not output or "/" not in output:
                findings.append(Finding(code="output.repo", severity="error",
                                        message="A remote conversion needs a Hub repo to upload the GGUF files to.",
                                        fix="Pass output='<your-user-or-org>/<model>-GGUF'."))
            output_dir, cache, push_to = Path(REMOTE_OUTPUT_DIR), _REMOTE_LLAMA_CPP_CACHE, output
        config = conversion_config(resolved, output_dir=output_dir,
                                   cache_dir=cache / LLAMA_CPP_PYTHON_VERSION, quantizations=quants,
                                   pre_tokenizer=pre_tokenizer, push_to_hub=push_to is not None,
                                   hub_model_id=push_to)
        script = render_script("convert_gguf", config)
        if backend == "local":
            missing = probes.missing_job_requirements(script, self.context.job_python)
            if missing:
                findings.append(Finding(code="dependencies.missing", severity="error",
                                        message=f"The job's Python lacks: {', '.join(missing)}.",
                                        fix="pip install 'jobtrail[train,gguf]' into that environment."))
        base: dict[str, Any] = dict(findings=findings, source=resolved, quantizations=quants, output_repo=push_to)
        if checks.blocking(findings):
            return ConvertResult(job_id=None, status="rejected", **base)
        spec = JobSpec(method="convert_gguf", model=resolved, dataset="", backend=cast(BackendName, backend),
                       output=output)
        self._add_job(run_id, spec, config, script)
        self.tracker.dispatch()
        return ConvertResult(job_id=run_id, status=self.context.latest(run_id).status.value,
                             output_dir=str(output_dir) if backend == "local" else None, **base)

    def _add_job(
        self, run_id: str, spec: JobSpec, config: dict[str, Any], script: str, target: RunRecord | None = None
    ) -> AttemptRecord:
        """A tool-started job (evaluation, conversion): one queued attempt, no preflight of training's."""
        now = time.time()
        flavor = spec.flavor or (target.flavor if target else None)
        attempt = queued_attempt(run_id, 1, spec, config, script, created_at=now, flavor=flavor)
        self.ledger.add_run(new_run(run_id, spec, now, flavor=flavor), attempt)
        return attempt
