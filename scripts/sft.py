# /// script
# requires-python = ">=3.11"
# dependencies = ["torch>=2.6", "transformers>=5.23", "trl>=1.16", "peft>=0.21", "datasets>=5.2", "accelerate>=1.15"]
# ///
"""jobtrail SFT job: supervised fine-tuning (LoRA or full) with TRL's SFTTrainer.

Runs as it is from scripts/ (`python scripts/sft.py` trains the example CONFIG below), or as a
script rendered by jobtrail, where the runtime and the job's CONFIG are inlined. It prints
`JOBTRAIL {...}` event lines (start, environment, data_manifest, resume, step, checkpoint,
artifact, metrics, termination) from which the server rebuilds the attempt's receipt.

Heavy packages are imported inside functions, after the environment event, so that a missing
or broken one ends the job with a `dependency_error` termination event instead of a bare crash.
"""

import json  # the rendered config block is `CONFIG: dict = json.loads(...)`
import os
import shutil
from pathlib import Path
from typing import Any

# --- jobtrail:runtime ---
from _runtime import (
    apply_mapping,
    apply_retention,
    begin_checkpoint,
    commit_checkpoint,
    emit,
    emit_environment,
    fetch_remote_checkpoint,
    find_resume_target,
    mapping_problems,
    mapping_source_columns,
    phase,
    push_checkpoint,
    push_final,
    run_job,
    sha256_file,
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
FILE_LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
FINAL_DIR = "final"


# --- data ------------------------------------------------------------------------------------


def load_train_dataset(spec: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Load the training split and describe it for the `data_manifest` event."""
    import datasets

    source, split = str(spec["source"]), spec.get("split") or "train"
    path = Path(source).expanduser()
    if path.suffix.lower() in FILE_LOADERS and not path.is_file():
        raise FileNotFoundError(f"dataset file not found: {source}")
    if path.is_file():
        loader = FILE_LOADERS.get(path.suffix.lower())
        if loader is None:
            supported = ", ".join(sorted(FILE_LOADERS))
            raise ValueError(f"unsupported dataset file type {path.suffix!r}; use one of {supported}")
        # A single data file always loads as the "train" split.
        dataset = datasets.load_dataset(loader, data_files=str(path), split="train")
        origin = {"kind": "file", "sha256": sha256_file(path), "split": "train"}
    else:
        revision = spec.get("revision")
        dataset = datasets.load_dataset(source, split=split, revision=revision)
        kind = "dir" if path.is_dir() else "hub"
        origin = {"kind": kind, "revision": revision or _hub_revision(source, kind), "split": split}
    manifest = {
        "source": source,
        **origin,
        "rows": len(dataset),
        "columns": list(dataset.column_names),
        "fingerprint": getattr(dataset, "_fingerprint", None),
    }
    return dataset, manifest


def map_dataset(dataset: Any, mapping: dict[str, Any] | None) -> Any:
    """Apply the job's dataset_mapping (declarative; see _runtime.apply_mapping) to every row."""
    if not mapping:
        return dataset
    problems = mapping_problems(mapping)
    if problems:
        raise ValueError("invalid dataset_mapping: " + "; ".join(problems))
    consumed = mapping_source_columns(mapping)
    missing = [name for name in consumed if name not in dataset.column_names]
    if missing:
        raise ValueError(f"dataset_mapping needs column(s) {missing}; the dataset has {dataset.column_names}")
    # The consumed columns go; apply_mapping returns what replaces them (and the rest unchanged).
    return dataset.map(lambda row: apply_mapping(row, mapping), remove_columns=consumed)


def detect_format(dataset: Any, text_field: str) -> str:
    """Which SFT format the rows are in; a clear bad_input error if none fits."""
    columns = set(dataset.column_names)
    if len(dataset) == 0:
        raise ValueError("dataset has no rows")
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


def _hub_revision(repo_id: str, kind: str) -> str | None:
    """The dataset's commit sha on the Hub, when it can be asked; None otherwise."""
    if kind != "hub":
        return None
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(repo_id).sha
    except Exception:  # offline, private, or an old hub client: the manifest says "unknown"
        return None


# --- config ------------------------------------------------------------------------------------


def precision_defaults() -> dict[str, Any]:
    """bf16 where the GPU has it, fp16 on older GPUs, fp32 on CPU (TRL's bf16 default raises there)."""
    import torch

    if torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return {"bf16": True, "fp16": False}
        return {"bf16": False, "fp16": True}
    return {"use_cpu": True, "bf16": False, "fp16": False}


def build_training_args(config: dict[str, Any], output_dir: Path) -> Any:
    """SFTConfig from CONFIG: explicit training_args win, except what the runtime must own."""
    from trl import SFTConfig

    explicit = dict(config.get("training_args") or {})
    explicit.pop("model_init_kwargs", None)  # used when loading the model (load_model)
    precision = precision_defaults()
    if {"bf16", "fp16"} & set(explicit):  # the caller chose a precision: add no second one
        precision = {k: v for k, v in precision.items() if k not in ("bf16", "fp16")}
    kwargs: dict[str, Any] = {
        **precision,
        "report_to": "none",
        "disable_tqdm": True,  # the step events are the progress report; bars only clutter logs
        "include_num_input_tokens_seen": "non_padding",  # tokens for step events and tokens/s
        **explicit,
        # Owned by the runtime: retention follows the commit protocol (Trainer's own rotation
        # could delete the newest committed checkpoint), and the output dir is the job's.
        "output_dir": str(output_dir),
        "save_total_limit": None,
    }
    # No Trainer push: its upload would race the commit protocol (the marker must follow the
    # files), so the runtime pushes each committed checkpoint itself (push_checkpoint).
    return SFTConfig(**kwargs)


def build_peft_config(spec: dict[str, Any] | None) -> Any:
    """A LoRA config for method "lora", None (full fine-tuning) for "none"."""
    spec = spec or {"method": "none"}
    method = spec.get("method", "none")
    if method == "none":
        return None
    if method != "lora":
        raise ValueError(f"unknown peft method {method!r}; use 'lora' or 'none'")
    from peft import LoraConfig

    return LoraConfig(
        task_type="CAUSAL_LM",
        r=spec.get("r", 16),
        lora_alpha=spec.get("alpha", 32),
        lora_dropout=spec.get("dropout", 0.05),
        target_modules=spec.get("target_modules", "all-linear"),
    )


def load_model(config: dict[str, Any], args: Any) -> tuple[Any, Any]:
    """Model and tokenizer, loaded here (not by SFTTrainer) so failures carry the 'model' phase."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    init_kwargs = dict((config.get("training_args") or {}).get("model_init_kwargs") or {})
    # A LoRA base can live in bf16 (only the adapter trains); full fine-tuning keeps fp32
    # master weights and lets autocast do the bf16 math.
    is_lora = (config.get("peft") or {}).get("method") == "lora"
    init_kwargs.setdefault("dtype", torch.bfloat16 if (args.bf16 and is_lora) else torch.float32)
    model = AutoModelForCausalLM.from_pretrained(config["model"], **init_kwargs)
    tokenizer = AutoTokenizer.from_pretrained(config["model"], revision=init_kwargs.get("revision"))
    return model, tokenizer


# --- training ----------------------------------------------------------------------------------


def make_callback(
    output_dir: Path, run_id: str, attempt_id: str, retention: int | None, push_to: str | None
) -> Any:
    """A TrainerCallback that turns Trainer events into jobtrail events and commits checkpoints."""
    from transformers import TrainerCallback

    class JobtrailCallback(TrainerCallback):
        tokens_at_start = 0  # tokens seen before this attempt (a resumed state carries them)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.tokens_at_start = state.num_input_tokens_seen or 0

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # DefaultFlowCallback (which runs first) has decided; the save follows this hook.
            if control.should_save and state.is_world_process_zero:
                begin_checkpoint(output_dir / f"checkpoint-{state.global_step}", state.global_step)

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # Called after Trainer wrote weights, optimizer, scheduler, RNG and trainer state.
            ckpt = output_dir / f"checkpoint-{state.global_step}"
            if ckpt.is_dir() and state.is_world_process_zero:  # one committer per job
                commit_checkpoint(ckpt, state.global_step, run_id, attempt_id)
                if push_to:
                    with phase("push"):
                        push_checkpoint(ckpt, push_to, state.global_step)
                apply_retention(output_dir, retention, state.global_step)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any
        ) -> None:
            # Eval logs and the final summary are not steps; other ranks would repeat rank 0.
            if not logs or "loss" not in logs or not state.is_world_process_zero:
                return
            emit(
                "step",
                step=state.global_step,
                loss=logs["loss"],
                learning_rate=logs.get("learning_rate"),
                grad_norm=logs.get("grad_norm"),
                epoch=logs.get("epoch"),
                tokens=state.num_input_tokens_seen or None,
            )

    return JobtrailCallback()


def save_final(trainer: Any, output_dir: Path, run_id: str, attempt_id: str) -> Path:
    """Write the final model (or adapter) + tokenizer to output_dir/final and commit it."""
    final = output_dir / FINAL_DIR
    step = trainer.state.global_step
    is_main = trainer.is_world_process_zero()
    if is_main:
        if final.exists():  # an earlier attempt's final model: this attempt's replaces it
            shutil.rmtree(final)
        begin_checkpoint(final, step)
    trainer.save_model(str(final))  # every rank (sharded saves); writes the tokenizer too
    if is_main:
        commit_checkpoint(final, step, run_id, attempt_id)
        emit("artifact", kind="final_model", path=str(final))
    return final


def peak_memory_bytes() -> int | None:
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux
    except (ImportError, OSError):
        return None


def emit_metrics(train_metrics: dict[str, Any], state: Any, tokens_at_start: int) -> None:
    """The `metrics` event; throughput counts this attempt only (train() reports no tokens/s)."""
    runtime = train_metrics.get("train_runtime")
    tokens = (state.num_input_tokens_seen or 0) - tokens_at_start
    emit(
        "metrics",
        train_runtime=runtime,
        train_loss=train_metrics.get("train_loss"),
        global_step=state.global_step,
        train_samples_per_second=train_metrics.get("train_samples_per_second"),
        tokens_per_second=round(tokens / runtime, 3) if tokens > 0 and runtime else None,
        peak_memory_bytes=peak_memory_bytes(),
    )


def main() -> None:
    run_id = os.environ.get("JOBTRAIL_RUN_ID", "local")
    attempt_id = os.environ.get("JOBTRAIL_ATTEMPT_ID", "local-1")
    emit("start", template=CONFIG.get("template", "sft"),
         template_version=CONFIG.get("template_version", TEMPLATE_VERSION),
         run_id=run_id, attempt_id=attempt_id)
    emit_environment()
    output_dir = Path(CONFIG["output_dir"]).expanduser().resolve()
    output_dir.mkdir(parents=True, exist_ok=True)

    with phase("config"):
        args = build_training_args(CONFIG, output_dir)
        peft_config = build_peft_config(CONFIG.get("peft"))
    with phase("data"):
        dataset, manifest = load_train_dataset(CONFIG["dataset"])
        manifest["mapping"] = CONFIG["dataset"].get("mapping")
        dataset = map_dataset(dataset, manifest["mapping"])
        manifest["format"] = detect_format(dataset, args.dataset_text_field)
    emit("data_manifest", **manifest)
    with phase("model"):
        model, tokenizer = load_model(CONFIG, args)

    push_to = CONFIG.get("hub_model_id") if CONFIG.get("push_to_hub") else None
    if push_to:  # a fresh remote machine: the last committed checkpoint lives on the Hub
        with phase("resume"):
            fetch_remote_checkpoint(push_to, output_dir)
    resume_path, resume_step, skipped = find_resume_target(output_dir)
    emit("resume", checkpoint=resume_path, step=resume_step, skipped=skipped)

    from trl import SFTTrainer

    callback = make_callback(output_dir, run_id, attempt_id, CONFIG.get("checkpoint_retention"), push_to)
    with phase("setup"):  # tokenising the dataset, wrapping the model with the adapter
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[callback],
        )
    with phase("train"):
        result = trainer.train(resume_from_checkpoint=resume_path)
    save_final(trainer, output_dir, run_id, attempt_id)
    emit_metrics(result.metrics, trainer.state, callback.tokens_at_start)
    if push_to:
        with phase("push"):
            push_final(output_dir / FINAL_DIR, push_to)


if __name__ == "__main__":
    run_job(main)
