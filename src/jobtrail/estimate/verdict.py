"""What estimate_cost judges and how it explains itself: the checked request, one flavor's verdict,
and the words around the numbers (notes, assumptions, where the speed and the token count came from)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from jobtrail.errors import InvalidRequestError
from jobtrail.estimate import calibration as calib
from jobtrail.estimate.cost import DATA_PARALLEL_SCALING, EFFICIENCY, QLORA_SLOWDOWN, TimeEstimate
from jobtrail.estimate.hardware import LOCAL
from jobtrail.estimate.memory import HEADROOM, OPTIMIZER_BYTES, Device, precision
from jobtrail.estimate.parallel import describe, too_many_processes
from jobtrail.estimate.params import ModelShape
from jobtrail.methods.registry import method_spec
from jobtrail.models import Launcher, Peft
from jobtrail.results.estimate import Flavor, MemoryBreakdown, MicroBatch
from jobtrail.util.timefmt import human_duration

GUESSED = "a guess from the model's FLOPs and the device's peak (no run measured yet)"


@dataclass(frozen=True)
class Request:
    """estimate_cost's description of the job, checked: names normalised, sizes positive."""

    method: str
    peft: Peft
    optimizer: str
    max_length: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    num_train_epochs: float
    max_steps: int | None
    gradient_checkpointing: bool
    lora_r: int
    num_processes: int | None = None  # None: one per GPU
    # Choose the split per flavor (estimate/microbatch.py) but for these names, which the caller gave; None: don't.
    tune: frozenset[str] | None = None

    def __post_init__(self) -> None:
        for name in ("max_length", "per_device_train_batch_size", "gradient_accumulation_steps", "lora_r"):
            positive(name, getattr(self, name), optional=False, integer=True)
        positive("num_train_epochs", self.num_train_epochs, optional=False, integer=False)
        positive("max_steps", self.max_steps, optional=True, integer=True)
        positive("num_processes", self.num_processes, optional=True, integer=True)

    @property
    def epochs(self) -> int:
        return 1 if self.max_steps else math.ceil(self.num_train_epochs)


@dataclass(frozen=True)
class FlavorEstimate:
    """One flavor's memory, time and cost for this job."""

    flavor: Flavor
    device: Device
    launcher: Launcher
    split: MicroBatch | None  # the micro-batch chosen for this flavor; None: the request's values
    batch: int  # the micro-batch memory and time are estimated with (the split's, else the request's)
    checkpointing: bool
    memory: MemoryBreakdown  # one device's, under the launcher
    alone_gb: float  # what one device would need holding the whole job by itself
    usable_gb: float
    time: TimeEstimate | None  # None: the data's size is unknown
    cost_usd: float | None
    measurement: calib.Measurement | None
    measured_memory: bool
    same_shape: bool = True  # the measurement's micro-batch and max_length are the estimate's (else rescaled)
    remote: bool = True  # a rented flavor: start-up is a container's, not this machine's Python

    @property
    def fits(self) -> bool:
        return self.memory.total_gb <= self.usable_gb


def positive(name: str, value: Any, *, optional: bool, integer: bool) -> None:
    if value is None and optional:
        return
    kind = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        example = {"avg_tokens": "512", "num_examples": "10000"}.get(name, "1")
        raise InvalidRequestError(
            f"{name}={value!r} must be a positive {'integer' if integer else 'number'}.",
            fix=f"Pass {name}={example} (or another positive value).",
        )


def notes(target: FlavorEstimate, shape: ModelShape, request: Request, catalog_note: str | None) -> list[str]:
    notes = [catalog_note] if catalog_note else []
    if not target.fits:
        notes.append("To need less memory: " + "; ".join(_shrink_options(request)) + ".")
    if not shape.known:
        notes.append(
            f"model_type {shape.architecture!r} is not one the estimator knows; it was counted as a generic "
            "decoder (check params against the model card)."
        )
    if target.device == "cuda_fp16":
        notes.append(f"{target.flavor.gpu} has no bf16: the job trains in fp16 autocast over fp32 weights.")
    flavor = target.flavor
    if too_many_processes(flavor.gpu_count, request.num_processes):
        notes.append(
            f"num_processes={request.num_processes} is more than {flavor.name}'s {flavor.gpu_count} GPUs (one worker "
            f"per GPU): counted as {flavor.gpu_count}; submit refuses it."
        )
    if target.launcher.num_processes > 1 or flavor.gpu_count > 1:
        notes.append(describe(target.launcher, flavor.gpu_count, flavor.name) + _per_gpu(target))
    return notes


def _per_gpu(target: FlavorEstimate) -> str:
    """What the memory above counts, on a flavor of many GPUs."""
    if target.launcher.strategy == "fsdp":
        return (
            f" Memory is per GPU: one alone would need {target.alone_gb:.1f} GB; activations and logits are "
            "not sharded."
        )
    if target.launcher.strategy == "ddp" and target.flavor.gpu_count:
        return " Memory is per GPU, DDP's gradient buckets included."
    return ""


def _shrink_options(request: Request) -> list[str]:
    """The changes that lower this job's memory, as arguments to pass back."""
    options = {"none": ['peft="lora"', 'peft="qlora"'], "lora": ['peft="qlora"'], "qlora": []}[request.peft]
    if request.per_device_train_batch_size > 1:
        accumulation = request.per_device_train_batch_size * request.gradient_accumulation_steps
        options.append(f"per_device_train_batch_size=1 with gradient_accumulation_steps={accumulation}")
    if not request.gradient_checkpointing:
        options.append("gradient_checkpointing=True")
    if request.optimizer == "adamw" and request.peft == "none":
        options.append('optim="adamw_8bit"')
    options.append(f"max_length={request.max_length // 2}")
    return options


