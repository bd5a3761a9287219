"""A user's GRPO reward file, checked before submission.

The file's source then travels in the job's CONFIG (templates/configs.py `rewards_config`), which
the GRPO job runs in a namespace of its own; the built-in reward names and the reward knobs are
GRPO's method inputs (jobtrail.methods.rewards).

Nothing here imports torch or runs the user's code: the file is only parsed (`ast`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from jobtrail.models import Finding
from jobtrail.preflight.data_roots import confined

ACCEPTED_SIGNATURES = "(prompts, completions, **kwargs) or (completions, **kwargs)"
MAX_REWARD_FILE_BYTES = 256 * 1024  # its source goes into the job's config and the ledger

# Keyword arguments TRL passes every reward function besides prompts and completions.
TRL_REWARD_KWARGS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"})
# Importable in a job besides the standard library: the template's dependencies and theirs.
JOB_PACKAGES = frozenset(
    {
        "torch",
        "transformers",
        "trl",
        "peft",
        "datasets",
        "accelerate",
        "tokenizers",
        "huggingface_hub",
        "safetensors",
        "numpy",
        "pandas",
        "pyarrow",
        "regex",
        "packaging",
        "yaml",
        "tqdm",
        "jinja2",
    }
)
# Calls allowed in a top-level constant: building a value, nothing else.
_CONSTANT_CALLS = frozenset({"re.compile", "frozenset", "set", "tuple", "list", "dict"})
_WHY_TOP_LEVEL = (
    "The job runs the file once before training, so top-level statements would run there: side effects, slow "
    "work or failures outside the reward function, where they cannot be attributed to it."
)


def check_reward_file(path: str | Path, function: str) -> list[Finding]:
    """Findings for the reward file at `path` and its function `function` (empty: usable).

    Errors: the file is missing, unreadable, too large or not valid Python; `function` is not a
    top-level `def` accepting (prompts, completions, **kwargs) or (completions, **kwargs); the
    file has top-level code other than imports, definitions, constants and an
    `if __name__ == "__main__":` block (which the job does not run); a relative import. Warnings:
    imports a job does not have, and required parameters that must name dataset columns.
    """
    source, problem = read_reward_file(path)
    return [problem] if problem else check_reward_source(source, path, function)


def check_reward_source(source: str, path: str | Path, function: str) -> list[Finding]:
    """check_reward_file's judgement of a reward file's `source`, already read: pure."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        return [
            _error(
                "reward_file.syntax",
                f"The reward file {path} is not valid Python: {exc.msg} (line {exc.lineno}, column {exc.offset}).",
                "Fix the syntax there; `python -m py_compile FILE` shows the same error.",
            )
        ]
    findings = [*_top_level_findings(tree, path), *_function_findings(tree, path, function)]
    return findings + _import_findings(tree, path)


# --- the file ----------------------------------------------------------------------------------


def read_reward_file(path: str | Path) -> tuple[str, Finding | None]:
    """(source, None), or ("", why the file cannot be used) when it is missing, too large or unreadable. A file
    outside the data roots, or no .py file, is refused before it is read (InvalidRequestError, data_roots.py): its
    text would travel in the job's config and a dry run's script."""
    path = confined(str(path), "reward_file", suffix=".py")
    if not path.is_file():
        return "", _error(
            "reward_file.missing",
            f"The reward file {path} does not exist.",
            "Pass the path of a .py file that defines your reward function.",
        )
    if path.stat().st_size > MAX_REWARD_FILE_BYTES:
        return "", _error(
            "reward_file.too_large",
            f"The reward file {path} has {path.stat().st_size} bytes; at most {MAX_REWARD_FILE_BYTES} are accepted "
            "(its source travels in the job's config).",
            "Keep only the reward function and its helpers in the file; load large data from the dataset's columns.",
        )
    try:
        return path.read_text(encoding="utf-8"), None
    except (OSError, UnicodeDecodeError) as exc:
        return "", _error(
            "reward_file.unreadable",
            f"The reward file {path} cannot be read: {exc}.",
            "Save it as UTF-8 text and check its permissions.",
        )


def _top_level_findings(tree: ast.Module, path: str | Path) -> list[Finding]:
    findings = []
    for node in tree.body:
        what = _disallowed(node)
        if what:
            findings.append(
                _error(
                    "reward_file.top_level",
                    f"Line {node.lineno} of {path} is {what} at the top level. {_WHY_TOP_LEVEL}",
                    "Move it into the reward function (or a helper it calls); keep only imports, def/class, constants "
                    'and an `if __name__ == "__main__":` block at the top level.',
                )
            )
    return findings


def _disallowed(node: ast.stmt) -> str | None:
    """What the statement is, when the job must not run it at load time; None when it is fine."""
    if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Pass):
        return None
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return None  # a docstring
    if isinstance(node, ast.Assign | ast.AnnAssign):
        if node.value is None or _is_constant(node.value):
            return None
        return "an assignment that runs code (a call or computation)"
    if isinstance(node, ast.If) and _is_main_guard(node.test):
        return None  # the job loads the file under another module name: this block never runs there
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return "a call"
    return f"a {type(node).__name__.lower()} statement"


