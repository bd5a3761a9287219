"""Refresh jobtrail's tested versions on purpose (`make lock`), or see what a refresh would change (`make drift`).

    python tools/lock.py refresh   resolve the newest releases, rebuild the venv on them, regenerate the bundled
                                   tables, run the suite; print what moved and, if the suite failed, what broke
    python tools/lock.py drift     resolve the newest releases into a temporary directory and report what would
                                   move (packages, and the bundled tables derived from them); changes nothing

The locks (src/jobtrail/data/, read by templates/versions.py):
- tested-versions.txt: jobtrail[train,gguf,dev] for this machine's Python (3.11, Linux x86_64). `make test`, `make
  demo` and CI install exactly this (pip's -c), so a fresh clone runs the versions the suite last passed with.
- job-versions.txt: what a rendered job installs: every template's dependencies and the GPU-only extras, for the
  HF Jobs image's Python (3.12), constrained by the first lock so the two agree on every package they share.
torch is held at the CPU build this kind of machine installs from its own disk (TORCH_PIN, default: the lock's):
any other torch would pull a multi-GB CUDA build. uv resolves (`uv pip compile`, from the dev extras); both
files carry the same `# exclude-newer:` time, which rendered jobs pass to uv for what their pins do not name.
Runs with the standard library only, under any Python 3.11: the venv it uses is rebuilt on the way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "jobtrail" / "data"
DEV_LOCK, JOB_LOCK = DATA / "tested-versions.txt", DATA / "job-versions.txt"
VENV = ROOT / ".venv"
SCRIPTS = ROOT / "scripts"
DEV_TARGET = ("3.11", "x86_64-manylinux_2_28")  # this kind of machine (and CI)
JOB_TARGET = ("3.12", "x86_64-manylinux_2_28")  # render's UV_IMAGE: ghcr.io/astral-sh/uv:python3.12-bookworm
# Added to the job lock beside the templates' headers: what render adds for QLoRA and Liger (GPU jobs only).
GPU_EXTRAS_FROM = ROOT / "src" / "jobtrail" / "templates" / "render.py"
_EXTRA = re.compile(r'^(?:QLORA|LIGER)_REQUIREMENT = "([^"]+)"', re.M)
_DEPENDENCIES = re.compile(r"(?ms)^# dependencies = \[(.*?)\]$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_CUTOFF = re.compile(r"^# exclude-newer: (\S+)$", re.M)
LLAMA_CPP = "llama-cpp-python"  # not installed by anything: convert_gguf jobs build its sdist's llama.cpp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["refresh", "drift"])
    parser.add_argument("--torch", default=None, help="the torch version to hold (default: the current lock's)")
    args = parser.parse_args()
    torch = args.torch or pins(DEV_LOCK.read_text())["torch"]
    return refresh(torch) if args.action == "refresh" else drift(torch)


# --- resolving ---------------------------------------------------------------------------------------------


def resolve(out_dir: Path, torch: str) -> tuple[Path, Path]:
    """Both locks, resolved now, written into out_dir (same file names as in data/)."""
    cutoff = dt.datetime.now(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    work = Path(tempfile.mkdtemp(prefix="jobtrail-lock-"))
    (work / "torch.txt").write_text(f"torch=={torch}\n")
    dev, job = out_dir / DEV_LOCK.name, out_dir / JOB_LOCK.name
    body = uv_compile(
        ["pyproject.toml", "--extra", "train", "--extra", "gguf", "--extra", "dev"],
        DEV_TARGET,
        cutoff,
        constraints=work / "torch.txt",
    )
    dev.write_text(
        header("jobtrail[train,gguf,dev]: this machine, CI, the venv and local jobs", DEV_TARGET, cutoff) + body
    )
    (work / "job.in").write_text("\n".join(job_requirements()) + "\n")
    body = uv_compile([str(work / "job.in")], JOB_TARGET, cutoff, constraints=dev)
    llama = newest_llama_cpp()
    job.write_text(
        header("every job template's dependencies and GPU extras: rendered jobs pin these", JOB_TARGET, cutoff)
        + body
        + f"# the llama.cpp sources convert_gguf jobs build (never installed)\n"
        f"{LLAMA_CPP}=={llama}\n"
    )
    shutil.rmtree(work, ignore_errors=True)
    return dev, job


def uv_compile(inputs: list[str], target: tuple[str, str], cutoff: str, constraints: Path) -> str:
    python, platform = target
    command = [
        uv(),
        "pip",
        "compile",
        *inputs,
        "--python-version",
        python,
        "--python-platform",
        platform,
        "--exclude-newer",
        cutoff,
        "-c",
        str(constraints),
        "--upgrade",
        "--no-header",
        "--no-annotate",
        "--quiet",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"uv could not resolve {' '.join(inputs)} for Python {python}:\n{done.stderr.strip()}")
    return done.stdout


def header(what: str, target: tuple[str, str], cutoff: str) -> str:
    return (
        f"# jobtrail's tested versions: {what}.\n"
        f"# Python {target[0]} on {target[1]}. Written by `make lock` (tools/lock.py); do not edit by hand.\n"
        f"# exclude-newer: {cutoff}\n"
    )


def job_requirements() -> list[str]:
    """Every requirement a rendered job's header can list: the templates' own and render's GPU extras."""
    found: list[str] = []
    for template in sorted(SCRIPTS.glob("[!_]*.py")):
        block = _DEPENDENCIES.search(template.read_text())
        if block:
            found += re.findall(r'"([^"]+)"', block.group(1))
    found += _EXTRA.findall(GPU_EXTRAS_FROM.read_text())
    return sorted(set(found))


