"""What a job leaves for the jobs that read it (an evaluation, a conversion, a follower): its final model or
one of its committed checkpoints.

A local job's are directories on its machine. A remote (HF Jobs) job's machine is gone once it ends: what it
leaves is what it pushed to its Hub repo (its config's hub_model_id): the final model at the repo's root, and
each committed checkpoint in the repo's REMOTE_CHECKPOINT folder, one commit each (a checkpoint replaces the
one before, so an older one is read at the commit that pushed it, which its `pushed` event names).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobtrail.backends.registry import traits_of
from jobtrail.errors import InvalidRequestError, NotFoundError
from jobtrail.models import AttemptRecord, RunRecord
from jobtrail.outcomes.evals import HubWeights
from jobtrail.service.context import ServiceContext
from jobtrail.templates.configs import REMOTE_CHECKPOINT


@dataclass(frozen=True)
class JobOutput:
    """A job's final model or committed checkpoint: its base model and the weights on top of it."""

    base: str  # the model the job trained from
    adapter: str | None  # the adapter (or whole model) directory, or the Hub repo a remote job pushed to
    label: str  # "final" or the checkpoint's name
    hub: HubWeights | None = None  # a remote job's: where in its Hub repo, at which commit


def job_output(context: ServiceContext, run: RunRecord, checkpoint: str | None) -> JobOutput:
    """A job's final model (checkpoint None) or one of its committed checkpoints, by name, path or step."""
    latest = context.latest(run.run_id)
    if not latest.status.is_terminal and checkpoint is None:
        raise InvalidRequestError(
            f"{run.run_id} is still {latest.status.value}: its final model does not exist yet.",
            fix=f'Pass after="{run.run_id}" to queue this until it succeeds, or pass checkpoint= '
            "(a committed one, see inspect).",
        )
    if traits_of(run.backend).output == "hub_repo":
        return _pushed_output(context, run, latest, checkpoint)
    base = latest.config["model"]
    if checkpoint is None:
        return JobOutput(base, str(Path(latest.output_dir) / "final"), "final")
    committed = context.ledger.committed_checkpoints(run.run_id)
    for c in committed:
        if checkpoint in (c.path, Path(c.path).name, str(c.step)):
            return JobOutput(base, c.path, Path(c.path).name)
    names = ", ".join(sorted({Path(c.path).name for c in committed})) or "none yet"
    raise NotFoundError(f"{run.run_id} has no committed checkpoint {checkpoint!r}.", fix=f"Use one of: {names}.")


def refuse_unpushed(context: ServiceContext, run: RunRecord) -> None:
    """A job queued to read `run`'s final model once it succeeds is refused now, not then, when `run` is a remote
    job that pushes nothing (InvalidRequestError, hub_repo's)."""
    if traits_of(run.backend).output == "hub_repo":
        hub_repo(run, context.latest(run.run_id))


def hub_repo(run: RunRecord, latest: AttemptRecord) -> str:
    """The Hub repo a remote job pushes to; refused when it has none (its model went with its machine)."""
    repo = latest.config.get("hub_model_id")
    if not repo:
        raise InvalidRequestError(
            f"{run.run_id} ran on HF Jobs without a Hub repo to push to: its checkpoints and final model were lost "
            "with its machine, so there is nothing to read.",
            fix='Submit the training again with output="<your-user-or-org>/<name>" (the Hub repo it pushes its '
            "checkpoints and final model to; a token that can write there), then pass that job's id.",
        )
    return str(repo)


def _pushed_output(context: ServiceContext, run: RunRecord, latest: AttemptRecord, checkpoint: str | None) -> JobOutput:
    """A remote job's final model or pushed checkpoint, in its Hub repo."""
    repo, base = hub_repo(run, latest), latest.config["model"]
    if checkpoint is None:
        return JobOutput(base, repo, "final", HubWeights(run.run_id))  # read at the repo's head (preflight pins it)
    pushed = pushed_checkpoints(context, run.run_id)
    wanted = checkpoint.strip()
    if wanted == REMOTE_CHECKPOINT and pushed:
        wanted = str(max(pushed))
    for step, revision in pushed.items():
        if wanted in (f"checkpoint-{step}", str(step)) or Path(wanted).name == f"checkpoint-{step}":
            return JobOutput(base, repo, f"checkpoint-{step}", HubWeights(run.run_id, revision, REMOTE_CHECKPOINT))
    names = ", ".join(f"checkpoint-{step}" for step in sorted(pushed))
    raise NotFoundError(
        f"{run.run_id} pushed no checkpoint {checkpoint!r} to {repo}.",
        fix=f"Use one of: {names}."
        if names
        else f'It has pushed none yet: evaluate its final model once it succeeds (after="{run.run_id}").',
    )


def pushed_checkpoints(context: ServiceContext, run_id: str) -> dict[int, str | None]:
    """{step: the Hub commit that pushed it} of every checkpoint a remote run pushed (a later attempt's push of a
    step wins); the commit is None in events from before jobs reported it: only the newest is then readable, at
    the repo's head."""
    pushed: dict[int, str | None] = {}
    for attempt in context.ledger.attempts(run_id):
        if attempt.smoke_steps:  # a smoke run pushes nothing
            continue
        for event in context.ledger.events(attempt.attempt_id, "checkpoint"):
            if event.get("state") == "pushed" and isinstance(event.get("step"), int):
                pushed[event["step"]] = event.get("revision")
    return pushed
