"""Padding-free batching as preflight emits it (preflight/speedups.py) trains the same thing as padded batches: the
rendered job's losses step for step with rows cut to max_length (the job cuts them itself with TRL's truncation,
scripts/sft.py, the same rows, tokens and labels as TRL's padded preparation), and flex attention's per-row block
mask on a flattened batch of the tiny model. On a GPU, bench/speedups_gpu.py measured the same through training
(flex attention has no backward pass on a CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.jobs import JobKit, load_script_module, run_jobs, succeeded

# The tiny chat rows have 31-38 tokens: this cuts about half of them.
MAX_LENGTH = 34


def test_the_rendered_job_learns_the_same_padding_free_and_with_dataloader_workers(kit: JobKit, tmp_path: Path):
    shape = {"max_steps": 4, "per_device_train_batch_size": 4, "save_steps": 100, "learning_rate": 5e-3}
    padded, flat = run_jobs(
        kit.job(tmp_path / "padded", max_length=MAX_LENGTH, **shape),
        # What preflight sets for padding-free (the attention is SDPA here: flex attention trains on a GPU only),
        # with the DataLoader workers it sets on a GPU; max_length as it is (TRL alone refuses it with padding_free).
        kit.job(
            tmp_path / "flat",
            max_length=MAX_LENGTH,
            padding_free=True,
            dataloader_num_workers=2,
            dataloader_persistent_workers=True,
            **shape,
        ),
    )
    losses = [[event["loss"] for event in succeeded(run).named("step")] for run in (padded, flat)]
    assert len(losses[0]) == 4 and len(losses[1]) == 4
    for a, b in zip(*losses, strict=True):
        assert abs(a - b) <= 1e-5 * abs(a), losses
    tokens = [[event["tokens"] for event in run.named("step")] for run in (padded, flat)]
    assert tokens[0] == tokens[1]  # the same rows per step, cut alike, padding never counted


def _prompt_completion_rows() -> list[dict[str, str]]:
    """Rows whose prompt alone fills the 12 tokens cut_rows keeps (TRL drops them: nothing left to train on),
    rows cut inside the completion, and rows cut nowhere."""
    short = [{"prompt": "What comes after two?", "completion": " Three."}]
    long_completion = [{"prompt": "Name a color.", "completion": " red green blue yellow white black " * 3}]
    long_prompt = [{"prompt": "the quick brown fox jumps over the lazy dog " * 3, "completion": " ok"}]
    return (short + long_completion + long_prompt) * 3


@pytest.mark.parametrize("truncation_mode", ["keep_start", "keep_end"])
def test_the_job_cuts_padding_free_rows_as_trl_cuts_padded_ones(tiny_model: Path, tmp_path: Path, truncation_mode):
    """scripts/sft.py's trainer under padding_free=True and max_length prepares exactly the rows TRL's padded
    trainer prepares (input_ids and labels, the eval rows too, fully masked rows dropped), while TRL itself gets
    max_length=None, the only way TRL 1.16 flattens without packing."""
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sft = load_script_module("sft")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    rows = Dataset.from_list(_prompt_completion_rows())

    def prepared(trainer_class: type, padding_free: bool) -> tuple[Any, Any]:
        args = trl.SFTConfig(
            output_dir=str(tmp_path / f"{padding_free}"),
            max_length=12,
            truncation_mode=truncation_mode,
            padding_free=padding_free,
            use_cpu=True,
            report_to=[],
        )
        trainer = trainer_class(
            model=model, args=args, train_dataset=rows, eval_dataset=rows, processing_class=tokenizer
        )
        assert trainer.args.max_length == (None if padding_free else 12)
        assert trainer.data_collator.padding_free is padding_free
        return trainer.train_dataset.to_list(), trainer.eval_dataset.to_list()

    padded = prepared(trl.SFTTrainer, padding_free=False)
    flat = prepared(sft.cutting_rows_itself(trl.SFTTrainer), padding_free=True)
    assert flat == padded
    train = padded[0]
    assert max(len(row["input_ids"]) for row in train) == 12 and min(len(row["input_ids"]) for row in train) < 12
    assert all(any(label != -100 for label in row["labels"]) for row in train)
    assert len(train) == (6 if truncation_mode == "keep_start" else 9)  # keep_start drops the prompt-only rows
    with pytest.raises(ValueError, match="max_length"):  # what the job would meet without cutting the rows itself
        trl.SFTTrainer(
            model=model,
            args=trl.SFTConfig(output_dir=str(tmp_path / "trl"), max_length=12, padding_free=True, use_cpu=True),
            train_dataset=rows,
            processing_class=tokenizer,
        )


FLEX_FORWARD = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

model_dir = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
texts = ["a b c", "the quick brown fox jumps over the lazy dog " * 6, "hello", "one two three four five six seven"]
rows = [{"input_ids": tokenizer(t)["input_ids"]} for t in texts]
losses = {}
for name, attention, padding_free in (("padded", "sdpa", False), ("flex", "flex_attention", True)):
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attention).eval()
    batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=padding_free)(rows)
    with torch.no_grad():
        losses[name] = model(**batch, use_cache=False).loss.item()
    losses[name + "_shape"] = list(batch["input_ids"].shape)
# Rows alone, one at a time: what neither batch may differ from.
model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa").eval()
total = count = 0
with torch.no_grad():
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        total += model(input_ids=ids, labels=ids, use_cache=False).loss.item() * (ids.shape[1] - 1)
        count += ids.shape[1] - 1
losses["alone"] = total / count
print(json.dumps(losses))
"""


def test_flex_attention_keeps_each_flattened_row_to_itself(tiny_model: Path, job_env: dict[str, str]):
    """transformers builds flex attention's block mask from the position ids TRL's padding-free collator writes:
    the flattened batch's loss is the padded batch's and the rows' alone (forward only: CPU flex attention has
    no backward). It compiles the kernel, as the job's first step does (tens of seconds on this CPU)."""
    done = subprocess.run(
        [sys.executable, "-c", FLEX_FORWARD, str(tiny_model)],
        env={**job_env, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    losses = json.loads(done.stdout.strip().splitlines()[-1])
    assert losses["flex_shape"][0] == 1 and losses["padded_shape"][0] == 4  # flattened, and padded
    assert abs(losses["flex"] - losses["padded"]) <= 1e-5 * losses["padded"], losses
    assert abs(losses["flex"] - losses["alone"]) <= 1e-5 * losses["alone"], losses
