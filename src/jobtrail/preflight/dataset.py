"""validate_dataset: what a dataset holds, which TRL methods it fits as it is, and the mapping
that makes it fit when it does not.

Three layers, in this order in the file:
- reading (the only I/O): local .jsonl/.json/.csv/.parquet files, a directory of them, or one
  data file of a Hub dataset's split fetched with huggingface_hub; rows the reader cannot parse
  become RowProblems, a source that cannot be read at all becomes one Finding;
- judging (pure): TRL's dataset formats (messages, text, prompt/completion, preference with an
  explicit or implicit prompt, prompt-only, unpaired preference), each row checked by content,
  and common other shapes (ShareGPT, Alpaca, question/answer, renamed preference columns)
  answered with a declarative `dataset_mapping`;
- token lengths, only when a model (tokenizer) is given.

The mapping language has ONE implementation, scripts/_runtime.py `apply_mapping`, which every
rendered job inlines; `job_runtime()` loads that same file here, so a mapping that validates
READY is exactly the transformation the job applies.

Nothing heavy is imported at module import time (the MCP server imports this module):
huggingface_hub, pyarrow and transformers are imported only by the code path that needs them.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from jobtrail.errors import InvalidRequestError
from jobtrail.models import Finding
from jobtrail.util.refs import DATA_EXTENSIONS, looks_local
from jobtrail.templates.render import RUNTIME_MODULE, scripts_dir

DATASET_METHODS: tuple[str, ...] = ("sft", "dpo", "grpo", "reward", "kto")
Status = Literal["READY", "NEEDS_MAPPING", "INCOMPATIBLE"]
Severity = Literal["error", "warning"]

MAX_PROBLEMS = 20  # problems listed in a report; problems_total counts them all
SAMPLE_ROWS = 3
SAMPLE_CHARS = 200  # longer strings in samples are cut, with a marker saying by how much
SAMPLE_ITEMS = 8  # longer lists in samples are cut the same way
HUB_PROBE_TIMEOUT_S = 5.0

# Column names other datasets use for what TRL calls prompt/completion/chosen/rejected/messages,
# in order of preference when several are present.
PROMPT_ALIASES = ("prompt", "question", "query", "instruction", "problem", "input")
COMPLETION_ALIASES = ("completion", "answer", "response", "output", "solution")
CHOSEN_ALIASES = ("chosen", "response_chosen", "chosen_response", "good", "preferred", "accepted", "better")
REJECTED_ALIASES = ("rejected", "response_rejected", "rejected_response", "bad", "dispreferred", "worse")
CONVERSATION_ALIASES = ("messages", "conversations", "conversation", "chat", "dialog", "dialogue", "turns")
ROLE_KEYS = ("role", "from", "speaker", "author")
CONTENT_KEYS = ("content", "value", "text", "message")
# Role names seen in ShareGPT-style data → chat roles (the chat roles map to themselves).
ROLE_ALIASES = {
    "human": "user", "gpt": "assistant", "bot": "assistant", "model": "assistant",
    "chatgpt": "assistant", "function": "tool", "observation": "tool",
}
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_CSV_TRUE, _CSV_FALSE = {"True", "TRUE", "true"}, {"False", "FALSE", "false"}
_WRITE_ROWS = "Write the examples one JSON object per line (.jsonl), e.g. {\"text\": \"...\"}, or a CSV with a header row."


# --- result models ---------------------------------------------------------------------------


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


class DatasetReport(BaseModel):
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
    problems: list[RowProblem] = Field(default_factory=list)
    problems_total: int = 0
    samples: list[dict[str, Any]] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    token_lengths: TokenStats | None = None

    def to_markdown(self) -> str:
        """Verdict per method first, then findings and problems, then what to do."""
        lines = [self._headline()]
        lines += [_verdict_line(name, v) for name, v in self.methods.items()]
        if not self.methods:
            lines.append("No verdict: the data could not be read (see below).")
        if self.columns:
            lines.append("Columns: " + ", ".join(f"{c.name} ({c.type})" for c in self.columns))
        lines += _finding_lines(self.findings)
        if self.problems:
            cut = self.problems_total > len(self.problems)
            lines.append(f"\nProblems ({f'{len(self.problems)} of ' if cut else ''}{self.problems_total}):")
            lines += [f"- {self._where(p)}: {p.problem}" + (" (warning)" if p.severity == "warning" else "")
                      for p in self.problems]
        if self.token_lengths:
            lines.append("\n" + _token_line(self.token_lengths))
        lines += self._next_steps()
        return "\n".join(lines)

    def _headline(self) -> str:
        size = _count(self.rows, "row") if self.rows is not None else "row count unknown"
        checked = f", {self.rows_checked} checked" if self.rows is None or self.rows_checked < self.rows else ""
        style = " (conversational)" if self.conversational else ""
        where = " ".join(filter(None, [self.source, self.file_type, self.data_file]))
        return f"**Dataset {self.dataset}** (split {self.split}, {where}): {size}{checked}; format {self.format}{style}."

    def _where(self, problem: RowProblem) -> str:
        place = f"{self.row_numbering} {problem.row}"
        return f"{place} · {problem.column}" if problem.column else place

    def _next_steps(self) -> list[str]:
        steps: list[str] = []
        shown: dict[str, str] = {}  # mapping JSON → the first method it was shown for
        # A shape misfit is worth a line when it is the method asked about, or when nothing fits.
        alone = len(self.methods) == 1
        usable = any(v.status != "INCOMPATIBLE" for v in self.methods.values())
        for name, verdict in self.methods.items():
            if verdict.status == "NEEDS_MAPPING" and verdict.mapping is not None:
                key = _json(verdict.mapping)
                if key in shown:
                    steps.append(f"- {name}: the same dataset_mapping as {shown[key]}.")
                    continue
                shown[key] = name
                steps.append(f"- {name}: submit(..., dataset_mapping={key})")
                steps.append(f"  Equivalent Python:\n```python\n{verdict.python}```")
            elif verdict.status == "INCOMPATIBLE" and verdict.fix and (alone or not usable):
                steps.append(f"- {name}: {verdict.fix}")
        ready = [name for name, v in self.methods.items() if v.status == "READY"]
        if ready:
            call = f'submit(method="{ready[0]}", dataset="{self.dataset}", ...)'
            steps.insert(0, f"- Ready for {', '.join(ready)}: {call}")
        return ["\nWhat to do:", *steps] if steps else []


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
    line = (f"Token lengths ({text}{stats.tokenizer}, {stats.rows} rows): p50 {stats.p50} · p90 {stats.p90} · "
            f"p95 {stats.p95} · p99 {stats.p99} · max {stats.max}.")
    if stats.max_length is None:
        return line + " Pass max_length to count the rows over it."
    return line + f" {_count(stats.over_max_length or 0, 'row')} over max_length {stats.max_length}."


# --- public API --------------------------------------------------------------------------------


def validate_dataset(
    dataset: str,
    method: str | None = None,
    split: str = "train",
    model: str | None = None,
    max_length: int | None = None,
    *,
    max_rows: int = 10000,
    mapping: dict[str, Any] | None = None,
) -> DatasetReport:
    """Read up to `max_rows` rows of `dataset` and judge them for `method` (or every method).

    `mapping`: a dataset_mapping to apply first (what submit will run), so the verdicts describe
    the mapped rows. Problems with the data come back inside the report (findings, problems);
    only invalid arguments raise InvalidRequestError (an unknown method, a malformed mapping, a
    non-positive max_length/max_rows, an empty dataset reference).
    """
    methods = _methods_to_check(method)
    _check_arguments(dataset, split, model, max_length, max_rows)
    if mapping is not None:
        validate_mapping(mapping)
    dataset = dataset.strip()
    source: Literal["file", "hub"] = "file" if looks_local(dataset) else "hub"
    try:
        table = _read_local(dataset, split, max_rows) if source == "file" else _read_hub(dataset, split, max_rows)
    except _SourceError as exc:
        return DatasetReport(dataset=dataset, split=split, source=source, mapping=mapping, findings=[exc.finding])
    report = _judge(table, methods, mapping, DatasetReport(
        dataset=dataset, split=split, source=source, mapping=mapping, data_file=table.data_file,
        file_type=table.file_type, rows=table.total, row_numbering=table.numbering, findings=list(table.findings),
    ))
    if method is not None:
        report.findings += _verdict_findings(method, report.methods[method])
    if model is not None:
        _add_token_stats(report, table, model, max_length, method, mapping)
    elif max_length is not None:
        report.findings.append(Finding(
            code="dataset.tokens", severity="info",
            message="max_length was given without a model, so token lengths were not measured.",
            fix="Pass model= (a local model directory with tokenizer files) to measure them.",
        ))
    return report


@functools.cache
def job_runtime() -> ModuleType:
    """scripts/_runtime.py as a module: the same source every rendered job inlines.

    It is standard-library only at import time, so loading it here costs milliseconds.
    """
    path = scripts_dir() / RUNTIME_MODULE
    spec = importlib.util.spec_from_file_location("jobtrail_job_runtime", path)
    if spec is None or spec.loader is None:
        raise InvalidRequestError(f"Cannot load the job runtime from {path}.", fix="Reinstall jobtrail.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def validate_mapping(mapping: Any) -> None:
    """Raise InvalidRequestError (with the fix) unless `mapping` is a well-formed dataset_mapping."""
    problems = job_runtime().mapping_problems(mapping)
    if problems:
        raise InvalidRequestError(
            "dataset_mapping is invalid: " + "; ".join(problems) + ".",
            fix='Use a mapping validate_dataset proposes, e.g. {"kind": "rename", "columns": {"question": "prompt", '
            '"answer": "completion"}}; kinds: rename, sharegpt, alpaca.',
        )


def mapping_python(mapping: dict[str, Any]) -> str:
    """Equivalent `datasets` code for a (well-formed) dataset_mapping, for people and agents to read."""
    rt = job_runtime()
    kind = mapping["kind"]
    header = f"# dataset_mapping={_json(mapping)}\n"
    if kind == "rename":
        code = ""
        if mapping.get("columns"):
            code += f"dataset = dataset.rename_columns({mapping['columns']!r})\n"
        if mapping.get("drop"):
            code += f"dataset = dataset.remove_columns({mapping['drop']!r})\n"
        return header + code
    consumed = rt.mapping_source_columns(mapping)
    if kind == "sharegpt":
        role_key, content_key = mapping.get("role_key", "from"), mapping.get("content_key", "value")
        return header + (
            f"ROLES = {mapping.get('roles', rt.SHAREGPT_ROLES)!r}\n\n\n"
            "def to_messages(row):\n"
            f"    turns = row[{mapping['column']!r}]\n"
            "    return {\"messages\": [\n"
            f"        {{\"role\": ROLES[t[{role_key!r}]], \"content\": t[{content_key!r}]}} for t in turns\n"
            "    ]}\n\n\n"
            f"dataset = dataset.map(to_messages, remove_columns={consumed!r})\n"
        )
    names = {key: mapping.get(key, key) for key in ("instruction", "input", "output")}
    add_input = (
        f"    if row[{names['input']!r}]:\n        text += \"\\n\\n\" + row[{names['input']!r}]\n"
        if names["input"] is not None else ""
    )
    return header + (
        "def to_prompt_completion(row):\n"
        f"    text = row[{names['instruction']!r}]\n"
        f"{add_input}"
        "    return {\n"
        "        \"prompt\": [{\"role\": \"user\", \"content\": text}],\n"
        f"        \"completion\": [{{\"role\": \"assistant\", \"content\": row[{names['output']!r}]}}],\n"
        "    }\n\n\n"
        f"dataset = dataset.map(to_prompt_completion, remove_columns={consumed!r})\n"
    )


def _methods_to_check(method: str | None) -> tuple[str, ...]:
    if method is None:
        return DATASET_METHODS
    if method not in DATASET_METHODS:
        raise InvalidRequestError(
            f"Unknown method {method!r}.",
            fix=f"Use one of: {', '.join(DATASET_METHODS)}, or leave method out to check them all.",
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
            raise InvalidRequestError(f"{name} must be a positive integer, got {value!r}.", fix=f"Pass e.g. {name}=1024.")


# --- reading -----------------------------------------------------------------------------------


class _SourceError(Exception):
    """The source cannot be read at all; the finding says why and what to do."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


