"""What a training job turns on for speed (issue 15): the pure choice for an H100, a T4, an A10G and this
CPU; the caller's values win; the estimate's micro-batch; the dry run on an HF Jobs GPU flavor shows the
record, the rendered training_args and the header (liger-kernel only when on)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobtrail.estimate import estimate_cost
from jobtrail.estimate.microbatch import FILL, MicroBatch, choose_micro_batch, tunable
from jobtrail.models import Speedups
from jobtrail.preflight import speedups
from jobtrail.preflight.speedups import Target
from jobtrail.templates import pep723
from jobtrail.templates.configs import build_config
from jobtrail.templates.render import LIGER_REQUIREMENT, render_script
from jobtrail.templates.versions import job_lock, pin
from support.estimates import OFFLINE
from support.remote import publish, remote_spec

H100 = Target(flavor="h100", gpu="H100", bf16=True, compute_capability=9.0, installs=True)
A100 = Target(flavor="a100-large", gpu="A100", bf16=True, compute_capability=8.0, installs=True)
T4 = Target(flavor="t4-small", gpu="T4", bf16=False, compute_capability=7.5, installs=True)
A10G = Target(flavor="a10g-large", gpu="A10G", bf16=True, compute_capability=8.6, installs=True)
CPU = Target(flavor="local")
LOCAL_H100 = Target(flavor="local", gpu="H100", bf16=True, compute_capability=9.0, installs=False)

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
ITEMS = ("padding_free", "liger_kernel", "fused_adamw", "bf16", "gradient_checkpointing", "micro_batch")

LIGER_PINNED = pin(LIGER_REQUIREMENT, job_lock())  # as a rendered header lists it


def _choose(target: Target, given: dict[str, Any] | None = None, **kw: Any) -> Speedups:
    return speedups.choose("sft", target, given or {}, family=kw.pop("family", "qwen2"), **kw)


def _rendered(chosen: Speedups) -> dict[str, Any]:
    return speedups.apply({"training_args": {"learning_rate": 2e-4}}, chosen)["training_args"]


def test_an_h100_gets_everything_that_is_safe_there():
    chosen = _choose(H100, micro_batch=FILLED)
    assert chosen.device == "H100 (h100)"
    on = {name for name in ITEMS if getattr(chosen, name).on}
    assert on == {"liger_kernel", "fused_adamw", "bf16", "micro_batch"}  # checkpointing is off: it fits without
    assert (
        chosen.gradient_checkpointing.source == "preflight" and "fits without it" in chosen.gradient_checkpointing.why
    )
    assert chosen.bf16.source == "default"  # the job's own precision rule decides on the GPU it lands on
    assert _rendered(chosen) == {
        "learning_rate": 2e-4,
        "use_liger_kernel": True,
        "optim": "adamw_torch_fused",
        "gradient_checkpointing": False,
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
    }
    # SDPA computes a flattened padding-free batch whole: packing waits for a varlen kernel.
    assert not chosen.padding_free.on and "varlen flash attention" in chosen.padding_free.why
    assert _choose(A100, micro_batch=FILLED).liger_kernel.on


def test_padding_free_packing_comes_with_a_varlen_attention_kernel():
    flash = {"model_init_kwargs": {"attn_implementation": "flash_attention_2"}}
    chosen = _choose(H100, flash)
    assert chosen.padding_free.on and chosen.padding_free.source == "preflight"
    assert _rendered(chosen)["packing"] is True and _rendered(chosen)["packing_strategy"] == "bfd"
    assert _choose(
        H100, {"model_init_kwargs": {"attn_implementation": "kernels-community/flash-attn2"}}
    ).padding_free.on
    assert not _choose(CPU, flash).padding_free.on
    assert not speedups.choose("dpo", H100, flash, family="qwen2").padding_free.on


@pytest.mark.parametrize(("target", "why"), [(T4, "sm_75"), (A10G, "sm_86")])
def test_t4_and_a10g_keep_what_could_fail_off_and_say_why(target, why):
    chosen = _choose(target)
    assert not chosen.liger_kernel.on and why in chosen.liger_kernel.why and "shared memory" in chosen.liger_kernel.why
    assert not chosen.padding_free.on and chosen.padding_free.why
    assert chosen.fused_adamw.on  # any CUDA GPU
    assert "use_liger_kernel" not in _rendered(chosen)
    assert chosen.bf16.on is target.bf16
    if not target.bf16:
        assert "no bf16" in chosen.bf16.why and "fp16" in chosen.bf16.why


def test_t4_keeps_the_split_the_memory_model_was_not_measured_for():
    reason = tunable("cuda_fp16", "sft")
    assert reason and "fp16" in reason
    chosen = _choose(T4, micro_batch_off=reason)
    assert chosen.gradient_checkpointing.on and chosen.gradient_checkpointing.source == "default"
    assert not chosen.micro_batch.on and "fp16" in chosen.micro_batch.why


def test_a_cpu_job_turns_nothing_on():
    chosen = _choose(CPU, micro_batch_off=tunable("cpu", "sft") or "")
    assert chosen.device == "CPU (local)"
    assert not any(getattr(chosen, name).on for name in ITEMS if name != "gradient_checkpointing")
    assert chosen.gradient_checkpointing.on and chosen.gradient_checkpointing.source == "default"  # TRL's, untouched
    assert all(getattr(chosen, name).why for name in ITEMS)
    assert _rendered(chosen) == {"learning_rate": 2e-4}


def test_a_local_gpu_job_installs_nothing_so_liger_stays_off():
    chosen = _choose(LOCAL_H100, micro_batch=FILLED)
    assert not chosen.liger_kernel.on and "installs nothing" in chosen.liger_kernel.why
    assert chosen.fused_adamw.on and chosen.micro_batch.on


def test_liger_only_for_the_families_it_patches():
    assert not _choose(H100, family="gpt2").liger_kernel.on
    assert not _choose(H100, family="gemma3_text", multimodal=True).liger_kernel.on
    assert _choose(H100, family="llama").liger_kernel.on
    assert not speedups.choose("grpo", H100, {}, family="qwen2").liger_kernel.on


def test_the_callers_values_always_win():
    given = {
        "use_liger_kernel": False,
        "optim": "adamw_torch",
        "gradient_checkpointing": True,
        "per_device_train_batch_size": 2,
        "bf16": False,
        "fp16": True,
        "packing": True,
    }
    chosen = _choose(H100, given, micro_batch=FILLED)
    assert all(getattr(chosen, name).source == "user" for name in ITEMS)
    assert [getattr(chosen, name).on for name in ITEMS] == [True, False, False, False, True, True]
    assert _rendered(chosen) == {"learning_rate": 2e-4}  # nothing set over them
    # A liger turned on by the caller on a T4 stays on (and the header gets liger-kernel).
    assert _choose(T4, {"use_liger_kernel": True}).liger_kernel.on
    # A given accumulation alone fixes the split too.
    assert _choose(H100, {"gradient_accumulation_steps": 16}, micro_batch=FILLED).micro_batch.source == "user"


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
        return estimate_cost("m", config=SMOLLM2_17B, api=OFFLINE, flavor=flavor, tune_micro_batch=True, **kw)

    h200, t4 = sft("h200"), sft("t4-medium")
    assert h200.micro_batch is not None and h200.micro_batch.gradient_checkpointing is False
    assert h200.memory.total_gb == h200.micro_batch.total_gb <= FILL * 141
    assert h200.assumptions["gradient_checkpointing"] is False
    assert "Split as submit runs it: per_device_train_batch_size=8" in h200.to_markdown()
    assert "recompute" not in h200.assumptions.get("flops_per_token", "")
    plain = estimate_cost("m", config=SMOLLM2_17B, api=OFFLINE, flavor="h200")
    assert plain.micro_batch is None and plain.assumptions["gradient_checkpointing"] is True
    assert t4.micro_batch is None  # fp16 over fp32 weights: not measured, not tuned
    kept = sft("h200", gradient_checkpointing=True, per_device_train_batch_size=2)
    assert kept.micro_batch is not None and kept.micro_batch.changed == []


# --- the rendered job ----------------------------------------------------------------------------


def test_the_header_lists_liger_kernel_only_when_liger_is_on(tiny_model):
    from jobtrail.models import JobSpec

    spec = JobSpec(method="sft", model=str(tiny_model), dataset="d.jsonl")
    plain = build_config(spec, "/o")
    for chosen, listed in ((_choose(H100), True), (_choose(T4), False)):
        script = render_script("sft", speedups.apply(plain, chosen))
        assert (LIGER_PINNED in pep723.read_metadata(script)["dependencies"]) is listed


def _job_config(script: str) -> dict[str, Any]:
    line = next(line for line in script.splitlines() if line.startswith("CONFIG: dict = json.loads("))
    namespace: dict[str, Any] = {}
    exec("import json\n" + line, namespace)
    return namespace["CONFIG"]


def test_a_dry_run_on_a_gpu_flavor_shows_the_speedups_it_renders(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    from jobtrail.app import build_service

    publish(hub, "hf_user_write_token", tiny_model, chat_dataset, monkeypatch)
    service = build_service(tmp_path / "home")
    h200 = service.submit(remote_spec(flavor="h200", hyperparameters={"max_steps": 20}), dry_run=True)
    assert h200.speedups is not None and h200.speedups.device == "H200 (h200)"
    assert h200.speedups.liger_kernel.on and h200.speedups.fused_adamw.on and h200.speedups.micro_batch.on
    assert not h200.speedups.gradient_checkpointing.on  # the tiny model fits without it
    script = Path(h200.script_path).read_text()
    assert LIGER_PINNED in pep723.read_metadata(script)["dependencies"]
    args = _job_config(script)["training_args"]
    assert args["use_liger_kernel"] is True and args["optim"] == "adamw_torch_fused"
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (8, 1)
    assert args["gradient_checkpointing"] is False and _job_config(script)["speedups"] == h200.speedups.model_dump()
    t4 = service.submit(remote_spec(flavor="t4-small", hyperparameters={"max_steps": 20}), dry_run=True)
    assert t4.speedups is not None and not t4.speedups.liger_kernel.on
    t4_script = Path(t4.script_path).read_text()
    assert LIGER_PINNED not in pep723.read_metadata(t4_script)["dependencies"]
    assert "use_liger_kernel" not in _job_config(t4_script)["training_args"]
    assert "speedups" in h200.model_dump() and "liger_kernel" in h200.to_markdown()


def test_the_jobs_trl_config_takes_what_the_record_sets(tmp_path):
    """scripts/_training.py's build_training_args passes an H100's measures to SFTConfig as they are (on this
    CPU the job's own precision rule still picks fp32: bf16 is the job's to decide)."""
    import sys

    import trl

    from support.jobs import SCRIPTS, load_script_module

    sys.path.insert(0, str(SCRIPTS))
    try:
        training = load_script_module("_training")
    finally:
        sys.path.remove(str(SCRIPTS))
    config = speedups.apply({"training_args": {"max_length": 64}}, _choose(H100, micro_batch=FILLED))
    args = training.build_training_args(trl.SFTConfig, config, tmp_path)
    assert args.use_liger_kernel is True and args.optim == "adamw_torch_fused"
    assert args.gradient_checkpointing is False
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 1)
    assert args.use_cpu is True and args.bf16 is False


def test_under_jobtrails_fsdp_the_choice_goes_to_fsdps_activation_checkpointing():
    from jobtrail.templates.configs import fsdp_training_args

    sharded = {"training_args": fsdp_training_args({"learning_rate": 2e-4}, "sft")}
    assert sharded["training_args"]["fsdp_config"]["activation_checkpointing"] is True  # TRL's default, as FSDP's
    args = speedups.apply(sharded, _choose(H100, micro_batch=FILLED))["training_args"]
    assert args["gradient_checkpointing"] is False and args["fsdp_config"]["activation_checkpointing"] is False
    own = _choose(H100, {"fsdp": "full_shard", "fsdp_config": {"activation_checkpointing": True}}, micro_batch=FILLED)
    assert own.gradient_checkpointing.source == "user" and "gradient_checkpointing" not in _rendered(own)
