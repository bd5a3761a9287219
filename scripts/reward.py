# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15",
#   "trackio>=0.43",
# ]
# ///
"""jobtrail reward-model job: a scalar reward head trained on preference pairs with TRL's RewardTrainer.

The model is the base model with a sequence-classification head of one output (the reward
score); with LoRA or QLoRA the adapter's task type is SEQ_CLS, so PEFT trains and saves that new
head along with the adapter. Trains on preference pairs ('chosen' and 'rejected', with or without
a 'prompt'). Runs as it is from scripts/ or rendered by jobtrail, like sft.py, and prints the same
`JOBTRAIL {...}` events; step events also carry the pairwise accuracy and margin.
"""

import json  # noqa: F401 - the rendered config block is `CONFIG: dict = json.loads(...)`
from typing import Any

# --- jobtrail:runtime ---
from _runtime import run_job
from _training import Method, example_config, preference_format, train

# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict[str, Any] = example_config(
    "reward",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "trl-lib/ultrafeedback_binarized",
    learning_rate=1e-4,
    per_device_train_batch_size=2,
    max_length=512,
)
# --- end jobtrail:config ---

REWARD = Method("reward", "Reward", lambda rows, config: preference_format(rows, "reward modelling"), reward_head=True)

if __name__ == "__main__":
    run_job(lambda: train(CONFIG, REWARD), CONFIG.get("launcher"))
