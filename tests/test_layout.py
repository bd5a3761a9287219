"""The layout keeps its promises: folders by role, imports one way, small modules.

README.md ("Layout") describes the folders; this test holds the code to it, so a newcomer's
shortcut (an upward import, a module that grows past a page or two) fails here, not in review.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.duplicates import Duplicate, find_duplicates

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "jobtrail"
SCRIPTS = ROOT / "scripts"

# Higher imports lower, never the reverse; areas of one rank above the bottom do not import each
# other (preflight is above templates/estimate/outcomes because it plans with all three; results is below estimate
# and preflight, which fill its models, and above backends, whose traits its markdown reads).
RANK = {
    "app": 7, "__main__": 7, "demo": 7,
    "surface": 6,
    "service": 5,
    "preflight": 4,
    "templates": 3, "estimate": 3, "outcomes": 3,
    "results": 2,
    "backends": 1, "ledger": 1,
    "models": 0, "requests": 0, "errors": 0, "util": 0, "methods": 0, "__init__": 0,
}  # fmt: skip
# The CLI is an entry point like __main__: it builds the service (and its ledger commands the ledger) through the
# composition root.
ENTRY_POINT_IMPORTS = {("surface/cli.py", "app"), ("surface/cli.py", "demo"), ("surface/cli_ledger.py", "app")}
MAX_TOP_LEVEL_MODULES = 8
MAX_SRC_LINES = 600
MAX_SCRIPT_LINES = 900
MAX_FUNCTION_LINES = 79  # a function of 80 lines or more does several things: split it into named steps
# The functions that are longer today, each with why; the list only shrinks (a test fails once one is split).
LONG_FUNCTIONS = {
    "estimate/estimator.py:estimate_cost": "the estimate's steps in order; being reworked with the effective "
    "hyperparameters (issue 26 item 1), split after that",
    "estimate/estimator.py:_judge": "every verdict on the estimate in one place; split with estimate_cost",
}

MAX_DUPLICATE_PAIRS = 12
# The pairs of places in src/ that share six or more lines (tests/support/duplicates.py says how it reads them), each
# alike by design, with why; keyed by `path:anchor` (function, class or module-level name), in sorted order. A pair
# factored out leaves the list (a test fails once it is gone); the list never grows past MAX_DUPLICATE_PAIRS.
ALLOWED_DUPLICATES = {
    ("estimate/calibration.py:lookup", "estimate/calibration.py:record_measurement"): "the same keyword-only key, "
    "written there and read here: each call names the measurement it means (comment above lookup)",
    ("estimate/inputs.py:_download_config", "estimate/inputs.py:_download_config"): "one except clause a Hub "
    "error, each raising its own error with its own fix",
    ("outcomes/causes.py:CAUSE_RULES", "outcomes/causes.py:CAUSE_RULES"): "a table, one rule a cause, rows alike by "
    "design (comment above CAUSE_RULES)",
    ("outcomes/retry.py:JobFacts.current", "requests.py:EstimateRequest.hyperparameters"): "each record's own "
    "fields by name: a retry's job facts there, the hyperparameters asked for here",
    ("requests.py:EstimateRequest.hyperparameters", "service/webhook.py:Webhook._payload"): "each record's own "
    "fields by name: the hyperparameters asked for there, a webhook's job fields here",
    ("preflight/outputs.py:probe_output_repo", "preflight/probes.py:space_facts"): "ask the Hub, else say why it "
    "could not be asked: another call and other facts (comment above probe_output_repo)",
    ("surface/params.py:DatasetMapping", "surface/params.py:Output"): "each tool argument's type and description, "
    "declared once: alike in shape, each its own schema",
}


def _area(module: str) -> str:
    """jobtrail.preflight.rules → preflight; jobtrail.app → app; jobtrail → __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _jobtrail_imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "jobtrail":
            if node.module == "jobtrail":  # `from jobtrail import x`: x is a module, or a name of the package
                found += [
                    (node.lineno, f"jobtrail.{a.name}")
                    for a in node.names
                    if (SRC / a.name).exists() or (SRC / f"{a.name}.py").exists()
                ]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "jobtrail"]
    return found


