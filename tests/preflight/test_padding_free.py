"""Padding-free batching as preflight emits it (preflight/speedups.py) trains the same thing as padded batches: the
rendered job's losses step for step, and flex attention's per-row block mask on a flattened batch of the tiny
model. On a GPU, bench/speedups_gpu.py measured the same through training (flex attention has no backward pass on
a CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.jobs import JobKit, run_jobs, succeeded

# Long enough that no chat row of the tiny data is cut in the padded run: the padding-free one cuts none.
MAX_LENGTH = 512


def test_the_rendered_job_learns_the_same_padding_free_and_with_dataloader_workers(kit: JobKit, tmp_path: Path):
    shape = {"max_steps": 4, "per_device_train_batch_size": 4, "save_steps": 100, "learning_rate": 5e-3}
    padded, flat = run_jobs(
        kit.job(tmp_path / "padded", max_length=MAX_LENGTH, **shape),
        # What preflight sets for padding-free (the attention is SDPA here: flex attention trains on a GPU only),
        # with the DataLoader workers it sets on a GPU.
        kit.job(
            tmp_path / "flat",
            max_length=None,
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
    assert tokens[0] == tokens[1]  # the same rows per step, padding never counted


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
