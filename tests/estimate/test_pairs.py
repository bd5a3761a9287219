"""Methods that train more than one sequence per row, or keep a reference model (issue 29 item 5): DPO and reward
models run chosen and rejected as one batch of twice the rows (TRL 1.16's collators concatenate them), so their
activations and output head hold twice an SFT row's; DPO and KTO score each batch with a frozen reference model,
a second copy of the weights under full fine-tuning and none under PEFT (the base with the adapter off)."""

from __future__ import annotations

from typing import Any

import pytest

from jobtrail.estimate.cost import flops_per_token
from jobtrail.estimate.memory import (
    GB,
    Device,
    MemoryBreakdown,
    Peft,
    activation_total_bytes,
    estimate_memory,
    layer_activation_bytes,
)
from jobtrail.estimate.parallel import per_gpu_memory
from jobtrail.estimate.params import lora_params, model_shape
from jobtrail.methods.registry import method_spec
from jobtrail.models import Launcher
from jobtrail.preflight.plan import estimate_alone
from jobtrail.requests import EstimateRequest
from support.estimates import OFFLINE, QWEN25_05B

SHAPE = model_shape(QWEN25_05B)


def _memory(
    method: str, peft: Peft, *, device: Device = "cuda_bf16", batch: int = 4, **options: Any
) -> MemoryBreakdown:
    """One micro-batch of `batch` rows of 1024 tokens, as estimate_cost sizes `method`."""
    spec = method_spec(method)
    settings: dict[str, Any] = {
        "device": device,
        "peft": peft,
        "trainable_params": SHAPE.params if peft == "none" else lora_params(SHAPE, 16),
        "optimizer": "adamw",
        "seq_len": 1024,
        "batch": batch,
        "gradient_checkpointing": True,
        "head": spec.lm_head,
        "sequences": spec.flops.batch_sequences,
        "reference": spec.reference_model,
        **options,
    }
    return estimate_memory(SHAPE, **settings)


def _ref_forward_layer(batch: int) -> float:
    """One decoder layer's intermediates for the reference forward: adapters off, bf16, 2 × batch rows."""
    return layer_activation_bytes(SHAPE, 2, lora=False) * 2 * batch * 1024 / GB


def test_the_registry_says_which_methods_run_pairs_and_keep_a_reference():
    assert [m for m in ("sft", "dpo", "kto", "reward", "grpo") if method_spec(m).flops.batch_sequences == 2] == [
        "dpo",
        "reward",
    ]
    assert [m for m in ("sft", "dpo", "kto", "reward", "grpo") if method_spec(m).reference_model] == ["dpo", "kto"]
    # GRPO's per_device_train_batch_size already counts its completions: one sequence per row of the batch.
    assert method_spec("grpo").flops.batch_sequences == 1 and method_spec("grpo").flops.sequences > 1


@pytest.mark.parametrize("peft", ["lora", "qlora"])
def test_dpo_activations_and_head_are_twice_sfts_at_the_same_shape(peft):
    sft, dpo = _memory("sft", peft), _memory("dpo", peft)
    # Adapters compute in bf16 over a bf16/NF4 base: no autocast copies of weights, so activations scale with tokens:
    # a pair's are exactly twice a row's (in bytes; the breakdown rounds GB to three places).
    row = activation_total_bytes(SHAPE, "cuda_bf16", peft, 4 * 1024, True)
    assert activation_total_bytes(SHAPE, "cuda_bf16", peft, 2 * 4 * 1024, True) == 2 * row
    assert sft.activations_gb == round(row / GB, 3) and dpo.activations_gb == round(2 * row / GB, 3)
    # Exactly an SFT micro-batch of twice the rows, the output head's hidden states included.
    twice = _memory("sft", peft, batch=8)
    assert (dpo.activations_gb, dpo.logits_gb) == (twice.activations_gb, twice.logits_gb)
    assert dpo.logits_gb > sft.logits_gb
    # No reference model is loaded under PEFT: the base with the adapter switched off scores the batch.
    assert dpo.reference_gb == 0
    assert (dpo.weights_gb, dpo.trainable_gb, dpo.optimizer_gb) == (sft.weights_gb, sft.trainable_gb, sft.optimizer_gb)


