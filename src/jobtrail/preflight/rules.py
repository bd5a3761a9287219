"""Preflight rules: each looks at one thing and returns Findings (code, severity, message, fix).

Rules are pure: everything they need from outside (files, the Hub, the job's Python) arrives
in `Facts`, gathered by `gather()` through probes.py. A check that could not run says so
with a warning; it never passes silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jobtrail.errors import BackendError, JobtrailError
from jobtrail.estimate import EstimateResult, estimate_cost
from jobtrail.estimate.cost import TIMEOUT_BUFFER
from jobtrail.estimate.hardware import BUNDLED
from jobtrail.estimate.inputs import CHARS_PER_TOKEN
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight import hyperparams, probes
from jobtrail.preflight.architectures import is_causal_lm, is_known
from jobtrail.preflight.dataset import DatasetReport, validate_dataset
from jobtrail.preflight.methods import check_method
from jobtrail.preflight.probes import HubIdentity, ModelFacts
from jobtrail.preflight.reward_file import check_reward_file
from jobtrail.templates.defaults import effective
from jobtrail.util.refs import HUB_ID, looks_local
from jobtrail.util.timefmt import human_duration

# GRPO has no max_length (prompts are kept whole): the estimate bounds its prompts at this.
ESTIMATE_MAX_LENGTH = 1024
# GPUs without bf16, and those where torch.compile costs more than it saves on short jobs.
NO_BF16_GPUS = ("T4",)
SLOW_COMPILE_GPUS = ("T4", "A10G")


@dataclass(frozen=True)
class Facts:
    model: ModelFacts
    missing_requirements: list[str] | None = None  # None: not checked (no script or not local)
    python_error: str | None = None  # the job's interpreter could not be run
    identity: HubIdentity | None = None  # whoami of the token, for remote backends
    has_token: bool = False
    dataset: DatasetReport | None = None
    estimate: EstimateResult | None = None  # remote backends: memory, hours and timeout on the flavor
    estimate_error: str | None = None


def gather_model(spec: JobSpec, token: str | None = None) -> Facts:
    if looks_local(spec.model):
        return Facts(model=probes.local_model_facts(Path(spec.model).expanduser()))
    return Facts(model=probes.hub_model_facts(spec.model, token))


def gather_dataset(facts: Facts, spec: JobSpec) -> Facts:
    split = effective(spec.method, spec.hyperparameters).job["dataset_split"]
    report = validate_dataset(spec.dataset, spec.method, split=str(split), mapping=spec.dataset_mapping)
    return replace(facts, dataset=report)


def gather_estimate(facts: Facts, spec: JobSpec, *, ledger: Any = None, api: Any = None) -> Facts:
    """Memory and time on the chosen flavor, from the model's config.json and the data's size."""
    if facts.model.config is None or not spec.flavor:
        return facts
    values = effective(spec.method, spec.hyperparameters)
    args = values.training_args
    batch, accumulation = int(args["per_device_train_batch_size"]), int(args["gradient_accumulation_steps"])
    max_length = int(args.get("max_length") or ESTIMATE_MAX_LENGTH)
    report = facts.dataset
    if int(args.get("max_steps") or -1) > 0:
        examples, epochs = int(args["max_steps"]) * batch * accumulation, 1
    else:
        rows = (report.rows or report.rows_checked) if report else 0
        examples, epochs = rows, math.ceil(float(args["num_train_epochs"]))
    chars = report.mean_chars_per_row if report else None
    try:
        estimate = estimate_cost(
            spec.model, spec.method, peft=values.peft_method, num_examples=max(1, examples),
            avg_tokens=max(1.0, chars / CHARS_PER_TOKEN) if chars else float(max_length),
            max_length=max_length, per_device_batch_size=batch, gradient_accumulation_steps=accumulation,
            epochs=max(1, epochs), gradient_checkpointing=bool(args.get("gradient_checkpointing", True)),
            flavor=spec.flavor, lora_r=int(values.peft["r"]), config=facts.model.config, calibration=ledger, api=api,
        )
    except JobtrailError as exc:
        return replace(facts, estimate_error=str(exc))
    return replace(facts, estimate=estimate)


def gather_identity(facts: Facts, token: str | None) -> Facts:
    """For remote backends: whose token this is and whether it can push."""
    if not token:
        return replace(facts, has_token=False)
    return replace(facts, has_token=True, identity=probes.hub_identity(token))


def gather_requirements(facts: Facts, script: str, python: str) -> Facts:
    """Add what the job's interpreter lacks of the script's PEP 723 dependencies."""
    try:
        return replace(facts, missing_requirements=probes.missing_job_requirements(script, python))
    except BackendError as exc:
        return replace(facts, python_error=exc.message)


def max_positions(facts: Facts) -> int | None:
    positions = _text_config(facts.model.config or {}).get("max_position_embeddings")
    return positions if isinstance(positions, int) and positions > 0 else None


# --- model ----------------------------------------------------------------------------


def check_model(spec: JobSpec, facts: Facts) -> list[Finding]:
    m = facts.model
    if m.access == "not_found":
        if m.local:
            code, what = ("model.missing", "does not exist") if m.detail == "no such directory" else (
                "model.no_config", "has no readable config.json, so it is not a transformers model directory")
            return [_error(code, f"Model {spec.model} {what}.",
                           "Pass the directory that holds config.json and the weights, or a Hub id like 'Qwen/Qwen2.5-0.5B'.")]
        return [_error("model.not_found", f"No model {spec.model!r} on the Hub ({m.detail}).",
                       "Check the spelling (org/name); for a private repo set HF_TOKEN to a token that can read it.")]
    if m.access == "gated":
        return [_error("model.gated", f"{spec.model} is gated and your token has no access yet.",
                       f"Accept the terms at https://huggingface.co/{spec.model} with your account, then retry.")]
    if m.access == "unverified":
        return [Finding(code="model.unverified", severity="warning",
                        message=f"Could not check {spec.model!r} on the Hub ({m.detail}); the job downloads it.",
                        fix="Make sure the job's machine can reach the Hub, or pass a local model directory.")]
    return _architecture(spec, m.config or {})


def _architecture(spec: JobSpec, config: dict[str, Any]) -> list[Finding]:
    model_type = config.get("model_type")
    if not model_type:
        return [_error("model.architecture", f"{spec.model}'s config.json has no model_type.",
                       "Use a model saved by transformers (save_pretrained writes model_type).")]
    if not is_known(model_type):
        return [_error("model.architecture", f"transformers does not know model_type {model_type!r}.",
                       "Upgrade transformers in the job's environment, or pick a supported model.")]
    if not is_causal_lm(model_type):
        return [_error("model.architecture", f"{model_type!r} has no causal-LM head, which SFT needs.",
                       "Pick a decoder (causal LM) model such as Qwen2, Llama, Mistral or Gemma.")]
    vocab, positions = _text_config(config).get("vocab_size"), _text_config(config).get("max_position_embeddings")
    return [Finding(code="model.ok", severity="info",
                    message=f"{model_type}: vocabulary {vocab}, up to {positions} positions.")]


def check_chat_template(spec: JobSpec, facts: Facts, conversational: bool) -> list[Finding]:
    if conversational and facts.model.has_chat_template is False:
        return [_error("model.chat_template", f"The data is conversational but {spec.model} has no chat template.",
                       "Use an instruct/chat model, or convert the data to text or prompt/completion form.")]
    return []


def check_lora_targets(spec: JobSpec, facts: Facts) -> list[Finding]:
    peft = effective(spec.method, spec.hyperparameters).peft
    targets = peft["target_modules"]
    if peft["method"] != "lora" or not isinstance(targets, list):
        return []
    names = facts.model.module_names
    if names is None:
        return [Finding(code="lora.targets_unverified", severity="warning",
                        message="Could not read the model's module names, so lora_target_modules was not checked.",
                        fix='Use "all-linear" to let PEFT pick every linear layer.')]
    missing = [t for t in targets if t not in names]
    if not missing:
        return []
    linear = [n for n in names if n.endswith("proj") or n in ("fc1", "fc2", "c_attn", "c_proj", "dense")]
    return [_error("lora.targets", f"lora_target_modules {missing} do not exist in {spec.model}.",
                   f"Use names from this model, e.g. {linear[:7]}, or \"all-linear\".")]


# --- data, hyperparameters, config ------------------------------------------------------


def check_dataset(spec: JobSpec, facts: Facts) -> list[Finding]:
    """validate_dataset's findings for the method, on exactly the rows the job will see (mapped)."""
    report = facts.dataset
    if report is None:
        return []
    return [*report.findings, *check_chat_template(spec, facts, report.conversational)]


