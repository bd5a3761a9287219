"""jobtrail job-side training runtime, shared by every training template (sft, dpo, grpo, reward, kto).

A template declares only what differs per method, as a `Method`: its TRL config and trainer
classes, how it recognises its data formats, method inputs such as GRPO's reward functions, and
what its step metrics must not show; `train(CONFIG, method)` does the rest, the same way for every
method: the job's start events, loading and mapping the data, precision and LoRA/QLoRA settings,
loading the model (causal LM or a reward head), the callback that turns Trainer events into
jobtrail events and commits checkpoints, resume, the final model, the metrics event and the Hub push.

render.py inlines this file after scripts/_runtime.py (whose names it uses) into every rendered
script that imports it; the `jobtrail:runtime` block below is dropped there. Like _runtime.py it
is standard-library only at import time and has no `from __future__` import: heavy packages are
imported inside functions, after the environment event, so a missing one ends the job with a
`dependency_error` termination event rather than a bare crash.
"""

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --- jobtrail:runtime ---
from _mapping import apply_mapping, mapping_problems, mapping_source_columns
from _metrics import as_float32
from _model_card import CARD_NAME, trained_model_card
from _runtime import (
    COMMITS,
    announce_phase,
    apply_retention,
    barrier,
    begin_checkpoint,
    checkpoint_step,
    commit_checkpoint,
    emit,
    emit_environment,
    fetch_remote_checkpoint,
    find_resume_target,
    job_output_dir,
    package_version,
    phase,
    process_rank,
    push_checkpoint,
    push_final,
    setup_done,
    sha256_file,
    verify_checkpoint,
    withdraw_checkpoint,
)
from _tracking import make_trackio_callback, split_report_to
from _watch import (
    SHARE_MIN_LOGS,
    STALL_MINUTES,
    NothingTrainableError,
    RunWatch,
    TrainingDivergedError,
    Watchdog,
    weights_finite,
)

# --- end jobtrail:runtime ---

FILE_LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
FINAL_DIR = "final"
PEFT_METHODS = ("lora", "qlora", "none")
TRAINING_TEMPLATE_VERSION = 1  # the start event's, for a CONFIG that names none
# A step event's own fields: a log's num_input_tokens_seen is the event's `tokens` (the trainer's count).
STEP_LOG_FIELDS = ("loss", "learning_rate", "grad_norm", "epoch", "num_input_tokens_seen")
EVAL_MAX_ROWS = 500  # an eval_dataset's rows scored every eval_steps (the base/final evaluations take their own)


# --- the method ----------------------------------------------------------------------------------


def no_trainer_inputs(config: dict[str, Any]) -> dict[str, Any]:
    return {}


