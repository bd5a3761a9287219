"""The estimate_cost and hardware use-cases: gather the inputs (config.json, the flavor catalog,
data statistics, calibration measurements), run the pure models, pick a flavor."""

from __future__ import annotations

import difflib
import math
import random
import statistics
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

from jobtrail.errors import InvalidRequestError
from jobtrail.estimate import calibration as calib
from jobtrail.estimate.cost import (
    DATA_PARALLEL_SCALING,
    EFFICIENCY,
    QLORA_SLOWDOWN,
    TimeEstimate,
    Workload,
    cost_usd,
    estimate_time,
    recommended_timeout_s,
)
from jobtrail.estimate.hardware import LOCAL, Flavor, catalog, find_flavor, local_flavor
from jobtrail.estimate.inputs import DataStats, dataset_stats, load_model_config
from jobtrail.estimate.memory import (
    CUDA_CONTEXT_GB,
    GB,
    HEADROOM,
    OPTIMIZER_ALIASES,
    OPTIMIZER_BYTES,
    Device,
    MemoryBreakdown,
    Peft,
    device_for,
    estimate_memory,
    precision,
)
from jobtrail.estimate.microbatch import MicroBatch, choose_micro_batch, tunable
from jobtrail.estimate.parallel import choose_launcher, describe, per_gpu_memory, too_many_processes
from jobtrail.estimate.params import ModelShape, lora_params, model_shape
from jobtrail.estimate.results import EstimateResult, FlavorOption, HardwareResult, memory_label
from jobtrail.methods import METHODS
from jobtrail.methods.hyperparameters import PEFT_DEFAULTS
from jobtrail.methods.registry import TRL_DEFAULTS, method_spec
from jobtrail.models import Launcher
from jobtrail.util.refs import looks_local
from jobtrail.util.timefmt import human_duration

if TYPE_CHECKING:
    from jobtrail.ledger.store import Ledger

PEFTS: tuple[str, ...] = ("lora", "qlora", "none")
MAX_OPTIONS = 5
# What TRL's configs use when jobtrail sets nothing: SFTConfig turns gradient checkpointing on, and
# the Trainer's AdamW keeps two fp32 moments. A method without max_length (GRPO) is sized at this.
TRL_FALLBACKS: dict[str, Any] = {"gradient_checkpointing": True, "optim": "adamw", "max_length": 1024}


def submit_defaults(method: str) -> dict[str, Any]:
    """The hyperparameters a job submitted without them runs with: the method registry's merge,
    the same tables templates.defaults.effective() reads (estimate sits beside templates)."""
    return {**TRL_FALLBACKS, **TRL_DEFAULTS, **method_spec(method).defaults, **PEFT_DEFAULTS}


def hardware_report(api: Any = None) -> HardwareResult:
    """The flavor catalog: live from the Hub when it answers, else the bundled snapshot."""
    flavors, source, snapshot_date, note = catalog(api)
    return HardwareResult(flavors=flavors, source=source, snapshot_date=snapshot_date, note=note, local=local_flavor())


@dataclass(frozen=True)
class _Request:
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
            _positive(name, getattr(self, name), optional=False, integer=True)
        _positive("num_train_epochs", self.num_train_epochs, optional=False, integer=False)
        _positive("max_steps", self.max_steps, optional=True, integer=True)
        _positive("num_processes", self.num_processes, optional=True, integer=True)

    @property
    def epochs(self) -> int:
        return 1 if self.max_steps else math.ceil(self.num_train_epochs)


@dataclass(frozen=True)
class _Verdict:
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

    @property
    def fits(self) -> bool:
        return self.memory.total_gb <= self.usable_gb


