"""Use-cases behind every tool: preflight → render → ledger → backend, retries, evaluations
and conversions. Keeping the ledger in step with the backends lives in tracking.py.

Every public method first calls `refresh()`, so any tool call (or the server's poller)
advances jobs; state lives in the ledger and the attempt directories, never in this object.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from secrets import choice
from typing import Any

from jobtrail.preflight import conversion as gguf
from jobtrail.outcomes import retry as retry_policy
from jobtrail.service import secrets
from jobtrail.backends.base import Backend
from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.ledger.store import REPORT_GROUPS, Ledger
from jobtrail.models import (
    Finding,
    AttemptRecord,
    JobSpec,
    JobStatus,
    RunRecord,
    TerminationReason,
)
from jobtrail.estimate import (
    EstimateResult,
    Flavor,
    HardwareResult,
    estimate_cost,
    hardware_report,
)
from jobtrail.outcomes.evals import DEFAULT_MAX_NEW_TOKENS, EvalRecord, delta, eval_config
from jobtrail.preflight import rules as checks
from jobtrail.preflight import probes
from jobtrail.preflight.dataset import DatasetReport, validate_dataset
from jobtrail.util.refs import looks_local
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import config_json, render_script, sha256_text
from jobtrail.surface.results import (
    AttemptView,
    CancelResult,
    ConvertResult,
    EvaluateResult,
    InspectResult,
    JobRow,
    LogsResult,
    Progress,
    PsResult,
    ReportResult,
    ReportRow,
    RetryResult,
    SubmitResult,
)
from jobtrail.util.timefmt import parse_duration
from jobtrail.service.tracker import LedgerTracking

log = logging.getLogger("jobtrail.service.facade")
# A remote job's working directory is its own and gone when it ends: results live on the Hub.
REMOTE_OUTPUT_DIR = "jobtrail-output"
MAX_LINE_CHARS = 2000
_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32: no i, l, o, u


class JobService(LedgerTracking):
    def __init__(
        self,
        ledger: Ledger,
        backends: Mapping[str, Backend],
        home: Path,
        job_python: str,
        hub_token: str | None = None,
        cancel_wait_s: float = 20.0,
    ) -> None:
        self.ledger = ledger
        self.backends = backends
        self.home = home
        self.job_python = job_python
        self.hub_token = hub_token
        self.cancel_wait_s = cancel_wait_s
        self._flavors: list[Flavor] | None = None

    # --- submit -----------------------------------------------------------------------

    def submit(
        self, spec: JobSpec, *, dry_run: bool = False, force: bool = False, max_retries: int = 0
    ) -> SubmitResult:
        backend = self._backend(spec.backend)
        secrets.validate(spec.secrets)
        spec = _normalise(spec)
        run_id = _new_run_id()
        plan = self._plan(spec, backend, run_id)
        blocked = bool(checks.blocking(plan.findings))
        base = dict(
            script_sha256=sha256_text(plan.script) if plan.script else "",
            config_sha256=sha256_text(config_json(plan.config)) if plan.config else "",
            backend=spec.backend,
            output_repo=plan.push_to,
        )
        if dry_run:
            return SubmitResult(job_id=None, status="dry_run", script=plan.script, findings=plan.findings, **base)
        if blocked and (not force or plan.config is None):
            return SubmitResult(job_id=None, status="rejected", findings=plan.findings, **base)
        assert plan.config is not None
        if spec.timeout_s is None and plan.estimate is not None:
            # HF's default (30 minutes) kills most training: the estimate + 30% instead.
            spec = spec.model_copy(update={"timeout_s": plan.estimate.recommended_timeout_s})
        if plan.push_to:
            problem = self._create_output_repo(plan.push_to)
            if problem:
                return SubmitResult(job_id=None, status="rejected", findings=[*plan.findings, problem], **base)
        created = time.time()
        run = RunRecord(
            run_id=run_id,
            created_at=created,
            method=spec.method,
            model=spec.model,
            dataset=spec.dataset,
            backend=spec.backend,
            flavor=spec.flavor,
            spec=spec,
            max_retries=max_retries,
        )
        attempt = AttemptRecord(
            attempt_id=f"{run_id}/1",
            run_id=run_id,
            number=1,
            status=JobStatus.QUEUED,
            created_at=created,
            backend=spec.backend,
            flavor=spec.flavor,
            timeout_s=spec.timeout_s,
            config=plan.config,
            config_sha256=base["config_sha256"],
            script=plan.script,
            script_sha256=base["script_sha256"],
            forced=force and blocked,
            findings=plan.findings,
            spec=spec,
        )
        self.ledger.add_run(run, attempt)
        if spec.eval_dataset:  # the base model is measured first (it is queued ahead of training)
            self._start_eval(spec.eval_dataset, base=spec.model, adapter=None, label="base", target=run,
                             backend_name=spec.backend)
        self._dispatch()
        current = self._latest_attempt(attempt.attempt_id)
        status = current.status.value if current.status.value in ("queued", "starting", "running") else "running"
        return SubmitResult(
            job_id=run_id,
            status=status,
            findings=plan.findings,
            forced=attempt.forced,
            workdir=str(self._workdir(attempt)),
            output_dir=plan.config["output_dir"],
            **base,
        )

    def _plan(self, spec: JobSpec, backend: Backend, run_id: str) -> Plan:
        """Facts → config → script → findings, for a submission or a dry run."""
        facts = checks.gather_dataset(checks.gather_model(spec, self.hub_token), spec)
        push_to = None
        if backend.name == "local":
            output_dir = self._output_dir(spec, run_id)
        else:
            facts = checks.gather_identity(facts, self.hub_token)
            facts = checks.gather_estimate(facts, spec, ledger=self.ledger, api=self._hub_api())
            output_dir = REMOTE_OUTPUT_DIR
            owner = facts.identity.name if facts.identity and facts.identity.name else None
            push_to = spec.output or (default_repo(owner, spec) if owner else None)
        config = None
        # A config needs valid names and, for GRPO, a reward file it can read.
        if not checks.check_hyperparameters(spec) and not checks.blocking(checks.check_method_rules(spec, facts)):
            config = build_config(spec, output_dir, checks.max_positions(facts), push_to=push_to)
        script = render_script(spec.method, config) if config else ""
        if script and backend.name == "local":
            facts = checks.gather_requirements(facts, script, self.job_python)
        return Plan(config=config, script=script, findings=checks.run_all(spec, facts), push_to=push_to,
                    estimate=facts.estimate)

    def _create_output_repo(self, repo_id: str) -> Finding | None:
        """Create the push target before the job starts, so the job itself needs only push rights."""
        from huggingface_hub import HfApi

        try:
            HfApi(token=self.hub_token).create_repo(repo_id, private=True, exist_ok=True)
        except Exception as exc:  # noqa: BLE001 - refused as a finding with the fix
            first = str(exc).strip().splitlines()
            return Finding(
                code="output.create_failed",
                severity="error",
                message=f"Could not create the output repo {repo_id}: {type(exc).__name__}: {first[0] if first else ''}"[:400],
                fix="Use a token that can create repos in that namespace, or create the repo yourself and pass output=...",
            )
        return None

    def _output_dir(self, spec: JobSpec, run_id: str) -> str:
        if spec.output:
            return str(Path(spec.output).expanduser().resolve())
        return str(self.home / "runs" / run_id / "output")

    # --- read -------------------------------------------------------------------------

    def ps(self, status: str | None = None, limit: int = 20) -> PsResult:
        self.refresh()
        rows = []
        for run, attempt in self.ledger.list_runs(status, limit):
            metrics = attempt.last_metrics or {}
            rows.append(
                JobRow(
                    job_id=run.run_id,
                    status=attempt.status.value,
                    method=run.method,
                    model=run.model,
                    dataset=run.dataset,
                    backend=run.backend,
                    created_at=run.created_at,
                    termination_reason=_value(attempt.termination_reason),
                    attempts=attempt.number,
                    step=metrics.get("step"),
                    loss=metrics.get("loss"),
                )
            )
        return PsResult(jobs=rows)

    def inspect(self, job_id: str) -> InspectResult:
        run = self._run(job_id)
        self.refresh()
        attempts = self.ledger.attempts(run.run_id)
        latest = attempts[-1]
        views = [self._attempt_view(a) for a in attempts]
        steps = [e for a in attempts for e in self.ledger.events(a.attempt_id, "step")]
        losses = [e["loss"] for e in steps if e.get("loss") is not None]
        progress = Progress(
            step=steps[-1].get("step") if steps else None,
            max_steps=latest.config.get("training_args", {}).get("max_steps"),
            first_loss=losses[0] if losses else None,
            last_loss=losses[-1] if losses else None,
            steps_logged=len(steps),
        )
        return InspectResult(
            job_id=run.run_id,
            status=latest.status.value,
            termination_reason=_value(latest.termination_reason),
            termination_message=latest.termination_message,
            method=run.method,
            model=run.model,
            dataset=run.dataset,
            backend=run.backend,
            created_at=run.created_at,
            hyperparameters=run.spec.hyperparameters,
            progress=progress,
            last_metrics=latest.last_metrics,
            checkpoints=[c for v in views for c in v.checkpoints],
            attempts=views,
            artifacts=[e for a in attempts for e in self.ledger.events(a.attempt_id, "artifact")],
            evaluations=(evaluations := self.ledger.evals_of(run.run_id)),
            eval_delta=_eval_delta(evaluations),
        )

    def _attempt_view(self, a: AttemptRecord) -> AttemptView:
        end = a.ended_at or (time.time() if a.started_at else None)
        return AttemptView(
            attempt_id=a.attempt_id,
            number=a.number,
            status=a.status.value,
            termination_reason=_value(a.termination_reason),
            termination_message=a.termination_message,
            evidence=a.evidence,
            created_at=a.created_at,
            started_at=a.started_at,
            ended_at=a.ended_at,
            duration_s=(end - a.started_at) if (a.started_at and end) else None,
            placement=a.placement,
            config_sha256=a.config_sha256,
            script_sha256=a.script_sha256,
            forced=a.forced,
            findings=a.findings,
            exit_code=a.exit_code,
            signal=a.signal,
            environment=a.environment,
            data_manifest=a.data_manifest,
            resumed_from=a.resumed_from,
            checkpoints=self.ledger.checkpoints(a.attempt_id),
            last_metrics=a.last_metrics,
            summary=a.summary,
            gpu_seconds=a.gpu_seconds,
            cost_usd=a.cost_usd if a.ended_at or a.backend == "local" else self._cost(a, time.time()),
            workdir=str(self._workdir(a)),
            output_dir=a.config.get("output_dir"),
            retry_note=a.retry_note,
        )

    def logs(self, job_id: str, tail: int = 50, cursor: int | None = None) -> LogsResult:
        if tail < 1:
            raise InvalidRequestError("tail must be at least 1.", fix="Pass tail=50 (or any positive number).")
        run = self._run(job_id)
        self.refresh()
        attempt = self.ledger.attempts(run.run_id)[-1]
        if attempt.placement is None:
            return LogsResult(job_id=run.run_id, attempt=attempt.number, lines=[],
                              finished=attempt.status.is_terminal, cursor=0)
        backend = self._backend(attempt.backend)
        lines, end = self._read_lines(backend, attempt.placement, cursor, tail)
        at_end = backend.read_log(attempt.placement, end).lines == []
        redact = self._redactor(attempt)
        cut = [_cut(redact(line)) for line in lines]
        return LogsResult(
            job_id=run.run_id,
            attempt=attempt.number,
            lines=[c for c, _ in cut],
            finished=attempt.status.is_terminal and at_end,
            cursor=end,
            truncated_lines=sum(1 for _, was_cut in cut if was_cut),
        )

    def report(self, days: float = 7, group_by: str = "termination_reason") -> ReportResult:
        if days <= 0:
            raise InvalidRequestError(f"days={days} is not positive.", fix="Pass days=7 (or any positive number).")
        if group_by not in REPORT_GROUPS:
            raise InvalidRequestError(f"Cannot group by {group_by!r}.", fix=f"Use one of: {', '.join(REPORT_GROUPS)}")
        self.refresh()
        rows = [
            ReportRow(
                termination_reason=r["grp"] if group_by == "termination_reason" else None,
                group=r["grp"],
                attempts=r["attempts"],
                gpu_hours=round(r["gpu_hours"], 4),
                cost_usd=round(r["cost_usd"], 4),
            )
            for r in self.ledger.report(time.time() - days * 86400, group_by)
        ]
        return ReportResult(
            days=days,
            group_by=group_by,
            rows=rows,
            total_attempts=sum(r.attempts for r in rows),
            total_gpu_hours=round(sum(r.gpu_hours for r in rows), 4),
            total_cost_usd=round(sum(r.cost_usd for r in rows), 4),
        )

    def hardware(self) -> HardwareResult:
        return hardware_report(api=self._hub_api())

    def estimate_cost(self, model: str, **arguments: Any) -> EstimateResult:
        dataset = arguments.pop("dataset", None)
        return estimate_cost(_local_path(model), dataset=_local_path(dataset) if dataset else None,
                             calibration=self.ledger, api=self._hub_api(), **arguments)

    def validate_dataset(
        self, dataset: str, method: str | None = None, split: str = "train", model: str | None = None,
        max_length: int | None = None,
    ) -> DatasetReport:
        dataset, model = _local_path(dataset), _local_path(model) if model else None
        return validate_dataset(dataset, method, split=split, model=model, max_length=max_length)

    # --- evaluate ---------------------------------------------------------------------

    def evaluate(
        self, dataset: str, *, job_id: str | None = None, model: str | None = None, split: str | None = None,
        checkpoint: str | None = None, metrics: list[str] | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        temperature: float = 0.0,
    ) -> EvaluateResult:
        """An evaluation job on the evaluated job's backend; its record is tied to the checkpoint."""
        if (job_id is None) == (model is None):
            raise InvalidRequestError("Give exactly one of job_id or model.",
                                      fix='evaluate(job_id="jt-...", dataset=...) or evaluate(model="org/name", dataset=...)')
        target, backend_name, base, adapter, label = None, "local", model, None, "base"
        if job_id is not None:
            target = self._run(job_id)
            self.refresh()
            base, adapter, label = self._evaluated_checkpoint(target, checkpoint)
            backend_name = target.backend
        assert base is not None
        return self._start_eval(dataset, base=base, adapter=adapter, label=label, target=target, backend_name=backend_name,
                                split=split, metrics=metrics, max_new_tokens=max_new_tokens, temperature=temperature)

    def _start_eval(
        self, dataset: str, *, base: str, adapter: str | None, label: str, target: RunRecord | None, backend_name: str,
        split: str | None = None, metrics: list[str] | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        temperature: float = 0.0,
    ) -> EvaluateResult:
        run_id = _new_run_id()
        output_dir = str(self.home / "runs" / run_id / "output") if backend_name == "local" else REMOTE_OUTPUT_DIR
        config = eval_config(_local_path(base), _local_path(dataset), output_dir=output_dir, adapter=adapter,
                             checkpoint_label=label, metrics=metrics, max_new_tokens=max_new_tokens,
                             temperature=temperature, split=split)
        script = render_script("evaluate", config)
        spec = JobSpec(method="evaluate", model=config["model"], dataset=config["dataset"]["source"], backend=backend_name,
                       flavor=target.flavor if target else None)
        attempt = self._add_job(run_id, spec, config, script, target)
        self.ledger.add_eval(attempt.attempt_id, target.run_id if target else None, label)
        self._dispatch()
        return EvaluateResult(job_id=run_id, status=self._latest(run_id).status.value,
                              evaluates=target.run_id if target else base, checkpoint=label, backend=backend_name)

    def _evaluated_checkpoint(self, run: RunRecord, checkpoint: str | None) -> tuple[str, str, str]:
        """(base model, adapter dir, label) for a job's final model or one of its committed checkpoints."""
        latest = self._latest(run.run_id)
        if not latest.status.is_terminal and checkpoint is None:
            raise InvalidRequestError(f"{run.run_id} is still {latest.status.value}: its final model does not exist yet.",
                                      fix="Wait for it to succeed, or pass checkpoint= (a committed one, see inspect).")
        if run.backend != "local":
            repo = latest.config.get("hub_model_id")
            return latest.config["model"], repo, checkpoint or "final"
        output = Path(latest.config["output_dir"])
        if checkpoint is None:
            return latest.config["model"], str(output / "final"), "final"
        committed = [c for a in self.ledger.attempts(run.run_id) for c in self.ledger.checkpoints(a.attempt_id)
                     if c.state == "committed"]
        for c in committed:
            if checkpoint in (c.path, Path(c.path).name, str(c.step)):
                return latest.config["model"], c.path, Path(c.path).name
        names = ", ".join(sorted({Path(c.path).name for c in committed})) or "none yet"
        raise NotFoundError(f"{run.run_id} has no committed checkpoint {checkpoint!r}.", fix=f"Use one of: {names}.")

    # --- convert to GGUF ---------------------------------------------------------------

    def convert_gguf(
        self, source: str, quantizations: list[str] | None = None, output: str | None = None, backend: str = "local",
        checkpoint: str | None = None, pre_tokenizer: str | None = None,
    ) -> ConvertResult:
        """A conversion job: merge, convert to F16, quantize, verify (scripts/convert_gguf.py)."""
        self._backend(backend)
        quants = list(quantizations or gguf.DEFAULT_QUANTIZATIONS)
        target = self.ledger.get_run(source.strip())
        if target is not None:
            self.refresh()
            _, resolved, _ = self._evaluated_checkpoint(target, checkpoint)
            backend = target.backend
        else:
            resolved = _local_path(source)
        findings = gguf.check_conversion(gguf.conversion_facts(resolved), quants, pre_tokenizer)
        run_id = _new_run_id()
        if backend == "local":
            output_dir = Path(output).expanduser().resolve() if output else self.home / "runs" / run_id / "output"
            cache = Path(os.environ.get("JOBTRAIL_LLAMA_CPP_CACHE") or self.home / "cache" / "llama.cpp")
            push_to = None
        else:
            if not output or "/" not in output:
                findings.append(Finding(code="output.repo", severity="error",
                                        message="A remote conversion needs a Hub repo to upload the GGUF files to.",
                                        fix="Pass output='<your-user-or-org>/<model>-GGUF'."))
            output_dir, cache, push_to = Path(REMOTE_OUTPUT_DIR), Path("/tmp/jobtrail-llama-cpp"), output
        config = gguf.conversion_config(resolved, output_dir=output_dir, cache_dir=cache / gguf.LLAMA_CPP_PYTHON_VERSION,
                                        quantizations=quants, pre_tokenizer=pre_tokenizer,
                                        push_to_hub=push_to is not None, hub_model_id=push_to)
        script = render_script("convert_gguf", config)
        if backend == "local":
            missing = probes.missing_job_requirements(script, self.job_python)
            if missing:
                findings.append(Finding(code="dependencies.missing", severity="error",
                                        message=f"The job's Python lacks: {', '.join(missing)}.",
                                        fix="pip install 'jobtrail[train,gguf]' into that environment."))
        base = dict(findings=findings, source=resolved, quantizations=quants, output_repo=push_to)
        if checks.blocking(findings):
            return ConvertResult(job_id=None, status="rejected", **base)
        spec = JobSpec(method="convert_gguf", model=resolved, dataset="", backend=backend, output=output)
        self._add_job(run_id, spec, config, script)
        self._dispatch()
        return ConvertResult(job_id=run_id, status=self._latest(run_id).status.value,
                             output_dir=str(output_dir) if backend == "local" else None, **base)

    def _add_job(self, run_id: str, spec: JobSpec, config: dict[str, Any], script: str, target: RunRecord | None = None) -> AttemptRecord:
        """A tool-started job (evaluation, conversion): one queued attempt, no preflight of training's."""
        now = time.time()
        flavor = spec.flavor or (target.flavor if target else None)
        run = RunRecord(run_id=run_id, created_at=now, method=spec.method, model=spec.model, dataset=spec.dataset,
                        backend=spec.backend, flavor=flavor, spec=spec)
        attempt = AttemptRecord(
            attempt_id=f"{run_id}/1", run_id=run_id, number=1, status=JobStatus.QUEUED, created_at=now,
            backend=spec.backend, flavor=flavor, timeout_s=spec.timeout_s, config=config,
            config_sha256=sha256_text(config_json(config)), script=script, script_sha256=sha256_text(script), spec=spec,
        )
        self.ledger.add_run(run, attempt)
        return attempt

    # --- retry --------------------------------------------------------------------------

    def retry(self, job_id: str, changes: dict[str, Any] | None = None) -> RetryResult:
        run = self._run(job_id)
        self.refresh()
        return self._retry(run, changes, automatic=False)

    def _retry(self, run: RunRecord, changes: dict[str, Any] | None, *, automatic: bool) -> RetryResult:
        attempts = self.ledger.attempts(run.run_id)
        latest = attempts[-1]
        spec = latest.spec or run.spec
        history = [self._attempt_facts(a) for a in attempts]
        decision = retry_policy.decide(history, spec.hyperparameters, changes, automatic=automatic)
        if not decision.retry:
            diagnosis = latest.termination_message
            if diagnosis and latest.evidence and latest.evidence != "termination event":
                diagnosis += f" (evidence: {latest.evidence})"
            return RetryResult(job_id=run.run_id, retried=False, attempt=None, status=latest.status.value,
                               message=decision.message, diagnosis=diagnosis, fix=decision.fix)
        new_spec = _apply_changes(spec, decision.changes)
        bad = checks.blocking(checks.check_hyperparameters(new_spec))
        if bad:
            raise InvalidRequestError(bad[0].message, fix=bad[0].fix)
        config = _rebuild_config(latest.config, new_spec) if decision.changes else latest.config
        script = render_script(new_spec.method, config) if decision.changes else latest.script
        now = time.time()
        attempt = AttemptRecord(
            attempt_id=f"{run.run_id}/{latest.number + 1}",
            run_id=run.run_id,
            number=latest.number + 1,
            status=JobStatus.QUEUED,
            created_at=now,
            backend=new_spec.backend,
            flavor=new_spec.flavor,
            timeout_s=new_spec.timeout_s,
            config=config,
            config_sha256=sha256_text(config_json(config)),
            script=script,
            script_sha256=sha256_text(script),
            spec=new_spec,
            not_before=now + decision.delay_s if decision.delay_s else None,
            retry_note=decision.message,
        )
        if not self.ledger.add_attempt(attempt):
            return RetryResult(job_id=run.run_id, retried=False, attempt=None, status=latest.status.value,
                               message="Another retry of this job was started at the same moment.")
        self._dispatch()
        return RetryResult(
            job_id=run.run_id,
            retried=True,
            attempt=attempt.number,
            status=self._latest(run.run_id).status.value,
            message=decision.message,
            changes=decision.changes,
            resume_from=self._last_committed(run.run_id),
            delay_s=decision.delay_s,
        )

    def _attempt_facts(self, a: AttemptRecord) -> retry_policy.AttemptFacts:
        resumes = self.ledger.events(a.attempt_id, "resume")
        return retry_policy.AttemptFacts(
            number=a.number,
            reason=a.termination_reason,
            config_sha256=a.config_sha256,
            last_step=(a.last_metrics or {}).get("step"),
            start_step=resumes[-1].get("step") if resumes else None,
        )

    def _last_committed(self, run_id: str) -> str | None:
        committed = [
            c for a in self.ledger.attempts(run_id) for c in self.ledger.checkpoints(a.attempt_id)
            if c.state == "committed" and c.step is not None and Path(c.path).name.startswith("checkpoint-")
        ]
        return max(committed, key=lambda c: c.step or 0).path if committed else None

    # --- cancel -----------------------------------------------------------------------

    def cancel(self, job_id: str) -> CancelResult:
        run = self._run(job_id)
        self.refresh()
        attempt = self.ledger.attempts(run.run_id)[-1]
        if attempt.status.is_terminal:
            return self._cancel_result(attempt, "It had already ended; nothing to cancel.")
        now = time.time()
        if attempt.status is JobStatus.QUEUED and self.ledger.update_attempt(
            attempt.attempt_id,
            expect_status=[JobStatus.QUEUED.value],
            status=JobStatus.CANCELLED,
            termination_reason=TerminationReason.CANCELLED,
            termination_message="Cancelled while queued; it never started.",
            cancel_requested_at=now,
            ended_at=now,
        ):
            return self._cancel_result(self._latest(run.run_id), "Removed from the queue before it started.")
        self.ledger.update_attempt(attempt.attempt_id, cancel_requested_at=now)
        fresh = self._latest(run.run_id)
        if fresh.placement is not None:
            self._backend(fresh.backend).cancel(fresh.placement)
        deadline = time.monotonic() + self.cancel_wait_s
        while time.monotonic() < deadline:
            self._refresh_attempt(self._latest(run.run_id))
            fresh = self._latest(run.run_id)
            if fresh.status.is_terminal:
                return self._cancel_result(fresh, "Stopped (SIGTERM, then SIGKILL after the grace period).")
            time.sleep(0.2)  # polling the process state; bounded by cancel_wait_s
        return self._cancel_result(fresh, "Cancel sent; it is still shutting down. Check again with inspect.")

    def _cancel_result(self, attempt: AttemptRecord, message: str) -> CancelResult:
        return CancelResult(
            job_id=attempt.run_id,
            status=attempt.status.value,
            termination_reason=_value(attempt.termination_reason),
            message=message,
        )

    # --- when an attempt ends -----------------------------------------------------

    def _attempt_ended(self, attempt: AttemptRecord, reason: TerminationReason) -> None:
        if attempt.config.get("template") == "evaluate":
            record = EvalRecord.from_events(self.ledger.events(attempt.attempt_id, "eval"))
            state = record.state if record and record.state != "started" else "failed"
            self.ledger.finish_eval(attempt.attempt_id, state, record.model_dump(mode="json") if record else None)
        elif reason is TerminationReason.SUCCEEDED:
            self._calibrate(attempt)
            self._evaluate_after_training(attempt.run_id)
        if reason.status is JobStatus.FAILED:
            self._auto_retry(attempt.run_id)

    def _evaluate_after_training(self, run_id: str) -> None:
        """submit(eval_dataset=...): the final model is measured on the same data as the base."""
        run = self.ledger.get_run(run_id)
        if run is None or not run.spec.eval_dataset:
            return
        if any(e["checkpoint"] == "final" for e in self.ledger.evals_of(run_id)):
            return  # another process got here first
        base, adapter, label = self._evaluated_checkpoint(run, None)
        self._start_eval(run.spec.eval_dataset, base=base, adapter=adapter, label=label, target=run,
                         backend_name=run.backend)

    def _auto_retry(self, run_id: str) -> None:
        """submit(max_retries=N): spend from the reason budgets without being asked."""
        run = self.ledger.get_run(run_id)
        if run is None or len(self.ledger.attempts(run_id)) > run.max_retries:
            return
        self._retry(run, None, automatic=True)


