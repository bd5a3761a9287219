# /// script
# requires-python = ">=3.11"
# dependencies = ["torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15"]
# ///
"""jobtrail DPO job: direct preference optimisation (LoRA, QLoRA or full) with TRL's DPOTrainer.

Trains on preference pairs ('chosen' and 'rejected', with or without a 'prompt'). With an
adapter the reference model is the base model with the adapter switched off, so no second copy
of the weights is loaded. Runs as it is from scripts/ or rendered by jobtrail, like sft.py, and
prints the same `JOBTRAIL {...}` events; step events also carry DPO's reward accuracy and margin.
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
    "template": "dpo",
    "template_version": 1,
    "model": "Qwen/Qwen2.5-0.5B-Instruct",
    "dataset": {"source": "trl-lib/ultrafeedback_binarized", "split": "train"},
    "output_dir": "outputs/dpo",
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
STEP_METRICS = ("rewards/accuracies", "rewards/margins")


def detect_format(dataset: Any) -> str:
    return preference_format(dataset, "DPO")


def main() -> None:
    job = start_job(CONFIG, "dpo", TEMPLATE_VERSION)
    with phase("config"):
        from trl import DPOConfig

        args = build_training_args(DPOConfig, CONFIG, job.output_dir)
        peft_config = build_peft_config(CONFIG.get("peft"))
    dataset = prepare_dataset(job, detect_format)
    with phase("model"):
        model, tokenizer = load_model(CONFIG, args)
    resume_path = resume_point(job)

    from trl import DPOTrainer

    callback = make_callback(job, STEP_METRICS)
    with phase("setup"):  # tokenising the pairs, wrapping the model with the adapter
        trainer = DPOTrainer(
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
