"""validate_dataset: what a dataset holds, which TRL methods it fits as it is, and the mapping
that makes it fit when it does not.

One pass, I/O first: read the rows (read.py, files.py), and the model's tokenizer when one is
given; then judge them, purely: the shape per method (shapes.py), every row (rows.py), the
report (judge.py), token lengths (tokens.py). A dataset_mapping is validated and applied with
the job runtime's own implementation (mapping.py); the result models live in results/dataset.py.

Nothing heavy is imported at import time: huggingface_hub, pyarrow and transformers are imported
only by the code path that needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from jobtrail.errors import InvalidRequestError
from jobtrail.methods import METHODS
from jobtrail.models import Finding
from jobtrail.preflight.data_roots import confined
from jobtrail.preflight.dataset.judge import MAX_PROBLEMS, judge, verdict_findings
from jobtrail.preflight.dataset.mapping import job_runtime, mapping_python, validate_mapping
from jobtrail.preflight.dataset.read import load_tokenizer, model_positions, read_hub, read_local
from jobtrail.preflight.dataset.table import SourceError
from jobtrail.preflight.dataset.tokens import add_token_stats
from jobtrail.preflight.job_refs import names_a_job
from jobtrail.results.dataset import ColumnInfo, DatasetReport, MethodVerdict, RowProblem, TokenStats, finding
from jobtrail.util.refs import looks_local

__all__ = [
    "MAX_PROBLEMS",
    "ColumnInfo",
    "DatasetReport",
    "MethodVerdict",
    "RowProblem",
    "TokenStats",
    "job_runtime",
    "mapping_python",
    "validate_dataset",
    "validate_mapping",
]


def validate_dataset(
    dataset: str,
    method: str | None = None,
    split: str = "train",
    model: str | None = None,
    max_length: int | None = None,
    *,
    max_rows: int = 10000,
    mapping: dict[str, Any] | None = None,
    home: Path | None = None,
) -> DatasetReport:
    """Read up to `max_rows` rows of `dataset` and judge them for `method` (or every method).

    `mapping`: a dataset_mapping to apply first (what submit will run), so the verdicts describe
    the mapped rows. Problems with the data come back inside the report (findings, problems);
    only invalid arguments raise InvalidRequestError (an unknown method, a malformed mapping, a
    non-positive max_length/max_rows, an empty dataset reference), and a local dataset or model outside the data
    roots (data_roots.py), refused before anything is read; `home`: the service's state, besides JOBTRAIL_HOME's
    (what its jobs made, their outputs and the demo's files, may be read there).
    """
    methods = _methods_to_check(method)
    _check_arguments(dataset, split, model, max_length, max_rows)
    if mapping is not None:
        validate_mapping(mapping)
    dataset = dataset.strip()
    source: Literal["file", "hub"] = "file" if looks_local(dataset) else "hub"
    # Confined before a byte is read: the data (a link followed to where it leads) and a local model's tokenizer.
    where = str(confined(dataset, "dataset", home=home)) if source == "file" else dataset
    if model is not None and looks_local(model.strip()):
        confined(model.strip(), "model", home=home)
    try:
        if source == "hub" and names_a_job(dataset):
            raise SourceError(_job_id(dataset))
        table = read_local(where, split, max_rows, home) if source == "file" else read_hub(dataset, split, max_rows)
    except SourceError as exc:
        return DatasetReport(dataset=dataset, split=split, source=source, mapping=mapping, findings=[exc.finding])
    tokenizer, unloaded = load_tokenizer(model) if model is not None else (None, None)
    positions = model_positions(model) if model is not None else None
    # The I/O is done: everything below is pure.
    report = judge(table, methods, mapping, DatasetReport(dataset=dataset, split=split, source=source, mapping=mapping))
    if method is not None:
        report.findings += verdict_findings(method, report.methods[method])
    if model is not None:
        add_token_stats(
            report,
            table,
            model,
            tokenizer,
            unloaded=unloaded,
            max_length=max_length,
            positions=positions,
            method=method,
            mapping=mapping,
        )
    elif max_length is not None:
        report.findings.append(
            finding(
                "dataset.tokens",
                "max_length was given without a model, so token lengths were not measured.",
                "Pass model= (a local model directory with tokenizer files) to measure them.",
                "info",
            )
        )
    return report


def _job_id(dataset: str) -> Finding:
    """A job id is no Hub dataset: said at once, instead of asking the Hub (and retrying) for it."""
    return finding(
        "dataset.job_id",
        f"{dataset!r} is a jobtrail job id, not a dataset: a job's data is the dataset it was submitted with.",
        "Pass a data file or a Hub dataset id ('org/name') as dataset: the one a job trained on is on its receipt "
        f'(inspect). To train on a job\'s final model, pass model="{dataset}" instead.',
    )


def _methods_to_check(method: str | None) -> tuple[str, ...]:
    if method is None:
        return METHODS
    if method not in METHODS:
        raise InvalidRequestError(
            f"Unknown method {method!r}.",
            fix=f"Use one of: {', '.join(METHODS)}, or leave method out to check them all.",
        )
    return (method,)


def _check_arguments(dataset: Any, split: Any, model: Any, max_length: Any, max_rows: Any) -> None:
    if not isinstance(dataset, str) or not dataset.strip():
        raise InvalidRequestError(
            "dataset must name a file or a Hub dataset.",
            fix="Pass a path like 'data/train.jsonl' or a Hub id like 'trl-lib/Capybara'.",
        )
    if not isinstance(split, str) or not split.strip():
        raise InvalidRequestError("split must be a non-empty name.", fix='Pass split="train".')
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise InvalidRequestError(
            "model must name a model directory or Hub id.", fix="Pass a local model directory, or leave model out."
        )
    for name, value, optional in (("max_length", max_length, True), ("max_rows", max_rows, False)):
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequestError(
                f"{name} must be a positive integer, got {value!r}.", fix=f"Pass e.g. {name}=1024."
            )