def no_step_alerts(steps: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    return []


def same_trainer(trainer_class: type) -> type:
    return trainer_class


@dataclass(frozen=True)
class Method:
    """What one training method brings to `train`; everything else is the same for every method."""

    name: str  # the template's name (the start event's, for a CONFIG that names none)
    # TRL names the method's classes <trl_name>Config and <trl_name>Trainer (e.g. SFTConfig,
    # SFTTrainer): imported from trl once the job runs.
    trl_name: str
    # (mapped dataset, CONFIG) → the name of the rows' format, or a ValueError saying which columns
    # the method needs (a bad_input termination: it runs in the data phase).
    detect_format: Callable[[Any, dict[str, Any]], str]
    # A one-output sequence-classification model (the reward score) with a SEQ_CLS adapter,
    # instead of a causal LM.
    reward_head: bool = False
    # CONFIG → extra keyword arguments for the trainer (e.g. GRPO's reward_funcs), built in the
    # config phase so a bad one fails before the data loads.
    trainer_inputs: Callable[[dict[str, Any]], dict[str, Any]] = no_trainer_inputs
    # (this attempt's step metrics so far, each with its "step"; CONFIG) → what a training that may
    # still "succeed" hides (GRPO's flat rewards), as alerts: code, step, message, fix. Asked after
    # each log once a few steps are in, and when training ends; each code is said once.
    check_steps: Callable[[list[dict[str, Any]], dict[str, Any]], list[dict[str, Any]]] = no_step_alerts
    # Whether a loss far above its running median is worth an alert: not for a loss that hovers
    # around 0 by design (GRPO's policy-gradient surrogate), where any ratio to its median is noise.
    loss_spikes: bool = True
    # Whether the loss is the mean cross-entropy of the next token (SFT's): its ceiling is ln(vocabulary),
    # the loss of a uniform guess, so a loss far above it, or pinned at it, says the weights are gone.
    token_loss: bool = False
    # TRL's trainer class → the one the job trains with (SFT's cuts its own rows under padding-free batching).
    trainer_class: Callable[[type], type] = same_trainer


def train(config: dict[str, Any], method: Method) -> None:
    """One training job, start to end: events, data, model, the TRL trainer, checkpoints, final model."""
    job = start_job(config, method.name, TRAINING_TEMPLATE_VERSION)
    with phase("config"):
        import trl

        args = build_training_args(getattr(trl, f"{method.trl_name}Config"), config, job.output_dir)
        peft_config = build_peft_config(config.get("peft"), task_type="SEQ_CLS" if method.reward_head else "CAUSAL_LM")
        trainer_inputs = method.trainer_inputs(config)
        # Started now, so trackio's init runs in the background while the data and model load; one run
        # per job, rank 0's (the args joined the job's workers: the ranks are known from here on).
        tracking = None
        if process_rank() == 0:
            model_name = base_model(config["model"])
            tracking = make_trackio_callback(config, job.run_id, job.attempt_id, model_name, method.name)
    with args.main_process_first(desc="preparing the data"):  # rank 0 fills the datasets cache first
        dataset, eval_rows = prepare_dataset(job, lambda rows: method.detect_format(rows, config))
    with phase("model", announce="loading_model"):
        model, tokenizer = load_model(config, args, reward_head=method.reward_head)
    resume_path = resume_point(job)

    callback = make_callback(job, method, args)
    trainer_class = counting_tokens_on_device(
        method.trainer_class(getattr(trl, f"{method.trl_name}Trainer")), callback.tokens
    )
    if tracking:  # the job's alerts show on its trackio run as well
        callback.alert = tracking.also_on_trackio(callback.alert)
    with phase("setup", announce="tokenizing"):  # tokenising the data, wrapping the model with the adapter
        trainer = trainer_class(
            model=model,
            args=args,
            train_dataset=dataset,
            eval_dataset=eval_rows,  # None: no evaluation during training
            processing_class=tokenizer,
            peft_config=None if hasattr(model, "peft_config") else peft_config,  # an adapter trains on as it is
            callbacks=[callback, *([tracking] if tracking else [])],
            **trainer_inputs,
        )
    job.facts.update(reward_head=method.reward_head, trackio=tracking.target if tracking else None)
    setup_done()
    train_and_finish(job, trainer, callback, resume_path)


def example_config(template: str, model: str, dataset: str, **training_args: Any) -> dict[str, Any]:
    """The CONFIG a template trains with when run as it is from scripts/ (a rendered job carries
    its own in that place): the server's CONFIG contract, with a LoRA adapter and a short run."""
    return {
        "template": template,
        "template_version": TRAINING_TEMPLATE_VERSION,
        "model": model,
        "dataset": {"source": dataset, "split": "train"},
        "output_dir": f"outputs/{template}",
        "peft": {"method": "lora", "r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"},
        "training_args": {"max_steps": 20, "save_steps": 10, "logging_steps": 1, "seed": 42, **training_args},
        "checkpoint_retention": 2,
        "push_to_hub": False,
        "hub_model_id": None,
    }


# --- the job -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One attempt of one run: its config, identity and output directory."""

    config: dict[str, Any]
    run_id: str
    attempt_id: str
    output_dir: Path
    # What the attempt learns as it runs, for the model card: the data manifest ("data"), whether the
    # model has a reward head ("reward_head"), where trackio reports ("trackio").
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def push_to(self) -> str | None:
        """The Hub repo that receives checkpoints and the final model (remote backends)."""
        return self.config.get("hub_model_id") if self.config.get("push_to_hub") else None


def start_job(config: dict[str, Any], template: str, template_version: int) -> Job:
    """Emit `start` and `environment` (before any heavy import) and create the output dir."""
    run_id = os.environ.get("JOBTRAIL_RUN_ID", "local")
    attempt_id = os.environ.get("JOBTRAIL_ATTEMPT_ID", "local-1")
    emit(
        "start",
        template=config.get("template", template),
        template_version=config.get("template_version", template_version),
        run_id=run_id,
        attempt_id=attempt_id,
    )
    emit_environment()
    return Job(config, run_id, attempt_id, job_output_dir(config, template))


# --- data --------------------------------------------------------------------------------------


def prepare_dataset(job: Job, detect_format: Callable[[Any], str]) -> tuple[Any, Any]:
    """Load and map the training split, name its format, set the evaluation rows apart (held_out_rows)
    and emit `data_manifest`; (training rows, evaluation rows or None).

    `detect_format` is the template's: it returns the format's name or raises a ValueError that
    says which columns the method needs (a bad_input termination, since this is the data phase).
    """
    spec = job.config["dataset"]
    with phase("data", announce="tokenizing"):
        dataset, manifest = load_train_dataset(spec)
        manifest["mapping"] = spec.get("mapping")
        dataset = map_dataset(dataset, manifest["mapping"])
        if len(dataset) == 0:
            raise ValueError("dataset has no rows")
        manifest["format"] = detect_format(dataset)
        dataset, held_out = held_out_rows(job, dataset, manifest, detect_format)
    emit("data_manifest", **manifest)
    job.facts["data"] = manifest
    return dataset, held_out


def held_out_rows(
    job: Job, dataset: Any, manifest: dict[str, Any], detect_format: Callable[[Any], str]
) -> tuple[Any, Any | None]:
    """(training rows, evaluation rows or None) as CONFIG["eval"] says; manifest["eval"] records them.

    A split_ratio cuts that share of the rows off with a fixed seed (the run's), so every attempt
    trains and evaluates on the same rows; an eval dataset is loaded like the training data, mapped
    like it when it has the mapping's columns, and must be in a format the method trains on (TRL
    computes the eval loss as it computes the training loss); its first EVAL_MAX_ROWS rows are used.
    """
    spec = job.config.get("eval") or {}
    if spec.get("split_ratio"):
        ratio, seed = spec["split_ratio"], spec["seed"]
        parts = dataset.train_test_split(test_size=ratio, seed=seed, shuffle=True)
        train, held = parts["train"], parts["test"]
        manifest["eval"] = {
            "kind": "split",
            "ratio": ratio,
            "seed": seed,
            "train_rows": len(train),
            "eval_rows": len(held),
        }
        return train, held
    if not spec.get("dataset"):
        return dataset, None
    held, described = load_train_dataset(spec["dataset"])
    mapping = job.config["dataset"].get("mapping")
    if mapping and set(mapping_source_columns(mapping)) <= set(held.column_names):
        held = map_dataset(held, mapping)
    try:
        fmt = detect_format(held)
    except ValueError as exc:
        raise ValueError(
            f"eval_dataset {described['source']}: {exc}. Evaluation during training needs rows in a format the "
            "method trains on; pass hyperparameters eval_strategy='no' to evaluate it only before and after "
            "training, or eval_split_ratio=0.1 to hold out training rows instead"
        ) from exc
    held = held.select(range(min(len(held), EVAL_MAX_ROWS)))
    manifest["eval"] = {
        "kind": "dataset",
        "dataset": described,  # as the training data's manifest describes it: source, sha256 or revision, rows
        "format": fmt,
        "train_rows": len(dataset),
        "eval_rows": len(held),
    }
    return dataset, held


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
        origin: dict[str, Any] = {"kind": "file", "sha256": sha256_file(path), "split": "train"}
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
    """Apply the job's dataset_mapping (declarative; see _mapping.apply_mapping) to every row."""
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


def preference_format(dataset: Any, method: str) -> str:
    """Paired preference rows (DPO, reward modelling): 'chosen' and 'rejected', 'prompt' optional."""
    columns = set(dataset.column_names)
    if not {"chosen", "rejected"} <= columns:
        raise ValueError(
            f"dataset columns {sorted(columns)} fit no {method} format: need 'chosen' and 'rejected' "
            "(and optionally 'prompt')"
        )
    return "preference" if "prompt" in columns else "preference_implicit_prompt"


def _hub_revision(repo_id: str, kind: str) -> str | None:
    """The dataset's commit sha on the Hub, when it can be asked; None otherwise."""
    if kind != "hub":
        return None
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(repo_id).sha
    except Exception:  # noqa: BLE001 - offline, private, or an old hub client: the manifest says "unknown"
        return None


# --- config and model ----------------------------------------------------------------------------


def precision_defaults() -> dict[str, Any]:
    """bf16 where the GPU has it, fp16 on older GPUs, fp32 on CPU (TRL's bf16 default raises there)."""
    import torch

    if torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return {"bf16": True, "fp16": False}
        return {"bf16": False, "fp16": True}
    return {"use_cpu": True, "bf16": False, "fp16": False}


def build_training_args(config_class: type, config: dict[str, Any], output_dir: Path) -> Any:
    """The method's TRL config from CONFIG: explicit training_args win, except what the runtime owns."""
    explicit = dict(config.get("training_args") or {})
    explicit.pop("model_init_kwargs", None)  # used when loading the model (load_model)
    # trackio is the job's own callback (_tracking.py), never TRL's integration, which fails the training with it.
    explicit["report_to"] = split_report_to(explicit.get("report_to"))[1]
    precision = precision_defaults()
    if {"bf16", "fp16"} & set(explicit):  # the caller chose a precision: add no second one
        precision = {k: v for k, v in precision.items() if k not in ("bf16", "fp16")}
    kwargs: dict[str, Any] = {
        **precision,
        "disable_tqdm": True,  # the step events are the progress report; bars only clutter logs
        "include_num_input_tokens_seen": "non_padding",  # tokens for step events and tokens/s
        **explicit,
        # Owned by the runtime: retention follows the commit protocol (Trainer's own rotation
        # could delete the newest committed checkpoint), and the output dir is the job's.
        "output_dir": str(output_dir),
        "save_total_limit": None,
        # Every loss is logged as it is: a NaN averaged away would hide a run that diverged.
        "logging_nan_inf_filter": False,
    }
    # No Trainer push: it uploads checkpoints whether or not they were committed, so the
    # runtime pushes each committed checkpoint itself (push_checkpoint).
    return config_class(**kwargs)


def build_peft_config(spec: dict[str, Any] | None, task_type: str = "CAUSAL_LM") -> Any:
    """A LoRA config for "lora" and "qlora", None (full fine-tuning) for "none".

    task_type "SEQ_CLS" (reward models) makes PEFT train and save the new score head too.
    QLoRA is refused here, in the config phase, when there is no CUDA GPU: bitsandbytes' 4-bit
    kernels need one, and failing before the data loads keeps the diagnosis first and cheap.
    """
    spec = spec or {"method": "none"}
    method = spec.get("method", "none")
    if method not in PEFT_METHODS:
        raise ValueError(f"unknown peft method {method!r}; use 'lora', 'qlora' or 'none'")
    if method == "none":
        return None
    if method == "qlora":
        _require_cuda_for_qlora()
    from peft import LoraConfig

    return LoraConfig(
        task_type=task_type,
        r=spec.get("r", 16),
        lora_alpha=spec.get("alpha", 32),
        lora_dropout=spec.get("dropout", 0.05),
        target_modules=spec.get("target_modules", "all-linear"),
    )


def _require_cuda_for_qlora() -> None:
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            "QLoRA (peft method 'qlora') needs a CUDA GPU: its 4-bit NF4 weights run on bitsandbytes' "
            "CUDA kernels, and this machine has none. Use a GPU flavor, or peft 'lora' on CPU."
        )