def test_full_dpo_loads_a_reference_model_in_fp32_and_autocast_copies_it_on_a_gpu():
    sft, dpo = _memory("sft", "none"), _memory("dpo", "none")
    twice = _memory("sft", "none", batch=8)
    assert (dpo.activations_gb, dpo.logits_gb) == (twice.activations_gb, twice.logits_gb)
    # fp32 weights, the policy's dtype under full fine-tuning, and the bf16 copies autocast caches in its forward:
    # the same copies the policy's matmuls save (every Linear, and the tied output head).
    copies = SHAPE.linear_params * 2 + SHAPE.embedding_params * 2
    assert dpo.reference_gb == pytest.approx(round((SHAPE.params * 4 + copies) / GB, 3), abs=1e-3)
    assert dpo.total_gb == pytest.approx(
        sft.total_gb + dpo.reference_gb + (twice.activations_gb - sft.activations_gb) + dpo.logits_gb - sft.logits_gb,
        abs=3e-3,
    )
    on_cpu = _memory("dpo", "none", device="cpu")
    assert on_cpu.reference_gb == pytest.approx(round(SHAPE.params * 4 / GB, 3), abs=1e-3)  # fp32, no autocast


def test_without_checkpointing_the_reference_forward_adds_one_layer_of_intermediates():
    off = {"gradient_checkpointing": False}
    dpo, twice = _memory("dpo", "lora", **off), _memory("sft", "lora", batch=8, **off)
    assert dpo.activations_gb == pytest.approx(twice.activations_gb + _ref_forward_layer(4), abs=2e-3)
    # With checkpointing the recomputed layer the sum already holds is larger than the reference's, and later.
    assert _memory("dpo", "lora").activations_gb == _memory("sft", "lora", batch=8).activations_gb


def test_kto_trains_one_sequence_but_keeps_a_reference_and_a_reward_model_trains_pairs_without_one():
    sft, kto = _memory("sft", "none"), _memory("kto", "none")
    assert kto.activations_gb == sft.activations_gb and kto.reference_gb > 0
    assert _memory("kto", "lora").reference_gb == 0
    reward, twice = _memory("reward", "none"), _memory("sft", "none", batch=8)
    assert reward.activations_gb == twice.activations_gb and reward.reference_gb == 0
    assert reward.logits_gb == 0  # a score head: one number per sequence
    grpo = _memory("grpo", "lora")
    assert grpo.activations_gb == _memory("sft", "lora").activations_gb  # its batch counts completions


def test_fsdp_shards_the_reference_model_like_the_policys_weights():
    dpo = _memory("dpo", "none")
    sharded = per_gpu_memory(dpo, Launcher(kind="torchrun", num_processes=4, strategy="fsdp"))
    assert sharded.reference_gb == pytest.approx(dpo.reference_gb / 4, abs=1e-3)
    assert sharded.activations_gb == dpo.activations_gb


def _estimate(method: str, peft: str, **options: Any) -> Any:
    ask: dict[str, Any] = dict(
        num_examples=1000,
        avg_tokens=1024,
        max_length=1024,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        gradient_checkpointing=True,
        flavor="a100-large",
    )
    request = EstimateRequest("Qwen/Qwen2.5-0.5B", method=method, peft=peft, **{**ask, **options})
    return estimate_alone(request, config=QWEN25_05B, api=OFFLINE)


