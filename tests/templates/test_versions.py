"""One set of tested versions (issue 24): the venv is the lock, every rendered job pins the job lock, and a job's
interpreter that differs from it is named before the job runs."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import lock as lock_tool
import pytest

from jobtrail.models import JobSpec
from jobtrail.preflight import probes
from jobtrail.preflight.dependencies import check_dependencies
from jobtrail.preflight.facts import Facts, gather_requirements
from jobtrail.templates import pep723
from jobtrail.templates.llama_cpp import LLAMA_CPP_PYTHON_VERSION
from jobtrail.templates.render import LIGER_REQUIREMENT, QLORA_REQUIREMENT, render_script, scripts_dir, template_names
from jobtrail.templates.versions import Lock, environment_lock, job_lock, parse_lock, pin, same_release
from jobtrail.util.data import data_path

ROOT = Path(__file__).resolve().parents[2]
# What a job's header can hold beyond its template's: QLoRA's and Liger's packages (GPU jobs).
EVERY_EXTRA = {"peft": {"method": "qlora"}, "training_args": {"use_liger_kernel": True, "report_to": ["trackio"]}}


def test_the_venv_the_suite_runs_in_is_the_environment_lock():
    """`make test` installs the lock (pip -c); a venv that is not it would make every other test here judge
    versions nobody locked. Packages the lock names for other machines (CUDA's) are not installed here."""
    locked = environment_lock()
    installed = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions() if d.metadata["Name"]}
    off = {
        name: (version, locked.version_of(name))
        for name, version in installed.items()
        if locked.version_of(name) is not None and not same_release(version, locked.require(name))
    }
    assert not off, f"this venv is not the lock (installed, locked): {off}; rebuild it: make .venv/.installed"
    for name in ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "mcp", "huggingface_hub"):
        assert same_release(importlib.metadata.version(name), locked.require(name)), name


@pytest.mark.parametrize("template", template_names())
def test_every_rendered_job_pins_exactly_the_job_lock(template):
    header = pep723.read_metadata(render_script(template, EVERY_EXTRA))
    template_header = pep723.read_metadata((scripts_dir() / f"{template}.py").read_text())
    assert len(header["dependencies"]) >= len(template_header["dependencies"])
    for requirement in header["dependencies"]:
        name, version = re.fullmatch(r"([\w.-]+)==(\S+)", requirement).groups()  # type: ignore[union-attr]
        assert version == job_lock().require(name), requirement
    assert header["tool"]["uv"] == {"exclude-newer": job_lock().exclude_newer}


def test_the_extras_a_gpu_job_adds_are_pinned_too():
    header = pep723.read_metadata(render_script("sft", EVERY_EXTRA))["dependencies"]
    for extra in (QLORA_REQUIREMENT, LIGER_REQUIREMENT):
        name = extra.split(">=")[0]
        assert f"{name}=={job_lock().require(name)}" in header


def test_newest_keeps_the_templates_lower_bounds_and_no_cutoff():
    for template in template_names():
        header = pep723.read_metadata(render_script(template, {}, dependency_versions="newest"))
        template_header = pep723.read_metadata((scripts_dir() / f"{template}.py").read_text())
        assert header["dependencies"] == template_header["dependencies"]
        assert "tool" not in header


def test_the_two_locks_agree_and_cover_every_job_requirement():
    dev, job = environment_lock(), job_lock()
    assert dev.exclude_newer == job.exclude_newer
    shared = dev.versions.keys() & job.versions.keys()
    assert {"torch", "transformers", "trl", "peft", "datasets"} <= shared
    assert {name: dev.versions[name] for name in shared} == {name: job.versions[name] for name in shared}
    for requirement in lock_tool.job_requirements():
        assert pin(requirement, job) != requirement, f"{requirement} is not in {job.name}: run make lock"
    assert {QLORA_REQUIREMENT, LIGER_REQUIREMENT} <= set(lock_tool.job_requirements())
    assert job.require("llama-cpp-python") == LLAMA_CPP_PYTHON_VERSION


def test_a_lock_without_its_cutoff_is_refused_and_pins_keep_extras_and_markers():
    with pytest.raises(ValueError, match="make lock"):
        parse_lock("x.txt", "trl==1.16.0\n")
    parsed = parse_lock("x.txt", "# exclude-newer: 2026-01-01T00:00:00Z\nTRL==1.16.0\nnumpy==2.3.0\n")
    assert parsed.version_of("trl") == "1.16.0" and parsed.exclude_newer == "2026-01-01T00:00:00Z"
    assert pin('trl[vllm]>=1.1; python_version >= "3.11"', parsed) == 'trl[vllm]==1.16.0; python_version >= "3.11"'
    assert pin("unlisted>=1", parsed) == "unlisted>=1"
    assert same_release("2.13.0+cpu", "2.13.0") and not same_release("5.25.0", "5.24.0")


def test_a_local_interpreter_with_other_versions_is_warned_with_the_pins_to_install(monkeypatch):
    """The job's Python is really probed; only the lock it is judged against is another one here."""
    locked = environment_lock()
    other = Lock(
        name=locked.name, exclude_newer=locked.exclude_newer, versions={**locked.versions, "transformers": "5.0.0"}
    )
    monkeypatch.setattr(probes, "environment_lock", lambda: other)
    facts = gather_requirements(Facts(), "sft", sys.executable)
    [untested] = facts.untested_requirements or []
    assert (untested.name, untested.tested) == ("transformers", "5.0.0")
    spec = JobSpec(method="sft", model="m", dataset="d")
    [warning] = check_dependencies(spec, facts)
    assert warning.code == "dependencies.untested" and warning.severity == "warning"
    assert f"transformers {untested.installed} (tested: 5.0.0)" in warning.message
    assert warning.fix == 'Install the tested versions into the job\'s Python: pip install "transformers==5.0.0"'


def test_the_locked_interpreter_draws_no_version_warning():
    facts = gather_requirements(Facts(), "sft", sys.executable)
    assert facts.untested_requirements == [] and facts.missing_requirements == []
    assert check_dependencies(JobSpec(method="sft", model="m", dataset="d"), facts) == []


def test_a_too_old_library_is_an_error_that_says_why():
    facts = Facts(missing_requirements=["trl>=1.16 (installed: 1.15.0)"])
    [error] = check_dependencies(JobSpec(method="sft", model="m", dataset="d"), facts)
    assert error.code == "dependencies.missing" and error.severity == "error" and "API" in error.message


def test_lock_reports_what_moved():
    old = "# exclude-newer: a\ntrl==1.16.0\ntransformers==5.23.0\ngone==1\n"
    new = "# exclude-newer: b\ntrl==1.16.0\ntransformers==5.24.0\nadded==2\n"
    assert lock_tool.moves(old, new) == ["added (new) -> 2", "gone 1 -> (gone)", "transformers 5.23.0 -> 5.24.0"]


def test_the_makefile_installs_the_lock_and_its_torch():
    makefile = (ROOT / "Makefile").read_text()
    lock_path = data_path("tested-versions.txt").relative_to(ROOT)
    assert f"LOCK := {lock_path}" in makefile and "-c $(LOCK)" in makefile
    assert "torch==2" not in makefile  # the torch pin is the lock's, not a copy