def load_model(config: dict[str, Any], args: Any, *, reward_head: bool = False) -> tuple[Any, Any]:
    """Model and tokenizer, loaded here (not by the trainer) so failures carry the 'model' phase.

    reward_head: a sequence-classification model with one output (the reward score) on top of
    the base model, as TRL's RewardTrainer expects; otherwise a causal LM.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    init_kwargs = dict((config.get("training_args") or {}).get("model_init_kwargs") or {})
    peft_method = (config.get("peft") or {}).get("method")
    # An adapter's base can live in bf16 (only the adapter trains); full fine-tuning keeps fp32
    # master weights and lets autocast do the bf16 math.
    adapter = peft_method in ("lora", "qlora")
    init_kwargs.setdefault("dtype", torch.bfloat16 if (args.bf16 and adapter) else torch.float32)
    if peft_method == "qlora":
        init_kwargs.setdefault("quantization_config", four_bit_config(args))
    # A LoRA adapter directory (a job's output/final, or a checkpoint): its base, with the adapter trainable.
    adapter_file = Path(config["model"]) / "adapter_config.json"
    base = base_model(config["model"])
    if reward_head:
        model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, **init_kwargs)
    else:
        model = AutoModelForCausalLM.from_pretrained(base, **init_kwargs)
    if adapter_file.is_file():
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, config["model"], is_trainable=True)
    tokenizer = AutoTokenizer.from_pretrained(config["model"], revision=init_kwargs.get("revision"))
    return model, tokenizer


def base_model(model: str) -> str:
    """The model whose weights a job starts from: a LoRA adapter directory's base, else `model` itself."""
    adapter_file = Path(model) / "adapter_config.json"
    adapter = json.loads(adapter_file.read_text()) if adapter_file.is_file() else {}
    return adapter.get("base_model_name_or_path") or model


