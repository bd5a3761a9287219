"""The flavor catalog: what each Hugging Face Jobs machine has and costs.

Live prices come from `HfApi().list_jobs_hardware()` when the Hub answers; otherwise the table
bundled here (a snapshot of the official price list, see SNAPSHOT_DATE) is used, and the
result says so and why. GPU facts (memory, bf16, peak dense TFLOPS) are not in the Hub's
answer, so they come from GPU_FACTS in both cases.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from jobtrail.backends.registry import LOCAL as LOCAL_BACKEND
from jobtrail.errors import InvalidRequestError
from jobtrail.results.estimate import Flavor
from jobtrail.util.hub import hub_unreachable

# The date of Hugging Face's official HF Jobs price list that the bundled table copies.
SNAPSHOT_DATE = "2026-11"
CatalogSource = Literal["live", "bundled"]


class GpuFacts(BaseModel):
    vram_gb: float = Field(description="Memory of one GPU, GB (1e9 bytes), as NVIDIA sells it.")
    bf16: bool
    peak_tflops: float = Field(description="Peak dense bf16 TFLOPS of one GPU (fp16 where bf16 is missing).")
    compute_capability: float = Field(description="CUDA compute capability (sm_75 → 7.5): what kernels it can run.")


# Peak dense (not 2:4 sparse) tensor-core TFLOPS from NVIDIA's data sheets. T4 (Turing) has no
# bf16: its figure is fp16, which the SFT template uses there.
# RTX PRO 6000 (Blackwell) is not in that table: 4 PFLOPS FP4 with sparsity / 8 ≈ 500 dense bf16.
GPU_FACTS: dict[str, GpuFacts] = {
    "T4": GpuFacts(vram_gb=16, bf16=False, peak_tflops=65, compute_capability=7.5),
    "L4": GpuFacts(vram_gb=24, bf16=True, peak_tflops=121, compute_capability=8.9),
    "A10G": GpuFacts(vram_gb=24, bf16=True, peak_tflops=125, compute_capability=8.6),
    "L40S": GpuFacts(vram_gb=48, bf16=True, peak_tflops=362, compute_capability=8.9),
    "A100": GpuFacts(vram_gb=80, bf16=True, peak_tflops=312, compute_capability=8.0),  # HF Jobs rents the 80 GB A100
    "H100": GpuFacts(vram_gb=80, bf16=True, peak_tflops=989, compute_capability=9.0),  # SXM
    "H200": GpuFacts(vram_gb=141, bf16=True, peak_tflops=989, compute_capability=9.0),
    "RTX PRO 6000": GpuFacts(vram_gb=96, bf16=True, peak_tflops=500, compute_capability=12.0),
}

# A CPU flavor's "peak": fp32 matmul measured with torch on a 2-vCPU VM of this project
# (2048² matmul ≈ 0.13 TFLOPS), scaled by vCPU count. Only a floor for tiny jobs: nobody should
# fine-tune an LLM on cpu-basic, and the estimator never recommends a CPU flavor.
CPU_TFLOPS_PER_VCPU = 0.065


def _gpu(name: str, gpu: str, count: int, price: float, cpu: str, ram_gb: float) -> Flavor:
    """A GPU flavor: what HF Jobs sells it with, and its GPU's facts (vram_gb, bf16, peak_tflops) as GPU_FACTS says."""
    facts = GPU_FACTS[gpu].model_dump()
    return Flavor(name=name, gpu=gpu, gpu_count=count, ram_gb=ram_gb, cpu=cpu, price_per_hour=price, **facts)


def _cpu(name: str, vcpus: int, ram_gb: float, price: float) -> Flavor:
    return Flavor(
        name=name,
        cpu=f"{vcpus} vCPU",
        ram_gb=ram_gb,
        price_per_hour=price,
        peak_tflops=round(vcpus * CPU_TFLOPS_PER_VCPU, 3),
    )


