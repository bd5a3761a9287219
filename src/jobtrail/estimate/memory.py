"""Peak training memory of one device, from the model's shape and the job's shape. Pure.

The peak is bounded by the sum of what lives through a training step: weights, trainable
weights, their gradients, optimizer state, the activations saved for backward, the logits,
and a fixed per-process overhead. Precisions follow what scripts/sft.py actually does:
  * GPU with bf16: a LoRA base loads in bf16; full fine-tuning keeps fp32 master weights and
    computes under bf16 autocast.
  * GPU without bf16 (T4): fp32 weights, fp16 autocast.
  * CPU: fp32 everything, no autocast.
PEFT creates adapter weights in fp32 (autocast_adapter_dtype=True), so they, their gradients
and their optimizer state are fp32 everywhere.
"""

from __future__ import annotations

from typing import Literal

from jobtrail.estimate.params import ModelShape
from jobtrail.models import Peft
from jobtrail.results.estimate import MemoryBreakdown

Device = Literal["cuda_bf16", "cuda_fp16", "cpu"]
# How the trainer turns the last hidden states into a loss (the method registry says which):
#   "logits": the model's own head, fp32 [tokens × vocabulary] logits (transformers' Trainer);
#   "fused": TRL >= 1.16's fused LM head (SFT, DPO, KTO, GRPO): log-probabilities computed tile by
#            tile, never the whole logits (trl/kernels/chunked_logprob.py);
#   "score": a sequence-classification head (reward models): one score per sequence.
Head = Literal["logits", "fused", "score"]

GB = 1e9  # decimal GB throughout, like GPU data sheets and the flavor table

FP32, HALF = 4, 2  # bytes per element
# bitsandbytes NF4 with double quantisation: 4 bits per weight, plus one 8-bit absmax per
# 64-weight block (0.125 bit) and one fp32 constant per 256 blocks (0.002 bit).
NF4_BYTES = 0.5 + (8 / 64 + 32 / (64 * 256)) / 8

# Optimizer state bytes per trainable parameter: AdamW keeps two fp32 moments (8 B);
# bitsandbytes' 8-bit AdamW two 8-bit moments (2 B, block constants ignored); Lion one fp32
# momentum (4 B); plain SGD (TRL's "sgd", momentum 0) none.
OPTIMIZER_BYTES: dict[str, float] = {"adamw": 8, "adamw_8bit": 2, "lion": 4, "sgd": 0}
# TRL/transformers `optim` names → the families above.
OPTIMIZER_ALIASES: dict[str, str] = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw",
    "adamw_hf": "adamw",
    "adam": "adamw",
    "adamw_bnb_8bit": "adamw_8bit",
    "adamw_8bit": "adamw_8bit",
    "paged_adamw_8bit": "adamw_8bit",
    "lion_32bit": "lion",
    "paged_lion_32bit": "lion",
}

# Process overhead outside the tensors counted here.
# GPU: the CUDA context, loaded kernels and cuBLAS/cuDNN handles, typically 0.4-0.6 GB per
# PyTorch process on A100/H100-class GPUs with CUDA's lazy module loading (what nvidia-smi
# shows beyond torch.cuda.memory_reserved()). torch.cuda.max_memory_allocated() leaves it out.
CUDA_CONTEXT_GB = 0.5
# CPU: the resident memory (ru_maxrss) of the job's Python apart from the model. Measured on
# this project's 2-vCPU VM: torch 2.13 CPU, transformers 5.23, trl 1.16, peft and datasets
# imported take 431 MB; SFT jobs of the ~0.1M-parameter demo model peak at 516-548 MB (the
# dataset, tokenizer, Trainer and allocator state on top).
CPU_RUNTIME_GB = 0.52

# A job fits a device when its estimate uses at most this share of the device's memory: the
# rest absorbs allocator fragmentation (PyTorch's caching allocator typically holds 5-10% more
# than it has allocated at the peak) and this estimate's own error.
HEADROOM = 0.90

# LoRA dropout (jobtrail's default lora_dropout=0.05 > 0) gives every adapted Linear its own
# dropped-out copy of the input, saved for backward with a one-byte mask per element.
LORA_DROPOUT_MASK_BYTES = 1

# TRL 1.16's fused LM head (ChunkedLogProbFunction) projects at most this many tokens onto at most
# this many vocabulary entries at a time (TOKEN_CHUNK_SIZE and _CHUNKED_LOGPROB_CHUNK_SIZE there).
FUSED_HEAD_TOKENS, FUSED_HEAD_VOCAB = 4096, 32768
# Bytes per element of that tile at the head's peak. A GPU folds each tile in place (Triton kernels): the tile alone.
# A CPU has no Triton, and TRL's torch fallback (_backward_tile) folds a whole fp32 tile at once: in backward the
# tile, five fp32 intermediates (scaled logits, z, log p, p, the gradient), at its largest statement two more and
# the target mask (a byte each). Measured on this project's VM (ChunkedLogProbFunction, 1024 and 2048 tokens ×
# 32000, fp32, RSS with glibc's mmap threshold fixed): backward +8.3 tiles, forward +4.0-4.3.
CPU_FUSED_TILE_BYTES = 8 * FP32 + 1


