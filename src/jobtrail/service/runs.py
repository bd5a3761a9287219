"""Training runs: submit (preflight → config → script → ledger → backend), retry (asked for, or
automatic within submit's max_retries) and cancel.

A submission, and a retry with changes, are planned by preflight.plan (facts, rules, config,
script, in one pass); this module decides what to do with the plan.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from jobtrail.backends.registry import traits_of
from jobtrail.errors import InvalidRequestError
from jobtrail.models import AttemptRecord, Finding, JobSpec, JobStatus, RunRecord, Speedups, TerminationReason
from jobtrail.outcomes import budget, exits
from jobtrail.outcomes.retry import Decision
from jobtrail.preflight import hyperparams, plan as preflight, rules as checks
from jobtrail.preflight.facts import BudgetFacts
from jobtrail.requests import SubmitOptions
from jobtrail.results.attempt_note import resume_point
from jobtrail.results.endings import NextStep
from jobtrail.results.jobs import CancelResult, RetryResult
from jobtrail.results.release import ReleaseResult
from jobtrail.results.submit import PlanSummary, SubmitResult
from jobtrail.service import chaining, idempotency, next_steps, request_steps, retry_state, secrets
from jobtrail.service.context import ServiceContext, local_path, new_run, new_run_id, queued_attempt
from jobtrail.service.tasks import Tasks
from jobtrail.service.tracker import Tracker
from jobtrail.service.use_case import UseCase
from jobtrail.templates.llama_cpp import canonical_quantization
from jobtrail.util.digest import config_json, sha256_text
from jobtrail.util.files import private_dir, write_private
from jobtrail.util.timefmt import parse_duration

# What a retry of a conversion may change: its own arguments, as convert_gguf takes them.
CONVERSION_CHANGES = ("quantizations", "pre_tokenizer")
# What submit reports for the attempt it queued; one that ended at once (a launch refused, the daily
# budget spent) says so, and its termination_message why.
_SUBMITTED_STATUS: dict[JobStatus, Literal["queued", "starting", "failed", "cancelled"]] = {
    JobStatus.QUEUED: "queued",
    JobStatus.STARTING: "starting",
    JobStatus.FAILED: "failed",
    JobStatus.CANCELLED: "cancelled",
}


class Runs(UseCase):
    def __init__(self, context: ServiceContext, tracker: Tracker, tasks: Tasks, cancel_wait_s: float = 20.0) -> None:
        super().__init__(context, tracker)
        self.tasks = tasks  # submit(eval_dataset=...) queues the base model's evaluation
        self.cancel_wait_s = cancel_wait_s

    # --- submit -----------------------------------------------------------------------

    def submit(self, spec: JobSpec, options: SubmitOptions) -> SubmitResult:
        self.context.backend(spec.backend)
        secrets.resolve(secrets.validate(spec.secrets))  # a missing or too short secret is refused now
        cap = self.context.caps.default_max_cost_usd
        if options.max_cost_usd is not None:
            cap = budget.parse_cap(options.max_cost_usd, "max_cost_usd")
        spec = _normalise(chaining.follow(self.context, spec))
        max_retries, force = options.max_retries, options.force
        request = idempotency.request_of(spec, max_retries=max_retries, force=force, max_cost_usd=cap)
        key = None if options.dry_run else options.idempotency_key  # a dry run never uses a key
        if key is not None and (held := self.ledger.run_by_idempotency_key(key)):
            return self._replayed(idempotency.replay(self.context, key, *held, request))
        asked = next_steps.submit_arguments(spec, options)  # the submission as the agent sent it, paths resolved
        run_id = new_run_id()
        spec, plan = self._plan(spec, run_id, cap, max_retries, cap_given=options.max_cost_usd is not None)
        summary = _planned(spec, plan, cap)
        if options.dry_run:  # the plan's verdict, as a submit would act on it
            script_path = self._keep_dry_run(plan.script, summary.script_sha256)
            script = plan.script if options.include_script else None
            return SubmitResult(
                job_id=None,
                status="dry_run",
                findings=plan.findings,
                forced=plan.forced(force),
                script=script,
                script_path=script_path,
                next_steps=_verdict_steps(plan, asked, force),
                **summary.result_fields(),
            )
        if not plan.accepts(force):
            steps = _verdict_steps(plan, asked, force)
            return SubmitResult(
                job_id=None, status="rejected", findings=plan.findings, next_steps=steps, **summary.result_fields()
            )
        spec = spec.model_copy(update={"timeout_s": plan.timeout_s})
        run = new_run(
            run_id,
            spec,
            time.time(),
            flavor=spec.flavor,
            max_retries=max_retries,
            max_cost_usd=cap,
            idempotency_key=key,
        )
        return self._start(run, plan, force, request, summary)

    def _plan(
        self, spec: JobSpec, run_id: str, cap: float | None, max_retries: int, *, cap_given: bool
    ) -> tuple[JobSpec, preflight.Plan]:
        """The spec the job runs with and its plan, judged against the caps: a job whose model names the job it
        follows is planned on that job's final model (or a stand-in for now)."""
        env = replace(self.context.plan_env(run_id), budget=self._budget(cap, max_retries, cap_given))
        if chaining.uses_parent_output(spec):
            _, plan = chaining.plan_on_parent(self.context, spec, env, None)
            return spec, plan
        spec = self._start_from(spec)
        return spec, preflight.plan(spec, env)

    def _start(
        self, run: RunRecord, plan: preflight.Plan, force: bool, request: dict[str, Any], summary: PlanSummary
    ) -> SubmitResult:
        """Queue the accepted plan's first attempt (its smoke run, when it has one: the full job follows it,
        followers.py), the base model's evaluation when there is eval data, and dispatch."""
        spec, key = run.spec, run.idempotency_key
        config, script = plan.first_run
        attempt = queued_attempt(
            run.run_id,
            1,
            spec,
            config,
            script,
            output_dir=self.context.output_dir(run.run_id, config),
            created_at=run.created_at,
            forced=plan.forced(force),
            findings=plan.findings,
            smoke_steps=spec.smoke_steps,
            host=self.context.host_for(spec.backend, reads=spec.after or spec.init_from),
        )
        run, attempt, taken_by = self.context.add_run(run, attempt, request)
        if taken_by is not None:
            # Another process created a job with this key since the look-up above: that job is the one.
            held = self.ledger.run_by_idempotency_key(key) if key is not None else None
            assert key is not None and held is not None
            return self._replayed(idempotency.replay(self.context, key, *held, request))
        if spec.eval_dataset:  # the base model is measured too: an evaluation queued behind the training attempt
            after = spec.after if chaining.uses_parent_output(spec) else None  # the base is the parent's output
            evaluation = preflight.Evaluation("base")
            self.tasks.start_eval(spec.eval_dataset, spec.model, evaluation, run, spec.backend, after=after)
        self.tracker.dispatch()
        current = self.context.attempt(attempt.attempt_id)
        ended = current.status.is_terminal  # a launch refused, the daily budget spent
        steps = self._now(run.run_id, "submit") if ended else next_steps.following(run.run_id)
        return SubmitResult(
            job_id=run.run_id,
            status=_SUBMITTED_STATUS.get(current.status, "running"),
            next_steps=steps,
            termination_message=current.termination_message,
            findings=plan.findings,
            forced=attempt.forced,
            workdir=str(self.context.workdir(attempt)),
            output_dir=attempt.output_dir,
            idempotency_key=key,
            waiting_for=chaining.waiting_on_parent(self.context, current),
            **summary.result_fields(),
        )

    def _replayed(self, result: SubmitResult) -> SubmitResult:
        """The earlier job an idempotency_key returns, with the steps its state calls for now."""
        assert result.job_id is not None
        steps = self._now(result.job_id, "submit")
        return result.model_copy(update={"next_steps": steps})

    def _now(self, job_id: str, reporter: next_steps.Reporter) -> list[NextStep]:
        run = self.context.run(job_id)
        return next_steps.now(self.context, run, self.ledger.attempts(run.run_id), reporter)

    def _budget(self, cap: float | None, max_retries: int, cap_given: bool) -> BudgetFacts:
        """The caps a submission is judged against, with what every job spent in the last 24 hours."""
        daily = self.context.caps.daily_budget_usd
        return BudgetFacts(
            max_cost_usd=cap,
            attempts=budget.worst_case_attempts(max_retries),
            daily_budget_usd=daily,
            spent_24h_usd=self.tracker.spending.last_24h() if daily is not None else 0.0,
            cap_given=cap_given,
        )

    def _start_from(self, spec: JobSpec) -> JobSpec:
        """submit(init_from=job_id): that job's final model, or a committed checkpoint's weights (not its
        optimizer state), becomes the model; the new run has its own fresh schedule."""
        if spec.init_from is None:
            if spec.init_checkpoint is not None:
                raise InvalidRequestError(
                    "init_checkpoint names a checkpoint of init_from.", fix="Pass init_from=<job_id>."
                )
            return spec
        source = self.context.run(spec.init_from)
        if spec.model != source.spec.model:
            raise InvalidRequestError(
                f"Job {source.run_id} trained {source.spec.model}, not {spec.model}.",
                fix=f"Pass model={source.spec.model!r} with init_from={source.run_id!r}.",
            )
        if spec.init_checkpoint is None:
            latest = self.context.latest(source.run_id)
            if latest.termination_reason is not TerminationReason.SUCCEEDED:
                raise InvalidRequestError(
                    f"Job {source.run_id} has no final model ({latest.status.value}).",
                    fix="Wait for it to succeed, or pass init_checkpoint=<one of its committed checkpoints>.",
                )
            path = Path(latest.output_dir) / "final"
        else:
            committed = {Path(c.path).name: Path(c.path) for c in self.ledger.committed_checkpoints(source.run_id)}
            wanted = str(spec.init_checkpoint)
            name = wanted if wanted.startswith("checkpoint-") else f"checkpoint-{wanted}"
            if name not in committed or not committed[name].is_dir():
                kept = sorted(n for n, c in committed.items() if n.startswith("checkpoint-") and c.is_dir())
                raise InvalidRequestError(
                    f"Job {source.run_id} has no committed {name} on this machine.",
                    fix=f"Pass init_checkpoint as one of {kept}." if kept else "Start from its final model instead.",
                )
            path = committed[name]
        if not path.is_dir():
            raise InvalidRequestError(
                f"Job {source.run_id}'s model is not on this machine ({path}).",
                fix="Pass the Hub repo it pushed to as model= instead.",
            )
        return spec.model_copy(update={"model": str(path)})

    def _keep_dry_run(self, script: str, sha256: str) -> str | None:
        """A dry run's script goes to a file named by its sha256, so the agent can read it without the tokens."""
        if not script:
            return None
        folder = private_dir(self.context.home / "dry-runs")
        return str(write_private(folder / f"{sha256}.py", script))

    # --- retry ------------------------------------------------------------------------

    def retry(self, job_id: str, changes: dict[str, Any] | None = None) -> RetryResult:
        run = self.context.run(job_id)
        if run.method == "convert_gguf" and changes:  # a conversion's own arguments, not hyperparameters
            self.tracker.refresh()
            return self._reconvert(run, changes)
        if changes:
            changes = hyperparams.changes_by_field(run.spec.method, changes)  # lr is learning_rate, as for submit
        if changes and "max_cost_usd" in changes:
            changes = {**changes, "max_cost_usd": budget.parse_cap(changes["max_cost_usd"], "max_cost_usd")}
        self.tracker.refresh()
        return self._retry(run, changes, automatic=False)

    def auto_retry(self, run_id: str) -> None:
        """submit(max_retries=N): spend from the reason budgets without being asked."""
        run = self.ledger.get_run(run_id)
        if run is None or retry_state.counted(self.ledger.attempts(run_id)) > run.max_retries:
            return
        self._retry(run, None, automatic=True)

    def _retry(self, run: RunRecord, changes: dict[str, Any] | None, *, automatic: bool) -> RetryResult:
        attempts = self.ledger.attempts(run.run_id)
        latest = attempts[-1]
        spec = latest.spec or run.spec
        parent = next_steps.ended_parent(self.context, run) if latest.status.is_terminal else None
        if parent is not None:  # queued again, it would be cancelled at once: its parent has nothing for it
            parent_run, parent_attempts = parent
            message = (
                f"Not retried: it waits for {parent_run.run_id}, which ended "
                f"{next_steps.state(parent_attempts[-1])} and is not being retried: a new attempt would be cancelled "
                f"before it starts. Retry {parent_run.run_id} first (next_steps says how); then this job."
            )
            return self._refused(run, attempts, message, None)
        decision = retry_state.decide(self.ledger, run, attempts, spec, changes, automatic=automatic)
        if not decision.retry:
            return self._refused(run, attempts, decision.message, decision.fix, decision)
        job_changes = {k: v for k, v in decision.changes.items() if k != "max_cost_usd"}  # the cap is the run's
        new_spec = _apply_changes(spec, job_changes)
        rerun = _Rerun(latest.config, self.ledger.script(latest.script_sha256))
        if job_changes:  # a changed config goes through the same preflight as a submission
            replanned = self._replan(latest, new_spec, automatic=automatic)
            if isinstance(replanned, RetryResult):
                return replanned
            rerun = replanned
        if "max_cost_usd" in decision.changes:
            self.ledger.set_max_cost(run.run_id, decision.changes["max_cost_usd"])
        return self._queue(run, latest, new_spec, rerun, decision.message, decision.changes, decision.delay_s)

    def _queue(
        self,
        run: RunRecord,
        latest: AttemptRecord,
        spec: JobSpec,
        rerun: _Rerun,
        message: str,
        changes: dict[str, Any],
        delay_s: float = 0.0,
    ) -> RetryResult:
        """Queue the run's next attempt, running `rerun`, and dispatch."""
        now = time.time()
        attempt = queued_attempt(
            run.run_id,
            latest.number + 1,
            spec,
            rerun.config,
            rerun.script,
            output_dir=self.context.output_dir(run.run_id, rerun.config),
            created_at=now,
            forced=rerun.forced,
            findings=rerun.findings,
            not_before=now + delay_s if delay_s else None,
            retry_note=message,
            smoke_steps=latest.smoke_steps,  # a failed smoke run is run again; the full job follows it
            # Where its checkpoints are, and whose: retried through any server, it resumes on its host (a remote
            # job in its namespace, billed there).
            host=latest.host,
        )
        if not self.ledger.add_attempt(attempt):
            return _not_retried(latest, "Another retry of this job was started at the same moment.", steps=[])
        self.tracker.dispatch()
        return RetryResult(
            job_id=run.run_id,
            retried=True,
            attempt=attempt.number,
            status=self.context.latest(run.run_id).status.value,
            message=message,
            diagnosis=None,
            changes=changes,
            resume_from=self._last_committed(run.run_id),
            delay_s=delay_s,
            next_steps=next_steps.following(run.run_id),
        )

    def _refused(
        self,
        run: RunRecord,
        attempts: list[AttemptRecord],
        message: str,
        fix: str | None,
        decision: Decision | None = None,
    ) -> RetryResult:
        """A retry that does not run, with the one call that would (next_steps.retry_refused)."""
        latest = attempts[-1]
        steps = next_steps.retry_refused(self.context, run, attempts, decision)
        return _not_retried(latest, message, diagnosis=_diagnosis(latest), fix=fix, steps=steps)

    def _reconvert(self, run: RunRecord, changes: dict[str, Any]) -> RetryResult:
        """retry of a conversion with changes to its own arguments (quantizations, pre_tokenizer): the conversion
        planned again with them, as convert_gguf plans one; preflight judges it, whatever ended the last attempt
        (a conversion stopped by a missing pre-tokenizer is fixed by naming one)."""
        attempts = self.ledger.attempts(run.run_id)
        latest = attempts[-1]
        unknown = sorted(set(changes) - set(CONVERSION_CHANGES))
        if unknown:
            raise InvalidRequestError(
                f"A conversion's retry changes its own arguments ({', '.join(CONVERSION_CHANGES)}), not "
                f"{', '.join(unknown)}.",
                fix=f"Pass changes with {' or '.join(CONVERSION_CHANGES)} only, e.g. changes="
                '{"pre_tokenizer": "qwen2"}.',
            )
        task = chaining.task_of(latest)
        if not latest.status.is_terminal or latest.status is JobStatus.SUCCEEDED or task is None:
            decision = retry_state.retry_decision(self.ledger, run, attempts) if latest.status.is_terminal else None
            message = decision.message if decision else "The latest attempt has not ended yet."
            return self._refused(run, attempts, message, decision.fix if decision else None, decision)
        assert isinstance(task, preflight.Conversion)
        asked = changes.get("quantizations", task.quantizations)
        quants = list(dict.fromkeys(canonical_quantization(q) or q for q in asked if q != "F16"))
        conversion = preflight.Conversion(quants, changes.get("pre_tokenizer", task.pre_tokenizer))
        spec = latest.spec or run.spec
        plan = preflight.plan(spec, self.context.plan_env(run.run_id), conversion)
        if plan.config is None or not plan.accepts():
            bad = checks.blocking(plan.findings)
            raise InvalidRequestError(
                bad[0].message if bad else "The conversion could not be planned.", fix=bad[0].fix if bad else None
            )
        config, script = plan.first_run
        rerun = _Rerun(config, script, plan.findings)
        message = f"Converting again with changes to {', '.join(changes)}."
        return self._queue(run, latest, spec, rerun, message, changes)

    def _replan(self, latest: AttemptRecord, spec: JobSpec, *, automatic: bool) -> _Rerun | RetryResult:
        """A retry with changes, planned as a submission is; a forced run stays forced. A smoke run is run again as
        the smoke run of the job's plan (its own config is not the job's), any other attempt as the job itself.
        Refused by preflight: raised when asked for, the refusal when automatic."""
        previous = None if latest.smoke_steps else latest.config  # the attempt a retry keeps the output of
        planned = spec.model_copy(update={"smoke_steps": latest.smoke_steps})
        plan = preflight.plan(planned, self.context.plan_env(latest.run_id), previous=previous)
        if not plan.accepts(force=latest.forced):
            bad = checks.blocking(plan.findings)
            if not automatic:
                raise InvalidRequestError(bad[0].message, fix=bad[0].fix)
            message = f"The retry's changes do not pass preflight: {bad[0].message}"
            return _not_retried(latest, message, fix=bad[0].fix, steps=[])  # automatic: no one reads it
        config, script = plan.first_run
        return _Rerun(config, script, plan.findings, plan.forced(latest.forced))

    def _last_committed(self, run_id: str) -> str | None:
        point = resume_point(self.ledger.committed_checkpoints(run_id))
        return point.path if point else None

    # --- cancel -----------------------------------------------------------------------

    def release(self, job_id: str) -> ReleaseResult:
        """Start a follower held by the blocking alert of the job it follows, on that job's result anyway. The
        attempt's spec records it (released), so the receipt says the alert was overruled."""
        run = self.context.run(job_id)
        self.tracker.refresh()
        attempt = self.context.latest(run.run_id)
        held = chaining.hold_reason(self.context, attempt)
        status = attempt.status.value
        if held is None or attempt.spec is None or attempt.spec.after is None:
            message = f"{run.run_id} is not held (it is {status}): there is nothing to release."
            steps = self._now(run.run_id, "inspect")
            return ReleaseResult(
                job_id=run.run_id, released=False, status=status, message=message, fix=None, next_steps=steps
            )
        parent = self.context.latest(attempt.spec.after)
        if parent.status is not JobStatus.SUCCEEDED:
            return ReleaseResult(
                job_id=run.run_id,
                released=False,
                status=status,
                message=f"{run.run_id} is {held}",
                fix=f"Retry {attempt.spec.after} with the change its alert names; then {run.run_id} starts.",
                next_steps=next_steps.held(self.context, attempt),
            )
        self.ledger.update_attempt(
            attempt.attempt_id,
            expect_status=[JobStatus.QUEUED.value],
            spec=attempt.spec.model_copy(update={"released": True}),
        )
        self.tracker.refresh()
        return ReleaseResult(
            job_id=run.run_id,
            released=True,
            status=self.context.latest(run.run_id).status.value,
            message=f"it starts on {attempt.spec.after}'s result despite its alert (its receipt records the release).",
            fix=None,
            next_steps=next_steps.following(run.run_id),
        )

    def cancel(self, job_id: str) -> CancelResult:
        run = self.context.run(job_id)
        self.tracker.refresh()
        attempt = self.context.latest(run.run_id)
        if attempt.status.is_terminal:
            return self._cancelled(attempt, "It had already ended; nothing to cancel.")
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
            return self._cancelled(self.context.latest(run.run_id), "Removed from the queue before it started.")
        self.ledger.update_attempt(attempt.attempt_id, cancel_requested_at=now)
        fresh = self.context.latest(run.run_id)
        if not self.context.reaches(fresh):
            # Another host's local job (its pids mean nothing here), or a remote job in another HF namespace (this
            # server's token may not stop it there). The request is in the ledger, and the server that reaches the
            # job carries it out at its next refresh (tracker.refresh_attempt).
            how = traits_of(fresh.backend).cancel
            return self._cancelled(
                fresh,
                f"Cancel requested: {self.context.reached_by(fresh)} stops it ({how}) at its next refresh; this "
                f"server ({self.context.here(fresh.backend)}) cannot reach it.",
                pending=True,
            )
        if fresh.placement is not None:
            self.tracker.send_cancel(self.context.backend(fresh.backend), fresh)
        deadline = time.monotonic() + self.cancel_wait_s
        while time.monotonic() < deadline:
            self.tracker.refresh_attempt(self.context.latest(run.run_id))
            fresh = self.context.latest(run.run_id)
            if fresh.status.is_terminal:
                how = traits_of(fresh.backend).cancel
                return self._cancelled(fresh, how_it_stopped(fresh.exit_code, fresh.signal, how))
            time.sleep(0.2)  # polling the process state; bounded by cancel_wait_s
        return self._cancelled(fresh, "Cancel sent; it is still shutting down. Check again with inspect.")

    def _cancelled(self, attempt: AttemptRecord, message: str, pending: bool = False) -> CancelResult:
        """cancel's answer: once it ended, what its ending calls for (a retry resumes it); still stopping, or
        stopped by another server, a wait for the end."""
        job = attempt.run_id
        if attempt.status.is_terminal:
            steps = self._now(job, "cancel")
        else:
            steps = [next_steps.tool("wait", "returns once it has stopped, or after 30 s: call it again", job_id=job)]
        return CancelResult(
            job_id=job,
            status=attempt.status.value,
            termination_reason=attempt.termination_reason.value if attempt.termination_reason else None,
            message=message,
            host=attempt.host,
            pending=pending,
            next_steps=steps,
        )


