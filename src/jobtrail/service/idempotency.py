"""submit(idempotency_key=...): a submit call that is sent again (the client timed out and the agent
retried it) returns the job the first call started instead of starting, and paying for, a second one.

"The same arguments" is the normalised request: submit's JobSpec as it reads it (local paths made
absolute, the timeout in seconds, `after` set when `model` names a job) with max_retries, force and
the spending cap that applies (max_cost_usd, else JOBTRAIL_MAX_COST_USD).
Not compared: dry_run and include_script, which change what comes back, not the job; a dry run neither
reads nor uses a key. A key is used once a job is created with it (a rejected submission uses none) and
stays with that job in the ledger: another job needs another key.
"""

from __future__ import annotations

import json
from typing import Any

from jobtrail.errors import InvalidRequestError
from jobtrail.methods import METHODS
from jobtrail.methods.hyperparameters import typed
from jobtrail.models import JobSpec, RunRecord
from jobtrail.preflight.hyperparams import read_names
from jobtrail.results.submit import SubmitResult
from jobtrail.service.context import ServiceContext

_SHOWN_CHARS = 80  # of each differing value in the refusal


def request_of(spec: JobSpec, *, max_retries: int, force: bool, max_cost_usd: float | None) -> dict[str, Any]:
    """What a key stands for: everything that decides the job, normalised (the spending cap as it applies)."""
    dumped = spec.model_dump(mode="json")
    return {**_normalised(dumped), "max_retries": max_retries, "force": force, "max_cost_usd": max_cost_usd}


def _normalised(request: dict[str, Any]) -> dict[str, Any]:
    """A training request's hyperparameters as the job reads them: each under its field's name (lr is
    learning_rate) and read as the field's type ("30" is 30), so a call sent again with a value written another
    way is the same call. Applied to the request a key was used with too: one stored before it was normalised."""
    method, given = request.get("method"), request.get("hyperparameters")
    if method not in METHODS or not isinstance(given, dict):
        return request
    return {**request, "hyperparameters": typed(method, read_names(method, given).values)}


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each argument that differs, as "name: <then> then, <now> now" (an object's entries one by one)."""
    found = []
    for name in sorted(set(before) | set(now)):
        old, new = before.get(name), now.get(name)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            found += [f"{name}.{line}" for line in differences(old, new)]
        else:
            found.append(f"{name}: {_shown(old)} then, {_shown(new)} now")
    return found


def replay(
    context: ServiceContext, key: str, run: RunRecord, used_with: dict[str, Any], request: dict[str, Any]
) -> SubmitResult:
    """The job `key` started, when `request` is the one it was used with; otherwise the refusal naming what differs."""
    changed = differences(_normalised(used_with), request)
    if changed:
        raise InvalidRequestError(
            f"idempotency_key {key!r} was used by {run.run_id} with other arguments ({'; '.join(changed)}); "
            "nothing was submitted.",
            fix=f"For a different job pass a new idempotency_key; to follow the job that key started, "
            f'inspect(job_id="{run.run_id}").',
        )
    attempts = context.ledger.attempts(run.run_id)
    first, latest = attempts[0], attempts[-1]
    return SubmitResult(
        job_id=run.run_id,
        status=latest.status.value,
        already_submitted=True,
        idempotency_key=key,
        findings=first.findings,
        script_sha256=first.script_sha256,
        config_sha256=first.config_sha256,
        forced=first.forced,
        backend=run.backend,
        workdir=str(context.workdir(latest)),
        output_dir=latest.output_dir,
        output_repo=latest.config.get("hub_model_id"),
        after=run.spec.after,
        smoke_steps=run.spec.smoke_steps,
    )


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"
