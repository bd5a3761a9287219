"""The next steps of the tools that start no job from a job's ending: submit's verdict on its plan (a dry run, a
refusal), the lists, logs and series, the report and the planning tools. Their calls are written, and decided, as
next_steps.py decides a job's: every argument the agent gave carried, force or a retry offered only where it would
be accepted, `...` only for a value the agent alone knows.
"""

from __future__ import annotations

import json
from typing import Any

from jobtrail.backends.registry import HF_JOBS, LOCAL
from jobtrail.methods import METHODS
from jobtrail.models import AttemptRecord, Finding, RunRecord
from jobtrail.requests import EstimateRequest
from jobtrail.results.dataset import DatasetReport
from jobtrail.results.endings import NextStep
from jobtrail.results.estimate import EstimateResult, HardwareResult
from jobtrail.service.next_steps import BLANK, change, submit_arguments, tool
from jobtrail.util.refs import looks_local

# --- submissions ---------------------------------------------------------------------------------


# Refusals of data that was read but does not fit: validate_dataset shows the rows and the mapping.
DATA_SHAPE_CODES = frozenset(
    {
        "dataset.columns",
        "dataset.incompatible",
        "dataset.format",
        "dataset.invalid_json",
        "dataset.nested_json",
        "dataset.too_long",
        "dataset.tokens",
    }
)


# Refusals whose fix is another value of an argument only the agent knows (where its data or model is), and those
# whose fix is leaving the argument out (the job's own directory).
AGENT_CHOOSES = {
    "dataset.missing": "dataset",
    "dataset.not_found": "dataset",
    "dataset.access": "dataset",
    "dataset.unreadable": "dataset",
    "dataset.is_model": "dataset",
    "model.missing": "model",
    "model.not_found": "model",
    "model.no_config": "model",
}
LEFT_OUT = {"output.forbidden", "output.not_empty", "output.not_a_directory", "output.permission"}


def submit_refused(arguments: dict[str, Any], errors: list[Finding], forceable: bool) -> list[NextStep]:
    """A submission preflight refused: the submit with each fix applied where the fixes are values (the agent's own
    data or model, an output left out), force where it would pass (the plan's verdict, never after force=true was
    refused), validate_dataset for data that does not fit; else the Fixes to apply."""
    steps = [change("apply each Fix above to this submit and send it again (dry_run=true checks it first)")]
    if errors and all(f.code in AGENT_CHOOSES or f.code in LEFT_OUT for f in errors):
        fixed = {k: v for k, v in arguments.items() if not any(f.code in LEFT_OUT and k == "output" for f in errors)}
        fixed.update({AGENT_CHOOSES[f.code]: BLANK for f in errors if f.code in AGENT_CHOOSES})
        steps = [
            tool("submit", "checks it again with each Fix applied (`...`: yours to fill in)", **fixed, dry_run=True)
        ]
    if any(f.code in DATA_SHAPE_CODES for f in errors):
        check = {"dataset": arguments["dataset"], "method": arguments["method"]}
        steps.append(tool("validate_dataset", "shows the mapping the data needs and the rows that fail", **check))
    if forceable:
        why = "submits it anyway past these errors, and the receipt records it"
        steps.append(tool("submit", why, **arguments, force=True))
    return steps


def dry_run_passed(arguments: dict[str, Any]) -> list[NextStep]:
    """A dry run whose plan would be accepted (forced or not): the same submit, for real."""
    start = {k: v for k, v in arguments.items() if k not in ("dry_run", "include_script")}
    return [tool("submit", "starts it (the same arguments, without dry_run)", **start)]


# --- lists, logs, series -------------------------------------------------------------------------


