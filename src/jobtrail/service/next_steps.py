"""What to do with a job once it has ended: inspect's `next_steps`, each an exact call and why.

A training job that succeeded: load the result (an adapter on its base model, or the model alone: the
same code as its model card, scripts/_model_card.py), evaluate it, convert it to GGUF, train it further
as a new job, and look at its trackio run. One that failed: what its termination reason calls for (the
retry policy's own verdict: retry, or the fix), then the evidence. A cancelled one: retry resumes it.
A job that has not ended has none, and neither has an evaluation or a conversion (their results are
their own; inspect's summary says where to look).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from jobtrail.methods import METHODS
from jobtrail.models import AttemptRecord, JobStatus, RunRecord, TerminationReason
from jobtrail.outcomes import retry as retry_policy
from jobtrail.outcomes.retry import Decision
from jobtrail.requests import DEFAULT_QUANTIZATIONS
from jobtrail.results.endings import NextStep
from jobtrail.results.trackio_run import TrackioRun
from jobtrail.templates.runtime import runtime_module


def next_steps(
    run: RunRecord, latest: AttemptRecord, *, retry: Decision | None, trackio: TrackioRun | None, evaluated: bool
) -> list[NextStep]:
    """The next steps of a run whose latest attempt is `latest`.

    retry: what retry(job_id) would do now (failed or cancelled runs); evaluated: the final model already
    has an evaluation (submit(eval_dataset=...) makes one), so evaluating it again is no next step.
    """
    if run.method not in METHODS:  # evaluations and conversions have their own summaries
        return []
    if latest.status is JobStatus.SUCCEEDED:
        return _after_training(run, latest, trackio, evaluated)
    if latest.status in (JobStatus.FAILED, JobStatus.CANCELLED) and retry is not None:
        steps = [_after_failure(run, latest, retry)]
        if latest.status is JobStatus.FAILED:
            steps.append(_tool("logs", f'logs(job_id="{run.run_id}", tail=100)', "the evidence: its last lines"))
        return steps
    return []


def _after_training(
    run: RunRecord, latest: AttemptRecord, trackio: TrackioRun | None, evaluated: bool
) -> list[NextStep]:
    job = f'job_id="{run.run_id}"'
    where, base, adapter = _result(latest)
    steps = [_load(run, where, base, adapter)]
    if not evaluated:
        data = json.dumps(run.spec.eval_dataset or "<held-out data>")
        steps.append(
            _tool("evaluate", f"evaluate({job}, dataset={data})", "measure the trained model on held-out data")
        )
    steps.append(
        _tool(
            "convert_gguf",
            f'convert_gguf(source="{run.run_id}")',
            f"GGUF files (F16 and {', '.join(DEFAULT_QUANTIZATIONS)} by default; quantizations=[...] for others) "
            "for llama.cpp, Ollama, LM Studio",
        )
    )
    again = f"method={json.dumps(run.method)}, model={json.dumps(run.model)}, dataset={json.dumps(run.dataset)}"
    further = f'{again}, init_from="{run.run_id}"'
    if run.spec.after and run.model == run.spec.after:  # it trained on its parent's output: name this job as model
        further = f'method={json.dumps(run.method)}, model="{run.run_id}", dataset={json.dumps(run.dataset)}'
    steps.append(
        _tool(
            "continue_training",
            f"submit({further})",
            "train it further as a new job, from its final model with a fresh schedule (add hyperparameters=...)",
        )
    )
    if trackio is not None:
        kind: Literal["shell", "url"] = "url" if trackio.url else "shell"
        steps.append(
            NextStep(
                action="watch",
                kind=kind,
                call=trackio.open,
                why=f"its curves in trackio (project {trackio.project}, run {trackio.run})",
            )
        )
    return steps


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


def _after_failure(run: RunRecord, latest: AttemptRecord, decision: Decision) -> NextStep:
    if decision.retry:
        return _tool("retry", f'retry(job_id="{run.run_id}")', f"what a retry does now: {decision.message}")
    why = " ".join(part for part in (decision.message, decision.fix) if part)
    changes = decision.changes or _fixing_changes(run, latest)
    call = f'retry(job_id="{run.run_id}", changes={json.dumps(changes)})' if changes else None
    return NextStep(action="fix", kind="tool", call=call, why=why)


def _fixing_changes(run: RunRecord, latest: AttemptRecord) -> dict[str, Any] | None:
    """The change a retry needs after a failure that a change fixes, as the retry policy proposes it (a retry
    with it is allowed whatever the budgets say); None where the fix is not a retry (bad data, a missing package,
    a token) or no one change is known (unknown)."""
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


ToolAction = Literal["evaluate", "convert_gguf", "continue_training", "retry", "logs"]


def _tool(action: ToolAction, call: str, why: str) -> NextStep:
    return NextStep(action=action, kind="tool", call=call, why=why)