def check_hyperparameters(spec: JobSpec, facts: Facts | None = None) -> list[Finding]:
    return hyperparams.check_names(spec.method, spec.hyperparameters)


def check_method_rules(spec: JobSpec, facts: Facts) -> list[Finding]:
    """GRPO's batch arithmetic and rewards, DPO/KTO betas, a user reward file that must parse."""
    user = {"function": spec.reward_function} if spec.reward_file else None
    findings = check_method(spec.method, spec.hyperparameters, user)
    if spec.reward_file:
        findings += check_reward_file(Path(spec.reward_file), spec.reward_function or "reward")
    return findings


def check_config(spec: JobSpec, facts: Facts) -> list[Finding]:
    h = spec.hyperparameters
    findings: list[Finding] = []
    positions, max_length = max_positions(facts), h.get("max_length")
    if positions and isinstance(max_length, int) and max_length > positions:
        findings.append(_error("config.max_length", f"max_length {max_length} exceeds the model's {positions} positions.",
                               f"Set max_length={positions} (or less)."))
    if h.get("eval_strategy", "no") not in ("no", None) or h.get("do_eval"):
        findings.append(_error("config.eval_without_data",
                               "eval_strategy is set but the job has no evaluation split: the trainer would hang or fail.",
                               'Remove eval_strategy (or set eval_strategy="no").'))
    gpu = flavor_gpu(spec.flavor)
    if gpu in NO_BF16_GPUS and h.get("bf16"):
        findings.append(_error("config.bf16_unsupported", f"bf16 was requested but the {gpu} has no bf16.",
                               "Drop bf16 (the job picks fp16 on GPUs without bf16), or choose an L4/A10G/A100 flavor."))
    if gpu in SLOW_COMPILE_GPUS and h.get("torch_compile"):
        findings.append(Finding(code="config.torch_compile", severity="warning",
                                message=f"torch.compile on a {gpu} usually costs more compile time than it saves.",
                                fix="Remove torch_compile unless the run is long."))
    if spec.backend == "local" and spec.flavor:
        findings.append(Finding(code="config.flavor_ignored", severity="warning",
                                message=f"flavor={spec.flavor!r} has no effect on the local backend.",
                                fix="Drop flavor, or use a remote backend."))
    return findings


