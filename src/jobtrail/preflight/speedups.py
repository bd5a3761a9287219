"""What a training job turns on for speed, chosen once in the preflight pass for the job's device. Pure.

    choose(method, target, given, family=..., micro_batch=...) -> Speedups    each measure: on, source, why, sets
    apply(config, speedups) -> config                                          sets into training_args, the record

(templates/render.py adds liger-kernel to the script's header when its training_args turn Liger on.)

A value the caller gave always wins (source "user"). Everything else is safe by default: a measure
is turned on only where it cannot fail, and says why where it stays off:
  * padding-free packing (SFT) needs an attention kernel that keeps the sequences of a flattened
    micro-batch apart without computing across them (varlen flash attention). Jobs attend with
    PyTorch's SDPA unless the caller chose another implementation: transformers 5.23 keeps SDPA
    correct on a padding-free batch (a block-diagonal mask from the position ids) but computes the
    whole masked square of the flattened micro-batch, micro-batch times the attention work;
  * Liger's Triton kernels (RMSNorm, RoPE, SwiGLU) on A100/H100/H200 for the model families Liger
    patches, on HF Jobs (whose jobs install the header's liger-kernel); off on GPUs with less shared
    memory per SM (T4 64 KB; A10G, L4, L40S, RTX PRO 6000 ~100 KB), where Triton kernels tuned for
    data-center GPUs fail with "out of resource: shared memory";
  * fused AdamW on every CUDA GPU;
  * bf16 where the GPU has it: the job's own precision rule (scripts/_training.py precision_defaults)
    decides from the device it lands on, so it is recorded, not set;
  * gradient checkpointing off and the micro-batch from the estimate (estimate/microbatch.py): what the
    estimate's memory says fits, on bf16 GPUs, for SFT.
On a CPU nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobtrail.estimate.microbatch import MicroBatch
from jobtrail.models import Speedup, Speedups

# Attention implementations that run a padding-free batch as separate sequences (varlen kernels).
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")
VARLEN_KERNEL_PREFIX = "kernels-community/"  # transformers' Hub flash kernels, e.g. kernels-community/flash-attn2
# Compute capabilities whose shared memory per SM (sm_80: 164 KB, sm_90: 228 KB) Triton kernels are tuned for.
TRITON_SAFE_CAPABILITIES = (8.0, 9.0)
# model_type values Liger-Kernel patches (liger_kernel.transformers' apply functions) among the families
# the estimator knows.
LIGER_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3")


@dataclass(frozen=True)
class Target:
    """The device a job trains on, as preflight knows it."""

    flavor: str  # an HF Jobs flavor, or "local"
    gpu: str | None = None  # the GPU model; None on a CPU
    bf16: bool = False
    compute_capability: float | None = None  # None: a CPU, or a GPU jobtrail has no facts for
    installs: bool = False  # the job installs its script's dependencies (HF Jobs); a local job uses its Python

    @property
    def label(self) -> str:
        return f"{self.gpu or 'CPU'} ({self.flavor})"


def choose(
    method: str,
    target: Target,
    given: Mapping[str, Any],
    *,
    family: str | None = None,
    multimodal: bool = False,
    micro_batch: MicroBatch | None = None,
    micro_batch_off: str = "no estimate of the job's memory",
) -> Speedups:
    """The job's speed measures. `given`: the caller's hyperparameters; `family`: the model's model_type;
    `micro_batch`: the split the estimate chose (None: it chose none, `micro_batch_off` says why)."""
    checkpointing, batch = _memory_shape(given, micro_batch, micro_batch_off)
    return Speedups(
        device=target.label,
        padding_free=_padding_free(method, target, given),
        liger_kernel=_liger(method, target, given, family, multimodal),
        fused_adamw=_fused_adamw(target, given),
        bf16=_bf16(target, given),
        gradient_checkpointing=checkpointing,
        micro_batch=batch,
    )


def apply(config: dict[str, Any], speedups: Speedups) -> dict[str, Any]:
    """`config` with what the speedups set merged into its training_args, and the record as config["speedups"]."""
    args = dict(config["training_args"])
    for item in _items(speedups):
        for name, value in item.sets.items():
            if name == "gradient_checkpointing" and args.get("fsdp"):
                # Sharded by jobtrail (templates/configs.py): FSDP's own activation checkpointing carries it.
                args["fsdp_config"] = {**args["fsdp_config"], "activation_checkpointing": value}
            elif name == "model_init_kwargs":
                args[name] = {**(args.get(name) or {}), **value}
            else:
                args[name] = value
    return {**config, "training_args": args, "speedups": speedups.model_dump()}


def _items(speedups: Speedups) -> list[Speedup]:
    return [value for value in speedups.__dict__.values() if isinstance(value, Speedup)]


def _user(on: bool, why: str) -> Speedup:
    return Speedup(on=on, source="user", why=why)


def _off(why: str) -> Speedup:
    return Speedup(on=False, source="default", why=why)


def _padding_free(method: str, target: Target, given: Mapping[str, Any]) -> Speedup:
    if "padding_free" in given or "packing" in given:
        bfd = given.get("packing_strategy", "bfd") in ("bfd", "bfd_split")
        on = bool(given.get("padding_free")) or (bool(given.get("packing")) and bfd)
        return _user(on, "packing/padding_free as given")
    if method != "sft":
        return _off("packing is SFT's (TRL's SFTConfig)")
    if target.gpu is None:
        return _off("a CPU job keeps its rows as they are")
    attention = str((given.get("model_init_kwargs") or {}).get("attn_implementation") or "sdpa")
    varlen = attention in VARLEN_ATTENTION or (attention.startswith(VARLEN_KERNEL_PREFIX) and "flash" in attention)
    if not varlen:
        return _off(
            f"the job attends with {attention}, which computes a padding-free micro-batch as one flattened sequence "
            "(micro-batch times the attention work); it needs varlen flash attention: "
            "model_init_kwargs={'attn_implementation': 'flash_attention_2'} where flash-attn is installed (a uv "
            "script never installs it), or packing=True to pack anyway"
        )
    return Speedup(
        on=True,
        source="preflight",
        why=f"{attention} runs the packed rows of a padding-free batch as separate sequences: no padding tokens",
        sets={"packing": True, "packing_strategy": "bfd", "padding_free": True},
    )


def _liger(method: str, target: Target, given: Mapping[str, Any], family: str | None, multimodal: bool) -> Speedup:
    if "use_liger_kernel" in given:
        return _user(bool(given["use_liger_kernel"]), "use_liger_kernel as given")
    if method != "sft":
        return _off("turned on for SFT only")
    if target.gpu is None:
        return _off("Triton kernels need a CUDA GPU")
    if target.compute_capability not in TRITON_SAFE_CAPABILITIES:
        known = f"sm_{target.compute_capability:g}".replace(".", "") if target.compute_capability else "unknown"
        return _off(
            f"{target.gpu} ({known}) has less shared memory per SM than the A100/H100 Liger's Triton kernels are "
            "tuned for ('out of resource: shared memory' there): kept off"
        )
    if family not in LIGER_FAMILIES or multimodal:
        what = "a multimodal checkpoint" if multimodal else f"model_type {family!r}"
        return _off(f"jobtrail turns Liger on only for {', '.join(LIGER_FAMILIES)} language models, not {what}")
    if not target.installs:
        return _off(
            "a local job runs in your Python, which jobtrail installs nothing into: pass use_liger_kernel=True "
            "once liger-kernel is installed there"
        )
    return Speedup(
        on=True,
        source="preflight",
        why=f"Liger's fused RMSNorm, RoPE and SwiGLU kernels on {target.gpu} (liger-kernel joins the script's "
        "dependencies); the loss already runs through TRL's fused LM head, so no full logits either way",
        sets={"use_liger_kernel": True},
    )


def _fused_adamw(target: Target, given: Mapping[str, Any]) -> Speedup:
    if "optim" in given:
        return _user(given["optim"] == "adamw_torch_fused", f"optim={given['optim']!r} as given")
    if target.gpu is None:
        return _off("a CPU job sets no optimizer: transformers' default applies (fused AdamW from torch 2.8)")
    return Speedup(
        on=True,
        source="preflight",
        why="one fused CUDA kernel for the whole AdamW update (any CUDA GPU, fp16 loss scaling included)",
        sets={"optim": "adamw_torch_fused"},
    )


def _bf16(target: Target, given: Mapping[str, Any]) -> Speedup:
    if "bf16" in given or "fp16" in given:
        return _user(bool(given.get("bf16")), "bf16/fp16 as given")
    if target.gpu is None:
        return _off("a CPU job computes in fp32")
    if not target.bf16:
        return _off(f"{target.gpu} has no bf16: the job computes in fp16 autocast over fp32 weights")
    return Speedup(
        on=True,
        source="default",
        why=f"{target.gpu} has bf16: the job computes under bf16 autocast (a LoRA base loads in bf16); the job "
        "decides from the GPU it lands on",
    )


def _memory_shape(given: Mapping[str, Any], split: MicroBatch | None, off: str) -> tuple[Speedup, Speedup]:
    """(gradient_checkpointing, micro_batch) from the split the estimate chose."""
    if "gradient_checkpointing" in given:
        checkpointing = _user(bool(given["gradient_checkpointing"]), "gradient_checkpointing as given")
    elif "fsdp" in given or "fsdp_config" in given:
        checkpointing = _user(True, "the FSDP settings as given decide activation checkpointing")
    elif split is not None and "gradient_checkpointing" in split.changed:
        checkpointing = Speedup(
            on=split.gradient_checkpointing,
            source="preflight",
            why=f"the job fits without it ({split.why}): no layer is recomputed in backward",
            sets={"gradient_checkpointing": split.gradient_checkpointing},
        )
    elif split is not None:
        checkpointing = Speedup(on=True, source="default", why=f"needed: nothing fits without it ({split.why})")
    else:
        checkpointing = Speedup(on=True, source="default", why=f"TRL's default, kept: {off}")
    names = ("per_device_train_batch_size", "gradient_accumulation_steps")
    if set(names) & set(given):
        chosen = ", ".join(f"{name}={given[name]}" for name in names if name in given)
        return checkpointing, _user(True, f"{chosen} as given: the split is the caller's")
    if split is None or not set(names) & set(split.changed):
        why = off if split is None else f"the job's own micro-batch already fills it best ({split.why})"
        return checkpointing, _off(why)
    b, steps = split.per_device_train_batch_size, split.gradient_accumulation_steps
    return checkpointing, Speedup(
        on=True,
        source="preflight",
        why=f"{b} rows per micro-batch × {steps} accumulation steps keeps the effective batch ({split.why})",
        sets={name: getattr(split, name) for name in names},
    )
