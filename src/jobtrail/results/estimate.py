"""Result models of the hardware and estimate_cost tools, and the records they hold (a flavor, a memory breakdown,
a micro-batch split): stable structured fields plus the markdown an agent reads first (the verdict line, then a
small table, then assumptions). estimate/ computes them; the server declares its tools with them at start."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from jobtrail.models import Launcher, ToolResult
from jobtrail.results.endings import NextSteps, step_lines
from jobtrail.util.timefmt import human_duration

_MEMORY_ROWS = [
    ("weights_gb", "weights (frozen)"),
    ("trainable_gb", "trainable weights"),
    ("gradients_gb", "gradients"),
    ("optimizer_gb", "optimizer state"),
    ("activations_gb", "activations"),
    ("logits_gb", "output head (logits)"),
    ("reference_gb", "reference model"),
    ("overhead_gb", "overhead"),
]


class Flavor(BaseModel):
    """One machine a job can run on. Memory and TFLOPS are per GPU; gpu_count multiplies them."""

    name: str
    pretty_name: str | None = None
    gpu: str | None = Field(default=None, description='GPU model, e.g. "A10G"; None for CPU-only flavors.')
    gpu_count: int = 0
    vram_gb: float = Field(default=0, description="Memory of ONE GPU in GB; 0 for CPU flavors.")
    ram_gb: float | None = Field(default=None, description="Host memory in GB (what a CPU job can use).")
    cpu: str | None = None
    price_per_hour: float
    bf16: bool = False
    peak_tflops: float = Field(description="Peak dense bf16 TFLOPS per GPU (fp16 on T4); per machine on CPU flavors.")


class MemoryBreakdown(BaseModel):
    """GB (1e9 bytes) per component, for one device; total_gb is their sum."""

    # Shaped like models.Speedups and the other output models, a described Field a line: the descriptions are
    # the schema an agent reads.
    weights_gb: float = Field(description="Frozen weights: the base model under LoRA/QLoRA, a vision tower.")
    trainable_gb: float = Field(description="Weights being trained: the adapters, or the whole model without PEFT.")
    gradients_gb: float = Field(description="fp32 gradients of the trainable weights.")
    optimizer_gb: float = Field(description="Optimizer state per trainable weight (AdamW: two fp32 moments).")
    activations_gb: float = Field(
        description="Tensors saved for backward (one layer recomputed at a time when checkpointing)."
    )
    logits_gb: float = Field(
        description="The output head's working memory for one micro-batch: the fp32 logits (tokens × vocabulary × "
        "4 bytes) where the trainer builds them; TRL's fused LM head (SFT, DPO, KTO, GRPO) holds one tile of them."
    )
    overhead_gb: float = Field(description="CUDA context on a GPU; the Python/torch runtime on a CPU.")
    reference_gb: float = Field(
        0.0,
        description="The frozen reference model DPO and KTO score against, under full fine-tuning: its fp32 weights "
        "and, on a GPU, the half-precision copies autocast caches through its forward (under PEFT the base with the "
        "adapter off serves: nothing here).",
    )
    total_gb: float = Field(description="Peak memory of the device: the sum of the above.")


class MicroBatch(BaseModel):
    """How one device splits the effective batch, and why."""

    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    total_gb: float = Field(description="Estimated peak memory of one device with this split.")
    budget_gb: float = Field(description="What the split may fill: FILL of the device's memory.")
    changed: list[str] = Field(description="The hyperparameters whose value differs from the job's own defaults.")
    why: str

    def workload(self) -> dict[str, int]:
        """The Workload fields (estimate/cost.py) this split changes."""
        return {
            "batch": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }


class HardwareResult(ToolResult):
    flavors: list[Flavor]
    source: Literal["live", "bundled"] = Field(description='"live" from the Hub, or the "bundled" snapshot.')
    snapshot_date: str | None = Field(None, description="Date of the bundled price list (bundled only).")
    note: str | None = Field(None, description="Why live prices were not used, when they were not.")
    local: Flavor | None = Field(None, description="This machine (the local backend's): CPU cores, RAM, GPUs.")
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        origin = "live prices from the Hub" if self.source == "live" else f"bundled price list of {self.snapshot_date}"
        gpus = sorted((f for f in self.flavors if f.gpu_count), key=lambda f: f.price_per_hour)
        cheapest = (
            f"; cheapest GPU: {gpus[0].name} ({_gpu_label(gpus[0])}, {memory_label(gpus[0])}) at "
            f"${gpus[0].price_per_hour:.2f}/hour"
            if gpus
            else ""
        )
        lines = [f"{len(self.flavors)} flavors ({origin}){cheapest}."]
        if self.local:
            here = self.local
            gpu = f"{_gpu_label(here)} ({memory_label(here)})" if here.gpu_count else "no GPU"
            lines.append(f"This machine (local): {here.cpu}, {here.ram_gb or '?'} GB RAM, {gpu}.")
        return "\n".join(lines)

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        lines = [self.note] if self.note else []
        lines += ["| flavor | GPU | memory | bf16 | peak TFLOPS | $/hour |", "|---|---|---|---|---|---|"]
        for f in sorted(self.flavors, key=lambda f: (f.gpu_count > 0, f.price_per_hour)):
            lines.append(
                f"| {f.name} | {_gpu_label(f)} | {memory_label(f)} | {'yes' if f.bf16 else 'no'} | "
                f"{_tflops_label(f)} | {f.price_per_hour:.2f} |"
            )
        return lines


class FlavorOption(BaseModel):
    """One flavor's verdict for this job."""

    flavor: str
    fits: bool
    total_gb: float = Field(description="Peak memory per device on this flavor.")
    usable_gb: float = Field(description="Memory per device after headroom.")
    hours: float | None = Field(description="Wall time on this flavor, start-up and upload included.")
    cost_usd: float | None = Field(description="The hours at the flavor's price, billed by the minute.")
    timeout: str | None = Field(description='The timeout to submit with on this flavor, e.g. "3h".')
    calibrated: bool = Field(description="True when earlier attempts on this flavor measured the speed.")


