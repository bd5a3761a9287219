"""The structured events a job prints (`JOBTRAIL {json}`), parsed back from any backend's log.

Pure: the service feeds it log lines and stores what it returns, so a receipt can be rebuilt
from the log alone. Every event has "event" and "time" (the job's clock); among them, what a
watcher reads while the job runs (scripts/_runtime.py and _training.py print them):

    {"event": "phase", "phase": "training", "max_steps": 60, "step": 0}
        the job enters a phase: loading_model, tokenizing, training, evaluating, saving, pushing
        (convert_gguf also: installing, converting, quantizing). Printed on each change; "training"
        comes again with max_steps (the trainer's total, also for a run by epochs) and the step it
        starts from (a resumed attempt's). latest_phase() reads the current one.
    {"event": "alert", "code": "nan_loss", "step": 3, "message": "...", "fix": "..."}
        the job saw something wrong in itself, as soon as it saw it; one per code per attempt.
        Codes: nan_loss, nan_weights, loss_diverged and collapsed (the job then stops, ending
        `diverged`), loss_spike, grad_norm_exploding, stalled, overfitting, grpo_reward_std_zero,
        grpo_completions_clipped, and as training ends nothing_learned and loss_not_falling
        (the trackio callback adds its own warnings). alerts() reads them.
    {"event": "eval", "step": 20, "epoch": 0.5, "metrics": {"eval_loss": 1.93, "eval_runtime": 0.4}}
        an evaluation during training (eval_dataset or eval_split_ratio), every eval_steps, with
        every number the trainer logged under TRL's names. An evaluation job's own `eval` events
        carry a "state" instead (outcomes/evals.py); eval_metrics() reads only these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jobtrail.models import CheckpointRecord

PREFIX = "JOBTRAIL "
_STEP_FIELDS = ("step", "loss", "learning_rate", "grad_norm", "epoch", "tokens")
# A `warning` event: something a job that may still succeed wants the agent to know (GRPO rewards
# that never differ, completions cut short), with what to do about it.
WARNING_FIELDS = ("code", "step", "message", "fix")
# A checkpoint's states as the ledger keeps them (a job's `discarded` partial directories were never committed).
CHECKPOINT_STATES = ("writing", "committed", "superseded", "withdrawn")
ALERT_FIELDS = WARNING_FIELDS  # an `alert` event: what the job saw wrong in itself while it ran


def parse_line(line: str) -> dict[str, Any] | None:
    """The event on this log line, or None for ordinary output (and for mangled event lines)."""
    at = line.find(PREFIX)
    if at < 0:
        return None
    try:
        event = json.loads(line[at + len(PREFIX) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


@dataclass
class Digest:
    """What a batch of events changes on the attempt's receipt."""

    events: list[dict[str, Any]] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    checkpoints: list[CheckpointRecord] = field(default_factory=list)


def digest(lines: list[str]) -> Digest:
    out = Digest()
    for line in lines:
        event = parse_line(line)
        if event is None:
            continue
        out.events.append(event)
        _fold(event, out)
    return out


def _fold(event: dict[str, Any], out: Digest) -> None:
    kind = event["event"]
    payload = {k: v for k, v in event.items() if k not in ("event", "time")}
    if kind == "environment":
        out.fields["environment"] = payload
    elif kind == "data_manifest":
        out.fields["data_manifest"] = payload
    elif kind == "resume" and payload.get("checkpoint"):
        out.fields["resumed_from"] = payload["checkpoint"]
    elif kind == "step":
        out.fields["last_metrics"] = step_metrics(payload)
    elif kind == "metrics":
        out.fields["summary"] = payload
    elif kind == "checkpoint" and payload.get("path") and payload.get("state") in CHECKPOINT_STATES:
        out.checkpoints.append(
            CheckpointRecord(
                path=str(payload["path"]),
                step=payload.get("step"),
                state=payload["state"],
                manifest_sha256=payload.get("manifest_sha256"),
                updated_at=float(event.get("time") or 0.0),
            )
        )


def step_metrics(payload: dict[str, Any]) -> dict[str, Any]:
    """Every metric a step event carries, flat: its own fields, then the method's, under TRL's
    names ("rewards/accuracies", "reward_std", "completions/clipped_ratio" ...)."""
    own = {k: payload[k] for k in _STEP_FIELDS if payload.get(k) is not None}
    method = payload.get("metrics")
    extra = {k: v for k, v in method.items() if k not in own} if isinstance(method, dict) else {}
    return {**own, **extra}


def alerts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `alert` events, each as code, step, message and fix (in the order the job printed them)."""
    return [{k: e.get(k) for k in ALERT_FIELDS} for e in events if e.get("event") == "alert"]


def latest_phase(events: list[dict[str, Any]]) -> str | None:
    """The phase the job announced last (None before its first `phase` event)."""
    found = [e["phase"] for e in events if e.get("event") == "phase" and isinstance(e.get("phase"), str)]
    return found[-1] if found else None


def eval_metrics(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each evaluation during training, flat: {"step": 20, "epoch": 0.5, "eval_loss": 1.93, ...}."""
    points = []
    for e in events:
        if e.get("event") == "eval" and "state" not in e and isinstance(e.get("step"), int):
            metrics = e.get("metrics")
            points.append(
                {"step": e["step"], "epoch": e.get("epoch"), **(metrics if isinstance(metrics, dict) else {})}
            )
    return points


def warnings(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `warning` events, each as code, step, message and fix (in the order the job printed them)."""
    return [{k: e.get(k) for k in WARNING_FIELDS} for e in events if e.get("event") == "warning"]


def termination_event(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The job's own account of how it ended (the last one wins)."""
    found = [e for e in events if e.get("event") == "termination"]
    return found[-1] if found else None
