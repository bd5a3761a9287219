# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15",
#   "trackio>=0.43",
# ]
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
from _runtime import run_job
from _training import Method, example_config, preference_format, train

# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict[str, Any] = example_config(
    "dpo",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "trl-lib/ultrafeedback_binarized",
    learning_rate=5e-6,
    beta=0.1,
    per_device_train_batch_size=2,
    max_length=512,
)
# --- end jobtrail:config ---

DPO = Method("dpo", "DPO", lambda rows, config: preference_format(rows, "DPO"))

if __name__ == "__main__":
    run_job(lambda: train(CONFIG, DPO), CONFIG.get("launcher"))