class EstimateResult(ToolResult):
    model: str
    architecture: str = Field(description="model_type of the language model.")
    method: str
    peft: str
    flavor: str = Field(description="The flavor that memory, hours and cost below describe.")
    flavor_label: str = Field(description='Its memory in words, e.g. "24 GB" or "4 × 80 GB".')
    params: int = Field(description="Total parameters of the language model, from config.json.")
    trainable_params: int
    memory: MemoryBreakdown = Field(description="Peak memory of one device (one GPU) under the launcher below.")
    micro_batch: MicroBatch | None = Field(
        None,
        description="The micro-batch and gradient checkpointing chosen to fill this flavor's memory (what submit "
        "does on a bf16 GPU for values the caller left out; memory and time use them); None: the values as given.",
    )
    usable_gb: float = Field(description="The flavor's memory per device after headroom.")
    launcher: Launcher = Field(
        description="How the job would run on this flavor: processes (one per GPU) and ddp or fsdp; "
        "submit's preflight makes the same choice."
    )
    fits: dict[str, bool] = Field(description="Flavor name → whether the job fits it, with headroom.")
    recommended_flavor: str | None = Field(description="The cheapest GPU flavor that fits (lowest total cost).")
    # Time and cost need the data's size; without it they are None and time_unknown says why.
    tokens: int | None = Field(description="Tokens trained on, all epochs (non-padding).")
    steps: int | None = Field(description="Optimizer steps.")
    step_time_s: float | None
    tokens_per_second: float | None
    hours: float | None = Field(description="Wall time, start-up and upload included.")
    cost_usd: float | None
    recommended_timeout: str | None = Field(description='Whole hours, e.g. "3h": ≥ 1.3 × hours, never below 1h.')
    recommended_timeout_s: int | None
    time_unknown: str | None = Field(None, description="Why time and cost are None (the data's size is unknown).")
    calibrated: bool = Field(description="True when measurements of earlier attempts replaced the model.")
    speed_source: str = Field(
        "",
        description='Where the speed came from: "calibrated from N runs on this machine" (or "on <flavor>"), '
        "or a guess from the model's FLOPs and the device's peak.",
    )
    tokens_counted: Literal["tokenizer", "characters", "given"] | None = Field(
        None,
        description="How the data's tokens were counted: the model's tokenizer, characters/4 (no tokenizer could "
        "be read), or as given (avg_tokens, max_steps); None without a data size.",
    )
    catalog_source: Literal["live", "bundled", "given"]
    options: list[FlavorOption] = Field(description="The cheapest flavors that fit, cheapest first (at most 5).")
    notes: list[str] = Field(default_factory=list)
    assumptions: dict[str, Any]
    next_steps: NextSteps = Field(default_factory=list)

    def headline(self) -> str:
        return self._verdict()

    def next_calls(self) -> list[str]:
        return step_lines(self.next_steps)

    def details(self) -> list[str]:
        size = (
            f"{self.tokens:,} tokens{_counted(self.tokens_counted)} in {self.steps:,} steps of "
            f"~{self.step_time_s:.2f}s; speed: {self.speed_source}."
            if self.tokens is not None and self.steps is not None and self.step_time_s is not None
            else f"no time or cost: {self.time_unknown}."
        )
        lines = [
            f"{self.model}: {self.architecture}, {_billions(self.params)} params, "
            f"{_billions(self.trainable_params)} trainable ({self.method}, peft={self.peft}); {size}"
        ]
        lines += ["", f"| memory on {self.flavor} | GB |", "|---|---|"]
        lines += [
            f"| {label} | {getattr(self.memory, key):.2f} |"
            for key, label in _MEMORY_ROWS
            if key != "reference_gb" or self.memory.reference_gb  # only the methods that load one
        ]
        lines.append(f"| **total** | **{self.memory.total_gb:.2f}** of {self.usable_gb:.1f} usable |")
        if self.micro_batch and self.micro_batch.changed:
            mb = self.micro_batch
            checkpointing = "on" if mb.gradient_checkpointing else "off"
            lines.append(
                f"Split as submit runs it: per_device_train_batch_size={mb.per_device_train_batch_size}, "
                f"gradient_accumulation_steps={mb.gradient_accumulation_steps}, gradient checkpointing {checkpointing}."
            )
        if self.options:
            lines += ["", "| flavor that fits | GB | time | cost |", "|---|---|---|---|"]
            lines += [
                f"| {o.flavor} | {o.total_gb:.1f} | {_time(o.hours)} | {_usd(o.cost_usd)} |" for o in self.options
            ]
        lines += [f"! {note}" for note in self.notes]
        assumed = "; ".join(f"{k}: {v}" for k, v in self.assumptions.items())
        return [*lines, "", f"Assumptions: {assumed}."]

    def _verdict(self) -> str:
        cost = (
            f"{_time(self.hours)}, {_usd(self.cost_usd)}; timeout {self.recommended_timeout}"
            + (f" (speed {self.speed_source})" if self.speed_source else "")
            if self.hours is not None
            else "time and cost unknown without the data's size"
        )
        need = f"{self.memory.total_gb:.1f} GB needed"
        if self.fits.get(self.flavor):
            return f"Fits {self.flavor} ({self.flavor_label}): {need}; {cost}"
        if self.recommended_flavor and self.options:
            best = self.options[0]
            return (
                f"Does not fit {self.flavor} ({self.flavor_label}): {need}, {self.usable_gb:.1f} GB usable. "
                f"Cheapest that fits: {best.flavor} ({_time(best.hours)}, {_usd(best.cost_usd)})."
            )
        return f"Fits no flavor: {need} per device, {self.usable_gb:.1f} GB usable on the roomiest ({self.flavor})."


def _counted(how: str | None) -> str:
    return {"tokenizer": " (counted with the model's tokenizer)", "characters": " (characters/4: no tokenizer)"}.get(
        how or "", ""
    )


def _time(hours: float | None) -> str:
    return f"~{human_duration(hours * 3600)}" if hours is not None else "?"


def _usd(cost: float | None) -> str:
    return f"~${cost:.2f}" if cost is not None else "?"


def _billions(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.1f}K"


def memory_label(f: Flavor) -> str:
    if f.gpu_count == 0:
        return f"{f.ram_gb:g} GB RAM" if f.ram_gb else "host RAM"
    per_gpu = f"{f.vram_gb:g} GB"
    return per_gpu if f.gpu_count == 1 else f"{f.gpu_count} × {per_gpu}"


def _gpu_label(f: Flavor) -> str:
    if f.gpu_count == 0:
        return f"- ({f.cpu})" if f.cpu else "-"
    return str(f.gpu) if f.gpu_count == 1 else f"{f.gpu_count} × {f.gpu}"


def _tflops_label(f: Flavor) -> str:
    if f.gpu_count == 0:
        return f"~{f.peak_tflops:g} (fp32)"
    return f"{f.peak_tflops:g}" + ("" if f.bf16 else " (fp16)")
