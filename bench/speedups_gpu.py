"""What preflight's speedups (preflight/speedups.py) change in a training step, measured on one GPU: the same
SFTTrainer run, on the same weights, rows and row order, with each measure on and off.

  padded       TRL's defaults as the job runs them without the measures: rows padded per micro-batch,
               PyTorch SDPA attention, max_length set
  padding-free padding_free=True, max_length=None, attn_implementation="flex_attention": the micro-batch's rows
               flattened into one sequence, attention kept within each row by flex attention's block mask
               (transformers builds it from the position ids TRL's collator writes)
  liger        use_liger_kernel=True (RMSNorm, RoPE and SwiGLU kernels; TRL keeps its own fused LM head)
  both         padding-free and liger together
  workers      both, collated in two DataLoader workers (persistent)

Each variant loads the same saved random-weight model of the shape asked for (full fine-tuning, fp32 master
weights, bf16 autocast, fused AdamW, no gradient checkpointing: what preflight renders on an 80 GB GPU), trains
--steps steps on the same toy rows (lengths uniform in [--min-tokens, --max-tokens]) and logs every step.
Printed per variant: the loss at every step and its largest difference from the padded run (absolute and
relative), the first step's seconds (compilation included), the median seconds and tokens/s of the steps after
--warmup, and the peak GPU memory. Nothing is downloaded: the model, the tokenizer and the rows are made here.

  --rendered    instead: the SFT job jobtrail renders for the same model and rows (a local submit's dry run on
                this machine, jobtrail's own preflight choosing the speedups for it; told it trains 10^6 steps, so
                that padding-free's compilation pays back), run as it is and stopped after --steps step events.
                Printed: the speedups the receipt records, and the job's losses and seconds between step events
  --cpu-smoke   a tiny model on CPU, 4 steps: padded and padding-free with SDPA (flex attention has no backward
                on CPU), or with --rendered the rendered job: keeps the script from rotting; its figures mean nothing

Usage: python bench/speedups_gpu.py [--shape qwen2.5-0.5b|tiny] [--steps N] [--rows N] [--json PATH] [--rendered]
           [--cpu-smoke]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {  # Qwen/Qwen2.5-0.5B's config.json
        "vocab_size": 151936,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
    },
    "tiny": {
        "vocab_size": 1024,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
    },
}
TOKENIZER_VOCAB = 800  # the demo tokenizer's (jobtrail.demo.tinymodel), far below the model's vocabulary
LOW_ID = TOKENIZER_VOCAB // 2  # merged tokens only: no byte or special token among the toy rows'
VARIANTS = {
    "padded": {},
    "padding-free": {"padding_free": True},
    "liger": {"use_liger_kernel": True},
    "both": {"padding_free": True, "use_liger_kernel": True},
    "workers": {
        "padding_free": True,
        "use_liger_kernel": True,
        "dataloader_num_workers": 2,
        "dataloader_persistent_workers": True,
    },
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--min-tokens", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--rendered", action="store_true")
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args()
    if args.cpu_smoke:
        args.shape, args.steps, args.warmup, args.rows, args.max_tokens = "tiny", 4, 1, 32, 64
        args.variants = "padded,padding-free"
    with tempfile.TemporaryDirectory(prefix="jobtrail-speedups-") as tmp:
        model_dir = build_model(Path(tmp), SHAPES[args.shape], cuda=not args.cpu_smoke)
        rows = toy_rows(args.rows, args.min_tokens, args.max_tokens)
        if args.rendered:
            print(json.dumps(rendered(model_dir, rows, args, Path(tmp))), flush=True)
            return 0
        results = {}
        for name in args.variants.split(","):
            results[name] = run(name, VARIANTS[name], model_dir, rows, args, Path(tmp) / name)
            print(json.dumps({"variant": name, **summary(results[name], results.get("padded"))}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def build_model(root: Path, shape: dict[str, Any], *, cuda: bool) -> Path:
    """A random-weight Qwen2 of `shape` with the demo's byte-level BPE tokenizer (what AutoTokenizer loads for a
    qwen2 model), saved in `root`: initialised on the GPU (seconds for 0.5B parameters, where the CPU takes
    minutes)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from jobtrail.demo.tinymodel import _save_tokenizer, _train_tokenizer

    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = Qwen2ForCausalLM(Qwen2Config(**shape))
    path = root / "model"
    model.save_pretrained(path)
    _save_tokenizer(_train_tokenizer(TOKENIZER_VOCAB, seed=0), path, shape["max_position_embeddings"])
    return path