def four_bit_config(args: Any) -> Any:
    """QLoRA's quantization: 4-bit NF4 with double quantization, computing in the run's precision."""
    import torch
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16 if args.bf16 else torch.float16,
    )


# --- training ----------------------------------------------------------------------------------


def resume_point(job: Job) -> str | None:
    """The newest committed checkpoint to resume from (fetched from the Hub on a fresh machine)."""
    if job.push_to and process_rank() == 0:  # a fresh remote machine: the last committed checkpoint is on the Hub
        with phase("resume"):
            fetch_remote_checkpoint(job.push_to, job.output_dir)
    barrier()  # every worker resumes from the same checkpoint, fetched or not
    resume_path, resume_step, skipped = find_resume_target(job.output_dir)
    emit("resume", checkpoint=resume_path, step=resume_step, skipped=skipped)
    return resume_path


def make_callback(job: Job, method: Method, args: Any) -> Any:
    """A TrainerCallback that turns Trainer events into jobtrail events, commits checkpoints and
    watches the run.

    Step events carry the loss, learning rate, grad norm and epoch every method reports, and in a
    `metrics` object every other number the trainer logged, under TRL's names (DPO's
    "rewards/accuracies", GRPO's "reward_std", "completions/clipped_ratio" ...); an evaluation
    during training is an `eval` event with its step. What the numbers say (_watch.py: a NaN loss,
    a spike, exploding gradients, overfitting, the method's own check_steps, a stall) becomes an
    `alert` event as soon as it is seen; a NaN loss (or NaN weights about to be saved) stops the
    training without saving, and train_and_finish ends the job `diverged`.
    """
    from transformers import TrainerCallback

    output_dir, retention, push_to = job.output_dir, job.config.get("checkpoint_retention"), job.push_to
    stall_minutes = job.config.get("stall_alert_minutes", STALL_MINUTES)

    class JobtrailCallback(TrainerCallback):
        tokens_at_start = 0  # tokens seen before this attempt (a resumed state carries them)

        def __init__(self) -> None:
            self.tokens = DeviceTokenCount()
            self.steps: list[dict[str, Any]] = []  # this attempt's method metrics, step by step
            self.watch = RunWatch(
                job.run_id,
                args.learning_rate,
                spikes=method.loss_spikes,
                overflow_expected=bool(args.fp16),
                config=job.config,
            )
            self.start_step = 0  # the step this attempt resumed at
            self.watchdog = Watchdog(stall_minutes * 60 if stall_minutes else None, self.alert)

        def alert(self, *alerts: dict[str, Any]) -> None:
            for found in alerts:
                emit("alert", **found)

        def stop_now(self, control: Any) -> None:
            """The weights are lost (or nothing trains them): stop now, and neither save nor evaluate them."""
            control.should_training_stop = True
            control.should_save = control.should_evaluate = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.tokens_at_start = state.num_input_tokens_seen or 0
            self.start_step = state.global_step
            if method.token_loss:
                self.watch.know_vocabulary(vocabulary_size(kwargs.get("model")))
            rebase_learning_rate(kwargs.get("optimizer"), kwargs.get("lr_scheduler"), args.learning_rate)
            if state.is_world_process_zero:
                self.watchdog.start()
            # The trainer's own total (a run by epochs has no max_steps in its config).
            announce_phase("training", max_steps=state.max_steps, step=state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.watchdog.beat(state.global_step)
            if control.should_log or control.should_save or control.should_evaluate or control.should_training_stop:
                self.tokens.settle(state)  # before the Trainer logs, saves or evaluates (all ranks decide alike)
            # DefaultFlowCallback (which runs first) has decided; the save follows this hook. A
            # committed checkpoint is one a retry may resume from: never one with NaN weights.
            if control.should_save and not weights_finite(kwargs.get("model")):
                self.alert(*self.watch.on_lost_weights(state.global_step))
                self.stop_now(control)
            if control.should_save:
                if state.is_world_process_zero:
                    begin_checkpoint(output_dir / f"checkpoint-{state.global_step}", state.global_step)
                barrier()  # no worker writes its part before an old commit of that directory is withdrawn
            if control.should_evaluate and not control.should_log:  # no step event comes first
                announce_phase("evaluating")

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.tokens.settle(state)  # the Trainer may log, evaluate or save after an epoch too

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.watchdog.beat()  # an evaluation batch is progress too

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.watchdog.beat()
            announce_phase("training")

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # Called after Trainer wrote weights, optimizer, scheduler, RNG and trainer state: every
            # worker writes its own part (its RNG state, its shard), and the Trainer does not wait for
            # them, so the commit waits until all have.
            barrier()
            ckpt, step = output_dir / f"checkpoint-{state.global_step}", state.global_step
            if ckpt.is_dir() and state.is_world_process_zero:  # one committer per job
                with self.watchdog.paused():  # waiting for the previous checkpoint's commit is slow, not stuck
                    COMMITS.wait()
                    # Training goes on from here: the commit's event says so (after any wait for the last one,
                    # which training spent too), and the steady pace counts from it (estimate/steady.py).
                    written_at = time.time()
                    COMMITS.submit(lambda: self.commit(ckpt, step, written_at))

        def commit(self, ckpt: Path, step: int, written_at: float) -> None:
            """In the background (COMMITS), while training goes on: commit, push, retention."""
            with phase("train"):  # where a failed commit ran before it moved to the background
                commit_checkpoint(ckpt, step, job.run_id, job.attempt_id, written_at=written_at)
            if push_to:
                with phase("push"):  # no phase event: the job is training meanwhile
                    push_checkpoint(ckpt, push_to, step)
            apply_retention(output_dir, retention, step)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.tokens.settle(state)
            self.watchdog.stop()
            if state.is_world_process_zero:
                self.alert(*self.watch.new(method.check_steps(self.steps, job.config)))
                self.alert(*self.watch.on_train_end(self.steps, job.config, self.start_step))

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
        ) -> None:
            # The final summary is no step. Every worker logs the same numbers (gathered) and watches
            # them, so all stop together on a lost loss; only rank 0's events are printed (emit).
            if not logs:
                return
            if "loss" in logs:
                self.log_step(state, logs)
            elif any(name.startswith("eval_") for name in logs):
                metrics = {name: value for name, value in method_metrics(logs).items() if name.startswith("eval_")}
                emit("eval", step=state.global_step, epoch=logs.get("epoch"), metrics=as_float32(metrics))
                self.alert(*self.watch.on_eval(state.global_step, logs.get("eval_loss")))
            if self.watch.stopped:
                self.stop_now(control)
            elif "loss" in logs and control.should_evaluate:  # the evaluation follows this hook
                announce_phase("evaluating")

        def log_step(self, state: Any, logs: dict[str, Any]) -> None:
            extra = method_metrics(logs)
            self.steps.append({"step": state.global_step, **extra})
            emit(
                "step",
                step=state.global_step,
                loss=as_float32(logs["loss"]),
                learning_rate=as_float32(logs.get("learning_rate")),
                grad_norm=as_float32(logs.get("grad_norm")),
                epoch=as_float32(logs.get("epoch")),
                tokens=state.num_input_tokens_seen or None,
                **({"metrics": as_float32(extra)} if extra else {}),
            )
            self.alert(*self.watch.on_step(state.global_step, logs["loss"], logs.get("grad_norm")))
            if len(self.steps) >= SHARE_MIN_LOGS:
                self.alert(*self.watch.new(method.check_steps(self.steps, job.config)))

    return JobtrailCallback()


