"""What a training job turns on for speed (issues 15, 29): the pure choice for an H100 (HF Jobs and local), a T4,
an A10G and this CPU, fed the facts preflight gathers; the caller's values win; the estimate's micro-batch keeps
the effective batch; the dry runs (HF Jobs, and a local H100 whose job Python is asked what it has) show the record,
the rendered training_args and the header (liger-kernel only when on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobtrail.estimate.microbatch import FILL, MicroBatch, choose_micro_batch, tunable
from jobtrail.models import JobSpec, Speedups
from jobtrail.preflight import probes, speedups
from jobtrail.preflight.plan import estimate_alone, job_values
from jobtrail.preflight.speedups import PADDING_FREE_MIN_TRAIN_S, Target, Workload
from jobtrail.requests import EstimateRequest, SubmitOptions
from jobtrail.templates import pep723
from jobtrail.templates.configs import build_config, retry_config, with_speedups
from jobtrail.templates.render import LIGER_REQUIREMENT, render_script
from jobtrail.templates.versions import job_lock, pin
from support.estimates import OFFLINE
from support.remote import publish, remote_spec

H100 = Target(flavor="h100", gpu="H100", bf16=True, compute_capability=9.0)
A100 = Target(flavor="a100-large", gpu="A100", bf16=True, compute_capability=8.0)
T4 = Target(flavor="t4-small", gpu="T4", bf16=False, compute_capability=7.5)
A10G = Target(flavor="a10g-large", gpu="A10G", bf16=True, compute_capability=8.6)
CPU = Target(flavor="local")
# A local H100 whose job Python has what the measurements ran with (bench/speedups_gpu.py).
MEASURED = {"torch": "2.11.0+cu130", "transformers": "5.24.0", "triton": "3.6.0", "liger-kernel": "0.8.5"}
LOCAL_H100 = Target(flavor="local", gpu="H100", bf16=True, compute_capability=9.0, packages=MEASURED)

# The split an estimate on an 80 GB GPU chose for SFT's defaults (2 × 4): 8 rows at once, no checkpointing.
FILLED = MicroBatch(
    per_device_train_batch_size=8,
    gradient_accumulation_steps=1,
    gradient_checkpointing=False,
    total_gb=31.0,
    budget_gb=60.0,
    changed=["per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing"],
    why="estimated 31.0 GB, within the 60.0 GB jobtrail fills (75% of 80 GB)",
)
# An hour of training.
LONG_QWEN = Workload(family="qwen2", effective_batch=8, train_s=3600.0)
ITEMS = (
    "padding_free",
    "liger_kernel",
    "fused_adamw",
    "bf16",
    "gradient_checkpointing",
    "micro_batch",
    "dataloader",
    "step_metrics",
    "length_buckets",
)

LIGER_PINNED = pin(LIGER_REQUIREMENT, job_lock())  # as a rendered header lists it


def _choose(target: Target, given: dict[str, Any] | None = None, **changes: Any) -> Speedups:
    micro_batch = changes.pop("micro_batch", None)
    return speedups.choose("sft", target, given or {}, replace(LONG_QWEN, **changes), micro_batch=micro_batch)


def _rendered(chosen: Speedups) -> dict[str, Any]:
    return with_speedups({"learning_rate": 2e-4, "max_length": 1024}, chosen)


def _on(chosen: Speedups) -> set[str]:
    return {name for name in ITEMS if getattr(chosen, name).on}


def test_an_h100_on_hf_jobs_gets_everything_measured_safe_there():
    chosen = _choose(H100, micro_batch=FILLED)
    assert chosen.device == "H100 (h100)"
    assert _on(chosen) == {"padding_free", "liger_kernel", "fused_adamw", "bf16", "micro_batch", "dataloader"}
    assert (
        chosen.gradient_checkpointing.source == "preflight" and "fits without it" in chosen.gradient_checkpointing.why
    )
    assert chosen.bf16.source == "default"  # the job's own precision rule decides on the GPU it lands on
    assert "joins the script's dependencies" in chosen.liger_kernel.why
    assert "flex_attention" in chosen.padding_free.why and "cut to max_length by the job" in chosen.padding_free.why
    assert _rendered(chosen) == {
        "learning_rate": 2e-4,
        "max_length": 1024,  # kept: the job cuts the rows itself (scripts/sft.py), TRL gets max_length=None
        "padding_free": True,
        "model_init_kwargs": {"attn_implementation": "flex_attention"},
        "use_liger_kernel": True,
        "optim": "adamw_torch_fused",
        "gradient_checkpointing": False,
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "dataloader_num_workers": 2,
        "dataloader_persistent_workers": True,
    }
    assert not chosen.step_metrics.on and "report them" in chosen.step_metrics.why
    assert _choose(A100, micro_batch=FILLED).liger_kernel.on


def test_a_local_h100_turns_liger_on_when_the_jobs_python_has_it():
    chosen = _choose(LOCAL_H100, micro_batch=FILLED)
    assert chosen.liger_kernel.on and "liger-kernel 0.8.5 is importable by the job's Python" in chosen.liger_kernel.why
    assert chosen.padding_free.on and chosen.dataloader.on and chosen.micro_batch.on
    without = {name: v for name, v in MEASURED.items() if name != "liger-kernel"}
    lacking = _choose(replace(LOCAL_H100, packages=without)).liger_kernel
    assert not lacking.on and "not importable by the job's Python" in lacking.why and "liger-kernel>=" in lacking.why
    old = _choose(replace(LOCAL_H100, packages={**MEASURED, "liger-kernel": "0.7.1"})).liger_kernel
    assert not old.on and "0.7.1" in old.why


def test_triton_kernels_need_triton_and_a_c_compiler_in_a_local_job():
    no_triton = _choose(replace(LOCAL_H100, packages={k: v for k, v in MEASURED.items() if k != "triton"}))
    no_cc = _choose(replace(LOCAL_H100, c_compiler=False))
    for chosen, why in ((no_triton, "triton is not importable"), (no_cc, "C compiler")):
        assert not chosen.liger_kernel.on and why in chosen.liger_kernel.why
        assert not chosen.padding_free.on and why in chosen.padding_free.why
        assert chosen.fused_adamw.on  # no Triton in it


def test_padding_free_stays_off_where_it_was_not_measured_or_would_not_pay():
    cases = [
        (dict(train_s=PADDING_FREE_MIN_TRAIN_S - 1), "would not pay back"),
        (dict(train_s=None, train_unknown="the estimate has no training time (x)"), "no training time (x)"),
        (dict(family="gemma2"), "model_type 'gemma2'"),
        (dict(multimodal=True), "multimodal"),
        (dict(processes=2), "one GPU only"),
    ]
    for changes, why in cases:
        chosen = _choose(H100, **changes).padding_free
        assert not chosen.on and chosen.source == "default" and why in chosen.why, (changes, chosen.why)
    older = _choose(replace(LOCAL_H100, packages={**MEASURED, "torch": "2.10.1"})).padding_free
    assert not older.on and "torch 2.11 or newer" in older.why
    sdpa = _choose(H100, {"model_init_kwargs": {"attn_implementation": "sdpa"}}).padding_free
    assert not sdpa.on and "sdpa as given" in sdpa.why
    assert not speedups.choose("dpo", H100, {}, LONG_QWEN).padding_free.on


def test_the_callers_padding_free_is_kept_with_flex_attention_where_it_pays():
    chosen = _choose(H100, {"padding_free": True}).padding_free
    assert chosen.on and chosen.source == "user" and "flex_attention" in chosen.why
    assert chosen.sets == {"model_init_kwargs": {"attn_implementation": "flex_attention"}}
    assert speedups.attention_findings(H100, {"padding_free": True}, _choose(H100, {"padding_free": True})) == []
    off = _choose(H100, {"padding_free": False}).padding_free
    assert not off.on and off.source == "user" and off.sets == {}
    assert _rendered(_choose(H100, {"padding_free": False})).get("padding_free") is None  # the caller's, as given


@pytest.mark.parametrize(
    ("target", "given", "changes", "why"),
    [
        (CPU, {}, {}, "a CPU job"),
        (H100, {"model_init_kwargs": {"attn_implementation": "sdpa"}}, {}, "sdpa as given"),
        (H100, {}, {"train_s": 60.0}, "would not pay back"),
        (T4, {}, {}, "sm_75"),
    ],
)
def test_the_callers_padding_free_on_a_square_attention_is_kept_with_a_warning(target, given, changes, why):
    given = {**given, "padding_free": True}
    chosen = _choose(target, given, **changes)
    assert chosen.padding_free.on and chosen.padding_free.source == "user" and why in chosen.padding_free.why
    assert chosen.padding_free.sets == {}  # the job's attention left as it is
    [warning] = speedups.attention_findings(target, given, chosen)
    assert warning.code == "config.padding_free_attention" and warning.severity == "warning"
    assert why in warning.message and "one masked square" in warning.message
    assert "Drop padding_free" in (warning.fix or "")
    assert ("flex_attention" in (warning.fix or "")) is (target.gpu is not None)


def test_flex_attention_on_a_cpu_is_refused_before_the_job_starts():
    given = {"model_init_kwargs": {"attn_implementation": "flex_attention"}}
    for asked in ({}, {"padding_free": True}):
        [error] = speedups.attention_findings(CPU, {**given, **asked}, _choose(CPU, {**given, **asked}))
        assert error.code == "config.flex_attention_cpu" and error.severity == "error"
        assert "no backward pass" in error.message and "GPU" in (error.fix or "")
    assert speedups.attention_findings(H100, given, _choose(H100, given)) == []
    assert speedups.attention_findings(CPU, {}, _choose(CPU)) == []  # nothing asked, nothing said


def test_an_hf_jobs_job_pairs_flex_attention_only_with_a_lock_that_has_it(monkeypatch):
    lock = job_lock()
    assert _choose(H100).padding_free.on  # torch and transformers pinned at or past what was measured
    older = replace(lock, versions={**lock.versions, "transformers": "5.23.0"})
    monkeypatch.setattr(speedups, "job_lock", lambda: older)
    chosen = _choose(H100).padding_free
    assert not chosen.on and "the job lock pins transformers 5.23.0" in chosen.why


def test_a_varlen_flash_attention_the_caller_chose_carries_padding_free_without_a_compile():
    for attention in ("flash_attention_2", "kernels-community/flash-attn2"):
        chosen = _choose(H100, {"model_init_kwargs": {"attn_implementation": attention}}, train_s=10.0, family="x")
        assert chosen.padding_free.on and chosen.padding_free.source == "preflight"
        assert chosen.padding_free.sets == {"padding_free": True}  # the caller's attention kept
    assert not _choose(CPU, {"model_init_kwargs": {"attn_implementation": "flash_attention_2"}}).padding_free.on


@pytest.mark.parametrize(("target", "why"), [(T4, "sm_75"), (A10G, "sm_86")])
def test_t4_and_a10g_keep_what_could_fail_off_and_say_why(target, why):
    chosen = _choose(target)
    assert not chosen.liger_kernel.on and why in chosen.liger_kernel.why and "shared memory" in chosen.liger_kernel.why
    assert not chosen.padding_free.on and why in chosen.padding_free.why
    assert chosen.fused_adamw.on and chosen.dataloader.on  # any CUDA GPU
    assert "use_liger_kernel" not in _rendered(chosen)
    assert chosen.bf16.on is target.bf16
    if not target.bf16:
        assert "no bf16" in chosen.bf16.why and "fp16" in chosen.bf16.why


def test_t4_keeps_the_split_the_memory_model_was_not_measured_for():
    reason = tunable("cuda_fp16", "sft")
    assert reason and "fp16" in reason
    chosen = speedups.choose("sft", T4, {}, LONG_QWEN, micro_batch_off=reason)
    assert chosen.gradient_checkpointing.on and chosen.gradient_checkpointing.source == "default"
    assert not chosen.micro_batch.on and "fp16" in chosen.micro_batch.why


def test_a_cpu_job_turns_nothing_on():
    chosen = speedups.choose("sft", CPU, {}, LONG_QWEN, micro_batch_off=tunable("cpu", "sft") or "")
    assert chosen.device == "CPU (local)"
    assert _on(chosen) == {"gradient_checkpointing"}  # TRL's, untouched
    assert chosen.gradient_checkpointing.source == "default"
    assert all(getattr(chosen, name).why for name in ITEMS)
    assert _rendered(chosen) == {"learning_rate": 2e-4, "max_length": 1024}
    assert speedups.choose("sft", CPU, {}).device == "CPU (local)"  # no workload known: nothing turned on either


def test_liger_only_for_the_families_it_patches():
    assert not _choose(H100, family="gpt2").liger_kernel.on
    assert not _choose(H100, family="gemma3_text", multimodal=True).liger_kernel.on
    assert _choose(H100, family="llama").liger_kernel.on
    assert not speedups.choose("grpo", H100, {}, LONG_QWEN).liger_kernel.on


def test_the_callers_values_always_win():
    given = {
        "use_liger_kernel": False,
        "optim": "adamw_torch",
        "gradient_checkpointing": True,
        "per_device_train_batch_size": 2,
        "bf16": False,
        "fp16": True,
        "packing": True,
        "dataloader_num_workers": 0,
        "pad_to_multiple_of": 8,
    }
    chosen = _choose(H100, given, micro_batch=FILLED)
    assert all(getattr(chosen, name).source == "user" for name in ITEMS if name != "step_metrics")
    on = [True, False, False, False, True, True, False, False, True]
    assert [getattr(chosen, name).on for name in ITEMS] == on
    assert _rendered(chosen) == {"learning_rate": 2e-4, "max_length": 1024}  # nothing set over them
    # A liger turned on by the caller on a T4 stays on (and the header gets liger-kernel).
    assert _choose(T4, {"use_liger_kernel": True}).liger_kernel.on
    # A given accumulation alone fixes the split too.
    assert _choose(H100, {"gradient_accumulation_steps": 16}, micro_batch=FILLED).micro_batch.source == "user"


def test_a_split_that_would_change_the_effective_batch_is_refused():
    kept = _choose(H100, micro_batch=FILLED, processes=2)
    assert kept.micro_batch.on and "× 2 processes keeps the effective batch" in kept.micro_batch.why
    wrong = _choose(H100, micro_batch=FILLED.model_copy(update={"per_device_train_batch_size": 16}))
    assert not wrong.micro_batch.on and "would change the effective batch of 8" in wrong.micro_batch.why
    assert "per_device_train_batch_size" not in _rendered(wrong)


# --- the micro-batch -----------------------------------------------------------------------------


def _split(device_gb: float, *, batch: int = 2, accumulation: int = 4, given: bool = False) -> MicroBatch:
    """The split for a job whose peak is 10 GB + 3 GB per row (a fifth of that with checkpointing)."""
    return choose_micro_batch(
        lambda b, checkpointing: 10 + b * 3 * (0.2 if checkpointing else 1.0),
        batch=batch,
        accumulation=accumulation,
        gradient_checkpointing=True,
        given=("per_device_train_batch_size", "gradient_checkpointing") if given else (),
        device_gb=device_gb,
    )


def test_micro_batch_keeps_the_effective_batch_and_drops_checkpointing_when_it_fits():
    split = _split(80)
    assert (split.per_device_train_batch_size, split.gradient_accumulation_steps) == (8, 1)
    assert split.gradient_checkpointing is False and split.total_gb == 34 and split.budget_gb == 80 * FILL
    # 24 GB (18 filled): without checkpointing 2 rows need 16 GB, 4 need 22.
    small = _split(24)
    assert (small.per_device_train_batch_size, small.gradient_checkpointing) == (2, False)
    # 20 GB (15 filled): without checkpointing only 1 row fits, below the job's own 4; with it, all 8 (14.8 GB).
    tight = _split(20, batch=4, accumulation=2)
    assert (tight.per_device_train_batch_size, tight.gradient_checkpointing, tight.changed) == (
        8,
        True,
        ["per_device_train_batch_size", "gradient_accumulation_steps"],
    )


def test_micro_batch_never_changes_given_values_and_keeps_them_when_nothing_fits():
    given = _split(80, given=True)
    assert (given.per_device_train_batch_size, given.gradient_checkpointing, given.changed) == (2, True, [])
    hopeless = _split(10)
    assert hopeless.changed == [] and "kept" in hopeless.why


SMOLLM2_17B = {  # HuggingFaceTB/SmolLM2-1.7B
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
}


def test_the_estimate_chooses_the_split_per_flavor_and_estimates_with_it():
    def sft(flavor: str, **kw: Any):
        return estimate_alone(
            EstimateRequest("m", flavor=flavor, **kw), config=SMOLLM2_17B, api=OFFLINE, tune_micro_batch=True
        )

    h200, t4 = sft("h200"), sft("t4-medium")
    assert h200.micro_batch is not None and h200.micro_batch.gradient_checkpointing is False
    assert h200.memory.total_gb == h200.micro_batch.total_gb <= FILL * 141
    assert h200.assumptions["gradient_checkpointing"] is False
    assert "Split as submit runs it: per_device_train_batch_size=8" in h200.to_markdown()
    assert "recompute" not in h200.assumptions.get("flops_per_token", "")
    plain = estimate_alone(EstimateRequest("m", flavor="h200"), config=SMOLLM2_17B, api=OFFLINE)
    assert plain.micro_batch is None and plain.assumptions["gradient_checkpointing"] is True
    assert t4.micro_batch is None  # fp16 over fp32 weights: not measured, not tuned
    kept = sft("h200", gradient_checkpointing=True, per_device_train_batch_size=2)
    assert kept.micro_batch is not None and kept.micro_batch.changed == []


# --- the rendered job ----------------------------------------------------------------------------


def test_the_header_lists_liger_kernel_only_when_liger_is_on(tiny_model):
    spec = JobSpec(method="sft", model=str(tiny_model), dataset="d.jsonl")
    for chosen, listed in ((_choose(H100), True), (_choose(T4), False)):
        script = render_script("sft", build_config(spec, job_values(spec), "/o", speedups=chosen))
        assert (LIGER_PINNED in pep723.read_metadata(script)["dependencies"]) is listed


def test_a_retry_does_not_inherit_the_max_length_an_older_padding_free_unset(tiny_model):
    spec = JobSpec(method="sft", model=str(tiny_model), dataset="d.jsonl")
    values = job_values(spec)
    flat = build_config(spec, values, "/o", 512, speedups=_choose(H100))
    assert flat["training_args"]["max_length"] == 512 and flat["training_args"]["padding_free"] is True
    assert retry_config(flat, spec, values)["training_args"]["max_length"] == 512  # kept as the first attempt had it
    # An attempt planned before the job cut padding-free rows itself: preflight unset its max_length then.
    chosen = _choose(H100)
    older = chosen.padding_free.model_copy(update={"sets": {**chosen.padding_free.sets, "max_length": None}})
    first = build_config(spec, values, "/o", 512, speedups=chosen.model_copy(update={"padding_free": older}))
    assert first["training_args"]["max_length"] is None
    again = retry_config(first, spec, values, max_positions=512)
    assert again["training_args"]["max_length"] == 512  # the default, capped at the model's positions, decided anew


def _job_config(script: str) -> dict[str, Any]:
    line = next(line for line in script.splitlines() if line.startswith("CONFIG: dict = json.loads("))
    namespace: dict[str, Any] = {}
    exec("import json\n" + line, namespace)
    return namespace["CONFIG"]


def test_a_dry_run_on_a_gpu_flavor_shows_the_speedups_it_renders(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    from jobtrail.app import build_service

    publish(hub, "hf_user_write_token", tiny_model, chat_dataset, monkeypatch)
    service = build_service(tmp_path / "home")
    h200 = service.submit(remote_spec(flavor="h200", hyperparameters={"max_steps": 20}), SubmitOptions(dry_run=True))
    assert h200.speedups is not None and h200.speedups.device == "H200 (h200)"
    assert h200.speedups.liger_kernel.on and h200.speedups.fused_adamw.on and h200.speedups.micro_batch.on
    assert not h200.speedups.gradient_checkpointing.on  # the tiny model fits without it
    # 20 steps of the tiny model: flex attention's compile would not pay back.
    assert not h200.speedups.padding_free.on and "would not pay back" in h200.speedups.padding_free.why
    script = Path(h200.script_path).read_text()
    assert LIGER_PINNED in pep723.read_metadata(script)["dependencies"]
    args = _job_config(script)["training_args"]
    assert args["use_liger_kernel"] is True and args["optim"] == "adamw_torch_fused"
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (8, 1)
    assert args["dataloader_num_workers"] == 2 and args["dataloader_persistent_workers"] is True
    assert args["gradient_checkpointing"] is False and _job_config(script)["speedups"] == h200.speedups.model_dump()
    t4 = service.submit(remote_spec(flavor="t4-small", hyperparameters={"max_steps": 20}), SubmitOptions(dry_run=True))
    assert t4.speedups is not None and not t4.speedups.liger_kernel.on
    t4_script = Path(t4.script_path).read_text()
    assert LIGER_PINNED not in pep723.read_metadata(t4_script)["dependencies"]
    assert "use_liger_kernel" not in _job_config(t4_script)["training_args"]
    assert "speedups" in h200.model_dump() and "liger_kernel" in h200.to_markdown()
    # Training long enough: padding-free with flex attention (the job lock's torch and transformers have it), the
    # max_length kept for the job to cut the rows with.
    long = remote_spec(flavor="h200", hyperparameters={"max_steps": 10**6, "max_length": 256})
    flat = service.submit(long, SubmitOptions(dry_run=True))
    assert flat.speedups is not None and flat.speedups.padding_free.on, flat.speedups
    flat_args = _job_config(Path(flat.script_path).read_text())["training_args"]
    assert flat_args["padding_free"] is True and flat_args["max_length"] == 256
    assert flat_args["model_init_kwargs"] == {"attn_implementation": "flex_attention"}


def _job_python(root: Path, extra: dict[str, str]) -> Path:
    """A Python of its own (a venv seeing this one's packages through a .pth), with `extra` distributions
    installed as metadata alone: what preflight asks a job's Python is what it has installed, not its code."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = (venv / "lib").glob("python*/site-packages")
    (site / "parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for name, version in extra.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return venv / "bin" / "python"


def _fake_h100(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi answering as one H100 does, first on PATH (this machine has no GPU)."""
    tools = root / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_a_local_dry_run_on_an_h100_asks_the_jobs_python(tiny_model, chat_dataset, tmp_path, monkeypatch):
    """The local backend runs the job with JOBTRAIL_PYTHON (`python script.py`, no uv): preflight asks that Python
    whether it has liger-kernel and triton, and turns Liger on only then; padding-free where the estimate's
    training is long enough and every row of the local data was measured."""
    from jobtrail.app import build_service

    _fake_h100(tmp_path, monkeypatch)
    python = _job_python(tmp_path, {"liger-kernel": "0.8.5", "triton": "3.6.0"})
    assert probes.job_interpreter("sft", str(python)).packages["liger-kernel"] == "0.8.5"
    assert probes.job_interpreter("sft", str(python)).missing == []  # the speed packages are no requirement
    monkeypatch.setenv("JOBTRAIL_PYTHON", str(python))
    service = build_service(tmp_path / "home")
    long = {"max_steps": 10**7}
    local = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=long)
    planned = service.submit(local, SubmitOptions(dry_run=True))
    chosen = planned.speedups
    assert chosen is not None and chosen.device == "H100 80GB HBM3 (local)", planned.to_markdown()
    assert chosen.liger_kernel.on and "liger-kernel 0.8.5 is importable by the job's Python" in chosen.liger_kernel.why
    assert chosen.padding_free.on, chosen.padding_free.why
    assert "cut to max_length by the job" in chosen.padding_free.why
    args = _job_config(Path(planned.script_path).read_text())["training_args"]
    assert args["use_liger_kernel"] is True and args["padding_free"] is True
    assert args["max_length"] == 512  # TRL's default, capped at the tiny model's positions: the job cuts the rows
    assert args["model_init_kwargs"]["attn_implementation"] == "flex_attention"
    # Without liger-kernel in the job's Python, the same job keeps Liger off and says how to turn it on.
    monkeypatch.setenv("JOBTRAIL_PYTHON", str(_job_python(tmp_path / "bare", {"triton": "3.6.0"})))
    lacking = build_service(tmp_path / "home").submit(local, SubmitOptions(dry_run=True)).speedups
    assert lacking is not None and not lacking.liger_kernel.on and lacking.padding_free.on
    assert "pip install liger-kernel" in lacking.liger_kernel.why


def test_the_jobs_trl_config_takes_what_the_record_sets(tmp_path):
    """scripts/_training.py's build_training_args passes an H100's measures to SFTConfig as they are (on this
    CPU the job's own precision rule still picks fp32: bf16 is the job's to decide)."""
    import trl

    from support.jobs import SCRIPTS, load_script_module

    sys.path.insert(0, str(SCRIPTS))
    try:
        training = load_script_module("_training")
    finally:
        sys.path.remove(str(SCRIPTS))
    config = {"training_args": with_speedups({"max_length": 64}, _choose(H100, micro_batch=FILLED))}
    args = training.build_training_args(trl.SFTConfig, config, tmp_path)
    assert args.use_liger_kernel is True and args.optim == "adamw_torch_fused"
    assert args.gradient_checkpointing is False and args.padding_free is True and args.max_length == 64
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 1)
    assert args.dataloader_num_workers == 2 and args.dataloader_persistent_workers is True
    assert args.use_cpu is True and args.bf16 is False


def test_under_jobtrails_fsdp_the_choice_goes_to_fsdps_activation_checkpointing():
    from jobtrail.templates.configs import fsdp_training_args

    sharded = fsdp_training_args({"learning_rate": 2e-4}, "sft")
    assert sharded["fsdp_config"]["activation_checkpointing"] is True  # TRL's default, as FSDP's
    args = with_speedups(sharded, _choose(H100, micro_batch=FILLED))
    assert args["gradient_checkpointing"] is False and args["fsdp_config"]["activation_checkpointing"] is False
    own = _choose(H100, {"fsdp": "full_shard", "fsdp_config": {"activation_checkpointing": True}}, micro_batch=FILLED)
    assert own.gradient_checkpointing.source == "user" and "gradient_checkpointing" not in _rendered(own)


def test_a_receipt_written_before_these_measures_still_reads():
    old = _choose(H100).model_dump()
    del old["dataloader"], old["step_metrics"]
    read = Speedups(**json.loads(json.dumps(old)))
    assert not read.dataloader.on and "not recorded" in read.dataloader.why


def test_a_local_cpu_job_hears_of_its_attention_before_it_starts(tiny_model, chat_dataset, tmp_path):
    """A caller's padding_free=true on a CPU plans with a warning (the job cuts its rows itself, so max_length
    stays); flex attention on a CPU is refused instead of failing at the job's first step."""
    from jobtrail.app import build_service

    service = build_service(tmp_path / "home")

    def spec(**hyperparameters: Any) -> JobSpec:
        return JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=hyperparameters)

    flat = service.submit(spec(padding_free=True, max_length=32), SubmitOptions(dry_run=True))
    assert flat.speedups is not None and flat.speedups.device == "CPU (local)"
    assert flat.speedups.padding_free.on and flat.speedups.padding_free.source == "user"
    assert [f.severity for f in flat.findings if f.code == "config.padding_free_attention"] == ["warning"]
    args = _job_config(Path(flat.script_path or "").read_text())["training_args"]
    assert args["padding_free"] is True and args["max_length"] == 32 and "model_init_kwargs" not in args
    flex = service.submit(spec(model_init_kwargs={"attn_implementation": "flex_attention"}))
    assert flex.status == "rejected" and flex.job_id is None
    assert [f.code for f in flex.findings if f.severity == "error"] == ["config.flex_attention_cpu"]


def test_padded_batches_on_an_h100_round_their_length_to_few_shapes():
    """SDPA's cuDNN attention builds a graph per sequence length on sm_90 (the H200 profile of issue 29): a padded
    SFT job there pads to multiples of 64; padding-free, other GPUs, a CPU, other attention and the caller's own
    value keep it off."""
    short = _choose(H100, train_s=60.0)  # too short for flex attention's compile: padded
    assert not short.padding_free.on and short.length_buckets.on
    assert _rendered(short)["pad_to_multiple_of"] == speedups.LENGTH_BUCKET
    assert "cuDNN" in short.length_buckets.why and "loss is the same" in short.length_buckets.why
    assert not _choose(H100).length_buckets.on  # an hour: padding-free, nothing to round
    assert "padding-free" in _choose(H100).length_buckets.why
    assert "sm_80" in _choose(A100, train_s=60.0).length_buckets.why
    assert not _choose(CPU, train_s=60.0).length_buckets.on
    eager = _choose(H100, {"model_init_kwargs": {"attn_implementation": "eager"}}, train_s=60.0)
    assert not eager.length_buckets.on and "eager" in eager.length_buckets.why
    own = _choose(H100, {"pad_to_multiple_of": None}, train_s=60.0)
    assert own.length_buckets.source == "user" and "pad_to_multiple_of" not in _rendered(own)
    dpo = speedups.choose("dpo", H100, {}, replace(LONG_QWEN, train_s=60.0))
    assert not dpo.length_buckets.on


def test_the_jobs_trl_config_pads_to_the_bucket(tmp_path):
    import trl

    from support.jobs import SCRIPTS, load_script_module

    sys.path.insert(0, str(SCRIPTS))
    try:
        training = load_script_module("_training")
    finally:
        sys.path.remove(str(SCRIPTS))
    config = {"training_args": with_speedups({"max_length": 64}, _choose(H100, train_s=60.0))}
    args = training.build_training_args(trl.SFTConfig, config, tmp_path)
    assert args.pad_to_multiple_of == speedups.LENGTH_BUCKET and args.padding_free is False
