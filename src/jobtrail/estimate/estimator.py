"""The estimate_cost and hardware use-cases: gather the inputs (config.json, the flavor catalog,
data statistics, calibration measurements), run the pure models, pick a flavor."""

from __future__ import annotations

import difflib
import random
import statistics
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from jobtrail.errors import InvalidRequestError
from jobtrail.estimate import calibration as calib
from jobtrail.estimate.cost import Workload, cost_usd, estimate_time, recommended_timeout_s
from jobtrail.estimate.hardware import LOCAL, catalog, find_flavor, local_flavor
from jobtrail.estimate.inputs import DataStats, dataset_stats, load_model_config
from jobtrail.estimate.memory import (
    CUDA_CONTEXT_GB,
    GB,
    HEADROOM,
    OPTIMIZER_ALIASES,
    OPTIMIZER_BYTES,
    device_for,
    estimate_memory,
)
from jobtrail.estimate.microbatch import choose_micro_batch, tunable
from jobtrail.estimate.parallel import choose_launcher, per_gpu_memory
from jobtrail.estimate.params import ModelShape, lora_params, model_shape
from jobtrail.estimate.rates import rescaled_rate
from jobtrail.estimate.verdict import FlavorEstimate, Request, assumptions, notes, positive, speed_source
from jobtrail.methods.effective import Effective
from jobtrail.methods.registry import method_spec
from jobtrail.models import Peft
from jobtrail.results.estimate import EstimateResult, Flavor, FlavorOption, HardwareResult, memory_label
from jobtrail.util.refs import looks_local

if TYPE_CHECKING:
    from jobtrail.ledger.store import Ledger

PEFTS: tuple[Peft, ...] = get_args(Peft)
MAX_OPTIONS = 5
# A method without max_length (GRPO keeps its prompts whole) is sized at this many tokens a row.
UNCAPPED_LENGTH = 1024
# The sizes whose defaults the estimate may change when asked to tune (estimate/microbatch.py), unless given.
TUNABLE = frozenset({"per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing"})


def hardware_report(api: Any = None) -> HardwareResult:
    """The flavor catalog: live from the Hub when it answers, else the bundled snapshot."""
    flavors, source, snapshot_date, note = catalog(api)
    return HardwareResult(flavors=flavors, source=source, snapshot_date=snapshot_date, note=note, local=local_flavor())


def sized_length(values: Effective) -> Any:
    """The sequence length a job of `values` is sized at: its max_length, or UNCAPPED_LENGTH without one."""
    length = values.runs_with("max_length")
    return UNCAPPED_LENGTH if length is None else length


def estimate_cost(
    model: str,
    values: Effective,
    dataset: str | None = None,
    num_examples: int | None = None,
    avg_tokens: float | None = None,
    flavor: str | Flavor | None = None,
    *,
    tune_micro_batch: bool = False,
    config: dict[str, Any] | None = None,
    calibration: Ledger | None = None,
    api: Any = None,
    data: DataStats | None = None,
) -> EstimateResult:
    """Memory, time and money of a fine-tuning job before any GPU is rented.

    `values`: the job's effective hyperparameters (methods/effective.py; preflight/plan.py computes them, for a
    job or for estimate_cost asked alone), read as they are: the estimate merges no defaults of its own. Without
    a data size (dataset, num_examples and avg_tokens, or max_steps) memory and fits are answered and time and
    cost are None, with the reason.
    `model` is a Hub id or a local directory with config.json (or pass `config` directly);
    `flavor` a catalog name, or a Flavor describing another machine (e.g. this host, with a
    measured peak_tflops), which is then the only candidate. The job's num_processes (None: one per GPU)
    and each flavor's launcher (parallel.choose_launcher) decide the memory per GPU and the time.
    `tune_micro_batch`: choose the micro-batch and checkpointing the user left out, as submit does
    (estimate/microbatch.py; `micro_batch`). `calibration` is the ledger whose measurements replace the
    model where they exist; `api` an HfApi for live prices. `data`: the rows already measured
    (preflight/data_size.py: with the model's tokenizer where it can be read), in place of reading
    `dataset` here, which can only count characters/4.
    """
    request = _request(values, tune_micro_batch)
    positive("num_examples", num_examples, optional=True, integer=True)
    positive("avg_tokens", avg_tokens, optional=True, integer=False)
    stats = data if data is not None else dataset_stats(dataset) if dataset else None
    work, memory_seq, data_note = _workload(dataset, stats, num_examples, avg_tokens, request)
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
        _judge(shape, request, work, memory_seq, trainable, f, calibration, remote=remote and f.name != LOCAL)
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
        speed_source=speed_source(target),
        tokens_counted=(stats.counted if stats and avg_tokens is None else "given") if work else None,
        catalog_source=source,
        options=[_option(v) for v in choices[:MAX_OPTIONS]],
        notes=notes(target, shape, request, catalog_note),
        assumptions=assumptions(shape, request, memory_seq, target, data_note),
    )


def _request(values: Effective, tune: bool) -> Request:
    """The job as the estimate judges it, from its effective hyperparameters (checked: names normalised,
    sizes positive; TRL's own default where neither the user nor jobtrail set one)."""
    args = values.training_args
    max_steps = args.get("max_steps")
    return Request(
        method=values.method,
        peft=cast(Peft, choice("peft", values.peft_method, PEFTS)),
        optimizer=_optimizer(values.runs_with("optim")),
        max_length=sized_length(values),
        per_device_train_batch_size=args["per_device_train_batch_size"],
        gradient_accumulation_steps=args["gradient_accumulation_steps"],
        num_train_epochs=args["num_train_epochs"],
        max_steps=max_steps if max_steps is not None and max_steps != -1 else None,
        gradient_checkpointing=bool(values.runs_with("gradient_checkpointing")),
        lora_r=values.peft["r"],
        num_processes=values.job["num_processes"],
        tune=TUNABLE & set(values.given) if tune else None,
    )