class DeviceTokenCount:
    """The input tokens of the micro-batches since the count was last read, kept on the device.

    transformers reads its token count back (.item()) after every micro-batch: a wait for the device per
    micro-batch, for a number that only logs, evaluations and checkpoints show. The job's trainer adds each
    micro-batch's count here instead (counting_tokens_on_device), and its callback settles the sum into the
    trainer's state where the Trainer is about to log, evaluate or save, all of which read the device anyway."""

    def __init__(self) -> None:
        self.pending: Any = None  # a tensor on the device, None when nothing is pending
        self.gather: Any = None  # the trainer's accelerator.gather, given with every count

    def add(self, count: Any, gather: Callable[[Any], Any]) -> None:
        self.pending = count if self.pending is None else self.pending + count
        self.gather = gather

    def settle(self, state: Any) -> None:
        """Add what is pending to state.num_input_tokens_seen; every worker calls it at the same step (a gather)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            state.num_input_tokens_seen += int(self.gather(pending).sum().item())


def counting_tokens_on_device(trainer_class: type, tokens: DeviceTokenCount) -> type:
    """The method's trainer class, counting its non-padding input tokens into `tokens` (what transformers counts
    for include_num_input_tokens_seen="non_padding", the job's setting) without reading each count back."""

    class Trainer(trainer_class):  # type: ignore[misc]  # TRL's class, known once the job runs
        def _track_num_input_tokens(self, inputs: Any) -> None:
            name = getattr(self.model, "main_input_name", "input_ids")
            pad = getattr(self.processing_class, "pad_token_id", None)
            if self.args.include_num_input_tokens_seen != "non_padding" or not isinstance(inputs, Mapping):
                super()._track_num_input_tokens(inputs)
            elif "attention_mask" in inputs:
                tokens.add(inputs["attention_mask"].sum(), self.accelerator.gather)
            elif name in inputs and pad is not None:  # padding-free batches: no mask, no padding
                tokens.add((inputs[name] != pad).sum(), self.accelerator.gather)
            else:
                super()._track_num_input_tokens(inputs)

    Trainer.__name__ = Trainer.__qualname__ = trainer_class.__name__
    return Trainer


