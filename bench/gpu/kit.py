"""The wheels that carry the speed bench to a GPU machine without network: fetch them into .whl/.

The device machine (bench/gpu/README.md) has torch, transformers, accelerate and PEFT but no TRL, datasets,
trackio, liger-kernel or pydantic, and no way to fetch them. This collects, as x86-64 CPython 3.12 wheels,
every package that bench/train_throughput.py (jobtrail's rendered SFT job) and bench/baseline_sft.py (plain
TRL) need and that machine lacks or holds at another version than our locks, then walks each wheel's
Requires-Dist until nothing more is missing. bench/gpu/run.sh installs them there.

  roots     the SFT template's PEP 723 dependencies (scripts/sft.py), the Liger requirement preflight adds on a
            GPU (templates/render.py), and jobtrail's own dependencies minus its server surface (pyproject.toml),
            since the bench imports jobtrail.app and renders through it
  versions  src/jobtrail/data/job-versions.txt (the jobs' lock, Python 3.12), then tested-versions.txt:
            one version per package, the one the suite and the rendered jobs were tested with
  carried   a package the machine lacks, or holds at a version known to differ from the lock's; where its
            version there is unknown (MACHINE lists names only), a root, or a pure-Python wheel (small, and
            the lock's version is the one tested with the rest), is carried; a compiled one is left to the
            machine, and run.sh reports any requirement it leaves unmet
  kept      the machine's torch stack (torch, triton, CUDA libraries: gigabytes, built for its driver) and
            numpy, pandas and pyarrow (tens of MB each, compiled against the machine's numpy): never carried

Usage: .venv/bin/python bench/gpu/kit.py [--dest .whl] [--python-version 3.12]
Prints each wheel with its size and why it travels, what was left to the machine, and the total.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "src" / "jobtrail" / "data"
LOCKS = (DATA / "job-versions.txt", DATA / "tested-versions.txt")
SFT_TEMPLATE = ROOT / "scripts" / "sft.py"
RENDER = ROOT / "src" / "jobtrail" / "templates" / "render.py"
PYPROJECT = ROOT / "pyproject.toml"
# jobtrail's dependencies that only the MCP surface and plot() import; the bench reaches neither.
SERVER_ONLY = {"mcp", "matplotlib"}
LIMIT_MIB = 56  # the device tool carries 64 MiB with the working tree (~5 MiB tracked)

# The device image's Python packages (/work/.library/device/KINDS.md, read 2026-11-17), and the versions
# sessions saw there (its pip list); the rest of the names are there at versions nobody recorded.
MACHINE_VERSIONS = {
    "accelerate": "1.15.0",
    "huggingface-hub": "1.33.0",
    "numpy": "2.5.2",
    "safetensors": "0.8.0",
    "sentencepiece": "0.2.2",
    "tokenizers": "0.23.2",
    "torch": "2.11.0",
    "transformers": "5.17.0",
    "triton": "3.6.0",
}
_MACHINE_NAMES = """absl-py aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
    jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite
    lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
    multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpyro nvidia-cublas
    nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
    nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
    nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless
    optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
    pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
    pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
    pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
    scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
    shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
    tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq
    torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
    typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"""
MACHINE = set(MACHINE_VERSIONS) | set(_MACHINE_NAMES.split())
MACHINE_ONLY = re.compile(r"^(torch|triton|numpy|pandas|pyarrow|nvidia-.*|cuda-.*)$")
# Where pip finds a cp312 Linux x86-64 build: it matches each manylinux tag exactly.
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux1_x86_64"] + [f"manylinux_2_{n}_x86_64" for n in (24, 31, 34, 35, 39)]


def lock_versions() -> dict[str, str]:
    """name -> version, the jobs' lock winning where both locks name a package (they agree by construction)."""
    versions: dict[str, str] = {}
    for lock in reversed(LOCKS):
        for line in lock.read_text().splitlines():
            if "==" in line and not line.startswith("#"):
                name, version = line.split("==", 1)
                versions[canonicalize_name(name)] = version.strip()
    return versions


def roots() -> list[Requirement]:
    header = re.search(r"(?ms)^# dependencies = \[(.*?)\]$", SFT_TEMPLATE.read_text())
    assert header, f"no PEP 723 dependencies in {SFT_TEMPLATE}"
    found = [Requirement(r) for r in re.findall(r'"([^"]+)"', header.group(1))]
    liger = re.search(r'^LIGER_REQUIREMENT = "([^"]+)"', RENDER.read_text(), re.M)
    assert liger, f"no LIGER_REQUIREMENT in {RENDER}"
    found.append(Requirement(liger.group(1)))
    project = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    found += [r for r in map(Requirement, project) if canonicalize_name(r.name) not in SERVER_ONLY]
    return found