@dataclass
class _Table:
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
            problem = f"is a JSON {_type_name(row)}, not an object (one field per column)"
            self.problems.append(RowProblem(row=number, problem=problem))


def _finding(code: str, message: str, fix: str | None, severity: Literal["error", "warning", "info"] = "error") -> Finding:
    return Finding(code=code, severity=severity, message=message, fix=fix)


def _read_local(ref: str, split: str, max_rows: int) -> _Table:
    path = Path(ref).expanduser()
    if not path.exists():
        raise _SourceError(_finding(
            "dataset.missing", f"Dataset file {ref} does not exist.",
            "Pass an existing .jsonl, .json, .csv or .parquet file, or a Hub dataset id like 'org/name'.",
        ))
    try:
        if path.is_dir():
            return _read_directory(path, split, max_rows)
        table = _read_file(path, max_rows)
    except OSError as exc:  # permissions, a file vanishing mid-read, a device that is not a file
        raise _SourceError(_finding(
            "dataset.unreadable", f"{ref} cannot be read: {_short(exc)}.", "Check that the file exists and is readable.",
        )) from None
    if split != "train":
        table.findings.append(_finding(
            "dataset.split", f"A single data file is always loaded as the 'train' split; split={split!r} is ignored.",
            'Pass split="train", or a directory / Hub dataset that has a file for that split.', "warning",
        ))
    return table