def estimate_cost(
    model: str,
    method: str = "sft",
    peft: str | None = None,
    dataset: str | None = None,
    num_examples: int | None = None,
    avg_tokens: float | None = None,
    max_length: int | None = None,
    per_device_train_batch_size: int | None = None,
    gradient_accumulation_steps: int | None = None,
    num_train_epochs: float | None = None,
    max_steps: int | None = None,
    gradient_checkpointing: bool | None = None,
    flavor: str | Flavor | None = None,
    lora_r: int | None = None,
    optim: str | None = None,
    num_processes: int | None = None,
    *,
    tune_micro_batch: bool = False,
    config: dict[str, Any] | None = None,
    calibration: Ledger | None = None,
    api: Any = None,
) -> EstimateResult:
    """Memory, time and money of a fine-tuning job before any GPU is rented.

    The hyperparameters are submit's, by the same names; one left out (None) is the value submit
    would use for `method`. Without a data size (dataset, num_examples and avg_tokens, or max_steps)
    memory and fits are answered and time and cost are None, with the reason.
    `model` is a Hub id or a local directory with config.json (or pass `config` directly);
    `flavor` a catalog name, or a Flavor describing another machine (e.g. this host, with a
    measured peak_tflops), which is then the only candidate. `num_processes` is submit's knob: the
    job's processes (None: one per GPU); each flavor's launcher (parallel.choose_launcher) decides
    the memory per GPU and the time. `tune_micro_batch`: choose the micro-batch and checkpointing the caller
    left out, as submit does (estimate/microbatch.py; `micro_batch`). `calibration` is the ledger whose
    measurements replace the model where they exist; `api` an HfApi for live prices.
    """
    method = _choice("method", method, METHODS)
    given = {
        "peft": peft,
        "max_length": max_length,
        "per_device_train_batch_size": per_device_train_batch_size,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "num_train_epochs": num_train_epochs,
        "gradient_checkpointing": gradient_checkpointing,
        "lora_r": lora_r,
        "optim": optim,
    }
    values = {**submit_defaults(method), **{k: v for k, v in given.items() if v is not None}}
    request = _Request(
        method=method,
        peft=cast(Peft, _choice("peft", values["peft"], PEFTS)),
        optimizer=_optimizer(values["optim"]),
        max_length=values["max_length"],
        per_device_train_batch_size=values["per_device_train_batch_size"],
        gradient_accumulation_steps=values["gradient_accumulation_steps"],
        num_train_epochs=values["num_train_epochs"],
        max_steps=max_steps if max_steps is not None and max_steps != -1 else None,
        gradient_checkpointing=bool(values["gradient_checkpointing"]),
        lora_r=values["lora_r"],
        num_processes=num_processes,
        tune=frozenset(k for k, v in given.items() if v is not None) if tune_micro_batch else None,
    )
    _positive("num_examples", num_examples, optional=True, integer=True)
    _positive("avg_tokens", avg_tokens, optional=True, integer=False)
    work, memory_seq, data_note = _workload(dataset, num_examples, avg_tokens, request)
    local_model = config is None and looks_local(model)
    flavors, source, catalog_note = _candidates(LOCAL if local_model and flavor is None else flavor, api)
    if local_model:
        where = "so it is estimated for local (this machine)" if flavor is None else f"{flavor} cannot reach it"
        local_note = f"{model} is a directory on this machine: only the local backend can train it, {where}."
        catalog_note = f"{catalog_note} {local_note}" if catalog_note else local_note
    target_name = flavor.name if isinstance(flavor, Flavor) else flavor or (LOCAL if local_model else None)
    shape = model_shape(config if config is not None else load_model_config(model))
    trainable = shape.params if request.peft == "none" else lora_params(shape, request.lora_r)
    remote = source != "given"  # a catalog flavor is rented: start-up and upload count
    verdicts = [
        _judge(
            shape,
            request,
            work,
            memory_seq,
            trainable,
            f,
            _measurement(calibration, shape, request, f.name),
            remote=remote and f.name != LOCAL,
        )
        for f in flavors
    ]
    choices = _ranked(verdicts)
    recommended = choices[0] if choices else None
    target = _target(verdicts, target_name, recommended)
    t = target.time
    timeout_s = recommended_timeout_s(t.hours) if t else None
    return EstimateResult(
        model=model,
        architecture=shape.architecture,
        method=request.method,
        peft=request.peft,
        flavor=target.flavor.name,
        flavor_label=memory_label(target.flavor),
        params=shape.params,
        trainable_params=trainable,
        memory=target.memory,
        micro_batch=target.split,
        usable_gb=round(target.usable_gb, 2),
        launcher=target.launcher,
        fits={v.flavor.name: v.fits for v in verdicts},
        recommended_flavor=recommended.flavor.name if recommended else None,
        tokens=t.tokens if t else None,
        steps=t.steps if t else None,
        step_time_s=round(t.step_time_s, 4) if t else None,
        tokens_per_second=round(t.tokens_per_second, 2) if t else None,
        hours=round(t.hours, 4) if t else None,
        cost_usd=target.cost_usd,
        recommended_timeout=f"{timeout_s // 3600}h" if timeout_s else None,
        recommended_timeout_s=timeout_s,
        time_unknown=None if work else data_note,
        calibrated=target.measurement is not None,
        catalog_source=source,
        options=[_option(v) for v in choices[:MAX_OPTIONS]],
        notes=_notes(target, shape, request, catalog_note),
        assumptions=_assumptions(shape, request, memory_seq, target, data_note),
    )


