"""One data file (.jsonl, .json, .csv, .parquet) read into a Table, its values typed the way the
job's loader (`datasets`) types them, so the judging sees what the job will see.

pyarrow is imported only to read a .parquet file.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobtrail.preflight.dataset.table import SourceError, Table
from jobtrail.results.dataset import RowProblem, finding
from jobtrail.util.values import type_name

_CSV_TRUE, _CSV_FALSE = {"True", "TRUE", "true"}, {"False", "FALSE", "false"}
_WRITE_ROWS = 'Write the examples one JSON object per line (.jsonl), e.g. {"text": "..."}, or a CSV with a header row.'


def read_file(path: Path, max_rows: int) -> Table:
    readers: dict[str, Callable[[Path, int], Table]] = {
        ".jsonl": _read_jsonl,
        ".json": _read_json,
        ".csv": _read_csv,
        ".parquet": _read_parquet,
    }
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise SourceError(
            finding(
                "dataset.format",
                f"{path.name} is not a .jsonl, .json, .csv or .parquet file.",
                "Convert the data to JSON Lines (one JSON object per line) and pass that file.",
            )
        )
    if path.stat().st_size == 0:
        raise SourceError(finding("dataset.empty", f"{path.name} is empty.", _WRITE_ROWS))
    table = reader(path, max_rows)
    if table.total == 0:
        raise SourceError(finding("dataset.empty", f"{path.name} has no rows.", _WRITE_ROWS))
    if not table.rows:
        first = table.problems[0]
        raise SourceError(
            finding(
                "dataset.unreadable",
                f"No row of {path.name} could be read ({table.numbering} {first.row}: {first.problem}).",
                'Write one JSON object per line, e.g. {"messages": [{"role": "user", "content": "Hi"}, ...]}.',
            )
        )
    return table


def _read_jsonl(path: Path, max_rows: int, file_type: str = "jsonl") -> Table:
    table = Table(file_type=file_type, numbering="line")
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            table.total = (table.total or 0) + 1
            if table.examined >= max_rows:
                continue  # count the rest, parse none
            value, problem = _parse_json_line(raw, first=number == 1)
            if problem:
                table.problems.append(RowProblem(row=number, problem=problem))
            else:
                table.add(number, value)
    return table


def _parse_json_line(raw: bytes, *, first: bool) -> tuple[Any, str | None]:
    try:
        text = raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        return None, f"is not UTF-8 text (bad byte at position {exc.start + 1})"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"is not valid JSON: {exc.msg} (column {exc.colno})"
    except RecursionError:
        return None, "is JSON nested too deeply to read"


def _read_json(path: Path, max_rows: int) -> Table:
    text = _decode(path)
    try:
        value = json.loads(text)
    except RecursionError:
        raise SourceError(finding("dataset.invalid_json", f"{path.name} is nested too deeply to read.", None)) from None
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # one object after another: JSON Lines in a .json file, which loads fine
            return _read_jsonl(path, max_rows, file_type="json (JSON Lines)")
        raise SourceError(
            finding(
                "dataset.invalid_json",
                f"{path.name} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
                "Fix the file there, or write it as JSON Lines (.jsonl): one JSON object per line.",
            )
        ) from None
    table = Table(file_type="json")
    rows, key = _json_rows(value, path.name)
    if key is not None:
        table.findings.append(
            finding(
                "dataset.nested_json",
                f"The rows of {path.name} sit under the key {key!r}; the job's loader would read the file as ONE row "
                f"with a {key!r} column.",
                "Write the rows as JSON Lines: "
                f'python -c "import json,sys; rows=json.load(open(sys.argv[1]))[{key!r}]; '
                "open(sys.argv[2],'w').writelines(json.dumps(r)+chr(10) for r in rows)\" IN.json OUT.jsonl",
            )
        )
    table.total = len(rows)
    for number, row in enumerate(rows[:max_rows], 1):
        table.add(number, row)
    return table


def _json_rows(value: Any, name: str) -> tuple[list[Any], str | None]:
    """(rows, key they were nested under) for a whole-file JSON value."""
    if isinstance(value, list):
        return value, None
    if not isinstance(value, dict):
        raise SourceError(
            finding(
                "dataset.invalid_json",
                f"{name} holds a JSON {type_name(value)}, not a list of rows.",
                "Write a list of objects ([{...}, {...}]) or JSON Lines (.jsonl).",
            )
        )
    nested = [k for k, v in value.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
    for key in ("train", "data", *nested):
        if key in nested:
            return value[key], key
    return [value], None  # a single object is a single row, as the job's loader reads it


def _decode(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(
            finding(
                "dataset.unreadable",
                f"{path.name} is not UTF-8 text (bad byte at offset {exc.start}).",
                "Re-save the file as UTF-8.",
            )
        ) from None


def _read_csv(path: Path, max_rows: int) -> Table:
    reader = csv.reader(io.StringIO(_decode(path), newline=""))
    table = Table(file_type="csv")
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # the job's loader (pandas) has no field limit; match it
    number = 0
    try:
        header = next(reader, None)
        if not header:
            raise SourceError(finding("dataset.empty", f"{path.name} has no header row.", _WRITE_ROWS))
        for record in reader:
            if not record:
                continue  # a blank line, skipped by the job's loader too
            number += 1
            table.total = number
            if table.examined >= max_rows:
                continue
            if len(record) != len(header):
                problem = f"has {len(record)} fields; the header has {len(header)}"
                table.problems.append(RowProblem(row=number, problem=problem))
                continue
            table.add(number, dict(zip(header, record, strict=True)))
    except csv.Error as exc:
        table.problems.append(RowProblem(row=number + 1, problem=f"is not valid CSV: {exc}; reading stopped here"))
    finally:
        csv.field_size_limit(limit)
    _type_csv_columns(table.rows)
    return table


def _type_csv_columns(rows: list[dict[str, Any]]) -> None:
    """Type values the way the job's loader (pandas) does: empty → null; all-bool/int/float columns."""
    for name in rows[0] if rows else ():
        values = [row[name] for row in rows if row[name] != ""]
        convert = _csv_converter(values)
        for row in rows:
            row[name] = convert(row[name]) if row[name] != "" else None


def _csv_converter(values: list[str]) -> Callable[[str], Any]:
    if values and all(v in _CSV_TRUE | _CSV_FALSE for v in values):
        return lambda v: v in _CSV_TRUE
    for number in (int, float):
        try:
            for v in values:
                number(v)
        except ValueError:
            continue
        return number if values else str
    return str


def _read_parquet(path: Path, max_rows: int) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError(
            finding(
                "dataset.unreadable",
                "Reading .parquet needs pyarrow, which this environment lacks.",
                "pip install pyarrow",
            )
        ) from None
    table = Table(file_type="parquet")
    try:
        parquet = pq.ParquetFile(path)
        table.total = parquet.metadata.num_rows
        rows: list[dict[str, Any]] = []
        for batch in parquet.iter_batches(batch_size=min(max_rows, 1024)):
            rows += batch.to_pylist()
            if len(rows) >= max_rows:
                break
    except Exception as exc:  # noqa: BLE001  pyarrow raises ArrowInvalid, OSError and others for a damaged file
        raise SourceError(
            finding("dataset.unreadable", f"{path.name} is not a readable Parquet file: {exc}", "Re-export the file.")
        ) from None
    for number, row in enumerate(rows[:max_rows], 1):
        table.add(number, row)
    return table