@dataclass(frozen=True)
class _Rerun:
    """What a retry's attempt runs: the attempt's own config and script again, or a new plan's (its findings, and
    whether it is forced past them)."""

    config: dict[str, Any]
    script: str
    findings: list[Finding] = field(default_factory=list)
    forced: bool = False


def _verdict_steps(plan: preflight.Plan, asked: dict[str, Any], force: bool) -> list[NextStep]:
    """What a dry run or a refused submission calls for: the submit for real where its plan passes (forced, when
    only force passes it); else the fixes, and force where the plan says force would pass."""
    if plan.accepts(force):
        return request_steps.dry_run_passed({**asked, "force": True} if plan.forced(force) else asked)
    forceable = plan.accepts(True) and not force  # never after force=true was refused
    return request_steps.submit_refused(asked, checks.blocking(plan.findings), forceable)


def _planned(spec: JobSpec, plan: preflight.Plan, cap: float | None) -> PlanSummary:
    speedups = (plan.config or {}).get("speedups")
    return PlanSummary(
        script_sha256=sha256_text(plan.script) if plan.script else "",
        config_sha256=sha256_text(config_json(plan.config)) if plan.config else "",
        backend=spec.backend,
        output_repo=plan.push_to,
        launcher=plan.launcher if plan.config else None,
        max_cost_usd=cap,
        speedups=Speedups.model_validate(speedups) if speedups is not None else None,
        after=spec.after,
        smoke_steps=spec.smoke_steps,
    )