def check_dependencies(spec: JobSpec, facts: Facts) -> list[Finding]:
    if facts.python_error:
        return [_error("dependencies.python", f"The job's Python could not be checked: {facts.python_error}",
                       "Set JOBTRAIL_PYTHON to a working interpreter that has jobtrail[train] installed.")]
    if not facts.missing_requirements:
        return []
    return [_error("dependencies.missing", f"The job's Python lacks: {', '.join(facts.missing_requirements)}.",
                   "Install the training extra into that environment: pip install 'jobtrail[train]'")]


# --- remote backends ----------------------------------------------------------------------


def check_remote(spec: JobSpec, facts: Facts) -> list[Finding]:
    if spec.backend == "local":
        return []
    findings = [*_remote_token(facts), *_remote_paths(spec)]
    if spec.output and not (HUB_ID.match(spec.output) and "/" in spec.output):
        findings.append(_error("output.repo", f"output={spec.output!r} is not a Hub repo id; a remote job's disk is gone when it ends.",
                               "Pass output='<your-user-or-org>/<model-name>' (it is created, private, before submission)."))
    return findings


def check_estimate(spec: JobSpec, facts: Facts) -> list[Finding]:
    """Remote jobs: the flavor holds the job, and the timeout covers the estimate + 30%."""
    if spec.backend == "local":
        return []
    if not spec.flavor:
        return [_error("flavor.missing", "No flavor chosen for the HF job.",
                       "Pass flavor=... (estimate_cost recommends the cheapest that fits; hardware lists them).")]
    if facts.estimate_error or facts.estimate is None:
        why = facts.estimate_error or "the model's config.json could not be read"
        return [Finding(code="estimate.unavailable", severity="warning",
                        message=f"Memory and run time could not be estimated ({why}); the timeout and the fit were not checked.",
                        fix="Pass a timeout with room to spare, e.g. timeout=\"4h\".")]
    e = facts.estimate
    findings: list[Finding] = []
    if not e.fits.get(spec.flavor, True):
        better = f"flavor={e.recommended_flavor!r}" if e.recommended_flavor else "a bigger flavor"
        findings.append(_error("memory.does_not_fit",
                               f"The job needs ~{e.memory.total_gb:.1f} GB but {spec.flavor} offers {e.usable_gb:.1f} GB usable.",
                               f"Use {better}, or cut memory: smaller per_device_train_batch_size, shorter max_length, peft='lora'."))
    needed = math.ceil(e.hours * 3600 * TIMEOUT_BUFFER)
    if spec.timeout_s is None:
        findings.append(Finding(code="timeout.default", severity="info",
                                message=f"No timeout given: using {e.recommended_timeout} (estimate {human_duration(e.hours * 3600)} + 30%, "
                                        "rounded up; HF's own 30-minute default kills most training).",
                                fix=None))
    elif spec.timeout_s < needed:
        findings.append(_error("timeout.short",
                               f"timeout {human_duration(spec.timeout_s)} is shorter than the estimated {human_duration(e.hours * 3600)} "
                               f"(+30% buffer = {human_duration(needed)}).",
                               f"timeout=\"{e.recommended_timeout}\""))
    findings.append(Finding(code="estimate", severity="info",
                            message=f"~{human_duration(e.hours * 3600)} on {spec.flavor}, ~${e.cost_usd:.2f}; "
                                    f"{e.memory.total_gb:.1f} of {e.usable_gb:.1f} GB."))
    return findings


