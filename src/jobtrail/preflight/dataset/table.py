"""What reading a dataset produces: a Table of rows, or a SourceError saying why there is none."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from jobtrail.models import Finding
from jobtrail.results.dataset import RowProblem
from jobtrail.util.values import type_name


class SourceError(Exception):
    """The source cannot be read at all; the finding says why and what to do."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


@dataclass
class Table:
    """Rows as read, with the 1-based number (line or row) each came from."""

    file_type: str
    numbering: Literal["line", "row"] = "row"
    rows: list[dict[str, Any]] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    problems: list[RowProblem] = field(default_factory=list)  # rows that could not be read
    total: int | None = 0  # rows in the source; None when only part of it was fetched
    data_file: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def examined(self) -> int:
        return len(self.rows) + len(self.problems)

    def add(self, number: int, row: Any) -> None:
        if isinstance(row, dict):
            self.rows.append(row)
            self.numbers.append(number)
        else:
            problem = f"is a JSON {type_name(row)}, not an object (one field per column)"
            self.problems.append(RowProblem(row=number, problem=problem))