def _diagnosis(latest: AttemptRecord) -> str | None:
    """Why the last attempt ended, with the evidence the reason was read from (unless its own termination event)."""
    diagnosis = latest.termination_message
    if diagnosis and latest.evidence and latest.evidence != "termination event":
        diagnosis += f" (evidence: {latest.evidence})"
    return diagnosis


def _not_retried(
    latest: AttemptRecord, message: str, *, steps: list[NextStep], diagnosis: str | None = None, fix: str | None = None
) -> RetryResult:
    return RetryResult(
        next_steps=steps,
        job_id=latest.run_id,
        retried=False,
        attempt=None,
        status=latest.status.value,
        message=message,
        diagnosis=diagnosis,
        fix=fix,
        resume_from=None,
    )


def how_it_stopped(exit_code: int | None, signum: int | None, how: str) -> str:
    """What a cancel did, from how the backend saw the job end: one still running when the grace period after
    SIGTERM ran out died of SIGKILL; one that ended before (on SIGTERM, or exiting by its own handler) needed no
    more. A backend that reports neither (HF Jobs) stops jobs its own way (`how`, its traits' words)."""
    ended = exits.decode(exit_code, signum)
    if ended.signal == signal.SIGKILL:
        return "Stopped: it still ran when the grace period after SIGTERM ran out, so SIGKILL ended it."
    if ended.signal is not None or ended.code is not None:
        return f"Stopped: it ended after SIGTERM ({ended.words}), within the grace period; no SIGKILL was needed."
    return f"Stopped ({how})."


