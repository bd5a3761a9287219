"""Job configs: the CONFIG block a rendered script runs with (its immutable snapshot), for
training jobs and for GGUF conversion jobs.

Built from the job's effective hyperparameters (methods/effective.py), the very ones preflight's rules
judged (preflight/plan.py computes them once), so the config holds exactly the values preflight judged,
with the speed measures preflight chose for the job's device (preflight/speedups.py) merged in as the
config is built: nothing edits a config once it is built. A GRPO config also carries the source of the
user's reward file.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jobtrail.methods.effective import Effective
from jobtrail.methods.hyperparameters import field_type
from jobtrail.models import SINGLE_PROCESS, JobSpec, Launcher, Speedup, Speedups
from jobtrail.requests import DEFAULT_QUANTIZATIONS
from jobtrail.templates.llama_cpp import LLAMA_CPP_PYTHON_VERSION, normalize_quantizations
from jobtrail.templates.trackio_target import trackio_space
from jobtrail.util.refs import looks_local

TEMPLATE_VERSION = 1
# A remote job's working directory is its own and gone when it ends: results live on the Hub.
REMOTE_OUTPUT_DIR = "jobtrail-output"
# What a remote job leaves in its Hub repo besides the final model at its root (scripts/_runtime.py's names): its
# newest committed checkpoint in this folder, the commit marker (step, manifest sha256) inside it.
REMOTE_CHECKPOINT = "last-checkpoint"
COMMIT_MARKER = "JOBTRAIL_COMMITTED"
# FSDP as transformers 5.23 takes it (TrainingArguments fsdp / fsdp_config, read by accelerate 1.15's FSDP
# plugin): FSDP2, each decoder layer its own shard unit (the model's _no_split_modules), a full state dict
# saved (the checkpoint and the final model load with from_pretrained), the weights read from disk by
# rank 0 only (the others get them by broadcast: one CPU copy instead of N).
FSDP_CONFIG: dict[str, Any] = {
    "version": 2,
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "reshard_after_forward": True,
    "state_dict_type": "FULL_STATE_DICT",
    "cpu_ram_efficient_loading": True,
}


def build_config(
    spec: JobSpec,
    values: Effective,
    output_dir: str | None,
    max_positions: int | None = None,
    *,
    push_to: str | None = None,
    reward_source: str | None = None,
    launcher: Launcher = SINGLE_PROCESS,
    speedups: Speedups | None = None,
) -> dict[str, Any]:
    """The job's config snapshot: everything the rendered script needs, nothing secret.

    `values`: the job's effective hyperparameters, as preflight judged them (read, never edited).
    output_dir None: the job writes where its backend says at launch (a local job's run directory).
    When the caller did not choose max_length, the default is capped at the model's positions.
    `reward_source`: the text of spec.reward_file when the caller has read it already.
    `launcher`: the job's processes, as preflight chose them (the script starts them itself).
    `speedups`: the speed measures preflight chose (None: none chosen); what they set joins the training
    arguments last, and the config records them.
    """
    training_args = dict(values.training_args)
    if "max_length" in training_args:
        training_args["max_length"] = trained_max_length(spec, training_args["max_length"], max_positions)
    if push_to and (space := trackio_space(training_args, push_to.split("/")[0])):
        training_args["trackio_space_id"] = space  # a remote job's trackio run: a private Space of the user's
    if launcher.strategy == "fsdp":
        training_args = fsdp_training_args(training_args, spec.method)
    if speedups is not None:
        training_args = with_speedups(training_args, speedups)
    config = {
        "template": spec.method,
        "template_version": TEMPLATE_VERSION,
        "model": spec.model,
        "dataset": {"source": spec.dataset, "split": values.job["dataset_split"], "mapping": spec.dataset_mapping},
        "output_dir": output_dir,
        "peft": dict(values.peft),
        "training_args": training_args,
        "checkpoint_retention": values.job["checkpoint_retention"],
        "push_to_hub": push_to is not None,
        "hub_model_id": push_to,
        "stall_alert_minutes": values.job["stall_alert_minutes"],
        "eval": evaluation_config(spec, values),
        "launcher": launcher.model_dump(),
    }
    if spec.method == "grpo":
        user = None
        if spec.reward_file:
            user = {"file": spec.reward_file, "function": spec.reward_function or "reward", "source": reward_source}
        config["rewards"] = rewards_config(values.inputs, user)
    if speedups is not None:
        config["speedups"] = speedups.model_dump()
    return config


def with_speedups(training_args: Mapping[str, Any], speedups: Speedups) -> dict[str, Any]:
    """`training_args` with what the speedups set merged in. Reads the final training arguments (FSDP's
    included), so build_config merges them last."""
    args = dict(training_args)
    for item in (value for value in speedups.__dict__.values() if isinstance(value, Speedup)):
        for name, value in item.sets.items():
            if name == "gradient_checkpointing" and args.get("fsdp"):
                # Sharded by jobtrail (fsdp_training_args): FSDP's own activation checkpointing carries it.
                args["fsdp_config"] = {**args["fsdp_config"], "activation_checkpointing": value}
            elif name == "model_init_kwargs":
                args[name] = {**(args.get(name) or {}), **value}
            else:
                args[name] = value
    return args


def fsdp_training_args(training_args: dict[str, Any], method: str) -> dict[str, Any]:
    """The training arguments of a job sharded with FSDP (FSDP_CONFIG, under the user's own fsdp_config).

    Gradient checkpointing (the user's, or the TRL config's default for `method`) becomes FSDP's own
    activation checkpointing: the Trainer's would all-gather each layer's weights a second time in backward
    (transformers warns about it). Reads the final training arguments, so it is applied last."""
    if "fsdp" in training_args:  # the user's own FSDP settings, whole
        return training_args
    default = field_type(method, "gradient_checkpointing")
    checkpointing = training_args.get("activation_checkpointing")
    if checkpointing is None:
        checkpointing = training_args.get("gradient_checkpointing", bool(default and default.default))
    fsdp_config = {**FSDP_CONFIG, "activation_checkpointing": bool(checkpointing)}
    args = {k: v for k, v in training_args.items() if k != "activation_checkpointing"}
    return {**args, "gradient_checkpointing": False, "fsdp": True, "fsdp_config": fsdp_config}


def launcher_of(config: dict[str, Any]) -> Launcher:
    """The launcher a job config runs with (configs before launchers existed, and evaluations, run one process)."""
    return Launcher(**config["launcher"]) if "launcher" in config else SINGLE_PROCESS


def evaluation_config(spec: JobSpec, values: Effective) -> dict[str, Any] | None:
    """What the job evaluates on every eval_steps: a held-out slice of its training rows (eval_split_ratio,
    cut with the run's seed; it wins over an eval_dataset, which then serves the base/final evaluations
    only) or the eval_dataset's "test" split (a file is its own split); None without either, or with
    eval_strategy "no"."""
    ratio = values.job["eval_split_ratio"]
    if values.training_args.get("eval_strategy", "no") == "no" or not (ratio or spec.eval_dataset):
        return None
    held_out = None if ratio else {"source": spec.eval_dataset, "split": "test"}
    return {"split_ratio": ratio, "seed": values.training_args.get("seed", 42), "dataset": held_out}


def trained_max_length(spec: JobSpec, max_length: Any, max_positions: int | None) -> Any:
    """The max_length the job trains with: the caller's, or the default capped at the model's positions."""
    if max_positions and "max_length" not in spec.hyperparameters:
        return min(max_length, max_positions)
    return max_length


def retry_config(
    previous: Mapping[str, Any],
    spec: JobSpec,
    values: Effective,
    reward_source: str | None = None,
    launcher: Launcher = SINGLE_PROCESS,
    max_positions: int | None = None,
    speedups: Speedups | None = None,
) -> dict[str, Any]:
    """A retry's config: the new spec, with the same output (directory and Hub repo) and max_length
    (capped at the model's positions the first time) unless the retry sets one. A max_length the previous
    attempt's padding-free batching unset (preflight/speedups.py did, before the job cut padding-free rows itself)
    is no choice: the retry starts from the default, capped at `max_positions`, and preflight decides padding-free
    anew."""
    config = build_config(
        spec,
        values,
        previous["output_dir"],
        max_positions,
        push_to=previous.get("hub_model_id"),
        reward_source=reward_source,
        launcher=launcher,
        speedups=speedups,
    )
    kept = previous["training_args"].get("max_length")
    unset = "max_length" in ((previous.get("speedups") or {}).get("padding_free") or {}).get("sets", {})
    if "max_length" not in spec.hyperparameters and "max_length" in previous["training_args"] and not unset:
        config["training_args"]["max_length"] = kept
    return config


def default_repo(owner: str, spec: JobSpec) -> str:
    """<owner>/<model>-<method>-<date>: a new private repo per day of work, never an existing model's."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.model.rstrip("/").split("/")[-1]).strip("-")[:60] or "model"
    return f"{owner}/{name}-{spec.method}-{time.strftime('%Y%m%d')}"


def rewards_config(settings: Mapping[str, Any], user: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The GRPO job's CONFIG["rewards"] block.

    `settings`: GRPO's reward knobs (its inputs in the registry) with their defaults filled in, the
    effective hyperparameters' `inputs`; `user`: None, or {"file": path, "function": name} for a reward
    file that check_reward_file accepted, with its "source" when already read (otherwise it is read now),
    so the config snapshot holds the code.
    """
    names = settings["reward_funcs"] or []
    return {
        "builtin": [names] if isinstance(names, str) else list(names),
        "user": _user_block(user) if user else None,
        "format_regex": settings["reward_format_regex"],
        "length_target": settings["reward_length_target"],
    }


def _user_block(user: Mapping[str, Any]) -> dict[str, str]:
    source = user.get("source")
    if source is None:
        source = Path(user["file"]).expanduser().read_text(encoding="utf-8")
    return {"function": str(user["function"]), "source": source}


def conversion_config(
    source: str,
    *,
    output_dir: Path | str | None,
    cache_dir: Path,
    quantizations: Sequence[str] = DEFAULT_QUANTIZATIONS,
    base_model: str | None = None,
    pre_tokenizer: str | None = None,
    push_to_hub: bool = False,
    hub_model_id: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The CONFIG of a scripts/convert_gguf.py job (see that template for what each key does); output_dir
    None: where its backend says at launch."""
    kind = "dir" if looks_local(source) else "hub"
    path_or_id = str(Path(source).expanduser().resolve()) if kind == "dir" else source
    return {
        "template": "convert_gguf",
        "template_version": 1,
        "source": {"kind": kind, "path_or_id": path_or_id, "base_model": base_model},
        "quantizations": normalize_quantizations(list(quantizations)),
        "output_dir": str(Path(output_dir).expanduser().resolve()) if output_dir else None,
        "name": name or default_name(path_or_id, hub_model_id),
        "llama_cpp": {"version": LLAMA_CPP_PYTHON_VERSION, "cache_dir": str(Path(cache_dir).expanduser().resolve())},
        "pre_tokenizer": pre_tokenizer,
        "push_to_hub": push_to_hub,
        "hub_model_id": hub_model_id,
    }


_GENERIC_DIR = re.compile(r"^(final|merged|checkpoint-\d+|out|output|outputs)$")


def default_name(path_or_id: str, hub_model_id: str | None = None) -> str:
    """File-name stem for the GGUF files: the output repo's name, else the source's own name."""
    if hub_model_id:
        return hub_model_id.rsplit("/", 1)[-1]
    parts = [p for p in Path(path_or_id).parts if p not in ("/", "")]
    meaningful = [p for p in parts if not _GENERIC_DIR.match(p)]
    return re.sub(r"[^\w.-]+", "-", meaningful[-1]) if meaningful else "model"
