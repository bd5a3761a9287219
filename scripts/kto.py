# /// script
# requires-python = ">=3.11"
# dependencies = ["torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15"]
# ///
"""jobtrail KTO job: Kahneman-Tversky optimisation (LoRA, QLoRA or full) with TRL's KTOTrainer.

Trains on unpaired preference rows ('prompt', 'completion' and a boolean 'label': true for a
desirable completion, false for an undesirable one), or on preference pairs, which KTOTrainer
splits into one desirable and one undesirable row each. Runs as it is from scripts/ or rendered
by jobtrail, like sft.py, and prints the same `JOBTRAIL {...}` events; step events also carry
KTO's KL estimate.
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
    preference_format,
    prepare_dataset,
    resume_point,
    start_job,
    train_and_finish,
)
# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict = {
    "template": "kto",
    "template_version": 1,
    "model": "Qwen/Qwen2.5-0.5B-Instruct",
    "dataset": {"source": "trl-lib/kto-mix-14k", "split": "train"},
    "output_dir": "outputs/kto",
    "peft": {"method": "lora", "r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"},
    "training_args": {
        "max_steps": 20,
        "learning_rate": 5e-6,
        "beta": 0.1,
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
STEP_METRICS = ("kl",)


def detect_format(dataset: Any) -> str:
    """Unpaired rows with a boolean label, or pairs; a clear bad_input error otherwise."""
    columns = set(dataset.column_names)
    if {"prompt", "completion", "label"} <= columns:
        labels = dataset["label"]
        bad = next((i for i, value in enumerate(labels) if not isinstance(value, bool)), None)
        if bad is not None:  # 0/1 or "yes" would be read as a class index or a string, not a verdict
            raise ValueError(
                f"dataset column 'label' must be true or false in every row; row {bad + 1} has {labels[bad]!r}"
            )
        return "unpaired_preference"
    if {"chosen", "rejected"} <= columns:
        return preference_format(dataset, "KTO")
    raise ValueError(
        f"dataset columns {sorted(columns)} fit no KTO format: need 'prompt', 'completion' and a boolean "
        "'label', or 'chosen' and 'rejected' pairs"
    )


def main() -> None:
    job = start_job(CONFIG, "kto", TEMPLATE_VERSION)
    with phase("config"):
        from trl import KTOConfig

        args = build_training_args(KTOConfig, CONFIG, job.output_dir)
        peft_config = build_peft_config(CONFIG.get("peft"))
    dataset = prepare_dataset(job, detect_format)
    with phase("model"):
        model, tokenizer = load_model(CONFIG, args)
    resume_path = resume_point(job)

    from trl import KTOTrainer

    callback = make_callback(job, STEP_METRICS)
    with phase("setup"):  # tokenising the rows, wrapping the model with the adapter
        trainer = KTOTrainer(
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