def _is_constant(node: ast.expr) -> bool:
    """Literals, names, containers and operators of them, and re.compile/frozenset(...) of those."""
    if isinstance(node, ast.Constant | ast.Name | ast.Lambda):  # a lambda is defined, not run
        return True
    if isinstance(node, ast.Attribute):
        return _is_constant(node.value)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return all(_is_constant(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is None or _is_constant(k) for k in node.keys) and all(_is_constant(v) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        return _is_constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_constant(node.left) and _is_constant(node.right)
    if isinstance(node, ast.JoinedStr | ast.FormattedValue):
        return all(_is_constant(v) for v in ast.iter_child_nodes(node) if isinstance(v, ast.expr))
    if isinstance(node, ast.Call):
        return (
            ast.unparse(node.func) in _CONSTANT_CALLS
            and all(_is_constant(a) for a in node.args)
            and all(_is_constant(k.value) for k in node.keywords)
        )
    return False


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
        and isinstance(test.ops[0], ast.Eq)
    )


# --- the function ------------------------------------------------------------------------------


def _function_findings(tree: ast.Module, path: str | Path, function: str) -> list[Finding]:
    if not function.isidentifier():
        return [
            _error(
                "reward_file.function",
                f"{function!r} is not a Python function name.",
                'Pass the name of the reward function defined in the file, e.g. reward_function="score".',
            )
        ]
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function]
    if not defs:
        defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        return [
            _error(
                "reward_file.function_missing",
                f"The reward file {path} defines no top-level function {function!r}"
                + (f" (it defines {', '.join(defined)})." if defined else "."),
                f"Define `def {function}(prompts, completions, **kwargs):` at the top level of the file, or pass the "
                "name of the function it defines.",
            )
        ]
    node = defs[-1]  # the last definition is the one the name holds after the file runs
    if isinstance(node, ast.AsyncFunctionDef):
        return [_signature_error(path, function, "is `async def`; the job calls reward functions synchronously")]
    return _signature_findings(node, path)


def _signature_findings(node: ast.FunctionDef, path: str | Path) -> list[Finding]:
    """TRL calls the function with keyword arguments only: prompts, completions, completion_ids,
    trainer_state, ... and one per dataset column. Anything it cannot take that way fails."""
    args = node.args
    if args.posonlyargs:
        return [_signature_error(path, node.name, "has positional-only parameters; TRL passes keyword arguments")]
    named = [a.arg for a in (*args.args, *args.kwonlyargs)]
    if "completions" not in named:
        return [_signature_error(path, node.name, "has no `completions` parameter")]
    if args.kwarg is None:
        return [
            _signature_error(
                path,
                node.name,
                "has no `**kwargs`; TRL also passes completion_ids, trainer_state and every dataset column",
            )
        ]
    defaults = _parameters_with_defaults(args)
    columns = [name for name in named if name not in TRL_REWARD_KWARGS and name not in defaults]
    if not columns:
        return []
    return [
        Finding(
            code="reward_file.columns",
            severity="warning",
            message=f"{node.name}() takes {', '.join(map(repr, columns))} without a default: TRL passes them only as "
            "dataset columns of those names, so the job fails if the dataset lacks one.",
            fix="Check that the dataset has those columns (validate_dataset lists them), or read them from **kwargs.",
        )
    ]


def _parameters_with_defaults(args: ast.arguments) -> set[str]:
    positional = [a.arg for a in args.args]
    with_default = set(positional[len(positional) - len(args.defaults) :]) if args.defaults else set()
    return with_default | {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None}


def _signature_error(path: str | Path, function: str, why: str) -> Finding:
    return _error(
        "reward_file.signature",
        f"The reward function {function}() in {path} {why}.",
        f"Define it as `def {function}(prompts, completions, **kwargs):` (or `def {function}(completions, "
        "**kwargs):`), returning one float (or None) per completion.",
    )


# --- imports -----------------------------------------------------------------------------------


def _import_findings(tree: ast.Module, path: str | Path) -> list[Finding]:
    """A module the job cannot import fails it with dependency_error, at load or mid-training."""
    relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
    if relative:
        return [
            _error(
                "reward_file.import",
                f"Line {relative[0].lineno} of {path} is a relative import; the job loads the file on its own, outside "
                "any package, so it cannot work there.",
                "Copy what it imports into the reward file, or import it from an installed package.",
            )
        ]
    missing: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in filter(None, names):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in JOB_PACKAGES and top != "__future__":
                missing.setdefault(top, node.lineno)
    return [
        Finding(
            code="reward_file.import",
            severity="warning",
            message=f"The reward file {path} imports {top!r} (line {line}), "
            f"which is neither in the standard library nor "
            "among the job's dependencies; the job fails with dependency_error unless its environment has it.",
            fix=f"Use the standard library or the job's packages ({', '.join(sorted(JOB_PACKAGES))}) instead.",
        )
        for top, line in missing.items()
    ]


def _error(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="error", message=message, fix=fix)