def test_every_area_has_a_rank() -> None:
    areas = {
        p.stem if p.is_file() else p.name
        for p in SRC.iterdir()
        if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert areas <= set(RANK), f"give these folders a rank in RANK (and a line in README's Layout): {areas - set(RANK)}"


def test_imports_point_down() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        mine = rel.parts[0].removesuffix(".py")
        for line, module in _jobtrail_imports(path):
            theirs = _area(module)
            if theirs == mine or (rel.as_posix(), theirs) in ENTRY_POINT_IMPORTS:
                continue
            upward = RANK[theirs] > RANK[mine]
            sideways = RANK[theirs] == RANK[mine] and 0 < RANK[mine] < RANK["app"]
            if upward or sideways:
                wrong.append(f"src/jobtrail/{rel}:{line} ({mine}) imports {module} ({theirs})")
    assert not wrong, "imports must point down the layers:\n" + "\n".join(wrong)


def test_few_modules_at_the_top() -> None:
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_modules_stay_small() -> None:
    big = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_SRC_LINES
    ]
    big += [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in SCRIPTS.glob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_SCRIPT_LINES
    ]
    assert not big, big


def _function_lengths(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name as Python spells it, lines from `def` to its last line) for every function under `node`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + child.name
            yield name, (child.end_lineno or child.lineno) - child.lineno + 1
            yield from _function_lengths(child, f"{name}.<locals>.")
        elif isinstance(child, ast.ClassDef):
            yield from _function_lengths(child, f"{prefix}{child.name}.")
        else:
            yield from _function_lengths(child, prefix)


def test_functions_stay_short() -> None:
    lengths = {
        f"{path.relative_to(SRC).as_posix()}:{name}": lines
        for path in sorted(SRC.rglob("*.py"))
        for name, lines in _function_lengths(ast.parse(path.read_text()))
    }
    long = {name: lines for name, lines in lengths.items() if lines > MAX_FUNCTION_LINES}
    unlisted = [f"{name}: {lines} lines" for name, lines in long.items() if name not in LONG_FUNCTIONS]
    assert not unlisted, f"split these into named steps (at most {MAX_FUNCTION_LINES} lines each): {unlisted}"
    stale = [f"{name}: {lengths.get(name, 'gone')}" for name in LONG_FUNCTIONS if name not in long]
    assert not stale, f"short now (or gone): take them off LONG_FUNCTIONS: {stale}"


def _allow_line(duplicate: Duplicate) -> str:
    return f'    {duplicate}\n        {duplicate.key}: "<why they stay alike>",'


def test_duplicates_stay_within_budget() -> None:
    found = find_duplicates({p.relative_to(SRC).as_posix(): p.read_text() for p in sorted(SRC.rglob("*.py"))})
    new = [_allow_line(d) for d in found if d.key not in ALLOWED_DUPLICATES]
    assert not new, (
        "these places repeat each other: factor the shared lines out (a function, a table, a shared record), or, "
        "where they are alike by design, add the pair to ALLOWED_DUPLICATES with a reason (and say why beside the "
        "code):\n" + "\n".join(new)
    )
    stale = sorted(set(ALLOWED_DUPLICATES) - {d.key for d in found})
    assert not stale, f"no longer alike (or renamed): take them off ALLOWED_DUPLICATES: {stale}"
    assert len(ALLOWED_DUPLICATES) <= MAX_DUPLICATE_PAIRS, "over the duplicates budget: factor a pair out first"


def test_duplicate_finder_tells_copies_from_lists() -> None:
    body = """def total(rows, key):
    seen = set()
    result = 0
    for row in rows:
        if row[key] in seen:
            continue
        seen.add(row[key])
        result += row["amount"] * rate(row)
    log.info("summed %d rows", len(seen))
    return result
"""
    renamed = body.replace("seen", "known").replace("result", "sum_").replace('"amount"', '"price"')

    def fields(name: str) -> str:  # eight optional fields: every such record has this shape
        return f"class {name.upper()}:\n" + "".join(f"    {name}{n}: int | None = None\n" for n in range(8))

    found = find_duplicates({"a.py": body, "b.py": body, "c.py": renamed, "d.py": fields("d"), "e.py": fields("e")})
    assert [(d.key, d.exact) for d in found] == [
        (("a.py:total", "b.py:total"), True),
        (("a.py:total", "c.py:total"), False),
        (("b.py:total", "c.py:total"), False),
    ]


def test_job_scripts_never_import_jobtrail() -> None:
    """A rendered script runs on machines without jobtrail (HF Jobs containers)."""
    offenders = [p.name for p in SCRIPTS.glob("*.py") if _jobtrail_imports(p)]
    assert not offenders, offenders


def test_test_modules_have_unique_names() -> None:
    """Test folders are not packages: pytest imports test modules by file name, so two test_x.py collide."""
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