def assumptions(
    shape: ModelShape, request: Request, memory_seq: int, target: FlavorEstimate, data_note: str
) -> dict[str, Any]:
    t = target.time
    flavor = target.flavor
    if target.measurement is not None and target.measurement.tokens_per_second:
        m = target.measurement
        pace = "steady-state steps" if m.steady else "whole train_runtime"
        throughput = (
            f"measured {m.tokens_per_second:,.0f} tokens/s ({pace}, median of {m.samples} earlier measurement(s) on "
            f"{flavor.name})"
        )
    else:
        n = target.launcher.num_processes
        devices = f" × {n} GPUs × {DATA_PARALLEL_SCALING:g} data-parallel scaling" if flavor.gpu_count and n > 1 else ""
        slow = f", ÷{QLORA_SLOWDOWN} for 4-bit dequantisation" if request.peft == "qlora" else ""
        throughput = f"{EFFICIENCY[target.device]:.0%} of {flavor.peak_tflops:g} peak TFLOPS{devices}{slow}"
    rule = method_spec(request.method).flops
    terms = ["6N" if request.peft == "none" else "4N", "attention"]
    terms += ["recompute 2N"] if target.checkpointing else []
    terms += [f"{rule.why} {2 * rule.extra_forwards}N"] if rule.extra_forwards else []
    assumptions: dict[str, Any] = {
        "throughput": throughput,
        "data": data_note,
        "memory_sequence": _memory_sequence(request, target.batch, memory_seq),
        "precision": precision(target.device, request.peft),
        "optimizer": f"{request.optimizer} ({OPTIMIZER_BYTES[request.optimizer]:g} bytes per trainable parameter)",
        "gradient_checkpointing": target.checkpointing,
        "headroom": f"{1 - HEADROOM:.0%} of device memory kept free",
    }
    if t is not None:
        flops = f"{t.flops_per_token:.3g} ({' + '.join(terms)}, N={shape.matmul_params:,})"
        assumptions["flops_per_token"] = flops
    if request.peft != "none":
        assumptions["lora"] = f"r={request.lora_r} on every decoder Linear (all-linear), dropout > 0"
    if rule.completion_tokens and t is not None:
        assumptions["generation"] = (
            f"{t.generated_tokens:,} tokens generated ({rule.sequences} completions × "
            f"{rule.completion_tokens} tokens per prompt, jobtrail's defaults)"
        )
    if rule.sequences > 1 and not rule.completion_tokens:
        assumptions["sequences"] = f"{rule.sequences} sequences trained per row (chosen and rejected)"
    if method_spec(request.method).reference_model:
        assumptions["reference_model"] = (
            "a frozen fp32 copy of the model beside it, scored every step (TRL's precompute_ref_log_probs=False)"
            if request.peft == "none"
            else "the base with the adapter switched off, scored every step: no second copy"
        )
    if t is not None and t.startup_s:
        assumptions["startup"] = _startup(target, t.startup_s)
    if target.measured_memory and target.measurement is not None:
        attempt = target.measurement.attempt_id
        assumptions["memory_total"] = f"measured peak of attempt {attempt} (same max_length and batch)"
    if shape.vision_params:
        assumptions["vision_tower"] = f"{shape.vision_params:,} frozen params loaded, not adapted, not in params"
    return assumptions


def _memory_sequence(request: Request, batch: int, memory_seq: int) -> str:
    """What one micro-batch holds, as the memory peak counts it."""
    sequences = method_spec(request.method).flops.batch_sequences
    if sequences == 1:
        return f"{batch} × {memory_seq} tokens per micro-batch"
    return (
        f"{batch} pairs × {sequences} × {memory_seq} tokens per micro-batch (chosen and rejected run as one batch of "
        f"{batch * sequences} rows)"
    )


def speed_source(target: FlavorEstimate) -> str:
    """Where the estimate's speed came from, in the words the result shows."""
    m = target.measurement
    if m is None or not m.tokens_per_second:
        return GUESSED
    where = "this machine" if target.flavor.name == LOCAL else target.flavor.name
    shape = "" if target.same_shape else f", rescaled from {_measured_shape(m)}"
    what = "bench run" if m.sources == ["bench"] else "run"
    runs = f"1 {what}" if m.samples == 1 else f"{m.samples} {what}s"
    pace = "steady-state steps" if m.steady else "whole train_runtime: too few steps logged for a steady state"
    return f"calibrated from {runs} on {where} ({pace}){shape}"


def _measured_shape(m: calib.Measurement) -> str:
    recomputed = {None: "", True: ", gradient checkpointing", False: ", no gradient checkpointing"}
    return f"batch {m.batch} × max_length {m.max_length}{recomputed[m.gradient_checkpointing]}"


def _startup(target: FlavorEstimate, seconds: float) -> str:
    """What the time around the training loop counts, and whether it was measured."""
    m = target.measurement
    if m is not None and m.overhead_s is not None:
        return (
            f"{human_duration(seconds)} outside the steady training steps (start, loading, warm-up, checkpoints, "
            "saving), measured: earlier attempts' wall time less their tokens at the measured pace"
        )
    if target.remote:
        return f"{human_duration(seconds)} for container, install, weights download (and upload)"
    return (
        f"{human_duration(seconds)} for starting Python, importing torch/transformers/trl, loading and saving (a guess)"
    )