def device_for(*, gpu_count: int, bf16: bool) -> Device:
    if gpu_count == 0:
        return "cpu"
    return "cuda_bf16" if bf16 else "cuda_fp16"


def activation_bytes(device: Device) -> int:
    """Bytes per activation element: autocast computes in bf16/fp16 on a GPU, fp32 on a CPU."""
    return FP32 if device == "cpu" else HALF


def estimate_memory(
    shape: ModelShape,
    *,
    device: Device,
    peft: Peft,
    trainable_params: int,
    optimizer: str,
    seq_len: int,
    batch: int,
    gradient_checkpointing: bool,
    head: Head = "logits",
    sequences: int = 1,
    reference: bool = False,
) -> MemoryBreakdown:
    """Peak memory of one device training one micro-batch of `batch` rows of `seq_len` tokens.

    `sequences`: what the model runs per row (the method registry's FlopsRule.batch_sequences): a
    preference pair is two, chosen and rejected, concatenated into one batch of 2 × `batch` rows (TRL
    1.16's DPO and reward collators), so activations and the head hold twice an SFT row's.
    `reference`: the trainer also runs a frozen reference model's forward each step, under no_grad
    (MethodSpec.reference_model: DPO, KTO); see reference_bytes.

    The total is the sum of the components, which bounds the peak from above: the head's work
    peaks at the loss, the recomputed layer and the gradients later in backward. `head` is how
    the trainer computes the loss: "logits" counts the whole fp32 logits (the preflight's rule
    for a trainer that builds them: a 262k vocabulary at 4k tokens is 4.3 GB by itself).

    Measured on an H100 (torch.cuda.max_memory_allocated, a 0.8B Qwen2-shaped model, SFT with
    TRL 1.16, 16 × 512 tokens, gradient checkpointing; the fixtures of tests/estimate): full
    fine-tuning peaked 10% and LoRA 16% below this sum as it was with whole logits (LoRA 1.20×
    over). The logits were most of that gap: SFT's fused head never builds them. With the fused
    head counted as it works (head_bytes) the sum is 1.01× the LoRA peak and 1.06× the full one.
    """
    tokens = batch * sequences * seq_len
    activations = activation_total_bytes(shape, device, peft, tokens, gradient_checkpointing)
    if reference and not gradient_checkpointing:
        # The reference forward runs while the policy's activations are held, one layer's intermediates at a time
        # (no_grad saves nothing). With checkpointing the recomputed layer already counted is as large.
        activations += layer_activation_bytes(shape, activation_bytes(device), lora=False) * tokens
    parts = {
        "weights_gb": frozen_weight_bytes(shape, device, peft),
        "trainable_gb": trainable_params * FP32,
        "gradients_gb": trainable_params * FP32,  # gradients match their fp32 parameters
        "optimizer_gb": trainable_params * OPTIMIZER_BYTES[optimizer],
        "activations_gb": activations,
        "logits_gb": head_bytes(shape, device, tokens, head),
        "overhead_gb": (CPU_RUNTIME_GB if device == "cpu" else CUDA_CONTEXT_GB) * GB,
        "reference_gb": reference_bytes(shape, device, peft) if reference else 0.0,
    }
    gb = {name: value / GB for name, value in parts.items()}
    return MemoryBreakdown(**{k: round(v, 3) for k, v in gb.items()}, total_gb=round(sum(gb.values()), 3))


def head_bytes(shape: ModelShape, device: Device, tokens: int, head: Head) -> float:
    """What the output head holds at the loss, for one micro-batch of `tokens` tokens.

    "fused" (TRL's ChunkedLogProbFunction): a copy of the hidden states it scores (saved for
    backward), one [4096 tokens × 32768 vocabulary] tile in the compute dtype (on a CPU, the tile and
    the temporaries its fold makes: CPU_FUSED_TILE_BYTES), and in backward the fp32 gradient of the
    hidden states; an output head that trains (full fine-tuning) gets an fp32 gradient too, which is
    the one gradients_gb already counts.
    """
    if head == "score":
        return 0.0
    if head == "logits":
        return float(tokens * shape.vocab_size * FP32)
    e = activation_bytes(device)
    per_element = CPU_FUSED_TILE_BYTES if device == "cpu" else e
    tile = min(tokens, FUSED_HEAD_TOKENS) * min(shape.vocab_size, FUSED_HEAD_VOCAB) * per_element
    return float(tile + (e + FP32) * shape.hidden_size * tokens)


