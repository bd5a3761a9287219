"""Jobs that work on a model rather than train it: evaluations (of a model, a job's final model or
one of its committed checkpoints; also the base/final pair of submit(eval_dataset=...)) and GGUF
conversions. Each is one queued attempt, planned by the same preflight pass as training.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, cast

from jobtrail.backends.registry import traits_of
from jobtrail.errors import InvalidRequestError
from jobtrail.models import AttemptRecord, BackendName, JobSpec, RunRecord
from jobtrail.outcomes.evals import EvalRecord
from jobtrail.preflight.conversion import KNOWN_SPLIT_REGEXES
from jobtrail.preflight.plan import Conversion, Evaluation, Plan, plan
from jobtrail.requests import DEFAULT_QUANTIZATIONS, ConvertRequest, EvaluateRequest
from jobtrail.results.tasks import ConvertResult, EvaluateResult
from jobtrail.service import chaining, next_steps
from jobtrail.service.context import local_path, new_run, new_run_id, queued_attempt
from jobtrail.service.job_outputs import JobOutput, job_output, refuse_unpushed
from jobtrail.service.use_case import UseCase
from jobtrail.templates.llama_cpp import builds_quantizer, normalize_quantizations


class Tasks(UseCase):
    # --- evaluate ---------------------------------------------------------------------

    def evaluate(self, request: EvaluateRequest) -> EvaluateResult:
        """An evaluation job on the evaluated job's backend; its record is tied to the checkpoint. With `after`
        naming the evaluated job, it waits for that job and evaluates its final model."""
        job_id, model, checkpoint, after = request.job_id, request.model, request.checkpoint, request.after
        if (job_id is None) == (model is None):
            raise InvalidRequestError(
                "Give exactly one of job_id or model.",
                fix="Pass job_id (a job ps lists: its final model) or model (a model directory or Hub id), not both.",
            )
        parent = chaining.parent_of(self.context, after) if after is not None else None
        named = self.context.named_job(model, "model") if model is not None else None
        if named is not None:  # read as a Hub id, it would evaluate a model that does not exist
            raise InvalidRequestError(
                f"model={model!r} is a job id; model takes a local model directory or a Hub id.",
                fix=next_steps.call("evaluate", job_id=named.run_id, dataset=request.dataset)
                + " evaluates the model that job trained.",
            )
        target, backend_name = None, "local"
        output = JobOutput(base=str(model), adapter=None, label="base")
        if job_id is not None:
            target = self.context.run(job_id)
            self.tracker.refresh()
            if parent is not None and parent.run_id == target.run_id and checkpoint is None:
                refuse_unpushed(self.context, target)
                output = JobOutput(target.run_id, None, "final")  # its final model, once it exists (chaining.py)
            else:
                output = job_output(self.context, target, checkpoint)
            backend_name = target.backend
        task = Evaluation(
            output.label,
            output.adapter,
            request.split,
            request.metrics,
            request.max_new_tokens,
            request.temperature,
            output.hub,
        )
        after_id = parent.run_id if parent else None
        return self.start_eval(request.dataset, output.base, task, target, backend_name, after=after_id)

    def start_eval(
        self,
        dataset: str,
        base: str,
        task: Evaluation,
        target: RunRecord | None,
        backend_name: str,
        after: str | None = None,
    ) -> EvaluateResult:
        """Plan and queue the evaluation of `base` (with `task.adapter` on top) on `dataset`; `base` may be the
        job it waits for (`after`), whose final model it then evaluates."""
        run_id = new_run_id()
        if traits_of(backend_name).output == "hub_repo" and target is not None:  # its disk is gone: rows go there
            task = replace(task, outputs_repo=self.context.latest(target.run_id).config.get("hub_model_id"))
        spec = JobSpec(
            method="evaluate",
            model=base if base == after else local_path(base),
            dataset=local_path(dataset),
            backend=cast(BackendName, backend_name),
            flavor=target.flavor if target else None,
            after=after,
        )
        planned = self._plan(spec, run_id, task)
        evaluates = target.run_id if target else base
        if planned.config is None or planned.blocked:
            return EvaluateResult(
                job_id=None,
                status="rejected",
                evaluates=evaluates,
                checkpoint=task.label,
                backend=backend_name,
                findings=planned.findings,
                next_steps=[next_steps.change("apply each Fix above and evaluate again")],
            )
        attempt = self._add_job(
            run_id, spec, planned.config, planned.script, target, reads=target.run_id if target else None
        )
        self.ledger.add_eval(attempt.attempt_id, target.run_id if target else None, task.label)
        self.tracker.dispatch()
        latest = self.context.latest(attempt.run_id)
        return EvaluateResult(
            job_id=attempt.run_id,
            status=latest.status.value,
            evaluates=evaluates,
            checkpoint=task.label,
            backend=backend_name,
            findings=planned.findings,
            after=after,
            waiting_for=chaining.waiting_on_parent(self.context, latest),
            next_steps=next_steps.following(attempt.run_id),
        )

    def evaluate_after_training(self, run_id: str) -> None:
        """submit(eval_dataset=...): the final model is measured on the same data as the base."""
        run = self.ledger.get_run(run_id)
        if run is None or not run.spec.eval_dataset:
            return
        if any(e.checkpoint == "final" for e in self.ledger.evals_of(run_id)):
            return  # another process got here first
        output = job_output(self.context, run, None)
        task = Evaluation(output.label, output.adapter, hub=output.hub)
        self.start_eval(run.spec.eval_dataset, output.base, task, run, run.backend)

    def record_evaluation(self, attempt: AttemptRecord) -> None:
        """An evaluation attempt ended: its record (or its failure) goes into the evals table."""
        record = EvalRecord.from_events(self.ledger.events(attempt.attempt_id, "eval"))
        state = record.state if record and record.state != "started" else "failed"
        self.ledger.finish_eval(attempt.attempt_id, state, record.model_dump(mode="json") if record else None)

    # --- convert to GGUF --------------------------------------------------------------

    def convert_gguf(self, request: ConvertRequest) -> ConvertResult:
        """A conversion job: merge, convert to F16, quantize, verify (scripts/convert_gguf.py). With `after`
        naming the source job, it waits for that job and converts its final model."""
        source, backend, checkpoint, after = request.source, request.backend, request.checkpoint, request.after
        self.context.backend(backend)
        parent = chaining.parent_of(self.context, after) if after is not None else None
        if not request.quantizations:  # [] is a mistake, never "the defaults"
            raise InvalidRequestError(
                "quantizations is empty: there is nothing to quantize to.",
                fix=f"Pass quantizations={list(DEFAULT_QUANTIZATIONS)!r}, or leave it out for those defaults.",
            )
        # llama-quantize's own spelling ("q4_k_m" is Q4_K_M), each once, past the F16 base the job always makes:
        # what the job makes and the result says
        quants = normalize_quantizations(list(request.quantizations))
        target = self.context.named_job(source, "source")
        if target is not None and parent is not None and parent.run_id == target.run_id and checkpoint is None:
            refuse_unpushed(self.context, target)
            resolved, backend = target.run_id, target.backend  # its final model, once it exists (chaining.py)
        elif target is not None:
            self.tracker.refresh()
            pushed = job_output(self.context, target, checkpoint)
            assert pushed.adapter is not None  # a job's output names its weights
            if pushed.hub and pushed.hub.subfolder:
                raise InvalidRequestError(
                    f"{target.run_id} ran on HF Jobs: its {pushed.label} is in a folder of its Hub repo "
                    f"({pushed.adapter}), and a conversion reads a model at a repo's root.",
                    fix=f"Leave checkpoint out to convert its final model ({pushed.adapter}).",
                )
            resolved, backend = pushed.adapter, target.backend
        else:
            resolved = local_path(source)
        spec = JobSpec(
            method="convert_gguf",
            model=resolved,
            dataset="",
            backend=cast(BackendName, backend),
            output=request.output,
            after=parent.run_id if parent else None,
        )
        run_id = new_run_id()
        conversion = Conversion(quants, request.pre_tokenizer)
        planned = self._plan(spec, run_id, conversion)
        named = recognised_pre_tokenizer(planned) if request.pre_tokenizer is None else None
        if named is not None:  # it would stop at the converter without one: the one its split regex names
            conversion = Conversion(quants, named)
            planned = self._plan(spec, run_id, conversion)
        base: dict[str, Any] = dict(
            findings=planned.findings,
            source=resolved,
            quantizations=quants,
            output_repo=planned.push_to,
            after=spec.after,
            pre_tokenizer=conversion.pre_tokenizer,
            applied_pre_tokenizer=named is not None,
        )
        if planned.config is None or planned.blocked or stops(planned):
            # A pre-tokenizer it needs and none recognised: it would stop at the converter, so it is refused now.
            findings = [
                f.model_copy(update={"severity": "error"}) if f.code == PRE_TOKENIZER_NEEDED else f
                for f in planned.findings
            ]
            steps = next_steps.conversion_refused(findings)
            return ConvertResult(job_id=None, status="rejected", next_steps=steps, **{**base, "findings": findings})
        attempt = self._add_job(run_id, spec, planned.config, planned.script, reads=target.run_id if target else None)
        self.tracker.dispatch()
        latest = self.context.latest(attempt.run_id)
        return ConvertResult(
            job_id=attempt.run_id,
            status=latest.status.value,
            output_dir=attempt.output_dir if traits_of(backend).output == "directory" else None,
            waiting_for=chaining.waiting_on_parent(self.context, latest),
            builds_quantizer=builds_quantizer(planned.config, runs_here=traits_of(backend).runs_here),
            next_steps=next_steps.following(attempt.run_id),
            **base,
        )

    def _plan(self, spec: JobSpec, run_id: str, task: Evaluation | Conversion) -> Plan:
        """The preflight plan of an evaluation or a conversion; one whose input is the job it waits for is
        planned on that job's final model, or on a stand-in until it exists (chaining.py)."""
        if chaining.uses_parent_output(spec):
            return chaining.plan_on_parent(self.context, spec, self.context.plan_env(run_id), task)[1]
        return plan(spec, self.context.plan_env(run_id), task)

    def _add_job(
        self,
        run_id: str,
        spec: JobSpec,
        config: dict[str, Any],
        script: str,
        target: RunRecord | None = None,
        reads: str | None = None,
    ) -> AttemptRecord:
        """A tool-started job (evaluation, conversion): one queued attempt with its planned config and script, on
        the host of the job whose model it reads (`reads`), or of its parent."""
        now = time.time()
        flavor = spec.flavor or (target.flavor if target else None)
        output_dir = self.context.output_dir(run_id, config)
        host = self.context.host_for(spec.backend, reads=spec.after or reads)
        attempt = queued_attempt(
            run_id, 1, spec, config, script, output_dir=output_dir, created_at=now, flavor=flavor, host=host
        )
        _, attempt, _ = self.context.add_run(new_run(run_id, spec, now, flavor=flavor), attempt)
        return attempt


# The converter stops on a BPE tokenizer it does not know by its hash unless told which pre-tokenizer it is.
PRE_TOKENIZER_NEEDED = "gguf.pre_tokenizer_needed"


def recognised_pre_tokenizer(planned: Plan) -> str | None:
    """The pre-tokenizer a conversion needs and jobtrail recognises: the family whose split regex its tokenizer
    has (preflight's KNOWN_SPLIT_REGEXES), when preflight found the converter will not know it; else None."""
    facts = planned.facts.conversion
    if facts is None or facts.model is None or not any(f.code == PRE_TOKENIZER_NEEDED for f in planned.findings):
        return None
    tokenizer = facts.model.tokenizer
    if tokenizer is None or not tokenizer.present:
        tokenizer = facts.base.tokenizer if facts.base else None
    return KNOWN_SPLIT_REGEXES.get(tokenizer.split_regex or "") if tokenizer else None


def stops(planned: Plan) -> bool:
    """Whether the conversion would stop at the converter as planned: a pre-tokenizer it needs and none named."""
    return any(f.code == PRE_TOKENIZER_NEEDED for f in planned.findings)
