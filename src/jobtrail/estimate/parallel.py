"""How many processes a training job runs and how they share the model. Pure.

    choose_launcher(gpus, requested, fits_one_gpu) -> Launcher     the one choice, made in preflight
    too_many_processes(gpus, requested) -> bool                    more workers than GPUs to put them on
    per_gpu_memory(memory, launcher) -> MemoryBreakdown            one GPU's share under that choice
    describe(launcher, gpus, where) -> str                         the choice in a sentence

One process per GPU (torch's elastic launcher starts them; a CPU runs one unless asked for more,
as gloo workers). When the model and its training state fit one GPU, the processes run DDP: each
GPU holds the whole model, its gradients and optimizer state, plus DDP's gradient buckets (a second
copy of the trainable gradients that the all-reduce reads; transformers leaves
gradient_as_bucket_view off). When they fit only sharded, FSDP: weights, gradients and optimizer
state are split across the N GPUs, 1/N each. Either way every GPU runs its own micro-batch, so
activations, logits and the CUDA context stay per GPU.
"""

from __future__ import annotations

from jobtrail.models import SINGLE_PROCESS, Launcher
from jobtrail.results.estimate import MemoryBreakdown

# The parts of a device's memory that FSDP shards across the job's GPUs (TRL prepares a reference model with FSDP too).
SHARDED_PARTS = ("weights_gb", "trainable_gb", "gradients_gb", "optimizer_gb", "reference_gb")


def choose_launcher(gpus: int, requested: int | None = None, fits_one_gpu: bool | None = None) -> Launcher:
    """The job's launcher on a machine with `gpus` GPUs (0: a CPU).

    `requested`: the user's num_processes (it wins; on a GPU machine at most one per GPU, see
    too_many_processes); None: one per GPU. `fits_one_gpu`: the estimate's verdict for one GPU
    holding the whole job (None: not estimated, so DDP, which needs nothing the job does not have)."""
    count = requested if requested is not None else max(gpus, 1)
    if gpus:
        count = min(count, gpus)  # a GPU per worker; too_many_processes tells the user
    if count <= 1:
        return SINGLE_PROCESS
    if gpus and fits_one_gpu is False:
        return Launcher(kind="torchrun", num_processes=count, strategy="fsdp")
    return Launcher(kind="torchrun", num_processes=count, strategy="ddp")


def too_many_processes(gpus: int, requested: int | None) -> bool:
    """More workers than GPUs: each NCCL worker needs a GPU of its own (a CPU takes any number)."""
    return bool(gpus) and requested is not None and requested > gpus


def per_gpu_memory(memory: MemoryBreakdown, launcher: Launcher) -> MemoryBreakdown:
    """One GPU's peak under `launcher`, from `memory`, the peak of one device training alone."""
    if launcher.strategy == "single":
        return memory
    if launcher.strategy == "ddp":
        parts = {"gradients_gb": memory.gradients_gb * 2}  # + the all-reduce buckets
    else:
        parts = {name: getattr(memory, name) / launcher.num_processes for name in SHARDED_PARTS}
    values = {**memory.model_dump(exclude={"total_gb"}), **parts}
    return MemoryBreakdown(**{k: round(v, 3) for k, v in values.items()}, total_gb=round(sum(values.values()), 3))


def describe(launcher: Launcher, gpus: int, where: str) -> str:
    """`launcher` in a sentence: how many processes, on what, sharing the model how."""
    if launcher.strategy == "single":
        return f"One process on {where}."
    n = launcher.num_processes
    if not gpus:
        return f"{n} worker processes on {where}'s CPU (torchrun, gloo): each holds the whole model."
    used = f"one per GPU of {where}" if n == gpus else f"{n} of {where}'s {gpus} GPUs (num_processes)"
    if launcher.strategy == "fsdp":
        return (
            f"{n} worker processes (torchrun, FSDP), {used}: the model and its training state do not fit one GPU, "
            "so weights, gradients and optimizer state are sharded across them."
        )
    return f"{n} worker processes (torchrun, DDP), {used}: each GPU holds the whole model."