def _read_directory(path: Path, split: str, max_rows: int) -> _Table:
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    picked = _split_files(files, split)
    if not picked:
        raise _SourceError(_no_split_finding(str(path), split, files))
    table = _read_file(path / picked[0], max_rows)
    return _one_of(table, picked, split)


def _one_of(table: _Table, picked: list[str], split: str) -> _Table:
    """Mark a table read from the first of several files of a split."""
    table.data_file = picked[0]
    if len(picked) > 1:
        table.total = None
        table.findings.append(_finding(
            "dataset.sampled", f"Split {split!r} has {len(picked)} data files; only {picked[0]} was checked.",
            None, "info",
        ))
    return table


def _split_files(files: Iterable[str], split: str) -> list[str]:
    """The data files of `split`, the way `datasets` finds them by name (train-*, */train/*, ...)."""
    data = [f for f in files if f.lower().endswith(DATA_EXTENSIONS) and not any(p.startswith(".") for p in f.split("/"))]
    words = set(SPLIT_KEYWORDS.get(split.lower(), ())) | {split.lower()}
    matched = [f for f in data if _name_tokens(f) & words]
    if matched or split.lower() != "train":
        return sorted(matched)
    # No file is named after any split: `datasets` then takes every file as the train split.
    any_split = {w for ws in SPLIT_KEYWORDS.values() for w in ws}
    return sorted(data) if not any(_name_tokens(f) & any_split for f in data) else []


def _name_tokens(path: str) -> set[str]:
    return set(re.split(r"[/\-_.\s\d]+", path.lower()))


def _no_split_finding(where: str, split: str, files: list[str]) -> Finding:
    data = [f for f in files if f.lower().endswith(DATA_EXTENSIONS)]
    seen = ", ".join(data[:8]) + (" ..." if len(data) > 8 else "") if data else "none"
    return _finding(
        "dataset.split", f"{where} has no .jsonl/.json/.csv/.parquet file for split {split!r} (data files: {seen}).",
        "Pass the split that exists (e.g. split=\"train\"), or a path to one data file.",
    )


def _read_file(path: Path, max_rows: int) -> _Table:
    readers: dict[str, Callable[[Path, int], _Table]] = {
        ".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet,
    }
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise _SourceError(_finding(
            "dataset.format", f"{path.name} is not a .jsonl, .json, .csv or .parquet file.",
            "Convert the data to JSON Lines (one JSON object per line) and pass that file.",
        ))
    if path.stat().st_size == 0:
        raise _SourceError(_finding("dataset.empty", f"{path.name} is empty.", _WRITE_ROWS))
    table = reader(path, max_rows)
    if table.total == 0:
        raise _SourceError(_finding("dataset.empty", f"{path.name} has no rows.", _WRITE_ROWS))
    if not table.rows:
        first = table.problems[0]
        raise _SourceError(_finding(
            "dataset.unreadable",
            f"No row of {path.name} could be read ({table.numbering} {first.row}: {first.problem}).",
            "Write one JSON object per line, e.g. {\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, ...]}.",
        ))
    return table


def _read_jsonl(path: Path, max_rows: int, file_type: str = "jsonl") -> _Table:
    table = _Table(file_type=file_type, numbering="line")
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


def _read_json(path: Path, max_rows: int) -> _Table:
    text = _decode(path)
    try:
        value = json.loads(text)
    except RecursionError:
        raise _SourceError(_finding("dataset.invalid_json", f"{path.name} is nested too deeply to read.", None)) from None
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # one object after another: JSON Lines in a .json file, which loads fine
            return _read_jsonl(path, max_rows, file_type="json (JSON Lines)")
        raise _SourceError(_finding(
            "dataset.invalid_json", f"{path.name} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            "Fix the file there, or write it as JSON Lines (.jsonl): one JSON object per line.",
        )) from None
    table = _Table(file_type="json")
    rows, key = _json_rows(value, path.name)
    if key is not None:
        table.findings.append(_finding(
            "dataset.nested_json",
            f"The rows of {path.name} sit under the key {key!r}; the job's loader would read the file as ONE row "
            f"with a {key!r} column.",
            f"Write the rows as JSON Lines: python -c \"import json,sys; rows=json.load(open(sys.argv[1]))[{key!r}]; "
            "open(sys.argv[2],'w').writelines(json.dumps(r)+chr(10) for r in rows)\" IN.json OUT.jsonl",
        ))
    table.total = len(rows)
    for number, row in enumerate(rows[:max_rows], 1):
        table.add(number, row)
    return table


