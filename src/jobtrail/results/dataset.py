"""What validate_dataset answers: the result models, their markdown, and the wording they share."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from jobtrail.models import Finding, ToolResult
from jobtrail.results.endings import NextSteps, step_lines

Status = Literal["READY", "NEEDS_MAPPING", "INCOMPATIBLE"]
Severity = Literal["error", "warning"]


class ColumnInfo(BaseModel):
    name: str
    type: str = Field(
        description="Inferred from the values checked: string, integer, number, boolean, null, object, "
        "messages (a list of {role, content}), list[{from, value}], list[string] ...; 'a|b' when rows differ."
    )


class MethodVerdict(BaseModel):
    status: Status
    reason: str
    fix: str | None = Field(default=None, description="What to do when the status is not READY.")
    mapping: dict[str, Any] | None = Field(
        default=None, description="With NEEDS_MAPPING: pass it to submit as dataset_mapping."
    )
    python: str | None = Field(default=None, description="The mapping as equivalent `datasets` code.")


class RowProblem(BaseModel):
    row: int = Field(description="1-based: the line number in a .jsonl file, else the row number.")
    column: str | None = None
    problem: str
    severity: Severity = "error"


class TokenStats(BaseModel):
    p50: int
    p90: int
    p95: int
    p99: int
    max: int
    rows: int = Field(description="Rows measured.")
    over_max_length: int | None = Field(description="Rows longer than max_length (None: no max_length).")
    max_length: int | None
    tokenizer: str
    chat_template: bool = Field(description="Whether conversational rows were measured chat-templated.")
    mean: float | None = Field(None, description="Mean tokens per row measured, before truncation.")
    # Every measured row's length, for the estimate's padding and truncation (preflight.data_size): kept in
    # the process, out of the tool's result, which would otherwise carry up to 10,000 numbers.
    _lengths: list[int] = PrivateAttr(default_factory=list)

    def with_lengths(self, lengths: list[int]) -> TokenStats:
        self._lengths = list(lengths)
        return self

    @property
    def lengths(self) -> list[int]:
        return self._lengths


class DatasetReport(ToolResult):
    dataset: str
    split: str
    source: Literal["file", "hub"]
    data_file: str | None = Field(default=None, description="The file read (for the Hub: its path in the repo).")
    file_type: str | None = Field(default=None, description="How it was read: jsonl, json, csv, parquet.")
    format: str = Field(default="unknown", description="Detected: messages, text, prompt_completion, ...")
    conversational: bool = False
    mapping: dict[str, Any] | None = Field(default=None, description="The dataset_mapping applied first, if any.")
    rows: int | None = Field(default=None, description="Rows in the source (None: unknown).")
    rows_checked: int = 0
    mean_chars_per_row: float | None = Field(
        default=None, description="Mean characters of text per row read (for size estimates without a tokenizer)."
    )
    row_numbering: Literal["line", "row"] = "row"
    columns: list[ColumnInfo] = Field(default_factory=list)
    methods: dict[str, MethodVerdict] = Field(default_factory=dict)
    next_steps: NextSteps = Field(default_factory=list)
    problems: list[RowProblem] = Field(default_factory=list)
    problems_total: int = 0
    samples: list[dict[str, Any]] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    token_lengths: TokenStats | None = None

    def headline(self) -> str:
        """What was read, the verdict per method, and any error that stopped the check."""
        lines = [self._headline()]
        lines += [_verdict_line(name, v) for name, v in self.methods.items()]
        if not self.methods:
            lines.append("No verdict: the data could not be read.")
        lines += _finding_lines([f for f in self.findings if f.severity == "error"])
        return "\n".join(lines)

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        """Columns, warnings, row problems, token lengths, and each proposed mapping as Python."""
        lines = ["Columns: " + ", ".join(f"{c.name} ({c.type})" for c in self.columns)] if self.columns else []
        lines += _finding_lines([f for f in self.findings if f.severity != "error"])
        if self.problems:
            cut = self.problems_total > len(self.problems)
            lines.append(f"\nProblems ({f'{len(self.problems)} of ' if cut else ''}{self.problems_total}):")
            lines += [
                f"- {self._where(p)}: {p.problem}" + (" (warning)" if p.severity == "warning" else "")
                for p in self.problems
            ]
        if self.token_lengths:
            lines.append("\n" + _token_line(self.token_lengths))
        shown: set[str] = set()
        for name, verdict in self.methods.items():
            if verdict.mapping is not None and verdict.python and as_json(verdict.mapping) not in shown:
                shown.add(as_json(verdict.mapping))
                lines.append(f"\n{name}'s dataset_mapping as `datasets` code:\n```python\n{verdict.python}```")
        return lines

    def _headline(self) -> str:
        size = count(self.rows, "row") if self.rows is not None else "row count unknown"
        checked = f", {self.rows_checked} checked" if self.rows is None or self.rows_checked < self.rows else ""
        style = " (conversational)" if self.conversational else ""
        where = " ".join(filter(None, [self.source, self.file_type, self.data_file]))
        return (
            f"**Dataset {self.dataset}** (split {self.split}, {where}): {size}{checked}; format {self.format}{style}."
        )

    def _where(self, problem: RowProblem) -> str:
        place = f"{self.row_numbering} {problem.row}"
        return f"{place} · {problem.column}" if problem.column else place


def _verdict_line(name: str, verdict: MethodVerdict) -> str:
    mark = {"READY": "✓", "NEEDS_MAPPING": "~", "INCOMPATIBLE": "✗"}[verdict.status]
    return f"{mark} {name:<6} {verdict.status:<13} {verdict.reason}"


def _finding_lines(findings: list[Finding]) -> list[str]:
    if not findings:
        return []
    lines = ["\nFindings:"]
    for f in findings:
        mark = {"error": "✗", "warning": "!", "info": "i"}[f.severity]
        lines.append(f"{mark} {f.code}  {f.message}")
        if f.fix:
            lines.append(f"    Fix: {f.fix}")
    return lines


def _token_line(stats: TokenStats) -> str:
    text = "chat-templated " if stats.chat_template else ""
    line = (
        f"Token lengths ({text}{stats.tokenizer}, {stats.rows} rows): p50 {stats.p50} · p90 {stats.p90} · "
        f"p95 {stats.p95} · p99 {stats.p99} · max {stats.max}."
    )
    if stats.max_length is None:
        return line + " Pass max_length to count the rows over it."
    return line + f" {count(stats.over_max_length or 0, 'row')} over max_length {stats.max_length}."


# --- wording shared by the modules that fill a report ----------------------------------------


def finding(
    code: str, message: str, fix: str | None, severity: Literal["error", "warning", "info"] = "error"
) -> Finding:
    return Finding(code=code, severity=severity, message=message, fix=fix)


def count(n: int, noun: str) -> str:
    """'1 row', '3 rows'."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def as_json(value: Any) -> str:
    """A mapping as the agent passes it back (non-ASCII kept readable)."""
    return json.dumps(value, ensure_ascii=False)