def _remote_token(facts: Facts) -> list[Finding]:
    if not facts.has_token:
        return [_error("auth.no_token", "HF Jobs needs a Hugging Face token, and none is set for the jobtrail server.",
                       "Create a write token at https://huggingface.co/settings/tokens and set HF_TOKEN in the server's environment.")]
    identity = facts.identity
    if identity is None or identity.error:
        detail = identity.error if identity else "not checked"
        if identity and identity.status == 401:
            return [_error("auth.invalid", f"The Hub rejected the token ({detail}).",
                           "Create a new token at https://huggingface.co/settings/tokens and set HF_TOKEN.")]
        return [Finding(code="auth.unverified", severity="warning", message=f"Could not check the token ({detail}).",
                        fix="Make sure the server can reach the Hub.")]
    if identity.can_write_repos is False:
        return [_error("auth.cannot_push", f"The token of {identity.name} ({identity.role}) cannot write repos, so the "
                       "trained model could not be pushed and all training would be lost.",
                       "Use a write token, or a fine-grained token with repo write access, as HF_TOKEN.")]
    if identity.can_write_repos is None:
        return [Finding(code="auth.push_unverified", severity="warning",
                        message="The token's write access to the output repo could not be confirmed (fine-grained token).",
                        fix="Give the token write access to the output repo's namespace, or use a write token.")]
    return []


def _remote_paths(spec: JobSpec) -> list[Finding]:
    findings = []
    if looks_local(spec.model):
        findings.append(_error("remote.local_model", f"{spec.model} is a local path; an HF job cannot see this machine's files.",
                               f"Push it first: hf upload <your-user>/{Path(spec.model).name} {spec.model}  then pass that id as model."))
    if looks_local(spec.dataset):
        name = Path(spec.dataset).stem
        findings.append(_error("remote.local_dataset", f"{spec.dataset} is a local file; an HF job cannot see this machine's files.",
                               f"Push it first: hf upload <your-user>/{name} {spec.dataset} --repo-type dataset  then pass that id as dataset."))
    return findings


Check = Callable[[JobSpec, Facts], list[Finding]]
CHECKS: tuple[Check, ...] = (
    check_model,
    check_lora_targets,
    check_dataset,
    check_hyperparameters,
    check_method_rules,
    check_config,
    check_dependencies,
    check_remote,
    check_estimate,
)


def run_all(spec: JobSpec, facts: Facts) -> list[Finding]:
    return [finding for check in CHECKS for finding in check(spec, facts)]


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def flavor_gpu(flavor: str | None) -> str | None:
    """The GPU of a flavor in the bundled catalog (enough to know bf16 and compile support)."""
    found = next((f for f in BUNDLED if f.name == flavor), None)
    return found.gpu if found else None


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs (Gemma 3, ...) keep the language model's numbers in text_config."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def _error(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="error", message=message, fix=fix)