def _json_rows(value: Any, name: str) -> tuple[list[Any], str | None]:
    """(rows, key they were nested under) for a whole-file JSON value."""
    if isinstance(value, list):
        return value, None
    if not isinstance(value, dict):
        raise _SourceError(_finding(
            "dataset.invalid_json", f"{name} holds a JSON {_type_name(value)}, not a list of rows.",
            "Write a list of objects ([{...}, {...}]) or JSON Lines (.jsonl).",
        ))
    nested = [k for k, v in value.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
    for key in ("train", "data", *nested):
        if key in nested:
            return value[key], key
    return [value], None  # a single object is a single row, as the job's loader reads it


def _decode(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _SourceError(_finding(
            "dataset.unreadable", f"{path.name} is not UTF-8 text (bad byte at offset {exc.start}).",
            "Re-save the file as UTF-8.",
        )) from None


def _read_csv(path: Path, max_rows: int) -> _Table:
    reader = csv.reader(io.StringIO(_decode(path), newline=""))
    table = _Table(file_type="csv")
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # the job's loader (pandas) has no field limit; match it
    number = 0
    try:
        header = next(reader, None)
        if not header:
            raise _SourceError(_finding("dataset.empty", f"{path.name} has no header row.", _WRITE_ROWS))
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


def _read_parquet(path: Path, max_rows: int) -> _Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise _SourceError(_finding(
            "dataset.unreadable", "Reading .parquet needs pyarrow, which this environment lacks.", "pip install pyarrow",
        )) from None
    table = _Table(file_type="parquet")
    try:
        parquet = pq.ParquetFile(path)
        table.total = parquet.metadata.num_rows
        rows: list[dict[str, Any]] = []
        for batch in parquet.iter_batches(batch_size=min(max_rows, 1024)):
            rows += batch.to_pylist()
            if len(rows) >= max_rows:
                break
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError and others for a damaged file
        raise _SourceError(_finding(
            "dataset.unreadable", f"{path.name} is not a readable Parquet file: {exc}", "Re-export the file.",
        )) from None
    for number, row in enumerate(rows[:max_rows], 1):
        table.add(number, row)
    return table


def _read_hub(repo_id: str, split: str, max_rows: int) -> _Table:
    """Find the split's data file in a Hub dataset repo, download it, and read it like a local file."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise _SourceError(_unverified(repo_id, "HF_HUB_OFFLINE is set"))
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    # HF_ENDPOINT is read now, not when huggingface_hub was first imported.
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    unreachable = _hub_unreachable(api.endpoint)
    if unreachable:
        raise _SourceError(_unverified(repo_id, f"{api.endpoint} is unreachable ({unreachable})"))
    try:
        files = api.list_repo_files(repo_id, repo_type="dataset")
        picked = _split_files(files, split)
        if not picked:
            raise _SourceError(_no_split_finding(f"Hub dataset {repo_id}", split, files))
        local = api.hf_hub_download(repo_id, picked[0], repo_type="dataset")
    except GatedRepoError:
        raise _SourceError(_access(repo_id, "is gated and this token has not been granted access")) from None
    except RepositoryNotFoundError:
        raise _SourceError(_finding(
            "dataset.not_found", f"Hub dataset {repo_id} does not exist (or is private and this token cannot see it).",
            "Check the id on huggingface.co/datasets, or log in with a token that can read it (HF_TOKEN).",
        )) from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise _SourceError(_access(repo_id, f"refused access (HTTP {status})")) from None
        raise _SourceError(_unverified(repo_id, _short(exc))) from None
    except _SourceError:
        raise
    except Exception as exc:  # transport errors come from whichever HTTP client huggingface_hub uses
        raise _SourceError(_unverified(repo_id, _short(exc))) from None
    return _one_of(_read_file(Path(local), max_rows), picked, split)


def _hub_unreachable(endpoint: str) -> str | None:
    """Why the Hub endpoint cannot be reached (None when it answers at all).

    One quick request with no retries: huggingface_hub's file listing retries a refused
    connection for ~25 s, far too long for a preflight check that will then only say 'unverified'.
    """
    from huggingface_hub import get_session

    try:
        get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
    except Exception as exc:  # any transport failure means: not reachable from here
        return _short(exc)
    return None


def _unverified(repo_id: str, why: str) -> Finding:
    return _finding(
        "dataset.unverified",
        f"Hub dataset {repo_id} could not be checked: {why}. Its format is unknown until the job downloads it.",
        "Run validate_dataset where the Hub is reachable, or download the data and pass the local file.",
        "warning",
    )


def _access(repo_id: str, why: str) -> Finding:
    return _finding(
        "dataset.access", f"Hub dataset {repo_id} {why}.",
        f"Request access on https://huggingface.co/datasets/{repo_id} and use a token that has it (HF_TOKEN).",
    )


def _short(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:297] + "..."


# --- judging: shapes and plans -------------------------------------------------------------------


class _Turns(NamedTuple):
    """A column holding conversations: which keys name the speaker and the text, roles seen."""

    column: str
    role_key: str
    content_key: str
    roles: frozenset[str]


@dataclass(frozen=True)
class _Columns:
    """The columns of a view of the rows, and the first non-null value of each."""

    names: tuple[str, ...]
    first: dict[str, Any]
    rows: list[dict[str, Any]]

    @classmethod
    def of(cls, rows: list[dict[str, Any]]) -> _Columns:
        names: dict[str, None] = {}
        first: dict[str, Any] = {}
        for row in rows:
            for key, value in row.items():
                names.setdefault(key)
                if value is not None and key not in first:
                    first[key] = value
        return cls(tuple(names), first, rows)

    def has(self, *names: str) -> bool:
        return all(name in self.names for name in names)

    def find(self, aliases: tuple[str, ...]) -> str | None:
        return next((name for name in aliases if name in self.names), None)

    def conversational(self, name: str | None) -> bool:
        value = self.first.get(name) if name else None
        return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "role" in value[0]

    def turns(self) -> _Turns | None:
        for column in CONVERSATION_ALIASES:
            value = self.first.get(column)
            if not (isinstance(value, list) and value and isinstance(value[0], dict)):
                continue
            role_key = next((k for k in ROLE_KEYS if k in value[0]), None)
            content_key = next((k for k in CONTENT_KEYS if k in value[0]), None)
            if role_key and content_key:
                return _Turns(column, role_key, content_key, self._roles(column, role_key))
        return None

    def _roles(self, column: str, role_key: str) -> frozenset[str]:
        seen: set[str] = set()
        for row in self.rows:
            turns = row.get(column)
            if isinstance(turns, list):
                seen.update(t[role_key] for t in turns if isinstance(t, dict) and isinstance(t.get(role_key), str))
            if len(seen) > 50:  # enough to build a mapping; the rest show up as row problems
                break
        return frozenset(seen)

    def unpaired(self) -> bool:
        """A completion per row with a 'label' (KTO's unpaired preference), under any column names."""
        return "label" in self.names and bool(self.find(PROMPT_ALIASES) and self.find(COMPLETION_ALIASES))

    def same_kind(self, a: str, b: str) -> bool:
        """Both plain text or both lists of messages (TRL needs one kind per row)."""
        return isinstance(self.first.get(a), list) == isinstance(self.first.get(b), list)

    def alpaca(self) -> dict[str, Any] | None:
        output = self.find(("output", "response"))
        if "instruction" not in self.names or output is None:
            return None
        return {"kind": "alpaca", "instruction": "instruction", "input": self.find(("input", "context")), "output": output}


def _canonical_role(role: str) -> str | None:
    role_lower = role.lower()
    return role_lower if role_lower in job_runtime().CHAT_ROLES else ROLE_ALIASES.get(role_lower)


def _ready(reason: str) -> MethodVerdict:
    return MethodVerdict(status="READY", reason=reason)


def _incompatible(reason: str, fix: str) -> MethodVerdict:
    return MethodVerdict(status="INCOMPATIBLE", reason=reason, fix=fix)


def _needs(reason: str, mapping: dict[str, Any]) -> MethodVerdict:
    return MethodVerdict(status="NEEDS_MAPPING", reason=reason, mapping=mapping, fix=f"dataset_mapping={_json(mapping)}")


def _rename(reason: str, columns: dict[str | None, str], drop: tuple[str, ...] = ()) -> MethodVerdict:
    renames = {old: new for old, new in columns.items() if old is not None and old != new}
    mapping: dict[str, Any] = {"kind": "rename", "columns": renames}
    if drop:
        mapping["drop"] = list(drop)
    return _needs(reason, mapping)


def _found(c: _Columns) -> str:
    return ", ".join(repr(n) for n in c.names[:12]) or "no columns"


def _conversation_plan(t: _Turns) -> MethodVerdict:
    # Role names with a known chat equivalent (human, gpt ...) need translating; names without one
    # are left for the row checks to report, since no mapping could fix them.
    translate = any(role not in job_runtime().CHAT_ROLES and _canonical_role(role) for role in t.roles)
    if (t.role_key, t.content_key) == ("role", "content") and not translate:
        if t.column == "messages":
            return _ready("conversations in 'messages' (role/content turns)")
        return _rename(f"conversations are in {t.column!r}; TRL reads them from 'messages'", {t.column: "messages"})
    roles = {role: _canonical_role(role) for role in sorted(t.roles)}
    unknown = sorted(role for role, chat in roles.items() if chat is None)
    mapping = {
        "kind": "sharegpt", "column": t.column, "role_key": t.role_key, "content_key": t.content_key,
        "roles": {role: chat for role, chat in roles.items() if chat is not None},
    }
    reason = f"ShareGPT-style turns in {t.column!r} ({t.role_key}/{t.content_key}) become 'messages' (role/content)"
    if unknown:
        reason += f"; role(s) {unknown} have no chat equivalent: add them to roles"
    return _needs(reason, mapping)


def _plan_sft(c: _Columns) -> MethodVerdict:
    if c.unpaired():
        return _incompatible(
            "rows carry a 'label' (unpaired preference), so SFT would also learn the completions marked bad",
            "Use method='kto', or keep only the rows with label == true: dataset.filter(lambda r: r['label']).",
        )
    turns = c.turns()
    if turns:
        return _conversation_plan(turns)
    if "messages" in c.names:
        return _ready("conversations in 'messages'")
    if c.has("prompt", "completion"):
        style = "conversational" if c.conversational("prompt") else "plain text"
        return _ready(f"prompt/completion rows ({style}); the loss covers the completion")
    if "text" in c.names:
        return _ready("plain text rows in 'text' (language modelling)")
    alpaca = c.alpaca()
    if alpaca:
        return _needs("Alpaca-style rows (instruction/input/output) become a conversational prompt/completion", alpaca)
    prompt, completion = c.find(PROMPT_ALIASES), c.find(COMPLETION_ALIASES)
    if prompt and completion and c.same_kind(prompt, completion):
        reason = f"{prompt!r}/{completion!r} are a prompt and its completion"
        return _rename(reason, {prompt: "prompt", completion: "completion"})
    chosen, rejected = c.find(CHOSEN_ALIASES), c.find(REJECTED_ALIASES)
    if chosen and rejected:
        return _sft_on_chosen(c, prompt, chosen, rejected)
    return _incompatible(
        f"SFT needs 'messages', 'text', or 'prompt' + 'completion'; found {_found(c)}",
        'Write rows as {"messages": [{"role": "user", ...}, {"role": "assistant", ...}]} or {"prompt", "completion"}.',
    )


def _sft_on_chosen(c: _Columns, prompt: str | None, chosen: str, rejected: str) -> MethodVerdict:
    reason = f"preference pairs: SFT can learn the chosen answers ({chosen!r}); {rejected!r} is dropped"
    if prompt:
        return _rename(reason, {prompt: "prompt", chosen: "completion"}, drop=(rejected,))
    target = "messages" if c.conversational(chosen) else "text"
    return _rename(reason, {chosen: target}, drop=(rejected,))


def _plan_pairs(method: str, c: _Columns) -> MethodVerdict:
    prompt, chosen, rejected = c.find(PROMPT_ALIASES), c.find(CHOSEN_ALIASES), c.find(REJECTED_ALIASES)
    if (chosen, rejected) == ("chosen", "rejected") and prompt in (None, "prompt"):
        return _ready(f"preference pairs with an {'explicit' if prompt else 'implicit'} prompt")
    if chosen and rejected:
        return _rename(
            f"{chosen!r}/{rejected!r} are the preferred and dispreferred answers",
            {prompt: "prompt", chosen: "chosen", rejected: "rejected"},
        )
    if c.unpaired():
        return _incompatible(
            f"one labelled completion per row (unpaired preference); {method} needs a chosen and a rejected answer per row",
            "Use method='kto' for this data.",
        )
    return _incompatible(
        f"{method} needs preference pairs: 'chosen' and 'rejected' (and optionally 'prompt'); found {_found(c)}",
        "Write rows as {\"prompt\": ..., \"chosen\": ..., \"rejected\": ...}.",
    )


def _plan_dpo(c: _Columns) -> MethodVerdict:
    return _plan_pairs("DPO", c)


def _plan_reward(c: _Columns) -> MethodVerdict:
    return _plan_pairs("reward modelling", c)


def _plan_grpo(c: _Columns) -> MethodVerdict:
    if "prompt" in c.names:
        extra = [n for n in c.names if n not in ("prompt", "completion")]
        reason = "prompts in 'prompt'; GRPO generates the completions"
        if extra:
            reason += f"; {_reach(extra)}"
        if "completion" in c.names:
            reason += "; 'completion' does not (TRL reserves the name: rename it, e.g. to 'solution', if a reward needs it)"
        return _ready(reason)
    alpaca = c.alpaca()
    if alpaca:
        return _needs("Alpaca-style rows: the instruction (+ input) becomes the prompt", alpaca)
    prompt = c.find(PROMPT_ALIASES)
    if prompt:
        others = [n for n in c.names if n != prompt]
        tail = f"; {_reach(others)}" if others else ""
        return _rename(f"{prompt!r} holds the prompts{tail}", {prompt: "prompt"})
    return _incompatible(
        f"GRPO needs a 'prompt' column (it generates the completions itself); found {_found(c)}",
        "Give each row a 'prompt' (a string, or the conversation up to the user's last turn as messages).",
    )


def _plan_kto(c: _Columns) -> MethodVerdict:
    if c.has("prompt", "completion", "label"):
        return _ready("unpaired preference: a completion per row and a boolean 'label'")
    prompt, completion = c.find(PROMPT_ALIASES), c.find(COMPLETION_ALIASES)
    if prompt and completion and "label" in c.names:
        reason = f"{prompt!r}/{completion!r} with 'label' are unpaired preference rows"
        return _rename(reason, {prompt: "prompt", completion: "completion"})
    paired = _plan_pairs("KTO", c)
    if paired.status != "INCOMPATIBLE":  # KTO splits chosen/rejected pairs into labelled rows itself
        paired.reason += " (KTO splits each pair into a desirable and an undesirable row)"
        return paired
    return _incompatible(
        f"KTO needs 'prompt', 'completion' and a boolean 'label' per row, or chosen/rejected pairs; found {_found(c)}",
        "Add a 'label' column: true for a desirable completion, false for an undesirable one.",
    )


_PLANNERS: dict[str, Callable[[_Columns], MethodVerdict]] = {
    "sft": _plan_sft, "dpo": _plan_dpo, "grpo": _plan_grpo, "reward": _plan_reward, "kto": _plan_kto,
}


def _detect_format(c: _Columns) -> str:
    """TRL's name for the data's shape, or the other shape it resembles."""
    if "messages" in c.names:
        return "messages"
    checks = [
        ("preference", c.has("prompt", "chosen", "rejected")),
        ("preference_implicit_prompt", c.has("chosen", "rejected")),
        ("unpaired_preference", c.has("prompt", "completion", "label")),
        ("prompt_completion", c.has("prompt", "completion")),
        ("text", "text" in c.names),
        ("sharegpt", c.turns() is not None),
        ("alpaca", c.alpaca() is not None),
        ("preference_renamed", bool(c.find(CHOSEN_ALIASES) and c.find(REJECTED_ALIASES))),
        ("prompt_only", "prompt" in c.names),
        ("question_answer", bool(c.find(PROMPT_ALIASES) and c.find(COMPLETION_ALIASES))),
        ("prompt_renamed", bool(c.find(PROMPT_ALIASES))),
    ]
    return next((name for name, hit in checks if hit), "unknown")


# --- judging: rows -------------------------------------------------------------------------------


class _Issue(NamedTuple):
    column: str | None
    problem: str
    severity: Severity = "error"


def _check_text(row: dict[str, Any], column: str) -> list[_Issue]:
    value = row.get(column)
    if value is None:
        return [_Issue(column, f"'{column}' is {'null' if column in row else 'missing'}")]
    if not isinstance(value, str):
        return [_Issue(column, f"'{column}' is {_type_name(value)}, expected a string")]
    if not value.strip():
        return [_Issue(column, f"'{column}' is empty", "warning")]
    return []


def _check_messages(value: Any, column: str, *, need_assistant: bool) -> list[_Issue]:
    """Shape, roles and content of one list of messages; the first structural problem only."""
    if value is None:
        return [_Issue(column, f"'{column}' is missing or null")]
    if not isinstance(value, list):
        return [_Issue(column, f"'{column}' is {_type_name(value)}, expected a list of {{role, content}} messages")]
    if not value:
        return [_Issue(column, f"'{column}' has no messages")]
    roles: list[tuple[int, str]] = []
    warnings: list[_Issue] = []
    for i, message in enumerate(value):
        problem = _message_problem(message, f"{column}[{i}]")
        if problem:
            return [_Issue(column, problem)]
        roles.append((i, message["role"]))
        if message["role"] == "assistant" and isinstance(message.get("content"), str) and not message["content"].strip():
            warnings.append(_Issue(column, f"{column}[{i}] (assistant) is empty", "warning"))
    if need_assistant and all(role != "assistant" for _, role in roles):
        return [_Issue(column, f"'{column}' has no assistant turn to learn from")]
    order = _turn_order_problem(column, roles)
    return ([_Issue(column, order)] if order else []) + warnings


def _message_problem(message: Any, where: str) -> str | None:
    if not isinstance(message, dict):
        return f"{where} is {_type_name(message)}, expected {{role, content}}"
    role = message.get("role")
    if role is None:
        hint = " (it has 'from'/'value': ShareGPT turns, which need a dataset_mapping)" if "from" in message else ""
        return f"{where} has no 'role'{hint}"
    chat_roles = job_runtime().CHAT_ROLES
    if role not in chat_roles:
        return f"{where}.role {role!r} is not a chat role (use {', '.join(chat_roles)})"
    content = message.get("content")
    if content is None and not (role == "assistant" and message.get("tool_calls")):
        return f"{where} ({role}) has no 'content'"
    if content is not None and not isinstance(content, str | list):
        return f"{where}.content is {_type_name(content)}, expected a string"
    return None


def _turn_order_problem(column: str, roles: list[tuple[int, str]]) -> str | None:
    """System turns come first; then user and assistant alternate (tool results follow the assistant)."""
    previous: tuple[int, str] | None = None
    for i, role in roles:
        if role in ("system", "developer"):
            if previous is not None and previous[1] not in ("system", "developer"):
                return f"{column}[{i}] is a {role} message after the conversation started"
        elif role == "tool":
            if previous is None or previous[1] not in ("assistant", "tool"):
                return f"{column}[{i}] is a tool result that does not follow an assistant turn"
        elif previous is not None and previous[1] == role:
            return f"turns do not alternate: {column}[{previous[0]}] and {column}[{i}] are both {role!r}"
        previous = (i, role)
    return None


def _check_prompt_completion(row: dict[str, Any]) -> list[_Issue]:
    prompt, completion = row.get("prompt"), row.get("completion")
    if not (isinstance(prompt, list) or isinstance(completion, list)):
        return _check_text(row, "prompt") + _check_text(row, "completion")
    if isinstance(prompt, str) or isinstance(completion, str):
        mixed = "one of 'prompt'/'completion' is a string, the other a list of messages; both must be the same kind"
        return [_Issue(None, mixed)]
    issues = _check_messages(prompt, "prompt", need_assistant=False)
    issues += _check_messages(completion, "completion", need_assistant=True)
    if not issues and completion[0].get("role") != "assistant":
        problem = f"completion[0] is {completion[0]['role']!r}; the completion must start with the assistant's reply"
        issues.append(_Issue("completion", problem))
    return issues


def _check_pair(row: dict[str, Any], columns: tuple[str, ...]) -> list[_Issue]:
    keys = ("prompt", "chosen", "rejected") if "prompt" in columns else ("chosen", "rejected")
    lists = [k for k in keys if isinstance(row.get(k), list)]
    if lists and len(lists) != len(keys) and all(row.get(k) is not None for k in keys):
        problem = f"{', '.join(lists)} are lists of messages but the other columns are not; all must be the same kind"
        return [_Issue(None, problem)]
    if lists:
        explicit = "prompt" in keys
        issues = _check_messages(row.get("prompt"), "prompt", need_assistant=False) if explicit else []
        for key in ("chosen", "rejected"):
            issues += _check_messages(row.get(key), key, need_assistant=True)
    else:
        issues = [issue for key in keys for issue in _check_text(row, key)]
    if not any(i.severity == "error" for i in issues) and row.get("chosen") == row.get("rejected"):
        issues.append(_Issue("rejected", "'chosen' and 'rejected' are identical, so the pair teaches nothing", "warning"))
    return issues


def _check_prompt(row: dict[str, Any]) -> list[_Issue]:
    if isinstance(row.get("prompt"), list):
        return _check_messages(row["prompt"], "prompt", need_assistant=False)
    return _check_text(row, "prompt")


def _check_label(row: dict[str, Any]) -> list[_Issue]:
    label = row.get("label")
    if isinstance(label, bool):
        return []
    if label is None:
        return [_Issue("label", f"'label' is {'null' if 'label' in row else 'missing'}; KTO needs true or false")]
    return [_Issue("label", f"'label' is {label!r} ({_type_name(label)}); KTO needs true or false")]


def _row_checker(method: str, columns: tuple[str, ...]) -> Callable[[dict[str, Any]], list[_Issue]]:
    """The check every row of a view gets for `method`, chosen from the view's columns."""
    if method == "sft":
        if "messages" in columns:
            return lambda row: _check_messages(row.get("messages"), "messages", need_assistant=True)
        if "prompt" in columns and "completion" in columns:
            return _check_prompt_completion
        return lambda row: _check_text(row, "text")
    if method == "grpo":
        return _check_prompt
    if method == "kto" and "label" in columns and "completion" in columns:
        return lambda row: _check_prompt_completion(row) + _check_label(row)
    return lambda row: _check_pair(row, columns)


# --- judging: the report --------------------------------------------------------------------------


@dataclass
class _View:
    """Rows as one method would see them (after its mapping), with their source numbers."""

    rows: list[dict[str, Any]]
    numbers: list[int]
    problems: list[RowProblem]


def _map_rows(rows: list[dict[str, Any]], numbers: list[int], mapping: dict[str, Any] | None) -> _View:
    if mapping is None:
        return _View(rows, numbers, [])
    apply_mapping = job_runtime().apply_mapping
    view = _View([], [], [])
    column = job_runtime().mapping_source_columns(mapping)[0] if mapping.get("kind") != "rename" else None
    for number, row in zip(numbers, rows, strict=True):
        try:
            view.rows.append(apply_mapping(row, mapping))
            view.numbers.append(number)
        except ValueError as exc:  # apply_mapping's one documented failure: it names the column
            view.problems.append(RowProblem(row=number, column=column, problem=f"dataset_mapping fails: {exc}"))
    return view


def _judge(table: _Table, methods: tuple[str, ...], mapping: dict[str, Any] | None, report: DatasetReport) -> DatasetReport:
    """Fill `report` with columns, format, samples, a verdict per method and the row problems."""
    source = _map_rows(table.rows, table.numbers, mapping)
    columns = _Columns.of(source.rows)
    report.format = _detect_format(columns)
    report.conversational = any(columns.conversational(n) for n in ("messages", "prompt", "chosen", "completion"))
    report.rows_checked = table.examined
    if source.rows:
        report.mean_chars_per_row = round(sum(_text_chars(r) for r in source.rows) / len(source.rows), 1)
    report.columns = _column_infos(source.rows)
    report.samples = [_cut(row) for row in table.rows[:SAMPLE_ROWS]]
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


def _text_chars(value: Any) -> int:
    """Characters of text in a row, however nested (message contents, prompt/completion turns)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_chars(v) for v in value.values())
    if isinstance(value, list):
        return sum(_text_chars(v) for v in value)
    return 0


def _judge_method(
    method: str, columns: _Columns, source: _View, shared: list[RowProblem], table: _Table
) -> tuple[MethodVerdict, list[RowProblem]]:
    if not source.rows:
        return _incompatible("no row could be read or mapped", "Fix the rows listed under problems."), []
    plan = _PLANNERS[method](columns)
    if plan.status == "INCOMPATIBLE":
        return plan, []
    view = _map_rows(source.rows, source.numbers, plan.mapping)
    check = _row_checker(method, _Columns.of(view.rows).names)
    found = list(view.problems)
    for number, row in zip(view.numbers, view.rows, strict=True):
        found += [RowProblem(row=number, column=i.column, problem=i.problem, severity=i.severity) for i in check(row)]
    if plan.mapping is not None:
        plan.python = mapping_python(plan.mapping)
    return _settle(method, plan, [*shared, *found], table), found


def _settle(method: str, plan: MethodVerdict, problems: list[RowProblem], table: _Table) -> MethodVerdict:
    """The plan's verdict, unless rows with errors would stop the job."""
    errors = [p for p in problems if p.severity == "error"]
    warnings = len(problems) - len(errors)
    if not errors:
        if warnings:
            plan.reason += f" ({_count(warnings, 'warning')}: see problems)"
        return plan
    bad_rows = len({p.row for p in errors})
    first = errors[0]
    where = f"{table.numbering} {first.row}" + (f" · {first.column}" if first.column else "")
    then = f" With them fixed: {plan.reason}" + (f" (dataset_mapping={_json(plan.mapping)})" if plan.mapping else "") + "."
    first_problem = f"first: {where}: {first.problem}"
    return _incompatible(
        f"{bad_rows} of {_count(table.examined, 'row')} cannot be used for {method} ({first_problem}).{then}",
        f"Fix or remove the rows listed under problems (the first is {table.numbering} {first.row}), then validate again.",
    )


def _verdict_findings(method: str, verdict: MethodVerdict) -> list[Finding]:
    if verdict.status == "NEEDS_MAPPING":
        return [_finding(
            "dataset.columns", f"The data does not fit {method} as it is: {verdict.reason}.",
            f"Pass dataset_mapping={_json(verdict.mapping)} to submit (validate_dataset shows the equivalent Python).",
        )]
    if verdict.status == "INCOMPATIBLE":
        return [_finding("dataset.incompatible", f"The data does not fit {method}: {verdict.reason}", verdict.fix)]
    return []


# --- token lengths --------------------------------------------------------------------------------


def _add_token_stats(
    report: DatasetReport, table: _Table, model: str, max_length: int | None, method: str | None,
    mapping: dict[str, Any] | None,
) -> None:
    """Token-length percentiles of the rows as a fitting method's trainer would see them (mapped).

    The method asked about, else the first that fits; when none fits, the rows as they are.
    """
    candidates = [method] if method else list(report.methods)
    chosen = next((m for m in candidates if report.methods[m].status != "INCOMPATIBLE"), None)
    tokenizer, problem = _load_tokenizer(model)
    if tokenizer is None:
        report.findings.append(_finding("dataset.tokens", f"Token lengths were not measured: {problem}.",
                                        "Pass model= as a local model directory that holds the tokenizer files.", "warning"))
        return
    source = _map_rows(table.rows, table.numbers, mapping)
    view = _map_rows(source.rows, source.numbers, report.methods[chosen].mapping if chosen else None)
    lengths, templated, untemplated = _token_lengths(tokenizer, view.rows, prompt_only=chosen == "grpo")
    if untemplated:
        report.findings.append(_finding(
            "dataset.chat_template",
            f"The tokenizer of {model} has no chat template, so {_count(untemplated, 'conversational row')} "
            "could not be formatted.",
            "Use a model whose tokenizer has a chat template (an instruct model), or set one before training.", "warning",
        ))
    if not lengths:
        report.findings.append(_finding(
            "dataset.tokens", "Token lengths were not measured: no row holds text or messages to tokenize.", None, "info",
        ))
        return
    report.token_lengths = _stats(lengths, max_length, model, templated)
    if max_length is not None and report.token_lengths.over_max_length:
        stats = report.token_lengths
        report.findings.append(_finding(
            "dataset.too_long",
            f"{stats.over_max_length} of {_count(stats.rows, 'row')} are longer than max_length {max_length} tokens "
            f"(p99 {stats.p99}, max {stats.max}); they will be truncated.",
            f"Raise max_length to about {stats.p99}, or shorten those rows.", "warning",
        ))


def _load_tokenizer(model: str) -> tuple[Any | None, str | None]:
    local = looks_local(model)
    path = Path(model).expanduser()
    if local and not path.is_dir():
        return None, f"model directory {model} does not exist"
    try:
        from transformers import AutoTokenizer

        # A Hub model is used only if its tokenizer is already cached: no downloads in preflight.
        return AutoTokenizer.from_pretrained(str(path) if local else model, local_files_only=not local), None
    except Exception as exc:  # transformers raises OSError, ValueError, ImportError ... for a bad model dir
        return None, f"the tokenizer of {model} could not be loaded ({_short(exc)})"


def _token_lengths(tokenizer: Any, rows: list[dict[str, Any]], *, prompt_only: bool) -> tuple[list[int], bool, int]:
    """(length per row: its longest sequence, any chat-templated, conversational rows skipped).

    prompt_only: measure the prompt alone (GRPO generates the completion; its prompt is what fits).
    """
    has_template = bool(getattr(tokenizer, "chat_template", None))
    texts: list[tuple[int, str, bool]] = []  # (row index, text, chat-templated)
    untemplated = 0
    for index, row in enumerate(rows):
        for sequence, generation_prompt in _sequences({"prompt": row.get("prompt")} if prompt_only else row):
            if isinstance(sequence, str):
                texts.append((index, sequence, False))
            elif not has_template:
                untemplated += 1
                break
            else:
                try:
                    text = tokenizer.apply_chat_template(sequence, tokenize=False, add_generation_prompt=generation_prompt)
                except Exception:  # a malformed row (already listed as a problem) or a template error
                    continue
                texts.append((index, text, True))
    longest: dict[int, int] = {}
    for templated in (False, True):
        batch = [(i, t) for i, t, is_templated in texts if is_templated == templated]
        if not batch:
            continue
        # Chat templates write their own special tokens; plain text gets the tokenizer's defaults.
        ids = tokenizer([t for _, t in batch], add_special_tokens=not templated)["input_ids"]
        for (i, _), row_ids in zip(batch, ids, strict=True):
            longest[i] = max(longest.get(i, 0), len(row_ids))
    return list(longest.values()), any(t for _, _, t in texts), untemplated


def _sequences(row: dict[str, Any]) -> list[tuple[Any, bool]]:
    """What a trainer tokenizes for a row: (text or messages, add_generation_prompt) pairs."""
    def joined(a: Any, b: Any) -> Any:
        if isinstance(a, list) and isinstance(b, list):
            return a + b
        return a + b if isinstance(a, str) and isinstance(b, str) else None

    if "messages" in row:
        pairs = [(row["messages"], False)]
    elif "chosen" in row and "rejected" in row:
        prompt = row.get("prompt")
        pairs = [(joined(prompt, row[k]) if prompt is not None else row[k], False) for k in ("chosen", "rejected")]
    elif "prompt" in row and "completion" in row:
        pairs = [(joined(row["prompt"], row["completion"]), False)]
    elif "text" in row:
        pairs = [(row["text"], False)]
    else:
        pairs = [(row.get("prompt"), True)]
    return [(s, g) for s, g in pairs if isinstance(s, str) or (isinstance(s, list) and s)]


def _stats(lengths: list[int], max_length: int | None, model: str, templated: bool) -> TokenStats:
    ordered = sorted(lengths)

    def rank(q: float) -> int:  # nearest-rank percentile
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]

    return TokenStats(
        p50=rank(50), p90=rank(90), p95=rank(95), p99=rank(99), max=ordered[-1], rows=len(ordered),
        over_max_length=sum(n > max_length for n in ordered) if max_length is not None else None,
        max_length=max_length, tokenizer=model, chat_template=templated,
    )


# --- small helpers -------------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _reach(columns: list[str]) -> str:
    names = ", ".join(map(repr, columns[:6])) + (" ..." if len(columns) > 6 else "")
    return f"{names} {'reaches' if len(columns) == 1 else 'reach'} the reward functions"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _type_name(value: Any) -> str:
    """A short, human type name for a JSON-ish value (never recursing more than one level)."""
    scalars = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object", type(None): "null"}
    if type(value) in scalars:
        return scalars[type(value)]
    if not isinstance(value, list):
        return type(value).__name__
    if not value:
        return "list"
    first = value[0]
    if isinstance(first, dict):
        if "role" in first:
            return "messages"
        return "list[{" + ", ".join(sorted(str(k) for k in first)[:4]) + "}]"
    return f"list[{scalars.get(type(first), type(first).__name__)}]"


def _column_infos(rows: list[dict[str, Any]]) -> list[ColumnInfo]:
    types: dict[str, dict[str, None]] = {}
    for row in rows:
        for key, value in row.items():
            seen = types.setdefault(key, {})
            if len(seen) < 4:
                seen.setdefault(_type_name(value))
    return [ColumnInfo(name=str(name), type="|".join(seen)) for name, seen in types.items()]


def _cut(value: Any, depth: int = 0) -> Any:
    """A JSON-able copy with long strings and lists shortened (and a marker saying by how much)."""
    if depth > 6:
        return "…"
    if isinstance(value, str):
        return value if len(value) <= SAMPLE_CHARS else value[:SAMPLE_CHARS] + f"… (+{len(value) - SAMPLE_CHARS} chars)"
    if isinstance(value, dict):
        return {str(k): _cut(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        head = [_cut(v, depth + 1) for v in value[:SAMPLE_ITEMS]]
        return head + ([f"… (+{len(value) - SAMPLE_ITEMS} items)"] if len(value) > SAMPLE_ITEMS else [])
    if value is None or isinstance(value, bool | int | float):
        return value
    return _cut(str(value), depth)  # datetimes, bytes, decimals from Parquet
