"""Jobs that follow jobs (after=...) and smoke runs (smoke_steps=N): the rules submit, evaluate and
convert_gguf apply when a job is asked for, and that the dispatcher (followers.py) applies again.

A job with `after` waits, queued, until that job succeeds; if it ends any other way, the follower is
cancelled and never runs. When the follower's input (submit's `model`, evaluate's `job_id`,
convert_gguf's `source`) is that same job, it runs on the job's final model: its spec keeps the job id
as `model`, preflight checks it at submission on a stand-in (the final model when it exists already,
else the model the chain starts from: same architecture, tokenizer and size), and checks it again on the
final model itself when it is dispatched.

A smoke run is the job's own config for `smoke_steps` steps, into a directory of its own, pushing
nothing (the plan holds it: preflight/plan.SmokeRun). The full job then starts from the beginning: it
never resumes from the smoke run's checkpoints (a short run's schedule, warm-up and optimizer state are
not the full job's).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Literal

from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.models import AttemptRecord, Finding, JobSpec, JobStatus, RunRecord, TerminationReason
from jobtrail.outcomes import events
from jobtrail.outcomes.evals import HubWeights
from jobtrail.preflight import plan as preflight
from jobtrail.preflight.plan import Conversion, Evaluation, Plan, PlanEnv
from jobtrail.results import endings
from jobtrail.service.context import ServiceContext
from jobtrail.service.job_outputs import JobOutput, job_output
from jobtrail.service.retry_state import ended_for_good

ParentState = Literal["waiting", "succeeded", "ended"]


def uses_parent_output(spec: JobSpec | None) -> bool:
    """The job runs on its parent's final model: its `model` still names the job it follows."""
    return spec is not None and spec.after is not None and spec.model == spec.after


def parent_state(context: ServiceContext, parent: RunRecord) -> ParentState:
    attempts = context.ledger.attempts(parent.run_id)
    if attempts[-1].status is JobStatus.SUCCEEDED:
        return "succeeded"
    return "ended" if ended_for_good(context.ledger, parent, attempts, time.time()) else "waiting"


def parent_of(context: ServiceContext, after: str) -> RunRecord:
    """The job `after` names, refused when it does not exist or has ended without succeeding for good.

    A job can only follow one submitted before it, so a chain never loops: its own or a later job's id
    is unknown when it is submitted."""
    run = context.ledger.get_run(after.strip())
    if run is None:
        raise NotFoundError(
            f"after={after!r} names no job: a job can only follow a job submitted before it.",
            fix='Pass after=<a job id that submit returned or ps lists, e.g. "jt-4f9k2m7q">, or leave after out.',
        )
    if parent_state(context, run) == "ended":
        latest = context.latest(run.run_id)
        reason = latest.termination_reason.value if latest.termination_reason else None
        ended = endings.verdict(latest.status.value, reason, [])
        raise InvalidRequestError(
            f"{run.run_id} already ended {ended}: a job after it would never start.",
            fix=f'Retry {run.run_id} or submit it again fixed (inspect(job_id="{run.run_id}") says which its ending '
            "calls for), then pass after= that job; or leave after out.",
        )
    return run


def follow(context: ServiceContext, spec: JobSpec) -> JobSpec:
    """submit's spec with `after` checked; `model` naming a job makes that job the parent (after defaults to it)."""
    named = context.named_job(spec.model, "model")
    if named is None:
        if spec.after is not None:
            parent_of(context, spec.after)
        return spec
    if spec.after is not None and spec.after.strip() != named.run_id:
        raise InvalidRequestError(
            f"model names job {named.run_id} but after names {spec.after!r}: a job starts from the final model of "
            "the job it follows only.",
            fix=f'Pass after="{named.run_id}" with model="{named.run_id}", or a model path/Hub id as model.',
        )
    if spec.init_from is not None:
        raise InvalidRequestError(
            f"model names job {named.run_id} and init_from names {spec.init_from}: start from one of them.",
            fix=f'Pass model="{named.run_id}" alone (it starts from that job\'s final model once it succeeds), '
            "or init_from with that job's own model.",
        )
    parent_of(context, named.run_id)
    return spec.model_copy(update={"model": named.run_id, "after": named.run_id})


def chain_root(context: ServiceContext, run: RunRecord) -> str:
    """The model a chain of jobs starts from: the first job's `model` whose model does not name its parent."""
    while uses_parent_output(run.spec):
        assert run.spec.after is not None
        run = context.run(run.spec.after)
    return run.spec.model


