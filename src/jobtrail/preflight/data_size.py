"""The data's size in tokens, as the estimate needs it, from what validate_dataset measured.

validate_dataset already tokenizes the rows it reads with the model's own tokenizer (chat-templated
as the trainer will format them): the estimate reuses those lengths instead of a second pass, and
falls back to characters/CHARS_PER_TOKEN only where no tokenizer could be read, saying so. The
measured rows (at most validate_dataset's max_rows, 10,000) stand for the whole file: their length
distribution is scaled to the file's row count.
"""

from __future__ import annotations

import math
from pathlib import Path

from jobtrail.estimate.inputs import CHARS_PER_TOKEN, DataStats
from jobtrail.preflight.dataset import DatasetReport, validate_dataset
from jobtrail.util.refs import looks_local


def data_stats(report: DatasetReport | None) -> DataStats | None:
    """Rows and tokens per row of a read dataset: the tokenizer's lengths, else characters/4; None when
    nothing was read."""
    if report is None:
        return None
    rows = report.rows or report.rows_checked
    if not rows:
        return None
    name = Path(report.data_file or report.dataset).name
    tokens = report.token_lengths
    if tokens is not None and tokens.lengths:
        templated = ", chat-templated" if tokens.chat_template else ""
        sample = f", the first {tokens.rows:,} measured" if tokens.rows < rows else ""
        return DataStats(
            rows=rows,
            token_lengths=tokens.lengths,
            source=f"{name}: counted with {tokens.tokenizer}'s tokenizer{templated}{sample}",
            counted="tokenizer",
        )
    if not report.mean_chars_per_row:
        return None
    why = next((f.message for f in report.findings if f.code == "dataset.tokens"), "no tokenizer was given")
    return DataStats(
        rows=rows,
        token_lengths=[max(1, math.ceil(report.mean_chars_per_row / CHARS_PER_TOKEN))],
        source=f"{name}: characters/{CHARS_PER_TOKEN} per row, mean of {report.rows_checked:,} rows ({why})",
        counted="characters",
    )


def measured_data(dataset: str, method: str, model: str) -> DataStats | None:
    """For estimate_cost: a local data file's rows measured with `model`'s tokenizer (validate_dataset's
    pass); None for a Hub dataset or a file that cannot be read (the estimator then reads it itself and
    says what is wrong)."""
    if not looks_local(dataset) or not Path(dataset).expanduser().is_file():
        return None
    report = validate_dataset(dataset, method, model=model)
    if any(f.severity == "error" and f.code.startswith("dataset.") for f in report.findings) and not report.rows:
        return None
    return data_stats(report)