# Prices: Hugging Face's official HF Jobs table ($/hour, snapshot SNAPSHOT_DATE). vCPU and RAM
# follow the Hub's hardware page for the same flavors (used only for CPU jobs and display).
BUNDLED: list[Flavor] = [
    _cpu("cpu-basic", 2, 16, 0.01),
    _cpu("cpu-upgrade", 8, 32, 0.03),
    _gpu("t4-small", "T4", 1, 0.40, "4 vCPU", 15),
    _gpu("t4-medium", "T4", 1, 0.60, "8 vCPU", 30),
    _gpu("l4x1", "L4", 1, 0.80, "8 vCPU", 30),
    _gpu("l4x4", "L4", 4, 3.80, "48 vCPU", 186),
    _gpu("l40sx1", "L40S", 1, 1.80, "8 vCPU", 62),
    _gpu("l40sx4", "L40S", 4, 8.30, "48 vCPU", 382),
    _gpu("l40sx8", "L40S", 8, 23.50, "192 vCPU", 1534),
    _gpu("a10g-small", "A10G", 1, 1.00, "4 vCPU", 15),
    _gpu("a10g-large", "A10G", 1, 1.50, "12 vCPU", 46),
    _gpu("a10g-largex2", "A10G", 2, 3.00, "24 vCPU", 92),
    _gpu("a10g-largex4", "A10G", 4, 5.00, "48 vCPU", 184),
    _gpu("a100-large", "A100", 1, 2.50, "12 vCPU", 142),
    _gpu("a100x4", "A100", 4, 10.00, "48 vCPU", 568),
    _gpu("a100x8", "A100", 8, 20.00, "96 vCPU", 1136),
    _gpu("h200", "H200", 1, 5.00, "23 vCPU", 256),
    _gpu("h200x2", "H200", 2, 10.00, "46 vCPU", 512),
    _gpu("h200x4", "H200", 4, 20.00, "92 vCPU", 1024),
    _gpu("h200x8", "H200", 8, 40.00, "184 vCPU", 2048),
    _gpu("rtx-pro-6000", "RTX PRO 6000", 1, 2.75, "16 vCPU", 128),
    _gpu("rtx-pro-6000x2", "RTX PRO 6000", 2, 5.50, "32 vCPU", 256),
    _gpu("rtx-pro-6000x4", "RTX PRO 6000", 4, 11.00, "64 vCPU", 512),
    _gpu("rtx-pro-6000x8", "RTX PRO 6000", 8, 22.00, "128 vCPU", 1024),
]

LOCAL = LOCAL_BACKEND.name  # this machine, as a flavor: named after the backend that runs jobs on it
_NVIDIA_SMI_TIMEOUT_S = 3.0


def local_flavor() -> Flavor:
    """This machine as a flavor (the local backend's): CPU cores, RAM and GPUs, read without torch
    (os.cpu_count, /proc/meminfo, nvidia-smi when present). It costs nothing per hour."""
    cores = os.cpu_count() or 1
    ram_gb = _meminfo_gb()
    gpus = _visible(_nvidia_gpus())
    cpu = f"{cores} CPU cores"
    if not gpus:
        return Flavor(
            name=LOCAL, cpu=cpu, ram_gb=ram_gb, price_per_hour=0.0, peak_tflops=round(cores * CPU_TFLOPS_PER_VCPU, 3)
        )
    model, memory_gb = gpus[0]
    facts = gpu_facts(model)
    return Flavor(
        name=LOCAL,
        gpu=model,
        gpu_count=len(gpus),
        vram_gb=round(memory_gb, 1),
        ram_gb=ram_gb,
        cpu=cpu,
        price_per_hour=0.0,
        bf16=facts.bf16 if facts else True,
        peak_tflops=facts.peak_tflops if facts else 0.0,
    )


