"""What to do next, decided in one place: every tool's result carries `next_steps` (its summary's Next lines), and
each comes from here, from the decision the service just made.

- A job that has not ended: follow it (wait, logs), or, held behind its parent, release it or fix the parent.
- A job that ended (by kind): a training job that succeeded is loaded, evaluated, converted, trained further
  (carrying its own method, model and data); one whose result a blocking alert spoils gets the numbers and the
  alert's fix; a failed or cancelled one gets what the retry policy would do now (retry(job_id) only where a retry
  would run; else the change that fixes it, checked with the policy, or the fix itself). An evaluation names its
  metrics' job, a conversion its files: neither proposes metrics or plot, which they never log.
- A refused request: the one call that works. A submit refused by preflight is offered force only where force
  would pass (the plan's own verdict, Plan.accepts) and never after force=true was refused; a retry that would not
  run names the call that would (wait, the change, the parent's fix, convert_gguf with the conversion's arguments).
- Every call is written out with the arguments the agent gave and the values jobtrail knows; `...` stands only for
  a value the agent alone knows (held-out data, a model for a dataset).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from jobtrail.errors import JobtrailError
from jobtrail.methods import METHODS
from jobtrail.models import AttemptRecord, Finding, JobSpec, JobStatus, RunRecord, TerminationReason
from jobtrail.outcomes import events, retry as retry_policy
from jobtrail.outcomes.retry import Decision
from jobtrail.preflight.hyperparams import with_changes
from jobtrail.preflight.plan import Conversion, plan
from jobtrail.requests import DEFAULT_BACKEND, DEFAULT_QUANTIZATIONS, SubmitOptions
from jobtrail.results.attempt_note import resume_point
from jobtrail.results.endings import BLOCKING, NextStep, StepAction, verdict
from jobtrail.results.trackio_run import TrackioRun
from jobtrail.service import chaining
from jobtrail.service.context import ServiceContext
from jobtrail.service.retry_state import decide, retry_decision
from jobtrail.templates.runtime import runtime_module

BLANK: Any = ...  # a value only the agent knows: written `...`
# The tools a next step comes from, when it is not a job's own ending: what it reports shapes the steps.
Reporter = Literal["inspect", "wait", "cancel", "submit", "retry"]


def call(tool: str, **arguments: Any) -> str:
    """A tool call as an agent sends it: each argument by name, its value as JSON; None is left out."""
    written = [
        f"{name}={'...' if value is BLANK else json.dumps(value)}"
        for name, value in arguments.items()
        if value is not None
    ]
    return f"{tool}({', '.join(written)})"


def tool(action: StepAction, why: str, name: str | None = None, **arguments: Any) -> NextStep:
    """A step that calls tool `name` (the action's own, unless named)."""
    return NextStep(action=action, kind="tool", call=call(name or action, **arguments), why=why)


def change(why: str) -> NextStep:
    """A step that is a change to make, not a call."""
    return NextStep(action="fix", kind="tool", call=None, why=why)


# --- a job that runs ------------------------------------------------------------------------------


def following(job_id: str) -> list[NextStep]:
    """How to follow a job that was just started or queued."""
    return [
        tool("wait", "returns when it ends, or after 30 s with its progress: call it again", job_id=job_id),
        tool("logs", "its output so far", job_id=job_id),
    ]


def now(
    context: ServiceContext,
    run: RunRecord,
    attempts: list[AttemptRecord],
    reporter: Reporter,
    trackio: TrackioRun | None = None,
) -> list[NextStep]:
    """The steps for a run as it stands now, as `reporter` reports it."""
    latest = attempts[-1]
    job = run.run_id
    if not latest.status.is_terminal:
        if chaining.hold_reason(context, latest):
            return held(context, latest)
        if reporter == "wait":
            steps = [tool("wait", "keeps waiting", job_id=job)]
            if run.method in METHODS and _logged_steps(context, attempts):
                steps.append(tool("metrics", "the loss so far", job_id=job))
            return steps
        return [*following(job), tool("cancel", "stops it", job_id=job)]
    receipt = [tool("inspect", "its receipt: every attempt, why it ended", job_id=job)] if reporter != "inspect" else []
    if run.method == "evaluate":
        return [*receipt, *_after_evaluation(context, run, latest)]
    if run.method == "convert_gguf":
        return [*receipt, *_after_conversion(context, run, attempts)]
    if latest.status is JobStatus.SUCCEEDED:
        return [*receipt, *_after_training(context, run, attempts, trackio, reporter)]
    return [*receipt, *_after_ending(context, run, attempts)]


def _logged_steps(context: ServiceContext, attempts: list[AttemptRecord]) -> bool:
    return any(context.ledger.events(a.attempt_id, "step") for a in attempts)


def held(context: ServiceContext, attempt: AttemptRecord) -> list[NextStep]:
    """A follower held behind its parent: released onto a result with a blocking alert, or the parent fixed first."""
    assert attempt.spec is not None and attempt.spec.after is not None
    parent = context.run(attempt.spec.after)
    parent_attempts = context.ledger.attempts(parent.run_id)
    drop = tool("cancel", "drops it", job_id=attempt.run_id)
    if parent_attempts[-1].status is JobStatus.SUCCEEDED:
        release = tool("release", f"starts it on {parent.run_id}'s result anyway", job_id=attempt.run_id)
        return [release, drop]
    return [*_failure_fix(context, parent, parent_attempts, for_follower=attempt.run_id), drop]


# --- training that ended ------------------------------------------------------------------------


def _after_training(
    context: ServiceContext,
    run: RunRecord,
    attempts: list[AttemptRecord],
    trackio: TrackioRun | None,
    reporter: Reporter,
) -> list[NextStep]:
    latest = attempts[-1]
    job = run.run_id
    stops = [a for a in events.alerts(context.ledger.events(latest.attempt_id, "alert")) if a.get("code") in BLOCKING]
    if stops:  # its result is not usable as it is: the numbers behind the alert, and the fix it names
        steps = [tool("metrics", f"the numbers behind {stops[0]['code']}", job_id=job)]
        if stops[0].get("fix"):
            steps.append(change(f"{stops[0]['code']}: {stops[0]['fix']}"))
        return steps
    where, base, adapter = _result(latest)
    if _gone(latest, where):
        return [
            change(f"its final model {where} is not on this machine: nothing here can load, evaluate or convert it")
        ]
    steps = [_load(run, where, base, adapter)]
    if not any(e.checkpoint == "final" for e in context.ledger.evals_of(job)):
        data = run.spec.eval_dataset or BLANK
        steps.append(tool("evaluate", "measures the trained model on held-out data", job_id=job, dataset=data))
    steps.append(
        tool(
            "convert_gguf",
            f"GGUF files (F16 and {', '.join(DEFAULT_QUANTIZATIONS)} by default; quantizations=[...] for others) "
            "for llama.cpp, Ollama, LM Studio",
            source=job,
        )
    )
    steps.append(_continue_training(run))
    if reporter == "wait" and _logged_steps(context, attempts):
        steps.append(tool("plot", "its curves as a PNG", job_id=job))
    if trackio is not None:
        kind: Literal["shell", "url"] = "url" if trackio.url else "shell"
        why = f"its curves in trackio (project {trackio.project}, run {trackio.run})"
        steps.append(NextStep(action="watch", kind=kind, call=trackio.open, why=why))
    return steps


def _continue_training(run: RunRecord) -> NextStep:
    """A new job from this one's final model, with a fresh schedule: its method and data, init_from it (or, for a
    job that trained on its parent's output, this job named as its model)."""
    if run.spec.after and run.model == run.spec.after:
        arguments: dict[str, Any] = {"method": run.method, "model": run.run_id, "dataset": run.dataset}
    else:
        arguments = {"method": run.method, "model": run.model, "dataset": run.dataset, "init_from": run.run_id}
    if run.backend != DEFAULT_BACKEND:
        arguments["backend"] = run.backend
    why = "trains it further as a new job, from its final model with a fresh schedule (add hyperparameters=...)"
    return tool("continue_training", why, "submit", **arguments)


def _gone(latest: AttemptRecord, where: str) -> bool:
    """Whether a final model written to a directory is not there (deleted, or on another host's disk)."""
    return not latest.config.get("push_to_hub") and not Path(where).is_dir()


def _result(latest: AttemptRecord) -> tuple[str, str, bool]:
    """(where the final model is, its base model, whether it is an adapter)."""
    config = latest.config
    adapter = (config.get("peft") or {}).get("method") in ("lora", "qlora")
    final = Path(latest.output_dir) / "final"
    where = config.get("hub_model_id") if config.get("push_to_hub") else str(final)
    return str(where), _base_model(final, str(config.get("model"))), adapter


def _base_model(final: Path, model: str) -> str:
    """The model whose weights the adapter sits on: the saved adapter's own record of it (a job that
    started from another job's adapter has that adapter's base), else the model the job loaded."""
    try:
        recorded = json.loads((final / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        return _base_model(Path(model), model) if (Path(model) / "adapter_config.json").is_file() else model
    return str(recorded or model)


def _load(run: RunRecord, where: str, base: str, adapter: bool) -> NextStep:
    reward_head = run.method == "reward"
    code = runtime_module("_model_card").load_snippet(where, base, adapter=adapter, reward_head=reward_head)
    if adapter:
        why = (
            f"{where} is a LoRA adapter, not a whole model: load it onto its base model {base} "
            "(merge_and_unload() makes one plain model of the two)"
        )
    else:
        why = f"{where} is the whole fine-tuned model"
    return NextStep(action="load", kind="python", call=code, why=why)


# --- a failure, a cancel --------------------------------------------------------------------------


def _after_ending(context: ServiceContext, run: RunRecord, attempts: list[AttemptRecord]) -> list[NextStep]:
    steps = _failure_fix(context, run, attempts)
    if attempts[-1].status is JobStatus.FAILED:
        steps.append(tool("logs", "the evidence: its last lines", job_id=run.run_id, tail=100))
    return steps


def _failure_fix(
    context: ServiceContext, run: RunRecord, attempts: list[AttemptRecord], for_follower: str | None = None
) -> list[NextStep]:
    """What a job that ended without succeeding calls for: a retry where the policy would run one (with the change
    that fixes it, checked against the policy), a follower's parent fixed first, or the fix when no retry helps.
    `for_follower`: the steps serve that job, which waits for this one."""
    latest = attempts[-1]
    job = run.run_id
    then = f"; {for_follower} starts once it succeeds" if for_follower else ""
    parent = ended_parent(context, run)
    if parent is not None:  # it never started: its parent ended for good, and a retry here waits on that parent
        parent_run, parent_attempts = parent
        steps = _failure_fix(context, parent_run, parent_attempts)
        return [
            *steps,
            change(
                f"{job} waited for {parent_run.run_id}, which ended {state(parent_attempts[-1])}: once "
                f"{parent_run.run_id} is retried (or submitted again), a retry of {job} queues it after it again"
            ),
        ]
    decision = retry_decision(context.ledger, run, attempts)
    if decision.retry:
        point = resume_point(context.ledger.committed_checkpoints(job))
        start = f"from {Path(point.path).name}" if point else "from the start: it committed no checkpoint"
        return [tool("retry", f"what a retry does now: {decision.message} It runs {start}{then}", job_id=job)]
    why = " ".join(part for part in (decision.message, decision.fix) if part)
    # A conversion's retry takes only its own arguments (runs.py _reconvert): its fix is convert_gguf again.
    changes = None if run.method == "convert_gguf" else decision.changes or fixing_changes(run, latest)
    if changes and decide(context.ledger, run, attempts, latest.spec or run.spec, changes, automatic=False).retry:
        return [
            tool("fix", f"retries it with the change that fixes it{then}. {why}", "retry", job_id=job, changes=changes)
        ]
    steps = [change(why + then)]
    reason = latest.termination_reason
    if run.method == "convert_gguf":
        steps.append(_convert_again(run, latest))
    elif reason is TerminationReason.BAD_INPUT and run.method in METHODS:
        why_check = "shows what is wrong with the data"
        steps.append(tool("validate_dataset", why_check, dataset=run.dataset, method=run.method))
    return steps


def ended_parent(context: ServiceContext, run: RunRecord) -> tuple[RunRecord, list[AttemptRecord]] | None:
    """The job `run` waits for (after=...), when that job ended without succeeding and no retry of it follows."""
    spec = context.latest(run.run_id).spec or run.spec
    if spec.after is None or context.ledger.get_run(spec.after) is None:
        return None
    parent = context.run(spec.after)
    if chaining.parent_state(context, parent) != "ended":
        return None
    return parent, context.ledger.attempts(parent.run_id)


def state(attempt: AttemptRecord) -> str:
    """An attempt's state as results say it: "failed (oom)", "cancelled"."""
    reason = attempt.termination_reason.value if attempt.termination_reason else None
    return verdict(attempt.status.value, reason, [])


def fixing_changes(run: RunRecord, latest: AttemptRecord) -> dict[str, Any] | None:
    """The change a retry needs after a failure that a change fixes, as the retry policy proposes it; None where the
    fix is not a retry (bad data, a missing package, a token) or no one change is known (unknown)."""
    spec = latest.spec or run.spec
    reason = latest.termination_reason
    if reason is TerminationReason.OOM:
        return retry_policy.propose_memory_change(spec.hyperparameters, latest.config.get("training_args"))
    if reason is TerminationReason.DIVERGED:
        ran = retry_policy.JobFacts(
            method=run.method, learning_rate=latest.config.get("training_args", {}).get("learning_rate")
        )
        return {"learning_rate": retry_policy.diverged_learning_rate(spec.hyperparameters, ran)[0]}
    if reason is TerminationReason.TIMEOUT:
        hours = math.ceil(2 * (latest.timeout_s or spec.timeout_s or 7200) / 3600)  # twice the time it had
        return {"timeout": f"{hours}h"}
    return None


def retry_refused(
    context: ServiceContext, run: RunRecord, attempts: list[AttemptRecord], decision: Decision | None
) -> list[NextStep]:
    """The one call that works where retry(job_id) did not: wait for a job still running, the change or fix its
    ending calls for, a new job from one that succeeded."""
    latest = attempts[-1]
    if not latest.status.is_terminal:
        return [tool("wait", "returns when it ends; then retry it if it did not succeed", job_id=run.run_id)]
    if latest.status is JobStatus.SUCCEEDED:
        usable = run.method in METHODS and not _gone(latest, _result(latest)[0])
        return [_continue_training(run)] if usable else []
    steps = _failure_fix(context, run, attempts)
    if decision is not None and decision.changes and not any(s.call and s.call.startswith("retry(") for s in steps):
        steps.insert(0, tool("retry", decision.fix or decision.message, job_id=run.run_id, changes=decision.changes))
    corrected = _corrected_submit(context, run, latest)
    return [corrected, *steps] if corrected else steps


def _corrected_submit(context: ServiceContext, run: RunRecord, latest: AttemptRecord) -> NextStep | None:
    """A training job that ended bad_input or config_error because of a value preflight now refuses in its own spec
    (eval_split_ratio leaving no row to train on, a LoRA target its model lacks): the submit with the hyperparameters
    preflight's fixes name, where every error's fix names them (a retry never runs for these endings)."""
    reason = latest.termination_reason
    if run.method not in METHODS or reason not in (TerminationReason.BAD_INPUT, TerminationReason.CONFIG_ERROR):
        return None
    spec = latest.spec or run.spec
    try:
        errors = [f for f in plan(spec, context.plan_env(run.run_id)).findings if f.severity == "error"]
    except JobtrailError:  # its data or model is gone: nothing to plan on
        return None
    fixed = [hyperparameters_fix(f.fix) for f in errors]
    if not errors or any(named is None for named in fixed):
        return None
    changes = {name: value for named in fixed if named for name, value in named.items()}
    merged = with_changes(spec.method, spec.hyperparameters, changes)
    hyperparameters = {name: value for name, value in merged.items() if value is not None}  # null: left out
    why = f"submits it again with what preflight now finds wrong fixed ({', '.join(f.code for f in errors)})"
    return tool("submit", why, **{**submit_arguments(spec), "hyperparameters": hyperparameters})


_HYPERPARAMETERS_FIX = re.compile(r"^Pass hyperparameters=(\{.*?\})(?=[ ,.;]|$)")


def hyperparameters_fix(fix: str | None) -> dict[str, Any] | None:
    """The hyperparameters a finding's fix names when it is one ('Pass hyperparameters={"eval_split_ratio": null}
    ...': JSON, null for a value to leave out); None for any other fix."""
    found = _HYPERPARAMETERS_FIX.match(fix or "")
    if not found:
        return None
    try:
        named = json.loads(found.group(1))
    except ValueError:
        return None
    return named if isinstance(named, dict) else None


# --- a job's own submit ---------------------------------------------------------------------------


def submit_arguments(spec: JobSpec, options: SubmitOptions | None = None) -> dict[str, Any]:
    """submit's arguments for a job spec and options, as the agent would send them: each one given (defaults left
    out), with the values preflight and the service normalised (absolute paths)."""
    default = JobSpec(method=spec.method, model=spec.model, dataset=spec.dataset)
    arguments: dict[str, Any] = {"method": spec.method, "model": spec.model, "dataset": spec.dataset}
    for name in ("backend", "flavor", "hyperparameters", "output", "dataset_mapping", "eval_dataset", "reward_file"):
        value = getattr(spec, name)
        if value != getattr(default, name):
            arguments[name] = value
    for name in ("reward_function", "init_from", "init_checkpoint", "after", "smoke_steps"):
        arguments[name] = getattr(spec, name)
    if spec.secrets:
        arguments["secrets"] = spec.secrets
    if spec.timeout_s is not None:
        arguments["timeout"] = duration(spec.timeout_s)
    if spec.dependency_versions != default.dependency_versions:
        arguments["dependency_versions"] = spec.dependency_versions
    if options is not None:
        defaults = SubmitOptions()
        if options.max_retries != defaults.max_retries:
            arguments["max_retries"] = options.max_retries
        arguments["max_cost_usd"] = options.max_cost_usd
        arguments["idempotency_key"] = options.idempotency_key
    return {name: value for name, value in arguments.items() if value is not None}


def duration(seconds: int) -> str:
    """A timeout as submit takes it: "2h", "90m", or seconds."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


# --- evaluations and conversions -----------------------------------------------------------------


def _after_evaluation(context: ServiceContext, run: RunRecord, latest: AttemptRecord) -> list[NextStep]:
    """An evaluation that ended: the job it evaluated lists every evaluation of it; a failed one, its retry or fix."""
    if latest.status is not JobStatus.SUCCEEDED:
        return _after_ending(context, run, context.ledger.attempts(run.run_id))
    found = context.ledger.eval_by_job(run.run_id)
    evaluated = found[0] if found else None
    if evaluated is None:
        return []
    return [tool("inspect", "lists every evaluation of it, with the change from its base model", job_id=evaluated)]


def _after_conversion(context: ServiceContext, run: RunRecord, attempts: list[AttemptRecord]) -> list[NextStep]:
    """A conversion that ended: its files are its result (the summary lists them); a failed one, its fix."""
    if attempts[-1].status is JobStatus.SUCCEEDED:
        return []
    return _after_ending(context, run, attempts)


def conversion_refused(findings: list[Finding]) -> list[NextStep]:
    """A conversion refused at submission: its errors, or the pre-tokenizer it needs and jobtrail could not name."""
    needed = [f for f in findings if f.code == "gguf.pre_tokenizer_needed"]
    if needed:
        return [change(f"it would stop at the converter: {needed[0].fix} (convert_gguf's pre_tokenizer argument)")]
    return [change("apply each Fix above and convert again")]


def _convert_again(run: RunRecord, latest: AttemptRecord) -> NextStep:
    """The conversion asked for again, with its own arguments (the source it read, its quantizations, pre-tokenizer
    and output): convert_gguf applies a pre-tokenizer it recognises by itself."""
    task = chaining.task_of(latest)
    arguments: dict[str, Any] = {"source": run.spec.model}
    if isinstance(task, Conversion):
        arguments["quantizations"] = [q for q in task.quantizations if q != "F16"] or None
        arguments["pre_tokenizer"] = task.pre_tokenizer
    arguments["output"] = run.spec.output
    if run.backend != DEFAULT_BACKEND:
        arguments["backend"] = run.backend
    return tool("convert_gguf", "converts it again as a new job, once the cause above is fixed", **arguments)
