"""bench/train_throughput.py's figures per case: MFU, ratios, the loss curves, the targets, what a budget cut,
and the tables (and profile summaries) it prints."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from jobtrail.estimate.cost import flops_per_token
from jobtrail.estimate.hardware import gpu_facts
from jobtrail.estimate.params import model_shape

SPEEDUP_TARGET, LORA_MFU_TARGET, FULL_MFU_TARGET, COMMIT_TARGET = 1.5, 0.40, 0.25, 1.5
LORA_MFU_MIN_PARAMS = 6e9  # the LoRA MFU target is the 7-8B's: smaller models cannot fill an H100
NAME_WIDTH = 100  # CUDA kernels' names run to hundreds of characters


def model_params(model: str) -> int:
    from transformers import AutoConfig

    return model_shape(AutoConfig.from_pretrained(model).to_dict()).params


def add_mfu(sides: dict[str, dict[str, Any]], setup: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Each side's MFU from its steady tokens/s (None on CPU or an unknown GPU); returns what it was measured
    against: the GPU's peak as text (or why there is none) and the model's parameters."""
    from transformers import AutoConfig

    baseline = sides["baseline"]
    for side in sides.values():
        side["mfu"] = None
    if baseline["device"] == "cpu":
        return {"peak": None, "model_params": None}
    shape = model_shape(AutoConfig.from_pretrained(setup.model).to_dict())
    facts = gpu_facts(baseline["device"])
    if facts is None:
        return {"peak": f"no data-sheet peak for {baseline['device']}", "model_params": shape.params}
    # The same rows, so the baseline's (unpacked) rows give the mean sequence length the attention term needs.
    mean_length = baseline["tokens"] / (baseline["steps_trained"] * baseline["rows_per_step"])
    # Both sides train the same adapters (render_job gives the rendered job the baseline's LoRA settings).
    assert setup.peft == "none" or config["peft"]["method"] == "lora"
    per_token = flops_per_token(
        shape,
        seq_len=mean_length,
        peft="lora" if setup.peft == "lora" else "none",
        method="sft",
        gradient_checkpointing=False,  # model FLOPs: recomputation is the job's cost, not useful work
        lora_trainable=(baseline.get("trainable_params") or 0) if setup.peft == "lora" else 0,
    )
    for side in sides.values():
        steady = side["steady"]["tokens_per_s"]
        side["mfu"] = per_token * steady / (facts.peak_tflops * 1e12) if steady else None
    return {"peak": f"{facts.peak_tflops:g} TFLOPS bf16 dense", "model_params": shape.params}


