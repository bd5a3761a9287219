"""Judging a table of rows: the report's columns, format, samples, a verdict per method and the
row problems. Pure: it works on rows already read (read.py) and mapped (mapping.py).

A verdict starts from the shape (shapes.py); rows with errors (rows.py, or rows that could not
be read or mapped) turn it INCOMPATIBLE, since the job would stop on them.
"""

from __future__ import annotations

from typing import Any

from jobtrail.models import Finding
from jobtrail.preflight.credentials import mask_samples
from jobtrail.preflight.dataset.mapping import MappedRows, map_rows, mapping_python
from jobtrail.preflight.dataset.rows import row_checker
from jobtrail.preflight.dataset.shapes import PLANNERS, Columns, detect_format, incompatible
from jobtrail.preflight.dataset.table import Table
from jobtrail.results.dataset import ColumnInfo, DatasetReport, MethodVerdict, RowProblem, as_json, count, finding
from jobtrail.util.values import cut_sample, text_chars, type_name

MAX_PROBLEMS = 20  # problems listed in a report; problems_total counts them all
SAMPLE_ROWS = 3


def judge(
    table: Table, methods: tuple[str, ...], mapping: dict[str, Any] | None, report: DatasetReport
) -> DatasetReport:
    """Fill `report` with what `table` says of itself (its file, type, rows, numbering and reading findings), then
    columns, format, samples, a verdict per method and the row problems."""
    report.data_file, report.file_type, report.rows = table.data_file, table.file_type, table.total
    report.row_numbering, report.findings = table.numbering, list(table.findings)
    source = map_rows(table.rows, table.numbers, mapping)
    columns = Columns.of(source.rows)
    report.format = detect_format(columns)
    report.conversational = any(columns.conversational(n) for n in ("messages", "prompt", "chosen", "completion"))
    report.rows_checked = table.examined
    if source.rows:
        report.mean_chars_per_row = round(sum(text_chars(r) for r in source.rows) / len(source.rows), 1)
    report.columns = _column_infos(source.rows)
    report.samples = [mask_samples(cut_sample(row)) for row in table.rows[:SAMPLE_ROWS]]
    problems: dict[tuple[int, str | None, str], RowProblem] = {}
    for p in [*table.problems, *source.problems]:
        problems.setdefault((p.row, p.column, p.problem), p)
    shared = [*table.problems, *source.problems]  # rows every method's job would stumble on
    for method in methods:
        verdict, found = _judge_method(method, columns, source, shared, table)
        report.methods[method] = verdict
        for p in found:
            problems.setdefault((p.row, p.column, p.problem), p)
    ordered = sorted(problems.values(), key=lambda p: p.row)
    report.problems, report.problems_total = ordered[:MAX_PROBLEMS], len(ordered)
    return report


def _judge_method(
    method: str, columns: Columns, source: MappedRows, shared: list[RowProblem], table: Table
) -> tuple[MethodVerdict, list[RowProblem]]:
    if not source.rows:  # submit shows no `problems`: the first is said here, where every answer shows it
        errors = [p for p in shared if p.severity == "error"] or shared
        first = f" (first: {_where(table, errors[0])}: {errors[0].problem})" if errors else ""
        return incompatible(f"no row could be read or mapped{first}", "Fix what the first problem says."), []
    plan = PLANNERS[method](columns)
    if plan.status == "INCOMPATIBLE":
        return plan, []
    view = map_rows(source.rows, source.numbers, plan.mapping, proposed=True)
    check = row_checker(method, Columns.of(view.rows).names)
    found = list(view.problems)
    for number, row in zip(view.numbers, view.rows, strict=True):
        found += [RowProblem(row=number, column=i.column, problem=i.problem, severity=i.severity) for i in check(row)]
    if plan.mapping is not None:
        plan.python = mapping_python(plan.mapping)
    return _settle(method, plan, [*shared, *found], table), found


def _settle(method: str, plan: MethodVerdict, problems: list[RowProblem], table: Table) -> MethodVerdict:
    """The plan's verdict, unless rows with errors would stop the job."""
    errors = [p for p in problems if p.severity == "error"]
    warnings = len(problems) - len(errors)
    if not errors:
        if warnings:
            plan.reason += f" ({count(warnings, 'warning')}: see problems)"
        return plan
    bad_rows = len({p.row for p in errors})
    first = errors[0]
    where = _where(table, first)
    mapped = f" (dataset_mapping={as_json(plan.mapping)})" if plan.mapping else ""
    then = f" With them fixed: {plan.reason}{mapped}."
    first_problem = f"first: {where}: {first.problem}"
    return incompatible(
        f"{bad_rows} of {count(table.examined, 'row')} cannot be used for {method} ({first_problem}).{then}",
        f"Fix or remove the rows listed under problems (the first is {table.numbering} {first.row}), "
        "then validate again.",
    )


def _where(table: Table, problem: RowProblem) -> str:
    return f"{table.numbering} {problem.row}" + (f" · {problem.column}" if problem.column else "")


def verdict_findings(method: str, verdict: MethodVerdict) -> list[Finding]:
    if verdict.status == "NEEDS_MAPPING":
        return [
            finding(
                "dataset.columns",
                f"The data does not fit {method} as it is: {verdict.reason}.",
                f"Pass dataset_mapping={as_json(verdict.mapping)} to submit "
                "(validate_dataset shows the equivalent Python).",
            )
        ]
    if verdict.status == "INCOMPATIBLE":
        return [finding("dataset.incompatible", f"The data does not fit {method}: {verdict.reason}", verdict.fix)]
    return []


def _column_infos(rows: list[dict[str, Any]]) -> list[ColumnInfo]:
    types: dict[str, dict[str, None]] = {}
    for row in rows:
        for key, value in row.items():
            seen = types.setdefault(key, {})
            if len(seen) < 4:
                seen.setdefault(type_name(value))
    return [ColumnInfo(name=str(name), type="|".join(seen)) for name, seen in types.items()]