def listing(jobs: list[tuple[str, str]], others: bool) -> list[NextStep]:
    """ps: the newest live job to follow, the newest failed one to read; else the newest job's receipt.
    `jobs`: (job id, status), newest first; `others`: jobs exist beyond a filter that matched none."""
    if not jobs and others:
        return [tool("ps", "lists every job, whatever its status")]
    if not jobs:
        return [
            tool(
                "submit",
                "starts a job (validate_dataset first says whether the data fits)",
                method="sft",
                model=BLANK,
                dataset=BLANK,
            )
        ]
    live = next((job for job, status in jobs if status in ("queued", "starting", "running")), None)
    failed = next((job for job, status in jobs if status == "failed"), None)
    steps = [tool("inspect", "follows the newest live job", job_id=live)] if live else []
    if failed:
        steps.append(tool("inspect", "says why the newest failed job ended", job_id=failed))
    return steps or [tool("inspect", "the newest job's receipt", job_id=jobs[0][0])]


def reading(
    job_id: str, attempt: int, latest: int, finished: bool, waiting_for: str | None, cursor: int
) -> list[NextStep]:
    """logs: read on from the cursor while there is more; the receipt once all is read or nothing has started
    (`waiting_for`: what a queued attempt waits for)."""
    if finished:
        return [tool("inspect", "its receipt: the attempt has ended and its log is all read", job_id=job_id)]
    if waiting_for:
        return [tool("inspect", f"follows it: queued, it waits for {waiting_for}", job_id=job_id)]
    which = attempt if attempt != latest else None
    return [tool("logs", "reads what follows", job_id=job_id, attempt=which, cursor=cursor)]


def series(run: RunRecord, latest: AttemptRecord, logged: bool, last_step: int | None) -> list[NextStep]:
    """metrics: a job still training is followed; one that ended is drawn, or (no step logged) named again with a
    logging_steps its run reaches. An evaluation or a conversion logs no steps: its receipt has its result."""
    job = run.run_id
    if run.method not in METHODS:
        return [tool("inspect", f"its result: a {_kind(run)} logs no training steps", job_id=job)]
    if not latest.status.is_terminal:
        since = last_step if logged else None
        steps = [
            tool("wait", "until it ends", job_id=job),
            tool("metrics", "the points that follow", job_id=job, since_step=since),
        ]
        return [*steps, tool("plot", "its curves as a PNG", job_id=job)] if logged else steps
    if logged:
        return [tool("plot", "its curves as a PNG", job_id=job)]
    return [relog(run, latest), tool("inspect", "its receipt and committed checkpoints", job_id=job)]


def relog(run: RunRecord, latest: AttemptRecord) -> NextStep:
    """The job submitted again, logging its loss at every step: what a run too short to log one needs. A job forced
    past preflight errors would be refused as it was: the change is said, not written as a call."""
    hyperparameters = {**run.spec.hyperparameters, "logging_steps": 1}
    if latest.forced:
        return change(
            f"submit it again with hyperparameters={json.dumps(hyperparameters)} once its preflight "
            "errors are fixed (it was forced past them): it then logs its loss at every step"
        )
    again = {**submit_arguments(run.spec), "hyperparameters": hyperparameters}
    return tool("submit", "runs it again, logging its loss at every step", **again)


def _kind(run: RunRecord) -> str:
    return {"evaluate": "evaluation", "convert_gguf": "conversion"}.get(run.method, "job")


def drawn(job_id: str) -> list[NextStep]:
    """plot: the numbers behind the picture."""
    return [tool("metrics", "the numbers behind it", job_id=job_id)]


def reported(total_attempts: int, days: float, group_by: str) -> list[NextStep]:
    """report: the failed jobs, and the split by why attempts ended."""
    if not total_attempts:
        return []
    steps = [tool("ps", "lists the failed jobs (inspect says why each ended)", status="failed")]
    if group_by != "termination_reason":
        steps.append(tool("report", "splits it by why attempts ended", days=days, group_by="termination_reason"))
    return steps


# --- planning ------------------------------------------------------------------------------------


