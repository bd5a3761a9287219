"""Training time and money from FLOPs. Pure.

FLOPs per trained token (N = parameters that take part in a matmul, s = sequence length):
  forward = 2N + attention (2·s·q_dim per layer: QKᵀ and AV, causal, so half the full square)
  full fine-tuning: forward + backward (weight and input gradients: 2 × forward) ≈ 6N
  LoRA / QLoRA: forward + input gradients only (the base is frozen) ≈ 4N; attention has no
    weights, so its backward is the full 2 × forward in both cases
  gradient checkpointing: + one more forward (each layer is recomputed during backward)
  + the method's forwards without gradients (a reference model, KTO's KL term) and the sequences
    it trains per example, generating them first for GRPO: its FlopsRule in the method registry.
Throughput = peak TFLOPS × EFFICIENCY × GPUs (× data-parallel scaling), combined with a host
overhead per micro-batch (Python, autograd, kernel launches) that dominates small models.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from jobtrail.estimate.memory import Device, activation_bytes, layer_activation_bytes
from jobtrail.estimate.params import ModelShape
from jobtrail.methods.registry import method_spec
from jobtrail.models import Peft

# Fraction of peak FLOPS that training reaches on the FLOPs counted above (recomputation
# included, so this is hardware FLOPs utilisation). GPU: Hugging Face Trainer + SDPA on 1-13B
# models at batch 1-8 × 512-4096 tokens commonly lands at 30-45% of dense bf16 peak; 0.35 is
# the middle, and full fine-tuning of a 0.8B model on an H100 (bench/estimate_vs_measured.py)
# matched it. CPU: fitted on this project's 2-vCPU VM, one thread: a 40M-parameter model's
# matmuls run at ~60% of the thread's 2048² fp32 matmul rate once the elementwise time below
# is counted apart.
EFFICIENCY: dict[Device, float] = {"cuda_bf16": 0.35, "cuda_fp16": 0.35, "cpu": 0.6}
# bitsandbytes dequantises each 4-bit weight on every use: QLoRA steps run about 30% slower
# than LoRA at the same shape (rule of thumb from the QLoRA paper's and PEFT's comparisons).
QLORA_SLOWDOWN = 1.3
# Decoding with `generate` is memory-bound: with 8 sequences per prompt about 8 FLOPs per
# weight byte read, against ~300 at an H100's ridge point, so a few % of peak.
GENERATION_EFFICIENCY = 0.03
# Data-parallel scaling on one node: DDP overlaps the gradient all-reduce with backward.
DATA_PARALLEL_SCALING = 0.9
# Host time per micro-batch that does not scale with tokens: Python, autograd and kernel
# launches (forward, recompute, backward), the optimizer step, logging. GPU: measured on the
# H100 lease machine with micro-benchmarks of Qwen2-shaped models (2 and 16 layers, LoRA and
# full): ~12 ms per step plus ~16 ms per decoder layer with LoRA on all seven Linears (each adds
# dropout, two skinny matmuls, a scale and an add per pass) and ~7 ms without. CPU, one thread
# on this project's VM: a bare training loop of the demo model costs ~5 ms per LoRA layer
# (~2.5 ms without LoRA) at 16 tokens, and the SFT job adds ~12 ms per step (logging, metrics,
# gradient clipping, collation).
STEP_OVERHEAD_S: dict[Device, float] = {"cuda_bf16": 0.012, "cuda_fp16": 0.012, "cpu": 0.012}
LAYER_OVERHEAD_S: dict[tuple[Device, bool], float] = {  # (device, adapters?) → seconds per layer
    ("cuda_bf16", True): 0.016,
    ("cuda_bf16", False): 0.007,
    ("cuda_fp16", True): 0.016,
    ("cuda_fp16", False): 0.007,
    ("cpu", True): 0.005,
    ("cpu", False): 0.0025,
}
# Elementwise work (norms, RoPE, activations, dropout, their gradients) scales with the
# activations, not the FLOPs. On a CPU it costs ~3.1 ns per byte of a layer's saved
# activations per step (fitted: the demo model's layer went from 5 to 17 ms per step between 16
# and 512 tokens); on a GPU it is part of what EFFICIENCY leaves out.
ACTIVATION_S_PER_BYTE: dict[Device, float] = {"cuda_bf16": 0.0, "cuda_fp16": 0.0, "cpu": 3.1e-9}
# A GPU runs kernels while the host launches the next ones, so a step takes the longer of the
# two plus the part that cannot overlap (loss and grad-norm .item() syncs, the optimizer
# step): a quarter of the shorter one fitted the H100 measurements (LoRA and full, batch 4
# and 16 × 512 tokens) within 10%. A CPU does both in turn.
GPU_SERIAL_SHARE = 0.25
# Around the training loop: container start and `uv` installing the torch stack (~3 min on
# HF Jobs), downloading the bf16 weights at ~200 MB/s and uploading the result at ~100 MB/s.
STARTUP_S = 180.0
DOWNLOAD_GB_PER_S = 0.2
UPLOAD_GB_PER_S = 0.1
# Around a LOCAL job's training loop, until one run is measured (calibration's overhead_s replaces
# it): starting Python, importing torch/transformers/trl, tokenizing, saving. The demo model's jobs
# spent ~10.5 s outside train() on this project's 2-vCPU VM, most of it imports; a bigger model adds
# reading its weights (fp32 on a CPU) from local disk at ~1 GB/s.
LOCAL_STARTUP_S = 10.0
LOCAL_LOAD_GB_PER_S = 1.0
# Timeouts: at least 30% above the estimate, whole hours, never below one.
TIMEOUT_BUFFER = 1.3


class Workload(BaseModel):
    """What the job processes: rows, their length, and how they are batched."""

    examples: int
    epochs: int
    seq_len: float  # mean tokens per sequence the model runs (truncated; padding included)
    real_tokens_per_example: float  # non-padding tokens per row, as TRL counts them
    batch: int
    gradient_accumulation_steps: int


class TimeEstimate(BaseModel):
    flops_per_token: float
    tokens: int  # trained tokens, all epochs (both responses of a pair; GRPO completions included)
    generated_tokens: int
    steps: int
    micro_batches: int
    tokens_per_second: float
    step_time_s: float
    train_s: float
    startup_s: float
    hours: float


def flops_per_token(
    shape: ModelShape, *, seq_len: float, peft: Peft, method: str, gradient_checkpointing: bool, lora_trainable: int
) -> float:
    """FLOPs per trained token, as the hardware executes them (recomputation included)."""
    dense = 2.0 * shape.matmul_params
    attention = 2.0 * shape.num_layers * seq_len * shape.q_dim
    forward = dense + attention
    # Adapters: input gradients through the frozen base, plus the adapters' own weight gradients.
    backward = 2 * forward if peft == "none" else dense + 2 * attention + 4.0 * lora_trainable
    recompute = forward if gradient_checkpointing else 0.0
    # Forwards without gradients (a reference model, KTO's KL term) recompute nothing.
    return forward + backward + recompute + method_spec(method).flops.extra_forwards * forward


def estimate_time(
    shape: ModelShape,
    work: Workload,
    *,
    device: Device,
    peft: Peft,
    method: str,
    gradient_checkpointing: bool,
    lora_trainable: int,
    peak_tflops: float,
    gpu_count: int,
    processes: int = 1,
    remote: bool = True,
    measured_tokens_per_second: float | None = None,
    measured_startup_s: float | None = None,
) -> TimeEstimate:
    """Steps, throughput and wall time of the whole job on one flavor.

    `processes`: the job's workers, which split the rows (each runs its own micro-batches, so a step
    takes `processes` micro-batches per accumulation step); `gpu_count`: how many of them compute on a
    GPU of their own (CPU workers share the machine's cores: no faster together).
    `measured_tokens_per_second` (calibration; TRL's count: non-padding tokens over the
    train() runtime) replaces the FLOPs model, overheads and generation included;
    `measured_startup_s` (calibration: wall time less train_runtime) replaces the start-up model."""
    devices = max(gpu_count, 1)
    rule = method_spec(method).flops
    sequences, completion = rule.sequences, rule.completion_tokens
    seq = work.seq_len + completion
    fpt = flops_per_token(
        shape,
        seq_len=seq,
        peft=peft,
        method=method,
        gradient_checkpointing=gradient_checkpointing,
        lora_trainable=lora_trainable,
    )
    rows = work.examples * work.epochs
    tokens = int(rows * sequences * (work.real_tokens_per_example + completion))
    # A micro-batch runs `batch` rows of `batch_sequences` sequences each (a pair: two); a generating method's
    # batch counts completions, `sequences` of them per prompt.
    sequences_per_micro = work.batch * rule.batch_sequences
    examples_per_micro = sequences_per_micro / sequences
    micro_per_epoch = math.ceil(work.examples / (examples_per_micro * max(processes, devices)))  # per worker
    micro_batches = micro_per_epoch * work.epochs
    steps = math.ceil(micro_per_epoch / work.gradient_accumulation_steps) * work.epochs
    generated = int(rows * sequences * completion)
    if measured_tokens_per_second:
        train_s = tokens / measured_tokens_per_second
    else:
        scaling = DATA_PARALLEL_SCALING if devices > 1 else 1.0
        flops_per_s = peak_tflops * 1e12 * EFFICIENCY[device] * devices * scaling
        if peft == "qlora":
            flops_per_s /= QLORA_SLOWDOWN
        compute_s = rows * sequences * seq * fpt / flops_per_s  # padded tokens: what actually runs
        host_s = micro_batches * _host_seconds(shape, device, peft, sequences_per_micro * seq)
        generate_s = generated * 2.0 * shape.matmul_params / (peak_tflops * 1e12 * GENERATION_EFFICIENCY * devices)
        train_s = _combine(compute_s, host_s, device) + generate_s
    if measured_startup_s is not None:
        startup = measured_startup_s
    else:
        startup = _startup_seconds(shape, peft) if remote else local_startup_seconds(shape)
    return TimeEstimate(
        flops_per_token=fpt,
        tokens=tokens,
        generated_tokens=generated,
        steps=steps,
        micro_batches=micro_batches,
        tokens_per_second=tokens / train_s if train_s else 0.0,
        step_time_s=train_s / steps if steps else 0.0,
        train_s=train_s,
        startup_s=startup,
        hours=(train_s + startup) / 3600,
    )


def _host_seconds(shape: ModelShape, device: Device, peft: Peft, tokens: float) -> float:
    """Per micro-batch time that FLOPs do not explain (see STEP_OVERHEAD_S and
    ACTIVATION_S_PER_BYTE)."""
    adapters = peft != "none"
    elementwise = layer_activation_bytes(shape, activation_bytes(device), lora=adapters) * tokens
    per_layer = LAYER_OVERHEAD_S[device, adapters] + elementwise * ACTIVATION_S_PER_BYTE[device]
    return STEP_OVERHEAD_S[device] + per_layer * shape.num_layers


def _combine(compute_s: float, host_s: float, device: Device) -> float:
    """Wall time of device compute and host overhead: overlapped on a GPU, serial on a CPU."""
    if device == "cpu":
        return compute_s + host_s
    return max(compute_s, host_s) + GPU_SERIAL_SHARE * min(compute_s, host_s)


def _startup_seconds(shape: ModelShape, peft: Peft) -> float:
    download = (shape.params + shape.vision_params) * 2 / 1e9 / DOWNLOAD_GB_PER_S  # bf16 checkpoint
    upload = (shape.params * 2 / 1e9 / UPLOAD_GB_PER_S) if peft == "none" else 0.0  # adapters are small
    return STARTUP_S + download + upload


def local_startup_seconds(shape: ModelShape) -> float:
    """A local job's time outside train() before any is measured (LOCAL_STARTUP_S)."""
    return LOCAL_STARTUP_S + (shape.params + shape.vision_params) * 4 / 1e9 / LOCAL_LOAD_GB_PER_S


def cost_usd(hours: float, price_per_hour: float) -> float:
    """HF Jobs bills by the minute."""
    return round(math.ceil(hours * 60) * price_per_hour / 60, 2)


def recommended_timeout_s(hours: float) -> int:
    """TIMEOUT_BUFFER × the estimate, rounded up to whole hours, never below one hour."""
    return max(1, math.ceil(hours * TIMEOUT_BUFFER - 1e-9)) * 3600