def rebase_learning_rate(optimizer: Any, scheduler: Any, learning_rate: float) -> None:
    """Make a resumed attempt train at the learning rate it was given, not the checkpoint's.

    Resuming loads the optimizer's and the scheduler's state, learning rates included, so a retry
    with changes={"learning_rate": ...} (the fix for a diverged run) would otherwise go on at the
    old one. The schedule's shape and position are kept: only its base is scaled.
    """
    base = getattr(scheduler, "base_lrs", None)
    if optimizer is None or not base or not base[0] or base[0] == learning_rate:
        return
    scheduler.base_lrs = [lr * learning_rate / base[0] for lr in base]
    lambdas = getattr(scheduler, "lr_lambdas", None)  # every schedule of transformers' but reduce_lr_on_plateau
    for i, group in enumerate(optimizer.param_groups):
        position = lambdas[i](scheduler.last_epoch) if lambdas else group["lr"] / base[i]
        group["lr"] = scheduler.base_lrs[i] * position
        if "initial_lr" in group:
            group["initial_lr"] = scheduler.base_lrs[i]
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]  # what the trainer logs
    emit("learning_rate_rebased", checkpoint=base[0], now=learning_rate)


def method_metrics(logs: dict[str, Any]) -> dict[str, float]:
    """The numbers a Trainer log holds beyond the fields every step event has (TRL's names kept)."""
    return {
        name: value
        for name, value in logs.items()
        if name not in STEP_LOG_FIELDS and isinstance(value, int | float) and not isinstance(value, bool)
    }