def test_estimate_cost_counts_both_sequences_the_reference_and_says_so():
    sft, dpo, lora = _estimate("sft", "none"), _estimate("dpo", "none"), _estimate("dpo", "lora")
    assert dpo.memory.reference_gb > 0 and lora.memory.reference_gb == 0
    assert dpo.memory.total_gb > sft.memory.total_gb + dpo.memory.reference_gb
    markdown = dpo.to_markdown()
    assert "| reference model |" in markdown and "| reference model |" not in lora.to_markdown()
    assert "fp32 copy" in dpo.assumptions["reference_model"]
    assert "adapter switched off" in lora.assumptions["reference_model"]
    assert dpo.assumptions["memory_sequence"].startswith("4 pairs × 2 × 1024 tokens")
    # Time: both sequences train, and the reference forward adds 2N per token to full fine-tuning's 6N (+1/3).
    assert dpo.tokens == 2 * sft.tokens
    n = SHAPE.matmul_params
    kwargs: dict[str, Any] = dict(seq_len=1, peft="none", gradient_checkpointing=False, lora_trainable=0)
    ratio = flops_per_token(SHAPE, method="dpo", **kwargs) / flops_per_token(SHAPE, method="sft", **kwargs)
    assert ratio == pytest.approx(8 / 6, rel=1e-3) and flops_per_token(SHAPE, method="sft", **kwargs) == (
        pytest.approx(6 * n, rel=1e-3)
    )


def test_a_dpo_job_that_fits_as_sft_may_not():
    """Qwen2.5-0.5B full fine-tuning, 4 × 1024 tokens without checkpointing on a 24 GB A10G: the SFT job fits (15.6
    GB); DPO's second copy of the model and its twice as many rows (24.9 GB) do not, as the estimate said they did
    when it counted DPO as SFT; with LoRA (no second copy) DPO fits."""
    ask = dict(flavor="a10g-small", per_device_train_batch_size=4, gradient_checkpointing=False)
    sft, dpo = _estimate("sft", "none", **ask), _estimate("dpo", "none", **ask)
    assert sft.fits["a10g-small"] and not dpo.fits["a10g-small"]
    assert _estimate("dpo", "lora", **ask).fits["a10g-small"]


# bench/estimate_vs_measured.py's CPU shapes as they ran on this project's 2-vCPU VM (TRL 1.16, torch 2.13 CPU, full
# fine-tuning of a 40.5M-parameter Qwen2-shaped model, 256 tokens per sequence, checkpointing, 6 steps, one thread,
# MALLOC_MMAP_THRESHOLD_=65536 so that the job's ru_maxrss follows what it holds): the jobs' peaks in GB. 4 DPO pairs
# held 0.163 GB more than 8 SFT rows: the reference model's 40.5M fp32 weights.
SMALL = {
    "model_type": "qwen2",
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "tie_word_embeddings": True,
}
MEASURED_CPU_GB = {("sft", 4): 2.197, ("sft", 8): 3.307, ("dpo", 4): 3.470}


def test_cpu_peaks_of_real_sft_and_dpo_jobs_are_within_15_percent_and_a_pair_is_two_rows_plus_the_reference():
    small = model_shape(SMALL)
    estimates = {}
    for (method, batch), measured in MEASURED_CPU_GB.items():
        spec = method_spec(method)
        estimates[method, batch] = estimate_memory(
            small,
            device="cpu",
            peft="none",
            trainable_params=small.params,
            optimizer="adamw",
            seq_len=256,
            batch=batch,
            gradient_checkpointing=True,
            head=spec.lm_head,
            sequences=spec.flops.batch_sequences,
            reference=spec.reference_model,
        ).total_gb
        assert estimates[method, batch] / measured == pytest.approx(1.0, abs=0.15)
    measured_pair = MEASURED_CPU_GB["dpo", 4] - MEASURED_CPU_GB["sft", 8]
    assert estimates["dpo", 4] - estimates["sft", 8] == pytest.approx(measured_pair, abs=0.01)
    # Most of a CPU job's peak here is the fused head's torch fallback, which folds whole fp32 tiles at once.
    assert estimate_memory(
        small, device="cpu", peft="none", trainable_params=small.params, optimizer="adamw", seq_len=256, batch=4,
        gradient_checkpointing=True, head="fused",
    ).logits_gb == pytest.approx(1024 * 32000 * (8 * 4 + 1) / GB + (4 + 4) * 512 * 1024 / GB, abs=1e-3)  # fmt: skip