def _optimizer(name: str) -> str:
    normal = OPTIMIZER_ALIASES.get(str(name).lower(), str(name).lower())
    _choice("optim", normal, tuple(OPTIMIZER_BYTES))
    return normal


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    normal = str(value).strip().lower()
    if normal in allowed:
        return normal
    close = difflib.get_close_matches(normal, allowed, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(f'"{a}"' for a in allowed)
    raise InvalidRequestError(
        f"Unknown {name} {value!r}.{hint}",
        fix=(f'Pass {name}="{close[0]}" (one of {listed}).' if close else f"Use one of {listed}."),
    )


def _positive(name: str, value: Any, *, optional: bool, integer: bool) -> None:
    if value is None and optional:
        return
    kind = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        example = {"avg_tokens": "512", "num_examples": "10000"}.get(name, "1")
        raise InvalidRequestError(
            f"{name}={value!r} must be a positive {'integer' if integer else 'number'}.",
            fix=f"Pass {name}={example} (or another positive value).",
        )


def _workload(
    dataset: str | None, num_examples: int | None, avg_tokens: float | None, request: _Request
) -> tuple[Workload | None, int, str]:
    """(workload, sequence length for the memory peak, where the numbers came from, or why the
    size is unknown). max_steps fixes the rows trained on; explicit num_examples / avg_tokens win
    over the dataset's own statistics. No workload when the size is unknown: memory still is."""
    stats = dataset_stats(dataset) if dataset else None
    if stats is not None and stats.rows == 0:
        raise InvalidRequestError(f"{dataset!r} has no rows.", fix="Pass a dataset with at least one row.")
    batch, accumulation = request.per_device_train_batch_size, request.gradient_accumulation_steps
    if request.max_steps:
        rows = request.max_steps * batch * accumulation
    else:
        rows = num_examples or (stats.rows if stats else 0)
    if avg_tokens is None and stats is not None:
        real, padded, memory_seq = _lengths(stats, request.max_length, batch)
        note = f"{rows:,} rows, {real:.0f} tokens per row after truncation ({stats.source})"
    elif avg_tokens is not None or request.max_steps:
        real = padded = min(float(avg_tokens or request.max_length), request.max_length)
        memory_seq = request.max_length  # the longest row is unknown: a batch may reach max_length
        given = "as given" if avg_tokens is not None else "(max_length: the rows' lengths are unknown)"
        each = " per worker" if request.max_steps else ""  # max_steps × micro-batch × accumulation, on each worker
        note = f"{rows:,} rows{each} × {real:.0f} tokens {given} (padding not counted)"
    else:
        rows = 0
    if not rows:
        where = f"{dataset!r} is not a local .jsonl file, so " if dataset and stats is None else ""
        why = (
            f"the data's size is unknown: {where}time and cost need dataset=<local .jsonl>, "
            "num_examples and avg_tokens, or max_steps"
        )
        return None, request.max_length, why
    work = Workload(
        examples=rows,
        epochs=request.epochs,
        seq_len=padded,
        real_tokens_per_example=real,
        batch=batch,
        gradient_accumulation_steps=accumulation,
    )
    return work, memory_seq, note


def _lengths(stats: DataStats, max_length: int, batch: int) -> tuple[float, float, int]:
    """(mean real tokens per row, mean padded length per row, longest row) after truncation.

    Rows are padded to the longest of their batch; batches are drawn in a fixed shuffled order
    (the Trainer shuffles), so the result is deterministic."""
    lengths = [min(n, max_length) for n in stats.token_lengths]
    order = lengths[:]
    random.Random(0).shuffle(order)
    batches = [order[i : i + batch] for i in range(0, len(order), batch)]
    padded = sum(max(b) * len(b) for b in batches) / len(order)
    return statistics.fmean(lengths), padded, max(lengths)


def _candidates(
    flavor: str | Flavor | None, api: Any
) -> tuple[list[Flavor], Literal["live", "bundled", "given"], str | None]:
    """The flavors to judge (the catalog's and this machine, `local`), where the catalog came from,
    and a note on what was left out."""
    if isinstance(flavor, Flavor) or flavor == LOCAL:
        given = local_flavor() if flavor == LOCAL else flavor
        assert isinstance(given, Flavor)
        _require_speed(given)
        return [given], "given", None
    flavors, source, _, note = catalog(api)
    if flavor is not None:
        _require_speed(find_flavor(flavor, flavors))  # an unknown name fails here, with suggestions
    unknown = [f.name for f in flavors if f.peak_tflops <= 0]
    if unknown:  # a GPU the Hub lists but GPU_FACTS does not know: no speed to time it with
        left_out = f"Left out {', '.join(unknown)}: GPU speed unknown to the estimator."
        note = f"{note} {left_out}" if note else left_out
    here = local_flavor()
    return [f for f in flavors if f.peak_tflops > 0] + ([here] if here.peak_tflops > 0 else []), source, note


def _require_speed(flavor: Flavor) -> None:
    if flavor.peak_tflops <= 0:
        raise InvalidRequestError(
            f"Flavor {flavor.name!r} has a GPU ({flavor.gpu}) whose speed the estimator does not know.",
            fix="Pass another flavor (hardware() lists them), or a Flavor with peak_tflops set.",
        )


def _measurement(ledger: Ledger | None, shape: ModelShape, request: _Request, flavor: str) -> calib.Measurement | None:
    if ledger is None:
        return None
    return calib.lookup(
        ledger,
        architecture=shape.architecture,
        params=shape.params,
        method=request.method,
        peft=request.peft,
        flavor=flavor,
    )


def _judge(
    shape: ModelShape,
    request: _Request,
    work: Workload | None,
    memory_seq: int,
    trainable: int,
    flavor: Flavor,
    measurement: calib.Measurement | None,
    *,
    remote: bool,
) -> _Verdict:
    device = device_for(gpu_count=flavor.gpu_count, bf16=flavor.bf16)
    device_gb = flavor.vram_gb if flavor.gpu_count else (flavor.ram_gb or 0.0)
    usable_gb = device_gb * HEADROOM
    memory_at = partial(
        estimate_memory,
        shape,
        device=device,
        peft=request.peft,
        trainable_params=trainable,
        optimizer=request.optimizer,
        seq_len=memory_seq,
        head=method_spec(request.method).lm_head,
    )
    asked = memory_at(batch=request.per_device_train_batch_size, gradient_checkpointing=request.gradient_checkpointing)
    launcher = choose_launcher(flavor.gpu_count, request.num_processes, asked.total_gb <= usable_gb)
    split = None
    if request.tune is not None and tunable(device, request.method) is None:
        split = choose_micro_batch(
            lambda b, c: per_gpu_memory(memory_at(batch=b, gradient_checkpointing=c), launcher).total_gb,
            batch=request.per_device_train_batch_size,
            accumulation=request.gradient_accumulation_steps,
            gradient_checkpointing=request.gradient_checkpointing,
            given=request.tune,
            device_gb=device_gb,
        )
        work = work.model_copy(update=split.workload()) if work is not None else None
    batch = split.per_device_train_batch_size if split else request.per_device_train_batch_size
    checkpointing = split.gradient_checkpointing if split else request.gradient_checkpointing
    alone = memory_at(batch=batch, gradient_checkpointing=checkpointing)
    memory = per_gpu_memory(alone, launcher)
    if work is not None and request.max_steps:  # every step trains a micro-batch on each worker
        work = work.model_copy(update={"examples": work.examples * launcher.num_processes})
    measured_peak = measurement.peak_memory_bytes if measurement and _same_shape(measurement, request, batch) else None
    if measured_peak is not None:
        # A GPU's max_memory_allocated leaves out the CUDA context; a CPU's ru_maxrss has it all.
        context = 0.0 if device == "cpu" else CUDA_CONTEXT_GB
        memory = memory.model_copy(update={"total_gb": round(measured_peak / GB + context, 3)})
    time = (
        None
        if work is None
        else estimate_time(
            shape,
            work,
            device=device,
            peft=request.peft,
            method=request.method,
            gradient_checkpointing=checkpointing,
            lora_trainable=trainable if request.peft != "none" else 0,
            peak_tflops=flavor.peak_tflops,
            gpu_count=launcher.num_processes if flavor.gpu_count else 0,  # CPU workers share the same cores
            processes=launcher.num_processes,
            remote=remote,
            measured_tokens_per_second=measurement.tokens_per_second if measurement else None,
        )
    )
    return _Verdict(
        flavor=flavor,
        device=device,
        launcher=launcher,
        split=split,
        batch=batch,
        checkpointing=checkpointing,
        memory=memory,
        alone_gb=alone.total_gb,
        usable_gb=usable_gb,
        time=time,
        cost_usd=cost_usd(time.hours, flavor.price_per_hour) if time else None,
        measurement=measurement,
        measured_memory=measured_peak is not None,
    )


def _same_shape(m: calib.Measurement, request: _Request, batch: int) -> bool:
    return m.max_length == request.max_length and m.batch == batch


def _ranked(verdicts: list[_Verdict]) -> list[_Verdict]:
    """Flavors that fit, cheapest overall first. CPU flavors only when nothing else is offered:
    nobody should fine-tune a language model on cpu-basic because it costs cents an hour."""
    rented = [v for v in verdicts if v.flavor.name != LOCAL] or verdicts  # this machine only when asked for
    gpus = [v for v in rented if v.flavor.gpu_count]
    pool = gpus if gpus else rented
    return sorted(
        (v for v in pool if v.fits),
        key=lambda v: (v.cost_usd or 0.0, v.flavor.price_per_hour, v.time.hours if v.time else 0.0),
    )


def _target(verdicts: list[_Verdict], name: str | None, recommended: _Verdict | None) -> _Verdict:
    if name is not None:
        return next(v for v in verdicts if v.flavor.name == name)
    if recommended is not None:
        return recommended
    # Nothing fits: describe the roomiest device, so the numbers show how far off the job is.
    return max(
        [v for v in verdicts if v.flavor.name != LOCAL] or verdicts,
        key=lambda v: (v.usable_gb, -v.flavor.price_per_hour),
    )


def _option(v: _Verdict) -> FlavorOption:
    return FlavorOption(
        flavor=v.flavor.name,
        fits=v.fits,
        total_gb=v.memory.total_gb,
        usable_gb=round(v.usable_gb, 2),
        hours=round(v.time.hours, 4) if v.time else None,
        cost_usd=v.cost_usd,
        calibrated=v.measurement is not None,
        timeout=f"{recommended_timeout_s(v.time.hours) // 3600}h" if v.time else None,
    )


def _notes(target: _Verdict, shape: ModelShape, request: _Request, catalog_note: str | None) -> list[str]:
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


def _per_gpu(target: _Verdict) -> str:
    """What the memory above counts, on a flavor of many GPUs."""
    if target.launcher.strategy == "fsdp":
        return (
            f" Memory is per GPU: one alone would need {target.alone_gb:.1f} GB; activations and logits are "
            "not sharded."
        )
    if target.launcher.strategy == "ddp" and target.flavor.gpu_count:
        return " Memory is per GPU, DDP's gradient buckets included."
    return ""


def _shrink_options(request: _Request) -> list[str]:
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


def _assumptions(
    shape: ModelShape, request: _Request, memory_seq: int, target: _Verdict, data_note: str
) -> dict[str, Any]:
    t = target.time
    flavor = target.flavor
    if target.measurement is not None and target.measurement.tokens_per_second:
        m = target.measurement
        throughput = (
            f"measured {m.tokens_per_second:,.0f} tokens/s (median of {m.samples} earlier attempt(s) on {flavor.name})"
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
        "memory_sequence": f"{target.batch} × {memory_seq} tokens per micro-batch",
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
    if t is not None and t.startup_s:
        assumptions["startup"] = f"{human_duration(t.startup_s)} for container, install, weights download (and upload)"
    if target.measured_memory and target.measurement is not None:
        attempt = target.measurement.attempt_id
        assumptions["memory_total"] = f"measured peak of attempt {attempt} (same max_length and batch)"
    if shape.vision_params:
        assumptions["vision_tower"] = f"{shape.vision_params:,} frozen params loaded, not adapted, not in params"
    return assumptions