def parent_output(context: ServiceContext, parent: RunRecord) -> JobOutput:
    """What a follower runs on: the parent's final model once it succeeded, else the stand-in preflight checks
    it on, the model the chain starts from."""
    if parent_state(context, parent) != "succeeded":
        return JobOutput(chain_root(context, parent), None, "final")
    return job_output(context, parent, None)


def plan_on_parent(
    context: ServiceContext, spec: JobSpec, env: PlanEnv, task: Evaluation | Conversion | None
) -> tuple[JobSpec, Plan]:
    """Plan a job whose `model` names its parent on the parent's output (or its stand-in): the spec it runs
    with and the plan. The stand-in's plan carries the finding that says what is checked again later."""
    assert spec.after is not None
    parent = context.run(spec.after)
    output = parent_output(context, parent)
    base, adapter = output.base, output.adapter
    if isinstance(task, Evaluation):  # the final model: the adapter on its base
        task = replace(task, adapter=adapter, label="final", hub=output.hub)
        planned = spec.model_copy(update={"model": base})
    else:
        planned = spec.model_copy(update={"model": adapter or base})
    result = preflight.plan(planned, env, task)
    if adapter is None and parent_state(context, parent) != "succeeded":
        deferred = Finding(
            code="after.checked_on_stand_in",
            severity="info",
            message=f"{parent.run_id}'s final model does not exist yet: preflight checked this job on the model "
            f"its chain starts from ({base}). When {parent.run_id} succeeds it is planned again on that final model "
            "before it starts; a problem found then ends it config_error with the findings.",
        )
        result = replace(result, findings=[*result.findings, deferred])
    return planned, result


def task_of(attempt: AttemptRecord) -> Evaluation | Conversion | None:
    """What an evaluation or conversion attempt was asked to do, read back from its config."""
    config = attempt.config
    if config.get("template") == "evaluate":
        hub = config.get("adapter_hub")
        return Evaluation(
            label=config["checkpoint_label"],
            adapter=config.get("adapter"),
            split=config["dataset"].get("split"),
            metrics=config.get("metrics"),
            max_new_tokens=config["max_new_tokens"],
            temperature=config["temperature"],
            hub=HubWeights(**hub) if hub else None,
            outputs_repo=config.get("outputs_repo"),
        )
    if config.get("template") == "convert_gguf":
        return Conversion(list(config["quantizations"]), config.get("pre_tokenizer"))
    return None


def hold_reason(context: ServiceContext, attempt: AttemptRecord) -> str | None:
    """Why a queued follower is held rather than started or cancelled: the job it follows succeeded with a
    blocking alert (its result is not usable as it is), or ended diverged (a retry with the fix its alert names
    can still give it a result). None when it is not held (or was released)."""
    spec = attempt.spec
    if attempt.status is not JobStatus.QUEUED or spec is None or spec.after is None or spec.released:
        return None
    parent = context.ledger.get_run(spec.after)
    if parent is None:
        return None
    latest = context.latest(parent.run_id)
    cancel = f'cancel(job_id="{attempt.run_id}") drops it'
    if latest.status is JobStatus.SUCCEEDED:
        stops = endings.blocking(events.alerts(context.ledger.events(latest.attempt_id, "alert")))
        if not stops:
            return None
        stop = stops[0]
        return (
            f"held: {parent.run_id} succeeded, but {stop['code']} at step {stop['step']}: {stop['message']} "
            f'release(job_id="{attempt.run_id}") starts it on that result anyway; {cancel}'
        )
    if latest.termination_reason is TerminationReason.DIVERGED:
        stops = endings.blocking(events.alerts(context.ledger.events(latest.attempt_id, "alert")))
        fix = f" ({stops[0]['fix']})" if stops and stops[0].get("fix") else ""
        return (
            f"held: {parent.run_id} ended diverged, so there is no model to start from. Retry it with the fix its "
            f"alert names{fix}: this job starts once it succeeds; {cancel}"
        )
    return None


def waiting_on_parent(context: ServiceContext, attempt: AttemptRecord) -> str | None:
    """What a queued follower waits for, in words: "jt-ab12cd34 to succeed (it is running)"."""
    spec = attempt.spec
    if attempt.status is not JobStatus.QUEUED or spec is None or spec.after is None:
        return None
    parent = context.ledger.get_run(spec.after)
    if parent is None or parent_state(context, parent) == "succeeded":
        return None
    latest = context.latest(parent.run_id)
    state = latest.status.value
    if latest.status.is_terminal and latest.termination_reason:
        state = endings.verdict(state, latest.termination_reason.value, []) + ", an automatic retry may follow"
    smoke = ", its smoke run" if latest.smoke_steps and not latest.status.is_terminal else ""
    return f"{parent.run_id} to succeed (it is {state}{smoke})"
