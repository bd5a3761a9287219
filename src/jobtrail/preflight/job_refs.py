"""A jobtrail job id given where data goes: refused at once, never looked for on the Hub.

An agent that has a job in mind writes its id where the job's data or model should go (`dataset="jt-4f9k2m7q"`).
Read as a Hub id it would be looked up, retried for a minute and reported missing; the job it names says what
was meant instead: its final model is `model="<job id>"`, its data is the dataset it was submitted with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobtrail.errors import InvalidRequestError
from jobtrail.methods import METHODS
from jobtrail.models import JobStatus
from jobtrail.util.refs import JOB_ID


def names_a_job(ref: str) -> bool:
    """Whether `ref` is shaped like a job id and is no file or directory here."""
    key = ref.strip()
    return bool(JOB_ID.fullmatch(key)) and not Path(key).expanduser().exists()


def refuse_job_as_dataset(dataset: str, ledger: Any) -> None:
    """Raise when a training job's `dataset` names a job (`ledger`: the service's, None where there is none),
    with the submit that was meant: the job's final model as `model`, or its data as `dataset`."""
    if not names_a_job(dataset):
        return
    key = dataset.strip()
    run = (ledger.get_run(key) or ledger.get_run(key.lower())) if ledger is not None else None
    if run is None:
        raise InvalidRequestError(
            f"dataset={key!r} looks like a jobtrail job id, not a dataset, and no job has it.",
            fix="Pass a data file (.jsonl, .json, .csv, .parquet) or a Hub dataset id ('org/name') as dataset; "
            "ps lists job ids, and a job's receipt (inspect) names the dataset it trained on.",
        )
    job, data = run.run_id, run.spec.dataset
    if run.method not in METHODS:
        raise InvalidRequestError(
            f"dataset={key!r} names {job}, a {run.method} job, not a dataset.",
            fix=f"Pass a data file or a Hub dataset id as dataset{f' (it read {data!r})' if data else ''}.",
        )
    message = f"dataset={key!r} names {job}, a {run.method} job of {run.spec.model} on {data}, not a dataset."
    status = ledger.attempts(run.run_id)[-1].status
    if status.is_terminal and status is not JobStatus.SUCCEEDED:  # it has no final model, and never will as it is
        raise InvalidRequestError(message, fix=f'To train on its data, pass dataset="{data}".')
    raise InvalidRequestError(
        message,
        fix=f'To train further from its final model: submit(method="{run.method}", model="{job}", dataset="{data}") '
        f'(model="{job}" starts from what it trained, once it succeeds). To train on its data: dataset="{data}".',
    )