def precision(device: Device, peft: str) -> str:
    """How scripts/_training.py stores weights and computes on this device, in words."""
    if device == "cpu":
        return "fp32 throughout (CPU)"
    if device == "cuda_fp16":
        return "fp16 autocast over fp32 weights (the GPU has no bf16)"
    base = {"none": "fp32 master weights", "lora": "bf16 base", "qlora": "NF4 base, bf16 embeddings"}[peft]
    return f"bf16 autocast, {base}" + (", fp32 adapters" if peft != "none" else "")


def reference_bytes(shape: ModelShape, device: Device, peft: Peft) -> float:
    """A separate reference model's memory: TRL 1.16 loads one (DPOTrainer/KTOTrainer with ref_model=None and
    precompute_ref_log_probs=False) only without PEFT, in the policy's dtype, which full fine-tuning keeps in fp32,
    vision tower included. Its weights still require grad, so on a GPU autocast caches a half-precision copy of
    each weight it casts until the forward returns: the same copies the policy's matmuls save (_autocast_copies)."""
    if peft != "none":
        return 0.0
    cast_layer, cast_head = _autocast_copies(shape, device, peft)
    return (shape.params + shape.vision_params) * FP32 + shape.num_layers * cast_layer + cast_head


def frozen_weight_bytes(shape: ModelShape, device: Device, peft: Peft) -> float:
    """Weights that do not train: the base model (LoRA, QLoRA) and any vision tower."""
    if peft == "qlora":
        # Every Linear is NF4 (the vision tower's too); embeddings, norms and the output head
        # stay in the compute dtype (bitsandbytes skips lm_head).
        kept = shape.params - shape.linear_params
        return (shape.linear_params + shape.vision_params) * NF4_BYTES + kept * _base_bytes(device)
    base = shape.params if peft == "lora" else 0  # full fine-tuning trains the base itself
    return (base + shape.vision_params) * _base_bytes(device)


def _base_bytes(device: Device) -> int:
    # sft.py loads a LoRA base in bf16 only where the GPU has bf16; elsewhere in fp32.
    return HALF if device == "cuda_bf16" else FP32


def activation_total_bytes(
    shape: ModelShape, device: Device, peft: Peft, tokens: int, gradient_checkpointing: bool
) -> float:
    """Saved-for-backward tensors of one micro-batch.

    With checkpointing (transformers checkpoints each decoder layer) only every layer's input
    survives the forward, and one layer at a time is recomputed in full during backward.
    """
    e = activation_bytes(device)
    layer = layer_activation_bytes(shape, e, lora=peft != "none") * tokens
    cast_layer, cast_head = _autocast_copies(shape, device, peft)
    final_norm = (FP32 + e) * shape.hidden_size * tokens
    if gradient_checkpointing:
        inputs = shape.num_layers * e * shape.hidden_size * tokens
        return inputs + layer + cast_layer + final_norm + cast_head
    return shape.num_layers * (layer + cast_layer) + final_norm + cast_head


def layer_activation_bytes(shape: ModelShape, e: int, *, lora: bool) -> int:
    """Bytes saved for backward per token by one decoder layer (SDPA attention: no s² matrix).

    Counted from what the autograd graph of a transformers Llama-style layer keeps:
      * each RMSNorm: its fp32 upcast input (4h) and the normalised output in the compute dtype;
      * RoPE: q, k and their rotate_half copies; SDPA: q, k, v and its output; o_proj's
        contiguous input: 5·q_dim + 4·kv_dim elements;
      * a gated MLP: gate and up outputs, the activation's output and the product fed to
        down_proj (4·I); a plain MLP: the up output and the activation (2·I);
      * LoRA: the dropped-out input of every adapted Linear plus its byte mask.
    """
    h, q, kv, i = shape.hidden_size, shape.q_dim, shape.kv_dim, shape.intermediate_size
    norms = shape.norms_per_layer * (FP32 + e) * h
    if shape.qk_norm:
        norms += (FP32 + e) * (q + kv)
    attention = e * (5 * q + 4 * kv)
    mlp = e * (4 if shape.gated_mlp else 2) * i
    adapters = (e + LORA_DROPOUT_MASK_BYTES) * sum(a for a, _ in shape.layer_linears()) if lora else 0
    return norms + attention + mlp + adapters


def _autocast_copies(shape: ModelShape, device: Device, peft: Peft) -> tuple[float, float]:
    """(per decoder layer, output head) bytes of the half-precision casts of fp32 weights that
    autocast makes and the matmuls save for backward: full fine-tuning under bf16/fp16, and an
    fp32 base on a T4 (fp16 autocast). QLoRA dequantises inside its own autograd function and
    saves only the 4-bit weights; a CPU computes in fp32."""
    if device == "cpu" or peft == "qlora" or (device == "cuda_bf16" and peft == "lora"):
        return 0.0, 0.0
    return shape.linear_params / shape.num_layers * HALF, shape.embedding_params * HALF