def loss_agreement(rendered: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> dict[str, Any]:
    common = sorted(set(rendered["losses"]) & set(baseline["losses"]), key=int)
    gaps = {
        step: abs(rendered["losses"][step] - baseline["losses"][step]) / abs(baseline["losses"][step])
        for step in common
    }
    worst = max(gaps.values()) if gaps else math.inf
    return {
        "tolerance": tolerance,
        "steps_compared": [int(step) for step in common],
        "max_relative_gap": worst,
        "worst_step": int(max(gaps, key=lambda s: gaps[s])) if gaps else None,
        "agree": bool(common) and worst <= tolerance,
    }


def flat_figures(side: dict[str, Any]) -> dict[str, Any]:
    """The scalar figures a case's table shows (and its ratios compare), from one side's figures."""
    saves = side["checkpoints"]
    write_s = sum(c["write_s"] for c in saves) if saves else None
    gb = sum(c.get("commit_gb") or c["gb"] or 0 for c in saves) if saves else None
    # The rendered job's checkpoint is done when committed; plain TRL's when written.
    done_s = sum(c.get("commit_s", c["write_s"]) for c in saves) if saves else None
    final = side.get("final_commit") or {}
    return {
        "steady_tokens_per_s": side["steady"]["tokens_per_s"],
        "step_s_median": side["steady"]["step_s_median"],
        "steady_steps": side["steady"]["steps"],
        "warmup_s": side["warmup"]["seconds"],
        "whole_run_tokens_per_s": side["tokens"] / side["train_runtime_s"] if side["train_runtime_s"] else None,
        "steps_trained": side["steps_trained"],
        "checkpoint_write_s": write_s,
        "checkpoint_done_s": done_s,
        "checkpoint_gb": gb,
        "checkpoint_s_per_gb": done_s / gb if done_s is not None and gb else None,
        "checkpoint_stall_s": side["checkpoint_stall_s"],
        "final_commit_s": final.get("commit_s"),
        "train_runtime_s": side["train_runtime_s"],
        "wall_s": side["wall_s"],
        "peak_memory_bytes": side["peak_memory_bytes"],
        "mfu": side["mfu"],
        "rows_per_step": side["rows_per_step"],
    }


# The figures compared as rendered ÷ baseline (counts, like the steps trained, are shown side by side only).
RATIOS = (
    "steady_tokens_per_s",
    "step_s_median",
    "warmup_s",
    "whole_run_tokens_per_s",
    "checkpoint_write_s",
    "checkpoint_done_s",
    "checkpoint_gb",
    "checkpoint_s_per_gb",
    "checkpoint_stall_s",
    "train_runtime_s",
    "wall_s",
    "peak_memory_bytes",
    "mfu",
)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarise(label: str, setup: Any, sides: dict[str, Any], args: argparse.Namespace, built: dict) -> dict[str, Any]:
    rendered, baseline = sides["rendered"], sides["baseline"]
    pair = {"rendered": rendered, "baseline": baseline}
    basis = add_mfu(pair, setup, sides["config"])
    for side in pair.values():
        side["figures"] = flat_figures(side)
    ratios = {key: ratio(rendered["figures"][key], baseline["figures"][key]) for key in RATIOS}
    loss = loss_agreement(rendered, baseline, args.loss_tolerance)
    cut = [
        f"{label}: {name} trained {side['steps_trained']} of {side['max_steps']} steps (the budget's deadline)"
        for name, side in pair.items()
        if (side["stopped"] or {}).get("why") == "deadline"
    ]
    if args.profile:
        cut += [
            f"{label}: {name} has no profile ({(side['profile'] or {}).get('error', 'training ended before it')})"
            for name, side in pair.items()
            if not side["profile"] or "error" in side["profile"]
        ]
    report: dict[str, Any] = {
        "case": label,
        "setup": dataclasses.asdict(setup) | {"device": rendered["device"], **basis, "standin": built or None},
        "rendered": rendered,
        "baseline": baseline,
        "ratios": ratios,
        "loss": loss,
        "cut": cut,
    }
    if rendered["device"] != "cpu":
        report["targets"] = targets(setup, rendered, ratios, loss, basis)
    return report


def targets(
    setup: Any, rendered: dict[str, Any], ratios: dict[str, Any], loss: dict[str, Any], basis: dict[str, Any]
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "speedup": {"target": SPEEDUP_TARGET, "met": (ratios["steady_tokens_per_s"] or 0) >= SPEEDUP_TARGET},
        "loss_curve": {"met": loss["agree"]},
    }
    if setup.peft == "lora" and (basis["model_params"] or 0) >= LORA_MFU_MIN_PARAMS:
        found["lora_mfu"] = {"target": LORA_MFU_TARGET, "met": (rendered["mfu"] or 0) >= LORA_MFU_TARGET}
    if setup.peft == "none":
        found["full_mfu"] = {"target": FULL_MFU_TARGET, "met": (rendered["mfu"] or 0) >= FULL_MFU_TARGET}
    if ratios["checkpoint_s_per_gb"] is not None:
        found["commit_vs_write"] = {"target": COMMIT_TARGET, "met": ratios["checkpoint_s_per_gb"] <= COMMIT_TARGET}
    return found


# --- printing ------------------------------------------------------------------------------------


def _num(digits: int) -> Any:
    return lambda v: f"{v:,.{digits}f}"


ROWS = [
    ("steady tokens/s", "steady_tokens_per_s", _num(1)),
    ("steady step s (median)", "step_s_median", _num(3)),
    ("steady steps", "steady_steps", _num(0)),
    ("warm-up s", "warmup_s", _num(2)),
    ("whole-run tokens/s", "whole_run_tokens_per_s", _num(1)),
    ("steps trained", "steps_trained", _num(0)),
    ("checkpoint write s", "checkpoint_write_s", _num(2)),
    ("checkpoint done s", "checkpoint_done_s", _num(2)),
    ("checkpoint GB", "checkpoint_gb", _num(3)),
    ("checkpoint s/GB", "checkpoint_s_per_gb", _num(2)),
    ("checkpoint stall s", "checkpoint_stall_s", _num(2)),
    ("final model commit s", "final_commit_s", _num(2)),
    ("train runtime s", "train_runtime_s", _num(2)),
    ("wall s", "wall_s", _num(1)),
    ("peak memory GB", "peak_memory_bytes", lambda v: f"{v / 1e9:.3f}"),
    ("MFU (steady)", "mfu", lambda v: f"{v:.1%}"),
    ("rows per step", "rows_per_step", _num(0)),
]


def print_case(report: dict[str, Any]) -> None:
    setup = report["setup"]
    built = setup.get("standin")
    print(
        f"\n== {report['case']}: {Path(setup['model']).name} "
        f"({'LoRA' if setup['peft'] == 'lora' else 'full fine-tuning'}) on {Path(setup['dataset']).name}\n"
        f"max_steps {setup['steps']}, max_length {setup['max_length']}, device {setup['device']}"
        + (f", peak {setup['peak']}" if setup["peak"] else "")
        + (
            f"\nstand-in: {built['params'] / 1e6:,.1f}M parameters, {built['bytes'] / 1e9:.2f} GB, drawn on "
            f"{built['device']}, built in {built['seconds']:.1f} s"
            if built
            else ""
        )
    )
    warmup = report["rendered"]["warmup"]["steps"]
    print(f"{'':<24}{'rendered':>14}{'baseline':>14}{'ratio':>9}   (warm-up: the first {warmup} steps)")
    for label, key, show in ROWS:
        cells = [report[side]["figures"][key] for side in ("rendered", "baseline")]
        shown = [show(v) if v is not None else "n/a" for v in cells]
        r = report["ratios"].get(key)
        print(f"{label:<24}{shown[0]:>14}{shown[1]:>14}{(f'{r:.2f}x' if r is not None else ''):>9}")
    loss = report["loss"]
    print(
        f"loss curves ({len(loss['steps_compared'])} steps): max relative gap {loss['max_relative_gap']:.2%}"
        + (f" at step {loss['worst_step']}" if loss["worst_step"] else "")
        + f", tolerance {loss['tolerance']:.0%}: {'agree' if loss['agree'] else 'DIFFER'}"
    )
    for name in ("rendered", "baseline"):
        side = report[name]
        stopped = side["stopped"]
        excluded = ", ".join(f"{kind} {steps}" for kind, steps in side["excluded"].items() if steps)
        print(
            f"{name}: {side['steps_trained']} steps of max {side['max_steps']}"
            + (f", stopped after step {stopped['step']} ({stopped['why']})" if stopped else "")
            + (f"; not steady: {excluded}" if excluded else "")
        )
    for key in ("speedups", "launcher"):
        if key in report["rendered"]:
            print(f"rendered {key}: {json.dumps(report['rendered'][key])}")
    for name, target in (report.get("targets") or {}).items():
        bar = f" {target['target']}" if "target" in target else ""
        print(f"target {name}{bar}: {'met' if target['met'] else 'MISSED'}")
    for name in ("rendered", "baseline"):
        if report[name]["profile"]:
            print_profile(name, report[name]["profile"])


def print_profile(name: str, profile: dict[str, Any]) -> None:
    if "error" in profile:
        print(f"\nprofile of {name}: {profile['error']}")
        return
    steps = profile["steps"]
    numbers = steps["numbers"]
    between = profile["between_steps_ms"]
    print(
        f"\nprofile of {name}, steps {numbers[0]}-{numbers[-1]}: {profile['window_ms']:,.1f} ms "
        f"({profile['window_ms'] / len(numbers):,.1f} ms a step); CPU in a step {steps['mean_cpu_ms']:,.1f} ms, "
        + (f"between steps {between:,.1f} ms" if between is not None else "no gap between steps measured")
    )
    gpu = profile["gpu"]
    if gpu and "error" in gpu:
        print(f"  GPU: {gpu['error']}")
    elif gpu:
        print(
            f"  GPU busy {gpu['busy_ms']:,.1f} ms, idle {gpu['idle_fraction']:.1%} of the window "
            f"({gpu['idle_ms_in_steps']:,.1f} ms within steps, {gpu['idle_ms_between_steps']:,.1f} ms between)"
        )
        for gap in gpu["largest_gaps"]:
            print(f"  idle {gap['ms']:,.2f} ms at +{gap['at_ms']:,.1f} ms: {', '.join(gap['cpu_ops']) or '-'}")
        print(f"  {'total ms':>10}{'calls':>8}{'share':>8}  top CUDA kernels")
        for k in profile["top_kernels"]:
            print(f"  {k['total_ms']:>10,.2f}{k['calls']:>8}{k['share']:>8.1%}  {k['name'][:NAME_WIDTH]}")
    else:
        print("  no GPU: CPU ops only")
    print(f"  {'self ms':>10}{'total ms':>10}{'calls':>8}  top CPU ops")
    for op in profile["top_cpu_ops"]:
        print(f"  {op['self_ms']:>10,.2f}{op['total_ms']:>10,.2f}{op['calls']:>8}  {op['name'][:NAME_WIDTH]}")


def print_cuts(report: dict[str, Any]) -> None:
    budget = f" of a {report['budget_s']:g} s budget" if report["budget_s"] else ""
    print(f"\nwhole bench: {report['wall_s']:.1f} s{budget}")
    for line in report["cut"]:
        print(f"cut: {line}")
