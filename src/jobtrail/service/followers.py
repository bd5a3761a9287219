"""The dispatcher's side of pipelines and smoke runs (chaining.py has the rules): whether a queued
attempt may start, what it runs once its parent has succeeded, and the full job after a smoke run.

The tracker asks these at each dispatch and at each ending, so every decision is made from the ledger
as it is then, by whichever process dispatches: nothing waits in memory for a parent to finish.
"""

from __future__ import annotations

import time

from jobtrail.errors import InvalidRequestError
from jobtrail.models import AttemptRecord, JobStatus, NewAttempt, TerminationReason
from jobtrail.preflight import plan as preflight
from jobtrail.results import endings
from jobtrail.service import chaining
from jobtrail.service.context import ServiceContext, queued_attempt
from jobtrail.util.digest import config_json, sha256_text


class Followers:
    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.ledger = context.ledger

    def may_start(self, attempt: AttemptRecord) -> bool:
        """A queued attempt of a job with `after` starts once that job has succeeded; it is held while that job's
        result is not usable (chaining.hold_reason); if that job has ended any other way for good, the attempt is
        cancelled now, saying so, and never runs."""
        spec = attempt.spec
        if spec is None or spec.after is None:
            return True
        if chaining.hold_reason(self.context, attempt):  # stays queued, saying why (waiting_for)
            return False
        parent = self.context.run(spec.after)
        state = chaining.parent_state(self.context, parent)
        if state == "ended":
            latest = self.context.latest(parent.run_id)
            reason = (latest.termination_reason or TerminationReason.UNKNOWN).value
            why = f": {latest.termination_message}" if latest.termination_message else "."
            self.ledger.update_attempt(
                attempt.attempt_id,
                expect_status=[JobStatus.QUEUED.value],
                status=JobStatus.CANCELLED,
                termination_reason=TerminationReason.CANCELLED,
                termination_message=f"Never started: it waited for {parent.run_id}, which ended "
                f"{endings.verdict(latest.status.value, reason, [])}{why} Once {parent.run_id} is retried (or "
                "submitted again), a retry of this job queues it after it again.",
                evidence=f"{parent.run_id} ended {reason}",
                ended_at=time.time(),
            )
        return state == "succeeded"

    def prepare(self, attempt: AttemptRecord) -> AttemptRecord:
        """An attempt whose `model` names its parent is planned again on the parent's final model (its config,
        script and findings replaced), now that it exists; a blocking finding refuses it (InvalidRequestError)."""
        spec = attempt.spec
        if not chaining.uses_parent_output(spec):
            return attempt
        assert spec is not None
        env = self.context.plan_env(attempt.run_id)
        # Planned with the attempt's smoke_steps: a smoke attempt runs the smoke run of the job's plan.
        attempt_spec = spec.model_copy(update={"smoke_steps": attempt.smoke_steps})
        planned, plan = chaining.plan_on_parent(self.context, attempt_spec, env, chaining.task_of(attempt))
        if not plan.accepts(attempt.forced):
            self.ledger.update_attempt(attempt.attempt_id, findings=plan.findings)
            errors = [f for f in plan.findings if f.severity == "error"]
            first = errors[0] if errors else None
            raise InvalidRequestError(
                f"Not started: planned on {spec.after}'s final model ({planned.model}), preflight refused it: "
                + (first.message if first else "nothing could be planned."),
                fix=(first.fix if first and first.fix else "inspect lists the findings.")
                + " Then submit this job again.",
            )
        config, script = plan.first_run
        self.ledger.update_attempt(
            attempt.attempt_id,
            spec=planned,
            config=config,
            config_sha256=sha256_text(config_json(config)),
            script=script,
            script_sha256=sha256_text(script),
            output_dir=self.context.output_dir(attempt.run_id, config),
            findings=plan.findings,
        )
        return self.context.attempt(attempt.attempt_id)

    def after_smoke(self, smoke: AttemptRecord) -> NewAttempt:
        """The full job's attempt, queued to follow a smoke run that succeeded: the job's spec planned again,
        as at submission. A blocking finding now (the data changed since) refuses it (InvalidRequestError)."""
        spec = smoke.spec
        assert spec is not None and smoke.smoke_steps
        # Planned as the job itself: its smoke run is behind it.
        plan = preflight.plan(spec.model_copy(update={"smoke_steps": None}), self.context.plan_env(smoke.run_id))
        if not plan.accepts(smoke.forced):
            errors = [f for f in plan.findings if f.severity == "error"]
            raise InvalidRequestError(
                f"The smoke run's {smoke.smoke_steps} steps succeeded, but the full job no longer passes "
                f"preflight: {errors[0].message if errors else 'nothing could be planned.'}",
                fix=errors[0].fix if errors else None,
            )
        config, script = plan.first_run
        return queued_attempt(
            smoke.run_id,
            smoke.number + 1,
            spec,
            config,
            script,
            output_dir=self.context.output_dir(smoke.run_id, config),
            forced=plan.forced(smoke.forced),
            findings=plan.findings,
            retry_note=f"The smoke run (attempt {smoke.number}, {smoke.smoke_steps} steps) succeeded: the full job "
            "starts from the beginning, not from the smoke run's checkpoints.",
            host=smoke.host,
        )
