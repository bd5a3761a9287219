"""What a training job turns on for speed, chosen once in the preflight pass for the job's device. Pure.

    choose(method, target, given, workload, micro_batch=...) -> Speedups    each measure: on, source, why, sets
    attention_findings(target, given, speedups) -> [Finding]                an attention the job fails or crawls with

The config is built with the choice (templates/configs.build_config merges what each measure sets into the training
arguments and records the choice); templates/render.py adds liger-kernel to the script's header when those training
arguments turn Liger on.

A value the caller gave always wins (source "user"). Everything else is turned on only where it was measured to
keep the loss curve, and says why where it stays off. Measured with bench/speedups_gpu.py on an H100 (torch 2.11,
transformers 5.24, TRL 1.16, liger-kernel 0.8.5; a 0.5B Qwen2 shape, full fine-tuning, 8 rows of 32-1024 tokens per
step): every step's loss within 4e-5 (relative) of the padded run's, tokens/s in the steady steps:
  * Liger's Triton kernels (RMSNorm, RoPE, SwiGLU; TRL keeps its own fused LM head) on A100/H100/H200 for the
    model families Liger patches, wherever liger-kernel is importable by the job's Python: an HF Jobs job installs
    it from its header; a local job runs `python script.py` with the Python the local backend names
    (JOBTRAIL_PYTHON, else the server's), which preflight asks (probes.job_interpreter). 14.4k -> 26.6k tokens/s.
    Off on GPUs with less shared memory per SM (T4 64 KB; A10G, L4, L40S, RTX PRO 6000 ~100 KB), where Triton
    kernels tuned for data-center GPUs fail with "out of resource: shared memory";
  * padding-free batching (SFT): each micro-batch's rows flattened into one sequence without padding, attention
    kept within each row by flex attention's block mask (PyTorch's own, compiled by Triton: no flash-attn build,
    nothing downloaded), which transformers 5.24 builds from the position ids TRL's collator writes
    (masking_utils.find_packed_sequence_indices). The same rows per step, so the same effective batch, cut to
    max_length as a padded run cuts them: TRL 1.16 refuses padding_free with a max_length without packing, so the
    job (scripts/sft.py cutting_rows_itself) gives TRL max_length=None and runs TRL's own truncation with the job's
    max_length. Its first step compiles (33-62 s on an H100), so only where training takes PADDING_FREE_MIN_TRAIN_S
    or more. Flex attention ships with torch: a local job's Python must have the measured torch and transformers,
    an HF Jobs job installs the job lock's. 14.4k -> 22.3k tokens/s alone, 26.6k -> 27.5k beside Liger (11.9k ->
    17.9k for both together in a second run), peak memory 21.8 -> 14.4 GB with Liger. SDPA computes a flattened
    micro-batch as one masked square (micro-batch times the attention work), so a caller's SDPA or eager keeps it
    off; a caller's varlen flash attention (flash_attention_2/3, kernels-community/flash-attn*) carries it without
    the compile. A caller's padding_free=true gets flex attention where the same holds, and a warning where the
    job would compute the square instead;
  * fused AdamW on every CUDA GPU;
  * bf16 where the GPU has it: the job's own precision rule (scripts/_training.py precision_defaults) decides
    from the device it lands on, so it is recorded, not set;
  * gradient checkpointing off and the micro-batch from the estimate (estimate/microbatch.py): what the
    estimate's memory says fits, on bf16 GPUs, for SFT, keeping micro-batch x accumulation (and the processes);
  * collation in two persistent DataLoader workers on a GPU: TRL's collator costs 3.7 ms per padded micro-batch
    of 8 rows of 32-1024 tokens and 14.2 ms padding-free (on a 2-vCPU VM), time the training process otherwise
    spends between steps. The same batches in the same order (identical losses): 17.9k -> 18.7k tokens/s;
  * TRL's per-step entropy and token accuracy stay: TRL 1.16 has no switch for them, and the job's step events
    report them.
  * padded micro-batches padded to a multiple of LENGTH_BUCKET tokens (SFT on a GPU, padding-free off, SDPA):
    on an H200 (torch 2.11 cu130, cuDNN's attention chosen by SDPA on sm_90) `bench/train_throughput.py --suite
    --profile` found 88-93% of padded steps' time with the GPU idle, in cuDNN building an attention graph for each
    new sequence length (0.95-1.4 s forward and as much backward; cuDNN caches graphs by shape) and in Triton
    kernels loaded again for lengths of another divisibility. Rows of 32-1024 tokens give a new length most
    steps; multiples of 64 give at most max_length/64. The padding's labels are -100 and its attention masked, so
    the loss is the same; the extra work is under 64 tokens a row;
On a CPU nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from jobtrail.models import Finding, Speedup, Speedups
from jobtrail.results.estimate import MicroBatch
from jobtrail.templates.render import LIGER_REQUIREMENT
from jobtrail.templates.versions import job_lock

# Attention implementations that run a padding-free batch as separate sequences without compiling (varlen kernels).
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")
VARLEN_KERNEL_PREFIX = "kernels-community/"  # transformers' Hub flash kernels, e.g. kernels-community/flash-attn2
FLEX_ATTENTION = "flex_attention"
# Compute capabilities whose shared memory per SM (sm_80: 164 KB, sm_90: 228 KB) Triton kernels are tuned for.
TRITON_SAFE_CAPABILITIES = (8.0, 9.0)
# model_type values Liger-Kernel patches (liger_kernel.transformers' apply functions) among the families
# the estimator knows.
LIGER_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3")
# Plain causal softmax attention, whose packed block mask transformers 5.24 builds for flex attention: softcapped
# or sliding-window attention (gemma2, gemma3) is left out.
FLEX_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3")
# The oldest versions flex attention's padding-free training was measured with (bench/speedups_gpu.py).
FLEX_MEASURED = {"torch": "2.11", "transformers": "5.24"}
# Flex attention's first step compiled for 33-62 s on an H100: below this much training that would not pay back.
PADDING_FREE_MIN_TRAIN_S = 600.0
COMPILE = "the minute or so flex attention's first step spends compiling"
DATALOADER_WORKERS = 2
# Padded lengths a multiple of this: few shapes for cuDNN's per-shape attention graphs, tensor-core aligned.
LENGTH_BUCKET = 64
CUDNN_ATTENTION_CAPABILITY = 9.0  # where torch 2.11's SDPA picks cuDNN's attention for a masked batch (H100/H200)


@dataclass(frozen=True)
class Target:
    """The device a job trains on, as preflight knows it."""

    flavor: str  # an HF Jobs flavor, or "local"
    gpu: str | None = None  # the GPU model; None on a CPU
    bf16: bool = False
    compute_capability: float | None = None  # None: a CPU, or a GPU jobtrail has no facts for
    # What the job's Python has (canonical name -> version) of the template's dependencies and of liger-kernel and
    # triton: a local job's, as preflight asked it. None: the job installs its script's header (HF Jobs).
    packages: Mapping[str, str] | None = None
    # Triton builds its launcher with a C compiler (CC, gcc or clang) when a job first runs a kernel: a local
    # job finds one on this machine's PATH; HF Jobs' uv image has gcc.
    c_compiler: bool = True

    @property
    def label(self) -> str:
        return f"{self.gpu or 'CPU'} ({self.flavor})"


@dataclass(frozen=True)
class Workload:
    """What preflight knows of the job beyond its device and hyperparameters."""

    family: str | None = None  # the model's model_type
    multimodal: bool = False
    processes: int = 1  # the launcher's workers
    effective_batch: int | None = None  # the job's per_device_train_batch_size x gradient_accumulation_steps
    train_s: float | None = None  # the estimate's training time (steps x step time); None: unknown
    train_unknown: str = "the estimate has no training time"  # why train_s is None


def choose(
    method: str,
    target: Target,
    given: Mapping[str, Any],
    workload: Workload | None = None,
    *,
    micro_batch: MicroBatch | None = None,
    micro_batch_off: str = "no estimate of the job's memory",
) -> Speedups:
    """The job's speed measures. `given`: the caller's hyperparameters; `micro_batch`: the split the estimate chose
    (None: it chose none, `micro_batch_off` says why)."""
    workload = workload or Workload()
    checkpointing, batch = _memory_shape(given, micro_batch, micro_batch_off, workload)
    padding_free = _padding_free(method, target, given, workload)
    return Speedups(
        device=target.label,
        padding_free=padding_free,
        length_buckets=_length_buckets(method, target, given, padding_free),
        liger_kernel=_liger(method, target, given, workload),
        fused_adamw=_fused_adamw(target, given),
        bf16=_bf16(target, given),
        gradient_checkpointing=checkpointing,
        micro_batch=batch,
        dataloader=_dataloader(target, given),
        step_metrics=Speedup(
            on=False,
            source="default",
            why="TRL 1.16 computes entropy and mean_token_accuracy in its fused LM head on every micro-batch (two "
            "host syncs each); SFTConfig has no switch for them, and the job's step events report them",
        ),
    )


def _user(on: bool, why: str) -> Speedup:
    return Speedup(on=on, source="user", why=why)


def _off(why: str) -> Speedup:
    return Speedup(on=False, source="default", why=why)


def attention_findings(target: Target, given: Mapping[str, Any], chosen: Speedups) -> list[Finding]:
    """Flex attention the caller chose for a CPU fails at the job's first backward pass; a caller's padding-free
    batching that the job would compute as one masked square trains the same rows, only slower than padded."""
    attention = _attention(given) or (chosen.padding_free.sets.get("model_init_kwargs") or {}).get(
        "attn_implementation"
    )
    if attention == FLEX_ATTENTION and target.gpu is None:
        return [
            Finding(
                code="config.flex_attention_cpu",
                severity="error",
                message="attn_implementation='flex_attention' on a CPU: PyTorch's flex attention has no backward pass "
                "there, so the job would fail at its first step.",
                fix="Leave model_init_kwargs.attn_implementation unset on a CPU (transformers' sdpa), or run the job "
                "on a GPU.",
            )
        ]
    flat = chosen.padding_free
    cheap = attention == FLEX_ATTENTION or _varlen(attention)
    if cheap or not (given.get("padding_free") and flat.on and flat.source == "user"):
        return []
    if target.gpu is None:
        fix = (
            "Drop padding_free on a CPU: flex attention, which keeps the rows apart without the square, trains on GPUs."
        )
    else:
        fix = (
            f"Drop padding_free, or on an A100/H100/H200 with a {', '.join(FLEX_FAMILIES)} model and "
            f"{PADDING_FREE_MIN_TRAIN_S / 60:.0f} minutes or more of training leave attn_implementation unset "
            "(preflight pairs padding_free with flex_attention); with flash-attn in the job's environment, "
            'model_init_kwargs={"attn_implementation": "flash_attention_2"}.'
        )
    return [
        Finding(
            code="config.padding_free_attention",
            severity="warning",
            message=f"padding_free=true with {attention or 'sdpa'} attention ({flat.why}): the job computes each "
            "flattened micro-batch as one masked square, per_device_train_batch_size times the attention work of "
            "its rows apart. It trains the same rows, likely slower than padded.",
            fix=fix,
        )
    ]


def _attention(given: Mapping[str, Any]) -> str | None:
    chosen = (given.get("model_init_kwargs") or {}).get("attn_implementation")
    return chosen if isinstance(chosen, str) else None


def _varlen(attention: str | None) -> bool:
    """Whether `attention` runs a padding-free batch as separate sequences without compiling."""
    return attention is not None and (
        attention in VARLEN_ATTENTION or (attention.startswith(VARLEN_KERNEL_PREFIX) and "flash" in attention)
    )


def _padding_free(method: str, target: Target, given: Mapping[str, Any], workload: Workload) -> Speedup:
    asked = given.get("padding_free")
    if "packing" in given or asked is False or (asked and method != "sft"):
        bfd = given.get("packing_strategy", "bfd") in ("bfd", "bfd_split")
        on = bool(asked) or (bool(given.get("packing")) and bfd)
        return _user(on, "packing/padding_free as given")
    if method != "sft":
        return _off("padding-free batching is SFT's (TRL's SFTConfig)")
    chosen = _attention(given)
    blocked = _flattening_blocked(target, workload, chosen)
    if blocked:
        if asked:  # attention_findings warns
            return _user(True, f"padding_free as given, without an attention that keeps it cheap: {blocked}")
        return _off(blocked)
    attention = chosen or FLEX_ATTENTION
    sets: dict[str, Any] = {} if asked else {"padding_free": True}
    if chosen is None:
        sets["model_init_kwargs"] = {"attn_implementation": FLEX_ATTENTION}
    compiled = "" if _varlen(chosen) else " (its first step compiles the kernel once)"
    return Speedup(
        on=True,
        source="user" if asked else "preflight",
        why=f"each micro-batch's rows flattened into one sequence without padding, {attention} keeping each row's "
        f"attention to itself{compiled}; the same rows per step, cut to max_length by the job with TRL's own "
        "truncation as a padded run cuts them",
        sets=sets,
    )


def _flattening_blocked(target: Target, workload: Workload, chosen: str | None) -> str | None:
    """Why no attention carries padding-free batching cheaply for this job, or None."""
    if target.gpu is None:
        return "a CPU job keeps its rows as they are (flex attention has no backward pass on a CPU)"
    if chosen is not None and not _varlen(chosen) and chosen != FLEX_ATTENTION:
        return (
            f"the job attends with {chosen} as given, which computes a padding-free micro-batch as one flattened "
            "sequence (micro-batch times the attention work)"
        )
    if workload.processes > 1:
        return f"measured on one GPU only; this job runs {workload.processes} processes"
    return None if _varlen(chosen) else _flex_blocked(target, workload)


def _flex_blocked(target: Target, workload: Workload) -> str | None:
    """Why flex attention cannot carry padding-free batching for this job, or None."""
    if target.compute_capability not in TRITON_SAFE_CAPABILITIES:
        return f"flex attention's Triton kernels are tuned for A100/H100 shared memory, not {_sm(target)}"
    if workload.family not in FLEX_FAMILIES or workload.multimodal:
        what = "a multimodal checkpoint" if workload.multimodal else f"model_type {workload.family!r}"
        return f"flex attention is measured for {', '.join(FLEX_FAMILIES)} language models, not {what}"
    for name, oldest in FLEX_MEASURED.items():
        # A local job's Python as preflight asked it; an HF Jobs job installs the job lock's pins.
        has = "the job's Python has" if target.packages is not None else "the job lock pins"
        installed = target.packages.get(name) if target.packages is not None else job_lock().version_of(name)
        if not _at_least(installed, oldest):
            return (
                f"flex attention's padding-free training was measured with {name} {oldest} or newer; {has} "
                f"{name} {installed or 'none'}"
            )
    triton = _triton_missing(target)
    if triton:
        return f"flex attention compiles with Triton: {triton}"
    if workload.train_s is None:
        return f"{workload.train_unknown}, so {COMPILE} is not known to pay back"
    if workload.train_s < PADDING_FREE_MIN_TRAIN_S:
        return (
            f"training is estimated at {workload.train_s:.0f} s, under {PADDING_FREE_MIN_TRAIN_S:.0f} s: {COMPILE} "
            "would not pay back"
        )
    return None


def _liger(method: str, target: Target, given: Mapping[str, Any], workload: Workload) -> Speedup:
    if "use_liger_kernel" in given:
        return _user(bool(given["use_liger_kernel"]), "use_liger_kernel as given")
    if method != "sft":
        return _off("turned on for SFT only")
    if target.gpu is None:
        return _off("Triton kernels need a CUDA GPU")
    if target.compute_capability not in TRITON_SAFE_CAPABILITIES:
        return _off(
            f"{target.gpu} ({_sm(target)}) has less shared memory per SM than the A100/H100 Liger's Triton kernels "
            "are tuned for ('out of resource: shared memory' there): kept off"
        )
    if workload.family not in LIGER_FAMILIES or workload.multimodal:
        what = "a multimodal checkpoint" if workload.multimodal else f"model_type {workload.family!r}"
        return _off(f"jobtrail turns Liger on only for {', '.join(LIGER_FAMILIES)} language models, not {what}")
    triton = _triton_missing(target)
    if triton:
        return _off(f"Liger's kernels are Triton's: {triton}")
    requirement = Requirement(LIGER_REQUIREMENT)
    kernels = "Liger's fused RMSNorm, RoPE and SwiGLU kernels"
    lm_head = "the loss already runs through TRL's fused LM head, so no full logits either way"
    if target.packages is None:
        where = "liger-kernel joins the script's dependencies"
    else:
        version = target.packages.get("liger-kernel")
        if version is None:
            return _off(
                f"liger-kernel is not importable by the job's Python: install {requirement} there "
                "(pip install liger-kernel) and the next job turns it on"
            )
        if not requirement.specifier.contains(version, prereleases=True):
            return _off(f"the job's Python has liger-kernel {version}; jobtrail's jobs are written for {requirement}")
        where = f"liger-kernel {version} is importable by the job's Python"
    return Speedup(
        on=True,
        source="preflight",
        why=f"{kernels} on {target.gpu} ({where}); {lm_head}",
        sets={"use_liger_kernel": True},
    )


def _triton_missing(target: Target) -> str | None:
    """What a Triton kernel lacks to run in the job, or None (a job that installs its header gets torch's triton)."""
    if target.packages is not None and "triton" not in target.packages:
        return "triton is not importable by the job's Python (a CUDA build of torch brings it)"
    if not target.c_compiler:
        return "Triton builds its launcher with a C compiler, and none is on PATH (set CC, or install gcc)"
    return None


def _length_buckets(method: str, target: Target, given: Mapping[str, Any], padding_free: Speedup) -> Speedup:
    if "pad_to_multiple_of" in given:
        return _user(given["pad_to_multiple_of"] is not None, "pad_to_multiple_of as given")
    if method != "sft":
        return _off("measured with SFT's collator")
    if target.gpu is None:
        return _off("a CPU builds no attention graph per length: padding would only add work")
    if target.compute_capability != CUDNN_ATTENTION_CAPABILITY:
        return _off(f"measured on H100/H200 (sm_90), where SDPA picks cuDNN's attention; not on {_sm(target)}")
    if padding_free.on:
        return _off("padding-free micro-batches carry no padding to round up")
    attention = _attention(given)
    if attention not in (None, "sdpa"):
        return _off(f"measured with SDPA attention; the job attends with {attention} as given")
    return Speedup(
        on=True,
        source="preflight",
        why=f"each padded micro-batch padded to a multiple of {LENGTH_BUCKET} tokens: SDPA's cuDNN attention builds "
        "a graph for every new sequence length (about 1 s forward and 1 s backward on an H200, most steps' time "
        f"when rows vary in length), so the job meets at most max_length/{LENGTH_BUCKET} lengths; the padding is "
        "masked and its labels ignored, so the loss is the same",
        sets={"pad_to_multiple_of": LENGTH_BUCKET},
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


def _dataloader(target: Target, given: Mapping[str, Any]) -> Speedup:
    if "dataloader_num_workers" in given:
        workers = given["dataloader_num_workers"]
        return _user(bool(workers), f"dataloader_num_workers={workers!r} as given")
    if target.gpu is None:
        return _off("a CPU job collates in its training process: workers would take the cores it trains on")
    return Speedup(
        on=True,
        source="preflight",
        why=f"{DATALOADER_WORKERS} DataLoader workers collate the next micro-batches while the GPU trains (TRL's "
        "collator: 3.7 ms per padded micro-batch of 8 rows up to 1k tokens, 14 ms padding-free, measured on a "
        "2-vCPU VM); the same batches in the same order; pinned memory is already TRL's default",
        sets={"dataloader_num_workers": DATALOADER_WORKERS, "dataloader_persistent_workers": True},
    )


def _memory_shape(
    given: Mapping[str, Any], split: MicroBatch | None, off: str, workload: Workload
) -> tuple[Speedup, Speedup]:
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
    if workload.effective_batch is not None and b * steps != workload.effective_batch:
        return checkpointing, _off(
            f"the estimate's split {b} x {steps} would change the effective batch of {workload.effective_batch} "
            "rows per process: kept"
        )
    processes = f" × {workload.processes} processes" if workload.processes > 1 else ""
    return checkpointing, Speedup(
        on=True,
        source="preflight",
        why=f"{b} rows per micro-batch × {steps} accumulation steps{processes} keeps the effective batch ({split.why})",
        sets={name: getattr(split, name) for name in names},
    )


def _sm(target: Target) -> str:
    # sm_80, sm_86, sm_90: the capability's digits (8.0 formatted alone would read "sm_8")
    return f"sm_{round(target.compute_capability * 10)}" if target.compute_capability else "an unknown GPU"


def _at_least(installed: str | None, oldest: str) -> bool:
    try:
        return installed is not None and Version(installed).release >= Version(oldest).release
    except InvalidVersion:
        return False