def toy_rows(count: int, shortest: int, longest: int) -> list[list[int]]:
    """Token ids of the tokenizer's ordinary tokens (the first TOKENIZER_VOCAB ids), rows of varied length."""
    generator = random.Random(0)
    return [
        [
            generator.randrange(TOKENIZER_VOCAB // 2, TOKENIZER_VOCAB)
            for _ in range(generator.randint(shortest, longest))
        ]
        for _ in range(count)
    ]


def run(name: str, variant: dict[str, Any], model_dir: Path, rows: list[list[int]], args: Any, out: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    cuda = not args.cpu_smoke
    padding_free = bool(variant.get("padding_free"))
    attention = "flex_attention" if padding_free and cuda else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=attention)
    config = SFTConfig(
        output_dir=str(out),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        learning_rate=2e-5,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=42,
        gradient_checkpointing=False,
        bf16=cuda,
        use_cpu=not cuda,
        optim="adamw_torch_fused" if cuda else "adamw_torch",
        padding_free=padding_free,
        max_length=None if padding_free else args.max_tokens,
        use_liger_kernel=bool(variant.get("use_liger_kernel")),
        dataloader_num_workers=variant.get("dataloader_num_workers", 0),
        dataloader_persistent_workers=bool(variant.get("dataloader_persistent_workers")),
        disable_tqdm=True,
    )
    timer = step_timer(cuda)
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_dict({"input_ids": rows}),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[timer],
    )
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else None
    del trainer, model
    if cuda:
        torch.cuda.empty_cache()
    return {
        "attention": attention,
        "seconds": timer.seconds,
        "losses": timer.losses,
        "tokens": timer.tokens,
        "peak_gb": peak,
        "warmup": args.warmup,
    }


def rendered(model_dir: Path, rows: list[list[int]], args: Any, tmp: Path) -> dict[str, Any]:
    """Render the job through jobtrail (a local dry run), run it, stop it after args.steps step events."""
    from transformers import AutoTokenizer

    from jobtrail.app import build_service
    from jobtrail.models import JobSpec
    from jobtrail.requests import SubmitOptions

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data = tmp / "rows.jsonl"  # the rows as text: about as many tokens again when the job tokenizes them
    data.write_text("".join(json.dumps({"text": tokenizer.decode(row)}) + "\n" for row in rows))
    os.environ["JOBTRAIL_DATA_ROOTS"] = str(tmp)  # the model and rows written above are the job's inputs
    service = build_service(tmp / "home")
    shape = {"max_steps": 10**6, "logging_steps": 1, "save_steps": 10**6, "max_length": 2 * args.max_tokens}
    planned = service.submit(
        JobSpec(method="sft", model=str(model_dir), dataset=str(data), hyperparameters=shape),
        SubmitOptions(dry_run=True),
    )
    assert planned.speedups is not None and planned.script_path, planned.to_markdown()
    for name, item in planned.speedups:
        if name != "device":
            print(f"{name}: {'on' if item.on else 'off'} ({item.source}) {item.why} {item.sets or ''}", flush=True)
    env = {**os.environ, "JOBTRAIL_OUTPUT_DIR": str(tmp / "job-out"), "PYTHONUNBUFFERED": "1"}
    job = subprocess.Popen([sys.executable, planned.script_path], env=env, stdout=subprocess.PIPE, text=True)
    assert job.stdout is not None
    arrivals, losses, tokens, error = [], [], [], None
    for line in job.stdout:
        if not line.startswith("JOBTRAIL "):
            continue
        event = json.loads(line[len("JOBTRAIL ") :])
        if event.get("event") == "termination":
            error = event
            break
        if event.get("event") == "step":
            arrivals.append(time.perf_counter())
            losses.append(event["loss"])
            tokens.append(event.get("tokens"))
            if len(arrivals) >= args.steps:
                break
    job.kill()  # stopped, not ended: its checkpoint and final save are not what is measured
    job.wait(timeout=60)
    seconds = [b - a for a, b in itertools.pairwise(arrivals)][args.warmup :]
    step_tokens = [b - a for a, b in itertools.pairwise(tokens) if a is not None and b is not None]
    step_tokens = step_tokens[args.warmup :]
    return {
        "speedups": {name: item.on for name, item in planned.speedups if name != "device"},
        "steps": len(arrivals),
        "termination": error,
        "losses": [round(loss, 5) for loss in losses],
        "median_step_s": round(statistics.median(seconds), 4) if seconds else None,
        "median_tokens_per_s": round(statistics.median(t / s for t, s in zip(step_tokens, seconds, strict=False)))
        if seconds and step_tokens
        else None,
    }


def summary(result: dict[str, Any], padded: dict[str, Any] | None) -> dict[str, Any]:
    steady = result["seconds"][result["warmup"] :]
    step_tokens = [b - a for a, b in zip([0, *result["tokens"]], result["tokens"], strict=False)][result["warmup"] :]
    rates = [tokens / seconds for tokens, seconds in zip(step_tokens, steady, strict=True) if seconds > 0]
    out = {
        "attention": result["attention"],
        "first_step_s": round(result["seconds"][0], 2),
        "median_step_s": round(statistics.median(steady), 4),
        "median_tokens_per_s": round(statistics.median(rates)),
        "peak_gb": round(result["peak_gb"], 2) if result["peak_gb"] is not None else None,
        "losses": [round(loss, 5) for loss in result["losses"]],
    }
    if padded is not None and padded is not result:
        pairs = list(zip(result["losses"], padded["losses"], strict=True))
        out["max_abs_loss_diff"] = round(max(abs(a - b) for a, b in pairs), 6)
        out["max_rel_loss_diff"] = round(max(abs(a - b) / abs(b) for a, b in pairs), 6)
    return out


def step_timer(cuda: bool) -> Any:
    """A TrainerCallback timing each step and keeping its loss and TRL's num_tokens (the class is made here, where
    transformers is imported)."""
    import torch
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self.losses: list[float] = []
            self.tokens: list[int] = []
            self._start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            self._start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            self.seconds.append(time.perf_counter() - self._start)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))
                self.tokens.append(int(logs["num_tokens"]))

    return Timer()


if __name__ == "__main__":
    sys.exit(main())
