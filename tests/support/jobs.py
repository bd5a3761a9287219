"""Running rendered job scripts for real, and the small things job tests share.

A job test renders a template with jobtrail.templates.render, runs the script in a subprocess
against the offline tiny model and reads its `JOBTRAIL {...}` event lines; nothing is mocked.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobtrail.models import JobSpec
from jobtrail.templates.llama_cpp import LLAMA_CPP_PYTHON_VERSION
from jobtrail.templates.render import render_script, scripts_dir

SCRIPTS = scripts_dir()
JOB_TIMEOUT_S = 240
EVENT_PREFIX = "JOBTRAIL "
# Hyperparameters of a small SFT job on the tiny model: a checkpoint every 4 steps, a few seconds a step.
TINY_SFT = {
    "max_steps": 12,
    "logging_steps": 1,
    "save_steps": 4,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "max_length": 64,
    "learning_rate": 1e-3,
}
# The shortest such job that still commits a checkpoint before its final model: 4 steps, a save every 2.
FOUR_STEP_SFT = {**TINY_SFT, "max_steps": 4, "save_steps": 2}
# GGUF jobs build llama-quantize once per machine into this stable cache (overridable).
LLAMA_CPP_CACHE = (
    Path(os.environ.get("JOBTRAIL_LLAMA_CPP_CACHE") or Path.home() / ".cache" / "jobtrail-test" / "llama.cpp")
    / LLAMA_CPP_PYTHON_VERSION
)
FIRST_BUILD_TIMEOUT_S = 1500  # a cold cache downloads 77 MB and builds llama-quantize (~5 min on 2 cores)


@dataclass
class JobRun:
    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def named(self, name: str, **match: Any) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name and all(e.get(k) == v for k, v in match.items())]

    def one(self, name: str) -> dict[str, Any]:
        found = self.named(name)
        assert len(found) == 1, f"expected one {name!r} event, got {found}\n{self.describe()}"
        return found[0]

    @property
    def termination(self) -> dict[str, Any]:
        assert self.events and self.events[-1]["event"] == "termination", self.describe()
        return self.events[-1]

    def steps(self) -> list[int]:
        return [e["step"] for e in self.named("step")]

    def describe(self) -> str:
        return f"rc={self.returncode}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


def parse_events(stdout: str) -> list[dict[str, Any]]:
    prefix = len(EVENT_PREFIX)
    return [json.loads(line[prefix:]) for line in stdout.splitlines() if line.startswith(EVENT_PREFIX)]


def job_spec(method: str, model: Path | str, dataset: Path | str, **fields: Any) -> JobSpec:
    """What submit receives for `method` on a model and data (paths as the strings an agent passes)."""
    return JobSpec(method=method, model=str(model), dataset=str(dataset), **fields)


def lora_job_config(
    template: str, model: Path, dataset: Path, output_dir: Path, *, retention: int = 2, **training_args: Any
) -> dict[str, Any]:
    """A small, fast LoRA job config in the server's CONFIG contract (6 steps, a save every 2)."""
    return {
        "template": template,
        "template_version": 1,
        "model": str(model),
        "dataset": {"source": str(dataset), "split": "train"},
        "output_dir": str(output_dir),
        "peft": {"method": "lora", "r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"},
        "training_args": {
            "max_steps": 6,
            "learning_rate": 5e-3,
            "per_device_train_batch_size": 2,
            "save_steps": 2,
            "logging_steps": 1,
            "max_length": 64,
            "seed": 0,
            **training_args,
        },
        "checkpoint_retention": retention,
        "push_to_hub": False,
        "hub_model_id": None,
    }


@dataclass
class JobKit:
    """Renders small SFT jobs against the session's tiny model and runs them."""

    model: Path
    chat_dataset: Path
    env: dict[str, str]

    def config(
        self, output_dir: Path, *, dataset: Path | None = None, retention: int = 2, **training_args: Any
    ) -> dict[str, Any]:
        """A small, fast SFT job config on the kit's model and (by default) chat data."""
        return lora_job_config(
            "sft", self.model, dataset or self.chat_dataset, output_dir, retention=retention, **training_args
        )

    def job(self, workdir: Path, *, env: dict[str, str] | None = None, **config: Any) -> tuple[Path, dict[str, str]]:
        """(script, env) for run_jobs: renders a job whose output dir is workdir/out."""
        workdir.mkdir(parents=True, exist_ok=True)
        script = workdir / "job.py"
        script.write_text(render_script("sft", self.config(workdir / "out", **config)))
        return script, {**self.env, **(env or {})}


def start_job(script: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    # One torch thread per job: the tiny model gains nothing from more, and jobs run side by side.
    return subprocess.Popen(
        [sys.executable, str(script)],
        cwd=script.parent,
        env={**env, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_job(proc: subprocess.Popen[str]) -> JobRun:
    try:
        stdout, stderr = proc.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"job did not finish in {JOB_TIMEOUT_S}s\n{stdout[-2000:]}\n{stderr[-2000:]}")
    return JobRun(proc.returncode, stdout, stderr, parse_events(stdout))


def run_jobs(*jobs: tuple[Path, dict[str, str]]) -> list[JobRun]:
    """Run jobs side by side (they are mostly import-bound) and wait for all of them."""
    procs = [start_job(script, env) for script, env in jobs]
    return [finish_job(p) for p in procs]


def succeeded(run: JobRun) -> JobRun:
    assert run.returncode == 0 and run.termination["reason"] == "succeeded", run.describe()
    return run


def marker(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / "JOBTRAIL_COMMITTED").read_text())


def load_script_module(name: str) -> ModuleType:
    """scripts/<name>.py imported as a module: exactly the source render.py inlines or renders. Its imports of
    the runtime (`from _runtime import ...`) resolve next to it, as when the template runs from scripts/."""
    spec = importlib.util.spec_from_file_location(f"jobtrail_script_{name.lstrip('_')}", SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    """One JSON value per line (a str row is written as it is, to make broken lines)."""
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


# What a template's module level must never import: the job installs them, the check runs before.
HEAVY_PACKAGES = ("torch", "transformers", "trl", "datasets", "peft", "gguf")


def top_level_names(path: Path) -> set[str]:
    """Functions, classes and assigned names at a script's module level (they clash once inlined)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def assert_templates_import_light(templates: list[str], env: dict[str, str]) -> None:
    """Each template imports as it is from scripts/ without loading an ML package, and its example
    CONFIG names the template."""
    code = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); names = sys.argv[2].split(','); "
        "mods = [importlib.import_module(n) for n in names]; "
        f"heavy = set({HEAVY_PACKAGES!r}) & set(sys.modules); assert not heavy, heavy; "
        "wrong = [n for n, m in zip(names, mods) if m.CONFIG['template'] != n]; assert not wrong, wrong"
    )
    subprocess.run([sys.executable, "-c", code, str(SCRIPTS), ",".join(templates)], env=env, check=True, timeout=60)


# Prepended to job scripts that must wait for the test before going on.
WAIT_FOR_RELEASE = textwrap.dedent(
    """\
    import os, time
    def wait_for_release():
        deadline = time.monotonic() + 30
        while not os.path.exists("release"):
            if time.monotonic() > deadline:
                raise SystemExit("the test never released this job")
            time.sleep(0.01)
    """
)
