# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15",
#   "trackio>=0.43",
# ]
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
from _runtime import run_job
from _training import Method, example_config, preference_format, train

# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict[str, Any] = example_config(
    "kto",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "trl-lib/kto-mix-14k",
    learning_rate=5e-6,
    beta=0.1,
    per_device_train_batch_size=2,
    max_length=512,
)
# --- end jobtrail:config ---


def detect_format(dataset: Any, config: dict[str, Any]) -> str:
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


KTO = Method("kto", "KTO", detect_format)

if __name__ == "__main__":
    run_job(lambda: train(CONFIG, KTO), CONFIG.get("launcher"))
