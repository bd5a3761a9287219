# /// script
# requires-python = ">=3.11"
# dependencies = ["torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15"]
# ///
"""jobtrail SFT job: supervised fine-tuning (LoRA, QLoRA or full) with TRL's SFTTrainer.

Runs as it is from scripts/ (`python scripts/sft.py` trains the example CONFIG below), or as a
script rendered by jobtrail, where the runtime (_runtime.py, _training.py) and the job's CONFIG
are inlined. It prints `JOBTRAIL {...}` event lines (start, environment, data_manifest, resume,
step, checkpoint, artifact, metrics, termination) from which the server rebuilds the receipt.

Heavy packages are imported inside functions, after the environment event, so that a missing
or broken one ends the job with a `dependency_error` termination event instead of a bare crash.
"""

import json  # noqa: F401 - the rendered config block is `CONFIG: dict = json.loads(...)`
from typing import Any

# --- jobtrail:runtime ---
from _runtime import phase, run_job
from _training import (
    build_peft_config,
    build_training_args,
    load_model,
    make_callback,
    prepare_dataset,
    resume_point,
    start_job,
    train_and_finish,
)
# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict = {
    "template": "sft",
    "template_version": 1,
    "model": "Qwen/Qwen2.5-0.5B",
    "dataset": {"source": "trl-lib/Capybara", "split": "train"},
    "output_dir": "outputs/sft",
    "peft": {"method": "lora", "r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"},
    "training_args": {
        "max_steps": 20,
        "learning_rate": 2e-4,
        "per_device_train_batch_size": 2,
        "save_steps": 10,
        "logging_steps": 1,
        "max_length": 512,
        "seed": 42,
    },
    "checkpoint_retention": 2,
    "push_to_hub": False,
    "hub_model_id": None,
}
# --- end jobtrail:config ---

TEMPLATE_VERSION = 1


def detect_format(dataset: Any, text_field: str) -> str:
    """Which SFT format the rows are in; a clear bad_input error if none fits."""
    columns = set(dataset.column_names)
    if "messages" in columns:
        first = dataset[0]["messages"]
        if not isinstance(first, list) or not all(isinstance(m, dict) and "role" in m for m in first):
            raise ValueError("dataset column 'messages' must hold lists of {role, content} dicts")
        return "messages"
    if {"prompt", "completion"} <= columns:
        return "prompt_completion"
    if text_field in columns:
        return "text"
    raise ValueError(
        f"dataset columns {sorted(columns)} fit no SFT format: need 'messages', "
        f"'prompt' + 'completion', or '{text_field}'"
    )


def main() -> None:
    job = start_job(CONFIG, "sft", TEMPLATE_VERSION)
    with phase("config"):
        from trl import SFTConfig

        args = build_training_args(SFTConfig, CONFIG, job.output_dir)
        peft_config = build_peft_config(CONFIG.get("peft"))
    dataset = prepare_dataset(job, lambda rows: detect_format(rows, args.dataset_text_field))
    with phase("model"):
        model, tokenizer = load_model(CONFIG, args)
    resume_path = resume_point(job)

    from trl import SFTTrainer

    callback = make_callback(job)
    with phase("setup"):  # tokenising the dataset, wrapping the model with the adapter
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[callback],
        )
    train_and_finish(job, trainer, callback, resume_path)


if __name__ == "__main__":
    run_job(main)
