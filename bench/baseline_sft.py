"""Plain TRL SFT, the baseline of bench/train_throughput.py: the quick start of TRL's documentation,

    trainer = SFTTrainer(model="Qwen/Qwen3-0.6B", train_dataset=load_dataset("trl-lib/Capybara", split="train"))
    trainer.train()

with TRL's default settings. Only what a like-for-like comparison has to fix is set: the model,
the data, the number of steps, the sequence length and the output directory; logging every step
(logging_steps=1, as the bench has the rendered job do: its per-step times come from the steps' logs);
`--batch` when the bench asks for another batch than TRL's default; `--lora` adds TRL's documented way to
train an adapter (`peft_config=LoraConfig()`, PEFT's defaults); on a machine without CUDA `use_cpu=True`,
without which TRL's default bf16 refuses to start.

The bench runs it through bench/step_hook.py, which clocks the steps (the same callback as the rendered
job's side); nothing here watches the training. Once it ends, one line `BASELINE {json}` reports its
runtime, batch shape, trainable parameters and the peak GPU memory.

Usage: python bench/baseline_sft.py --model M --dataset D --steps N --max-length L --output-dir O [--batch B] [--lora]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULT_PREFIX = "BASELINE "
DATA_FILE_LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def load_rows(dataset: str) -> Any:
    """The training split: a local data file, or a Hub dataset as in TRL's quick start."""
    from datasets import load_dataset

    path = Path(dataset)
    if path.is_file():
        return load_dataset(DATA_FILE_LOADERS[path.suffix], data_files=str(path), split="train")
    return load_dataset(dataset, split="train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--batch", type=int, help="per-device batch (TRL's default when left out)")
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter: peft_config=LoraConfig()")
    args = parser.parse_args()

    import torch
    from trl import SFTConfig, SFTTrainer

    cuda = torch.cuda.is_available()
    settings: dict[str, Any] = {
        "output_dir": args.output_dir,
        "max_steps": args.steps,
        "max_length": args.max_length,
        "logging_steps": 1,
    }
    if args.batch:
        settings["per_device_train_batch_size"] = args.batch
    if not cuda:
        settings["use_cpu"] = True
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig()
    trainer = SFTTrainer(
        model=args.model, args=SFTConfig(**settings), train_dataset=load_rows(args.dataset), peft_config=peft_config
    )
    result = trainer.train()

    model = trainer.model
    report = {
        "train_runtime": result.metrics.get("train_runtime"),
        "train_loss": result.metrics.get("train_loss"),
        "global_step": trainer.state.global_step,
        "rows_per_step": trainer.args.per_device_train_batch_size
        * trainer.args.gradient_accumulation_steps
        * trainer.args.world_size,
        "learning_rate": trainer.args.learning_rate,
        "seed": trainer.args.seed,
        "bf16": trainer.args.bf16,
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "peak_memory_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
    }
    print(RESULT_PREFIX + json.dumps(report, default=str), flush=True)


if __name__ == "__main__":
    main()
