"""Pairs of places in Python source that share six or more lines: the same lines, or lines of the same shape.

The layout test's duplicates budget reads src/ with this, so the gate needs nothing outside the repository (the
team's `duplicates` command may be missing where CI runs). How it reads:

- A file is read as Python tokens, one entry a physical line. Comments, blank lines, import statements and lines of
  only punctuation and keywords (`)`, `],`, `else:`, `return`, `try:`) are passed over; a string spanning lines (a
  docstring) counts once, on its first line.
- A line's text is its tokens with white space folded; its shape writes every name (True, False and None too) as N,
  every string as S and every number as 0, keeping keywords and punctuation: `model=model,` and `split=split,` are
  alike, `timeout=parse(x),` and `flavor=None,` are not.
- Two places pair when MIN_LINES or more consecutive lines are the same to the letter, or alike in shape with at
  least MIN_FULL_LINES full lines among them. A full line has FULL_TOKENS tokens or more besides commas and is no
  declaration (`name: type`, with or without a default: a field or a parameter). A list of short items or of
  declarations (`key=value,` arguments, `x: int | None = None` fields, a column of strings) has the shape of every
  other such list, so only its letters make it a copy. On src/ two in three runs of seven lines of code (68%) have
  three full lines, so a renamed copy of them is found; a copy to the letter of six lines that count always is.
- A run is taken whole (extended both ways while the lines agree); two places in one file never overlap. A run of
  MIN_LINES lines that stands in more than MAX_PLACES places is an idiom, not a copy, and pairs nobody.
- A place is named by its anchor, the innermost function, class or module-level assignment holding most of its
  lines; two places are one pair however many runs they share (the longest is reported).

Against the `duplicates` tool (`duplicates --repo src --most 40`; 13 pairs when this was written, this finds 6): the
tool pairs files, this pairs anchors, so two runs between one pair of files in different functions count twice
here. Both find outcomes/causes.CAUSE_RULES' rows, estimate/calibration's record_measurement ~ lookup (the one pair
the same to the letter) and preflight/outputs.probe_output_repo ~ preflight/probes.space_facts. The tool also pairs
field, parameter and argument lists, which this passes over as declarations or short lines: backends/registry.py's
two BackendTraits, the surface/tools_*.py signatures and their requests, the described fields of models.Speedups ~
results/estimate.MemoryBreakdown and of results/jobs.py's InspectResult ~ CancelResult ~ results/progress.Progress.
This also pairs three the tool judges thin: surface/params.py's Annotated arguments, estimate/inputs.py's except
clauses and two dicts of fields by name (outcomes/retry.JobFacts.current ~ requests.EstimateRequest.hyperparameters).
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

MIN_LINES = 6
FULL_TOKENS = 4
MIN_FULL_LINES = 3
MAX_PLACES = 8

_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
_VALUE_NAMES = {"True", "False", "None"}
# Python 3.12 splits an f-string into tokens (3.14 a t-string too); its parts make one string like any other.
_TEMPLATE_START = {"FSTRING_START", "TSTRING_START"}
_TEMPLATE_END = {"FSTRING_END", "TSTRING_END"}


@dataclass(frozen=True)
class Line:
    number: int
    text: str
    shape: str

    @property
    def full(self) -> bool:
        """Long enough for its shape to tell, and not a declaration (`name: type`, a field or a parameter)."""
        tokens = self.shape.split()
        return tokens[:2] != ["N", ":"] and sum(token != "," for token in tokens) >= FULL_TOKENS


@dataclass(frozen=True)
class Place:
    path: str
    first: int
    last: int
    anchor: str

    @property
    def name(self) -> str:
        return f"{self.path}:{self.anchor}"

    def __str__(self) -> str:
        return f"{self.path}:{self.first}-{self.last} ({self.anchor})"


@dataclass(frozen=True)
class Duplicate:
    one: Place
    other: Place
    lines: int
    exact: bool

    @property
    def key(self) -> tuple[str, str]:
        """The pair as an allow-list names it: both places' `path:anchor`, in order."""
        first, second = sorted((self.one.name, self.other.name))
        return first, second

    def __str__(self) -> str:
        return f"{self.one} ~ {self.other}: {self.lines} lines {'the same' if self.exact else 'alike in shape'}"


def _token_shape(token: tokenize.TokenInfo) -> str:
    if token.type == tokenize.NAME:
        return token.string if keyword.iskeyword(token.string) and token.string not in _VALUE_NAMES else "N"
    return {tokenize.STRING: "S", tokenize.NUMBER: "0"}.get(token.type, token.string)


