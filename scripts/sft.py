# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15",
#   "trackio>=0.43",
# ]
# ///
"""jobtrail SFT job: supervised fine-tuning (LoRA, QLoRA or full) with TRL's SFTTrainer.

Runs as it is from scripts/ (`python scripts/sft.py` trains the example CONFIG below), or as a
script rendered by jobtrail, where the runtime (_runtime.py, _training.py) and the job's CONFIG
are inlined. It prints `JOBTRAIL {...}` event lines (start, environment, data_manifest, resume,
step, checkpoint, artifact, metrics, termination) from which the server rebuilds the receipt.

Everything but the data formats is the shared `train` of _training.py. Heavy packages are
imported there inside functions, after the environment event, so that a missing or broken one
ends the job with a `dependency_error` termination event instead of a bare crash.
"""

import copy
import json  # noqa: F401 - the rendered config block is `CONFIG: dict = json.loads(...)`
from typing import Any

# --- jobtrail:runtime ---
from _runtime import run_job
from _training import Method, example_config, train

# --- end jobtrail:runtime ---

# --- jobtrail:config ---
CONFIG: dict[str, Any] = example_config(
    "sft", "Qwen/Qwen2.5-0.5B", "trl-lib/Capybara", learning_rate=2e-4, per_device_train_batch_size=2, max_length=512
)
# --- end jobtrail:config ---


def detect_format(dataset: Any, config: dict[str, Any]) -> str:
    """Which SFT format the rows are in; a clear bad_input error if none fits."""
    columns = set(dataset.column_names)
    text_field = (config.get("training_args") or {}).get("dataset_text_field", "text")  # TRL's default
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


def cutting_rows_itself(trainer_class: type) -> type:
    """TRL's SFTTrainer, cutting the rows to max_length itself under padding-free batching without packing.

    TRL 1.16 refuses padding_free=True with a max_length there (its collator flattens the rows whole, so nothing
    would cut them): TRL is given max_length=None, and its own dataset preparation runs with the job's max_length,
    so its truncation (truncation_mode, and the rows left with no trained token dropped) makes the same rows,
    tokens and labels a padded run trains, the eval rows as well."""

    class SFTTrainer(trainer_class):  # type: ignore[misc]  # TRL's class, known once the job runs
        def __init__(self, *, args: Any, **kwargs: Any) -> None:
            self.rows_cut_at = args.max_length if args.padding_free and not args.packing else None
            if self.rows_cut_at is not None:
                args = copy.copy(args)  # not dataclasses.replace: TrainingArguments' __post_init__ runs once
                args.max_length = None
            super().__init__(args=args, **kwargs)

        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, *rest: Any) -> Any:
            if self.rows_cut_at is not None:
                args = copy.copy(args)
                args.max_length = self.rows_cut_at
            return super()._prepare_dataset(dataset, processing_class, args, *rest)

    return SFTTrainer


SFT = Method("sft", "SFT", detect_format, token_loss=True, trainer_class=cutting_rows_itself)

if __name__ == "__main__":
    run_job(lambda: train(CONFIG, SFT), CONFIG.get("launcher"))