def newest_llama_cpp() -> str:
    done = run_capture([str(python()), "-m", "pip", "index", "versions", LLAMA_CPP])
    found = re.search(rf"^{LLAMA_CPP} \(([^)]+)\)", done, re.M)
    if not found:
        sys.exit(f"pip could not list {LLAMA_CPP}'s releases:\n{done}")
    return found.group(1)


def uv() -> str:
    found = VENV / "bin" / "uv"
    if found.exists():
        return str(found)
    return shutil.which("uv") or sys.exit("uv is needed: `make .venv/.installed` installs it (the dev extras).")


def python() -> Path:
    return VENV / "bin" / "python"


def run_capture(command: list[str]) -> str:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


# --- comparing ---------------------------------------------------------------------------------------------


def pins(text: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for m in map(_PIN.match, text.splitlines()) if m}


def cutoff_of(text: str) -> str:
    found = _CUTOFF.search(text)
    return found.group(1) if found else "(no exclude-newer line)"


def moves(old: str, new: str) -> list[str]:
    before, after = pins(old), pins(new)
    lines = [
        f"{name} {before.get(name, '(new)')} -> {after.get(name, '(gone)')}"
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    ]
    return lines


# --- the two actions ---------------------------------------------------------------------------------------


def refresh(torch: str) -> int:
    old = {path.name: path.read_text() for path in (DEV_LOCK, JOB_LOCK)}
    tables = {path.name: path.read_text() for path in DATA.glob("*.json")}
    print(f"Resolving the newest releases (torch held at {torch}) ...", flush=True)
    resolve(DATA, torch)
    print("Rebuilding .venv on the new lock ...", flush=True)
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run(["make", str(VENV.relative_to(ROOT) / ".installed")], cwd=ROOT, check=True)
    llama = pins(JOB_LOCK.read_text())[LLAMA_CPP]
    print("Regenerating the bundled tables ...", flush=True)
    subprocess.run([str(python()), "tools/bundled_tables.py", "write", "--llama-cpp", llama], cwd=ROOT, check=True)
    report = Path(tempfile.mkdtemp(prefix="jobtrail-lock-")) / "junit.xml"
    print("Running the suite (make test) ...", flush=True)
    suite = subprocess.run(["make", "test", f"PYTEST_ARGS=--junitxml={report}"], cwd=ROOT, check=False)
    print("\n== What moved ==")
    for name, text in old.items():
        changed = moves(text, (DATA / name).read_text())
        print(f"{name}: " + ("; ".join(changed) if changed else "nothing moved"))
    retabled = [name for name, text in tables.items() if (DATA / name).read_text() != text]
    print("bundled tables regenerated: " + (", ".join(retabled) if retabled else "none changed"))
    if suite.returncode == 0:
        print("\nThe suite passed on the new versions: commit the locks and tables as one commit naming what moved.")
        return 0
    print("\n== What broke ==")
    for line in failures(report):
        print(line)
    print(
        "\nThe suite failed on the new versions (above). Fix what broke, or restore the locks with "
        "`git checkout src/jobtrail/data` and `make .venv/.installed`."
    )
    return 1


def failures(report: Path) -> list[str]:
    if not report.is_file():
        return ["(no test report: the lint gate or the install failed; see the output above)"]
    found = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for problem in [*case.iter("failure"), *case.iter("error")]:
            message = (problem.get("message") or "").splitlines()[0][:200] if problem.get("message") else ""
            found.append(f"{case.get('classname')}::{case.get('name')}: {message}")
    return found or ["(pytest failed without a failing test: see the output above)"]


def drift(torch: str) -> int:
    """Non-blocking: prints what `make lock` would move, exits 0 whatever it finds."""
    scratch = Path(tempfile.mkdtemp(prefix="jobtrail-drift-"))
    dev, job = resolve(scratch, torch)
    print(f"Against the lock resolved at {cutoff_of(DEV_LOCK.read_text())}:")
    for current, fresh in ((DEV_LOCK, dev), (JOB_LOCK, job)):
        changed = moves(current.read_text(), fresh.read_text())
        print(f"{current.name}: " + ("nothing would move" if not changed else "would move"))
        for line in changed:
            print(f"  {line}")
    newer = pins(dev.read_text())
    overlay = [
        f"{name}=={newer[name]}"
        for name in ("transformers", "trl")
        if newer.get(name) != pins(DEV_LOCK.read_text()).get(name)
    ]
    llama = pins(job.read_text())[LLAMA_CPP]
    if not overlay and llama == pins(JOB_LOCK.read_text())[LLAMA_CPP]:
        print("bundled tables: their sources did not move")
        return 0
    # The tables' sources, newer, over the venv's other packages (--no-deps): close enough to see what moves.
    target = scratch / "overlay"
    if overlay:
        subprocess.run(
            [str(python()), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), *overlay],
            check=True,
        )
    env = {**os.environ, "PYTHONPATH": str(target)}
    subprocess.run(
        [str(python()), "tools/bundled_tables.py", "diff", "--llama-cpp", llama], cwd=ROOT, env=env, check=False
    )
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