def marker_env(python_version: str, extra: str) -> dict[str, str]:
    return {
        "python_version": python_version,
        "python_full_version": f"{python_version}.3",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": extra,
    }


def applies(req: Requirement, extras: set[str], python_version: str) -> bool:
    if req.marker is None:
        return True
    marker: Marker = req.marker
    return any(marker.evaluate(marker_env(python_version, extra)) for extra in extras | {""})


def download(name: str, version: str, dest: Path, python_version: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    found = wheel_in(dest, name, version)
    if found:
        return found
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python_version, "--implementation", "cp", "-d", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    done = subprocess.run([*cmd, f"{name}=={version}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"pip found no cp{python_version.replace('.', '')} x86-64 wheel of {name}=={version}:\n{done.stderr}"
        )
    found = wheel_in(dest, name, version)
    assert found, f"pip downloaded no wheel of {name}=={version}"
    return found


def wheel_in(dest: Path, name: str, version: str) -> Path | None:
    for wheel in dest.glob("*.whl"):
        dist, ver = wheel.name.split("-")[:2]
        if canonicalize_name(dist) == name and ver == version:
            return wheel
    return None


def requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        headers = Parser().parsestr(zf.read(meta).decode())
    return [Requirement(r) for r in headers.get_all("Requires-Dist") or []]


def why_carried(name: str, locked: str, is_root: bool, pure: bool) -> str | None:
    """Why this package travels, or None when the machine's own will do."""
    if name not in MACHINE:
        return "missing there"
    there = MACHINE_VERSIONS.get(name)
    if there is not None:
        return f"there {there}" if there != locked else None
    if is_root:
        return "a root, version there unknown"
    return "pure Python, version there unknown" if pure else None


def collect(dest: Path, python_version: str) -> tuple[dict[str, tuple[Path, str]], dict[str, str]]:
    """(carried: name -> (wheel, why), left: name -> why the machine's own is used)."""
    locked = lock_versions()
    wanted: list[tuple[Requirement, bool]] = [(r, True) for r in roots()]
    extras: dict[str, set[str]] = {}
    carried: dict[str, tuple[Path, str]] = {}
    left: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    while wanted:
        req, is_root = wanted.pop(0)  # breadth first: every root is met as a root
        name = canonicalize_name(req.name)
        extras.setdefault(name, set()).update(req.extras)
        key = (name, frozenset(extras[name]))
        if key in seen:
            continue
        seen.add(key)
        if MACHINE_ONLY.match(name):
            left[name] = f"the machine's own ({MACHINE_VERSIONS.get(name, 'version unknown')})"
            continue
        if name not in locked:
            raise SystemExit(f"{name} (needed as {req}) is in neither lock: run `make lock` or name a version")
        wheel = carried[name][0] if name in carried else download(name, locked[name], dest, python_version)
        why = why_carried(name, locked[name], is_root, wheel.name.endswith("-none-any.whl"))
        if why is None:
            wheel.unlink(missing_ok=True)
            left[name] = f"the machine's own ({MACHINE_VERSIONS.get(name, 'version unknown')}; lock {locked[name]})"
            continue
        carried[name] = (wheel, why)
        for dep in requires(wheel):
            if applies(dep, extras[name], python_version):
                wanted.append((dep, False))
    return carried, left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=ROOT / ".whl")
    parser.add_argument("--python-version", default="3.12", help="the device machine's (3.12.3)")
    args = parser.parse_args()
    carried, left = collect(args.dest, args.python_version)
    keep = {wheel.name for wheel, _ in carried.values()}
    for stale in args.dest.glob("*.whl"):
        if stale.name not in keep:
            stale.unlink()
    total = 0
    for name in sorted(carried):
        wheel, why = carried[name]
        total += wheel.stat().st_size
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}  ({why})")
    print(f"{total / 2**20:7.2f} MiB  {len(carried)} wheels in {args.dest}")
    print("left to the machine: " + ", ".join(f"{n} {w}" for n, w in sorted(left.items())))
    if total > LIMIT_MIB * 2**20:
        print(f"over {LIMIT_MIB} MiB: the device tool would refuse the working tree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