def vocabulary_size(model: Any) -> int | None:
    """The size of the vocabulary a causal LM predicts over (a multimodal model's text part), if it says."""
    config: Any = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    return size if isinstance(size, int) else None


def keep_vouched_checkpoints(output_dir: Path, healthy_step: int | None, start_step: int) -> str:
    """After a blow-up, withdraw this attempt's commits that no healthy loss vouched for, and say what is kept.

    The loss logged at step N is computed on the weights of the updates before N, so a checkpoint of step
    H (the last healthy logged step) or later holds weights no healthy loss has seen: withdrawn, so that
    no retry resumes from them. The checkpoints before H (and the one this attempt resumed from) stay.
    """
    threshold = healthy_step if healthy_step is not None else start_step + 1
    withdrawn = []
    for path in sorted(output_dir.glob("checkpoint-*")):
        step = checkpoint_step(path)
        if step is not None and step >= threshold and verify_checkpoint(path, deep=False)[0]:
            withdraw_checkpoint(path, step, f"saved at step {step}, after the last healthy logged step")
            withdrawn.append(path.name)
    kept, step, _ = find_resume_target(output_dir)
    said = f" Withdrew {', '.join(withdrawn)} (no healthy loss vouched for its weights)." if withdrawn else ""
    if kept is None:
        return said + " No committed checkpoint from before the blow-up: a retry starts from the beginning."
    return (
        said
        + f" Kept {Path(kept).name} (step {step}), the last committed checkpoint from before it: a retry "
        + ("resumes from there.")
    )