@dataclass(frozen=True)
class Plan:
    config: dict[str, Any] | None  # None when the hyperparameter names are wrong
    script: str
    findings: list[Finding]
    push_to: str | None  # the Hub repo a remote job pushes to
    estimate: EstimateResult | None = None


def default_repo(owner: str, spec: JobSpec) -> str:
    """<owner>/<model>-<method>-<date>: a new private repo per day of work, never an existing model's."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.model.rstrip("/").split("/")[-1]).strip("-")[:60] or "model"
    return f"{owner}/{name}-{spec.method}-{time.strftime('%Y%m%d')}"


def _eval_delta(evaluations: list[dict[str, Any]]) -> dict[str, float] | None:
    """final − base on the same task set, when both evaluations finished (lower loss is better)."""
    done = {e["checkpoint"]: e for e in evaluations if e["state"] == "finished" and e["record"]}
    if "base" not in done or "final" not in done or done["base"]["task_set_sha256"] != done["final"]["task_set_sha256"]:
        return None
    return delta(EvalRecord.model_validate(done["base"]["record"]), EvalRecord.model_validate(done["final"]["record"]))


def _apply_changes(spec: JobSpec, changes: dict[str, Any]) -> JobSpec:
    """Retry changes: timeout, flavor and dataset_mapping are job fields; the rest are hyperparameters."""
    update: dict[str, Any] = {}
    hyper = dict(spec.hyperparameters)
    for name, value in changes.items():
        if name == "timeout":
            update["timeout_s"] = parse_duration(value)
        elif name in ("flavor", "dataset_mapping"):
            update[name] = value
        else:
            hyper[name] = value
    return spec.model_copy(update={**update, "hyperparameters": hyper})


def _rebuild_config(previous: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
    """A retry's config: the new spec, with the same output (directory and Hub repo) and capped max_length."""
    config = build_config(spec, previous["output_dir"], push_to=previous.get("hub_model_id"))
    if "max_length" not in spec.hyperparameters and "max_length" in previous["training_args"]:
        config["training_args"]["max_length"] = previous["training_args"]["max_length"]
    return config


def _normalise(spec: JobSpec) -> JobSpec:
    """Local paths become absolute, because the job runs in its own directory."""
    update = {"model": _local_path(spec.model), "dataset": _local_path(spec.dataset)}
    if spec.reward_file:
        update["reward_file"] = str(Path(spec.reward_file).expanduser().resolve())
    if spec.eval_dataset:
        update["eval_dataset"] = _local_path(spec.eval_dataset)
    return spec.model_copy(update=update)


def _local_path(ref: str) -> str:
    ref = ref.strip()
    return str(Path(ref).expanduser().resolve()) if looks_local(ref) else ref


def _new_run_id() -> str:
    return "jt-" + "".join(choice(_ID_ALPHABET) for _ in range(8))


def _cut(line: str) -> tuple[str, bool]:
    if len(line) <= MAX_LINE_CHARS:
        return line, False
    return line[:MAX_LINE_CHARS] + f" …[cut {len(line) - MAX_LINE_CHARS} chars]", True


def _value(reason: TerminationReason | None) -> str | None:
    return reason.value if reason else None