# --- a retry's spec and config --------------------------------------------------------------


def _apply_changes(spec: JobSpec, changes: dict[str, Any]) -> JobSpec:
    """Retry changes: timeout, flavor and dataset_mapping are job fields; the rest are hyperparameters."""
    update: dict[str, Any] = {}
    hyper: dict[str, Any] = {}
    for name, value in changes.items():
        if name == "timeout":
            update["timeout_s"] = parse_duration(value)
        elif name in ("flavor", "dataset_mapping"):
            update[name] = value
        else:
            hyper[name] = value
    merged = hyperparams.with_changes(spec.method, spec.hyperparameters, hyper)  # a change replaces the job's `lr`
    return spec.model_copy(update={**update, "hyperparameters": merged})


def _normalise(spec: JobSpec) -> JobSpec:
    """Local paths become absolute, because the job runs in its own directory (a model naming a job stays)."""
    model = spec.model if chaining.uses_parent_output(spec) else local_path(spec.model)
    update = {"model": model, "dataset": local_path(spec.dataset)}
    if spec.reward_file:
        update["reward_file"] = str(Path(spec.reward_file).expanduser().resolve())
    if spec.eval_dataset:
        update["eval_dataset"] = local_path(spec.eval_dataset)
    return spec.model_copy(update=update)