def train_and_finish(job: Job, trainer: Any, callback: Any, resume_path: str | None) -> None:
    """Train (from resume_path), then the final model, the metrics event and the Hub push."""
    with phase("train"):
        result = trainer.train(resume_from_checkpoint=resume_path)
        if callback.watch.diverged:  # stopped early, its weights lost: no final model
            COMMITS.wait()  # a commit still under way lands first, so that it can be withdrawn
            kept = ""
            if process_rank() == 0:
                kept = keep_vouched_checkpoints(job.output_dir, callback.watch.healthy_step, callback.start_step)
            raise TrainingDivergedError(callback.watch.diverged["message"] + kept)
        if callback.watch.still:  # stopped early: nothing trained it, so there is no model to save
            raise NothingTrainableError(callback.watch.still["message"])  # its alert, printed already, has the fix
    with phase("save", announce="saving"):
        save_final(trainer, job)
    emit_metrics(result.metrics, trainer.state, callback.tokens_at_start)
    if job.push_to and process_rank() == 0:
        with phase("push", announce="pushing"):
            push_final(job.output_dir / FINAL_DIR, job.push_to)


def save_final(trainer: Any, job: Job) -> Path:
    """Write the final model (or adapter) + tokenizer to output_dir/final and commit it."""
    final = job.output_dir / FINAL_DIR
    step = trainer.state.global_step
    is_main = trainer.is_world_process_zero()
    if is_main:
        if final.exists():  # an earlier attempt's final model: this attempt's replaces it
            shutil.rmtree(final)
        begin_checkpoint(final, step)
    barrier()  # the old final model is gone before any worker writes the new one
    trainer.save_model(str(final))  # every rank (sharded saves); writes the tokenizer too
    barrier()  # ... and every worker has written its part before rank 0 commits
    if is_main:
        write_model_card(trainer, job, final)
        COMMITS.wait()  # the last checkpoint's commit (it hashed while the final model was written) lands first
        commit_checkpoint(final, step, job.run_id, job.attempt_id)
        emit("artifact", kind="final_model", path=str(final))
    return final


def write_model_card(trainer: Any, job: Job, final: Path) -> None:
    """jobtrail's card (_model_card.py) replaces PEFT's template in final/ (pushed with the model) and
    TRL's card in output_dir, which names no base model for a local one ("fine-tuned version of [None]")."""
    summary: dict[str, Any] = next((log for log in reversed(trainer.state.log_history) if "train_loss" in log), {})
    card = trained_model_card(
        job.config,
        base_model=base_model(job.config["model"]),
        where=job.push_to or str(final),
        run_id=job.run_id,
        attempt_id=job.attempt_id,
        data=job.facts.get("data"),
        result={"global_step": trainer.state.global_step, **summary},
        packages={name: package_version(name) for name in ("trl", "transformers", "peft")},
        trackio=job.facts.get("trackio"),
        reward_head=bool(job.facts.get("reward_head")),
    )
    for directory in (final, job.output_dir):
        (directory / CARD_NAME).write_text(card, encoding="utf-8")


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
        train_loss=as_float32(train_metrics.get("train_loss")),
        global_step=state.global_step,
        train_samples_per_second=train_metrics.get("train_samples_per_second"),
        tokens_per_second=round(tokens / runtime, 3) if tokens > 0 and runtime else None,
        peak_memory_bytes=peak_memory_bytes(),
    )