def _statements(source: str) -> list[list[tokenize.TokenInfo]]:
    """Each logical line's tokens, an f-string's parts already merged into one STRING token."""
    statements: list[list[tokenize.TokenInfo]] = [[]]
    template: list[tokenize.TokenInfo] = []
    depth = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind = tokenize.tok_name[token.type]
        if template or kind in _TEMPLATE_START:
            template.append(token)
            depth += (kind in _TEMPLATE_START) - (kind in _TEMPLATE_END)
            if depth:
                continue
            text = "".join(t.string for t in template)
            token = tokenize.TokenInfo(tokenize.STRING, text, template[0].start, token.end, template[0].line)
            template = []
        if token.type == tokenize.NEWLINE:
            statements.append([])
        elif token.type not in _SKIPPED:
            statements[-1].append(token)
    return [statement for statement in statements if statement]


def code_lines(source: str) -> list[Line]:
    """The lines that can make a duplicate, in order."""
    lines = []
    for statement in _statements(source):
        if statement[0].string in ("import", "from"):
            continue
        rows: dict[int, list[tokenize.TokenInfo]] = defaultdict(list)
        for token in statement:
            rows[token.start[0]].append(token)
        for number, tokens in rows.items():
            if all(t.type == tokenize.OP or keyword.iskeyword(t.string) for t in tokens):
                continue
            text = " ".join(t.string for t in tokens)
            lines.append(Line(number, text, " ".join(_token_shape(t) for t in tokens)))
    return lines


def anchors(source: str) -> dict[int, str]:
    """Line number → the innermost function, class or module-level assignment around it (`<module>` elsewhere)."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                spans.append((first, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")
            elif isinstance(node, ast.Module) and isinstance(child, ast.Assign | ast.AnnAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if names:
                    spans.append((child.lineno, child.end_lineno or child.lineno, names[0]))

    visit(ast.parse(source), "")
    found: dict[int, str] = {}
    for first, last, name in sorted(spans, key=lambda span: span[0] - span[1]):  # widest first: inner ones overwrite
        found.update(dict.fromkeys(range(first, last + 1), name))
    return found


@dataclass(frozen=True)
class _File:
    path: str
    lines: list[Line]
    anchors: dict[int, str]

    def place(self, start: int, length: int) -> Place:
        run = self.lines[start : start + length]
        anchor = Counter(self.anchors.get(line.number, "<module>") for line in run).most_common(1)[0][0]
        return Place(self.path, run[0].number, run[-1].number, anchor)


_Key = Callable[[Line], str]


def _run(key: _Key, one: _File, i: int, other: _File, j: int) -> tuple[int, int, int]:
    """The whole run of equal keys through one.lines[i] and other.lines[j]: its start in each, and its length."""
    while i > 0 and j > 0 and key(one.lines[i - 1]) == key(other.lines[j - 1]):
        i, j = i - 1, j - 1
    limit = min(len(one.lines) - i, len(other.lines) - j, j - i if one is other else len(one.lines))
    length = 0
    while length < limit and key(one.lines[i + length]) == key(other.lines[j + length]):
        length += 1
    return i, j, length


def _runs(files: list[_File], key: _Key) -> set[tuple[int, int, int, int, int]]:
    """Every run of MIN_LINES or more equal keys in two places: (file, start, other file, its start, length)."""
    windows: dict[tuple[str, ...], list[tuple[int, int]]] = defaultdict(list)
    for f, file in enumerate(files):
        keys = [key(line) for line in file.lines]
        for i in range(len(keys) - MIN_LINES + 1):
            windows[tuple(keys[i : i + MIN_LINES])].append((f, i))
    runs = set()
    for places in windows.values():
        if len(places) > MAX_PLACES:
            continue
        for n, (f, i) in enumerate(places):
            for g, j in places[n + 1 :]:
                if f != g or j - i >= MIN_LINES:
                    start_i, start_j, length = _run(key, files[f], i, files[g], j)
                    runs.add((f, start_i, g, start_j, length))
    return runs


def find_duplicates(sources: dict[str, str]) -> list[Duplicate]:
    """One Duplicate a pair of places (its longest run) in `sources`, path → Python source; longest first."""
    files = [_File(path, code_lines(source), anchors(source)) for path, source in sorted(sources.items())]
    longest: dict[tuple[str, str], Duplicate] = {}
    for exact, key in ((True, lambda line: line.text), (False, lambda line: line.shape)):
        for f, i, g, j, length in _runs(files, key):
            one, other = files[f], files[g]
            if not exact and sum(line.full for line in one.lines[i : i + length]) < MIN_FULL_LINES:
                continue
            found = Duplicate(one.place(i, length), other.place(j, length), length, exact)
            if found.key not in longest or length > longest[found.key].lines:
                longest[found.key] = found
    return sorted(longest.values(), key=lambda d: (-d.lines, d.key))