def _optimizer(name: str) -> str:
    normal = OPTIMIZER_ALIASES.get(str(name).lower(), str(name).lower())
    choice("optim", normal, tuple(OPTIMIZER_BYTES))
    return normal


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` of `allowed`, normalised; an InvalidRequestError naming the closest choice otherwise."""
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


def _workload(
    dataset: str | None, stats: DataStats | None, num_examples: int | None, avg_tokens: float | None, request: Request
) -> tuple[Workload | None, int, str]:
    """(workload, sequence length for the memory peak, where the numbers came from, or why the
    size is unknown). max_steps fixes the rows trained on; explicit num_examples / avg_tokens win
    over the dataset's own statistics. No workload when the size is unknown: memory still is."""
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


def _measurement(
    ledger: Ledger | None, shape: ModelShape, request: Request, flavor: str, batch: int, checkpointing: bool
) -> calib.Measurement | None:
    """This flavor's measurements of the job, preferring those at the micro-batch and checkpointing it runs with."""
    if ledger is None:
        return None
    return calib.lookup(
        ledger,
        architecture=shape.architecture,
        params=shape.params,
        method=request.method,
        peft=request.peft,
        flavor=flavor,
        max_length=request.max_length,
        batch=batch,
        gradient_checkpointing=checkpointing,
    )


def _judge(
    shape: ModelShape,
    request: Request,
    work: Workload | None,
    memory_seq: int,
    trainable: int,
    flavor: Flavor,
    calibration: Ledger | None,
    *,
    remote: bool,
) -> FlavorEstimate:
    device = device_for(gpu_count=flavor.gpu_count, bf16=flavor.bf16)
    device_gb = flavor.vram_gb if flavor.gpu_count else (flavor.ram_gb or 0.0)
    usable_gb = device_gb * HEADROOM
    spec = method_spec(request.method)
    memory_at = partial(
        estimate_memory,
        shape,
        device=device,
        peft=request.peft,
        trainable_params=trainable,
        optimizer=request.optimizer,
        seq_len=memory_seq,
        head=spec.lm_head,
        sequences=spec.flops.batch_sequences,
        reference=spec.reference_model,
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
    measurement = _measurement(calibration, shape, request, flavor.name, batch, checkpointing)
    alone = memory_at(batch=batch, gradient_checkpointing=checkpointing)
    memory = per_gpu_memory(alone, launcher)
    if work is not None and request.max_steps:  # every step trains a micro-batch on each worker
        work = work.model_copy(update={"examples": work.examples * launcher.num_processes})
    same_shape = measurement is not None and _same_shape(measurement, request, batch, checkpointing)
    measured_peak = measurement.peak_memory_bytes if measurement and same_shape else None
    if measured_peak is not None:
        # A GPU's max_memory_allocated leaves out the CUDA context; a CPU's ru_maxrss has it all.
        context = 0.0 if device == "cpu" else CUDA_CONTEXT_GB
        memory = memory.model_copy(update={"total_gb": round(measured_peak / GB + context, 3)})
    time_of = partial(
        estimate_time,
        shape,
        device=device,
        peft=request.peft,
        method=request.method,
        gradient_checkpointing=checkpointing,
        lora_trainable=trainable if request.peft != "none" else 0,
        peak_tflops=flavor.peak_tflops,
        gpu_count=launcher.num_processes if flavor.gpu_count else 0,  # CPU workers share the same cores
        processes=launcher.num_processes,
        remote=remote,
    )
    time = None
    if work is not None:
        rate = rescaled_rate(measurement, work, time_of, same_shape=same_shape) if measurement else None
        time = time_of(
            work, measured_tokens_per_second=rate, measured_startup_s=measurement.overhead_s if measurement else None
        )
    return FlavorEstimate(
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
        same_shape=same_shape,
        remote=remote,
    )


def _same_shape(m: calib.Measurement, request: Request, batch: int, checkpointing: bool) -> bool:
    recomputed = m.gradient_checkpointing is None or m.gradient_checkpointing == checkpointing
    return m.max_length == request.max_length and m.batch == batch and recomputed


def _ranked(verdicts: list[FlavorEstimate]) -> list[FlavorEstimate]:
    """Flavors that fit, cheapest overall first. CPU flavors only when nothing else is offered:
    nobody should fine-tune a language model on cpu-basic because it costs cents an hour."""
    rented = [v for v in verdicts if v.flavor.name != LOCAL] or verdicts  # this machine only when asked for
    gpus = [v for v in rented if v.flavor.gpu_count]
    pool = gpus if gpus else rented
    return sorted(
        (v for v in pool if v.fits),
        key=lambda v: (v.cost_usd or 0.0, v.flavor.price_per_hour, v.time.hours if v.time else 0.0),
    )


def _target(verdicts: list[FlavorEstimate], name: str | None, recommended: FlavorEstimate | None) -> FlavorEstimate:
    if name is not None:
        return next(v for v in verdicts if v.flavor.name == name)
    if recommended is not None:
        return recommended
    # Nothing fits: describe the roomiest device, so the numbers show how far off the job is.
    return max(
        [v for v in verdicts if v.flavor.name != LOCAL] or verdicts,
        key=lambda v: (v.usable_gb, -v.flavor.price_per_hour),
    )


def _option(v: FlavorEstimate) -> FlavorOption:
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