def _visible(gpus: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The GPUs a job started from here can use: those CUDA_VISIBLE_DEVICES names, when it is set
    (indices or UUIDs; CUDA stops at the first entry it cannot use, "-1" or "" hides them all)."""
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None or not gpus:
        return gpus
    kept: list[tuple[str, float]] = []
    for entry in (e.strip() for e in chosen.split(",")):
        if entry.isdigit() and int(entry) < len(gpus):
            kept.append(gpus[int(entry)])
        elif entry.startswith(("GPU-", "MIG-")):  # a UUID: some GPU of this machine (nvidia-smi lists one model)
            kept.append(gpus[min(len(kept), len(gpus) - 1)])
        else:
            break
    return kept


def flavor_gpu_count(name: str | None) -> int:
    """GPUs of a flavor of the bundled catalog (0 for a CPU flavor or a name it does not know)."""
    return next((f.gpu_count for f in BUNDLED if f.name == name), 0)


def _meminfo_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) * 1024 / 1e9, 1)  # the kernel writes kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _nvidia_gpus() -> list[tuple[str, float]]:
    """(model, GB) per GPU from nvidia-smi; none when it is missing, slow or fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, _, mib = line.rpartition(",")
        try:
            gpus.append((name.strip().removeprefix("NVIDIA "), float(mib) * 1024**2 / 1e9))
        except ValueError:
            continue
    return gpus


_UNIT_PER_HOUR = {"minute": 60.0, "hour": 1.0, "second": 3600.0}
_SIZE = re.compile(r"([\d.]+)\s*([KMGT]i?B)?", re.I)
_SIZE_TO_GB = {  # the Hub writes "46 GB"; accept binary units too
    "kb": 1e-6,
    "mb": 1e-3,
    "gb": 1.0,
    "tb": 1e3,
    "kib": 1024 / 1e9,
    "mib": 1024**2 / 1e9,
    "gib": 1024**3 / 1e9,
    "tib": 1024**4 / 1e9,
}


def catalog(api: Any = None) -> tuple[list[Flavor], CatalogSource, str | None, str | None]:
    """(flavors, source, snapshot_date, note): live from the Hub, else the bundled table.

    `api` is anything with `list_jobs_hardware()` (an HfApi); None builds a default HfApi.
    Any failure (offline, 5xx, a changed response shape) falls back, and `note` says why.
    """
    try:
        if api is None:
            from huggingface_hub import HfApi  # imported here: the server must start fast

            api = HfApi()
        endpoint = getattr(api, "endpoint", None)  # an HfApi has one; a stand-in for it may not
        unreachable = hub_unreachable(endpoint) if isinstance(endpoint, str) else None
        if unreachable:  # asked first and quickly: the client's own connection has no timeout
            raise ConnectionError(unreachable)
        flavors = [flavor_from_hub(info) for info in api.list_jobs_hardware()]
        if not flavors:
            raise ValueError("the Hub listed no hardware")
        return flavors, "live", None, None
    except Exception as exc:  # noqa: BLE001 - any failure at all: the bundled table still answers
        reason = f"{type(exc).__name__}: {_first_line(exc)}"
        note = f"Live prices unavailable ({reason}); using the bundled {SNAPSHOT_DATE} table."
        return list(BUNDLED), "bundled", SNAPSHOT_DATE, note


def flavor_from_hub(info: Any) -> Flavor:
    """Map a huggingface_hub JobHardwareInfo onto a Flavor, filling GPU facts by model name."""
    price = float(info.unit_cost_usd) * _UNIT_PER_HOUR[str(info.unit_label).lower()]
    ram_gb = _gb(info.ram)
    accel = info.accelerator
    if accel is None:
        vcpus = _number(info.cpu) or 0.0  # "8 vCPU"
        return Flavor(
            name=info.name,
            pretty_name=info.pretty_name,
            cpu=info.cpu,
            ram_gb=ram_gb,
            price_per_hour=round(price, 4),
            peak_tflops=round(vcpus * CPU_TFLOPS_PER_VCPU, 3),
        )
    count = int(accel.quantity)
    facts = gpu_facts(str(accel.model))
    # The Hub documents `vram` as the flavor's total; per-GPU memory comes from the GPU's facts
    # when it is a GPU we know, else the total split evenly.
    vram = facts.vram_gb if facts else (_gb(accel.vram) or 0) / max(count, 1)
    return Flavor(
        name=info.name,
        pretty_name=info.pretty_name,
        gpu=str(accel.model),
        gpu_count=count,
        vram_gb=vram,
        ram_gb=ram_gb,
        cpu=info.cpu,
        price_per_hour=round(price, 4),
        bf16=facts.bf16 if facts else True,
        peak_tflops=facts.peak_tflops if facts else 0.0,
    )


def find_flavor(name: str, flavors: list[Flavor]) -> Flavor:
    """The flavor called `name`, or an InvalidRequestError that suggests the closest names."""
    by_name = {f.name: f for f in flavors}
    if name in by_name:
        return by_name[name]
    close = difflib.get_close_matches(name, list(by_name), n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise InvalidRequestError(
        f"Unknown flavor {name!r}.{hint}",
        fix=f'Pass flavor="{close[0]}".' if close else "Call hardware() for the list of flavors.",
    )


def gpu_facts(model: str) -> GpuFacts | None:
    """GPU facts by the Hub's accelerator model name ("A10G", "A100", "L40S", "RTX PRO 6000" ...)."""
    key = _squash(model)
    # Longest names first: "L4" is a substring of "L40S".
    for name in sorted(GPU_FACTS, key=len, reverse=True):
        if _squash(name) in key:
            return GPU_FACTS[name]
    return None


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _gb(text: Any) -> float | None:
    """GB in a size like "46 GB" (a bare number counts as GB); None when there is none."""
    match = _SIZE.search(str(text or ""))
    if not match:
        return None
    unit = (match.group(2) or "GB").lower()
    return float(match.group(1)) * _SIZE_TO_GB[unit]


def _number(text: Any) -> float | None:
    match = re.search(r"[\d.]+", str(text or ""))
    return float(match.group(0)) if match else None


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]