def estimated(request: EstimateRequest, result: EstimateResult) -> list[NextStep]:
    """estimate_cost: the submit it estimated (the agent's model, data and hyperparameters, on the flavor that fits,
    with its timeout), or the smaller job to estimate when nothing fits."""
    given = {"model": request.model, "method": request.method, "dataset": request.dataset}
    target = result.flavor if result.fits.get(result.flavor) else (result.options[0].flavor if result.options else None)
    if target is None:
        asked = {name: getattr(request, name) for name in ESTIMATE_ARGUMENTS}
        return [
            tool(
                "estimate_cost",
                "a 4-bit base (or a smaller max_length or batch: the notes say what frees memory) may fit",
                **{**asked, "peft": "qlora"},
            )
        ]
    timeout = result.recommended_timeout if target == result.flavor else result.options[0].timeout
    # This machine's flavor is named after the local backend; the catalog's are HF Jobs', which cannot read this
    # machine's files: a local model or data trains here (preflight refuses it on HF Jobs, remote.local_*).
    where: dict[str, Any] = {"backend": HF_JOBS.name, "flavor": target}
    here = looks_local(request.model) or bool(request.dataset and looks_local(request.dataset))
    moved = []
    if target == LOCAL.name or here:
        if target != LOCAL.name:
            moved = [
                change(
                    f"{target} is an HF Jobs flavor, and an HF job cannot read this machine's files: upload "
                    "the model and data to the Hub (hf upload) and estimate again to train there"
                )
            ]
            timeout = None  # the estimate's timeout is the flavor's
        where = {"backend": LOCAL.name}
        target = LOCAL.name
    hyper = request.hyperparameters() or None
    job = {
        "method": request.method,
        "model": request.model,
        "dataset": request.dataset or BLANK,
        **where,
        "timeout": timeout,
        "hyperparameters": hyper,
    }
    steps = [tool("submit", f"runs the job estimated here on {target}", **job), *moved]
    if result.hours is None:
        steps.append(tool("estimate_cost", "adds time and cost from the data's size", **{**given, "dataset": BLANK}))
    return steps


ESTIMATE_ARGUMENTS = (
    "model",
    "method",
    "dataset",
    "num_examples",
    "avg_tokens",
    "max_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "max_steps",
    "gradient_checkpointing",
    "flavor",
    "lora_r",
    "optim",
    "num_processes",
)


def validated(report: DatasetReport, model: str | None) -> list[NextStep]:
    """validate_dataset: a submit for each method the data is ready for or mapped to (the model given, else `...`);
    for data no method takes, each method's own fix."""
    steps: list[NextStep] = []
    base = {"model": model or BLANK, "dataset": report.dataset}
    ready = [name for name, verdict in report.methods.items() if verdict.status == "READY"]
    if ready:
        steps.append(tool("submit", f"trains on it (ready for {', '.join(ready)})", method=ready[0], **base))
    shown: set[str] = set()
    alone = len(report.methods) == 1
    usable = any(v.status != "INCOMPATIBLE" for v in report.methods.values())
    for name, fit in report.methods.items():
        if fit.status == "NEEDS_MAPPING" and fit.mapping is not None:
            key = json.dumps(fit.mapping, sort_keys=True)
            if key not in shown:
                shown.add(key)
                why = f"trains {name} with the mapping the data needs"
                steps.append(tool("submit", why, method=name, **base, dataset_mapping=fit.mapping))
        elif fit.status == "INCOMPATIBLE" and fit.fix and (alone or not usable):
            steps.append(change(f"{name}: {fit.fix}"))
    return steps


def flavors(result: HardwareResult) -> list[NextStep]:
    """hardware: whether a model fits the cheapest GPU flavor, and what a job on it costs."""
    gpus = sorted((f for f in result.flavors if f.gpu_count), key=lambda f: f.price_per_hour)
    if not gpus:
        return []
    return [
        tool(
            "estimate_cost",
            f"says whether a job fits {gpus[0].name} and what it costs",
            model=BLANK,
            flavor=gpus[0].name,
        )
    ]
