"""Preflight rules: each looks at one thing and returns Findings (code, severity, message, fix).

Rules are pure: everything they need from outside (files, the Hub, the job's Python) arrives
in `Facts`, gathered beforehand by facts.py, with the training job's effective hyperparameters
(`facts.job_values`, computed once by plan.py: what the rules judge is what the config holds). A
check that could not run says so with a warning; it never passes silently. plan.py runs them,
once per job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from jobtrail.backends.registry import traits_of
from jobtrail.estimate import EstimateResult
from jobtrail.estimate.cost import TIMEOUT_BUFFER
from jobtrail.estimate.hardware import BUNDLED
from jobtrail.estimate.parallel import describe, too_many_processes
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight import hyperparams
from jobtrail.preflight.architectures import is_causal_lm, is_known
from jobtrail.preflight.caps import check_caps
from jobtrail.preflight.dependencies import check_dependencies
from jobtrail.preflight.facts import Facts, requested_processes
from jobtrail.preflight.learning_rate import check_learning_rate
from jobtrail.preflight.lora_targets import check_lora_targets
from jobtrail.preflight.methods import check_method
from jobtrail.preflight.outputs import check_output, check_output_repo
from jobtrail.preflight.passthrough import check_passthrough
from jobtrail.preflight.probes import ModelFacts
from jobtrail.preflight.reward_file import check_reward_source
from jobtrail.preflight.run_length import check_run_length
from jobtrail.preflight.trackio_space import check_trackio
from jobtrail.util.refs import HUB_ID, looks_local
from jobtrail.util.timefmt import human_duration

# GPUs without bf16, and those where torch.compile costs more than it saves on short jobs.
NO_BF16_GPUS = ("T4",)
SLOW_COMPILE_GPUS = ("T4", "A10G")
# The shortest timeout a training job can live through: its imports and model load alone take longer.
MIN_TRAINING_TIMEOUT_S = 60


def max_positions(facts: Facts) -> int | None:
    """The model's positions, which cap the default max_length."""
    return facts.model.max_positions if facts.model else None


# --- model ----------------------------------------------------------------------------


def check_model(spec: JobSpec, facts: Facts) -> list[Finding]:
    m = facts.model
    if m is None:
        return []
    if m.access == "not_found":
        if m.local:
            code, what = (
                ("model.missing", "does not exist")
                if m.detail == "no such directory"
                else ("model.no_config", "has no readable config.json, so it is not a transformers model directory")
            )
            return [
                _error(
                    code,
                    f"Model {spec.model} {what}.",
                    "Pass the directory that holds config.json and the weights, or a Hub id like 'Qwen/Qwen2.5-0.5B'.",
                )
            ]
        return [
            _error(
                "model.not_found",
                f"No model {spec.model!r} on the Hub ({m.detail}).",
                "Check the spelling (org/name); for a private repo set HF_TOKEN to a token that can read it.",
            )
        ]
    if m.access == "gated":
        return [
            _error(
                "model.gated",
                f"{spec.model} is gated and your token has no access yet.",
                f"Accept the terms at https://huggingface.co/{spec.model} with your account, then retry.",
            )
        ]
    if m.access == "unverified":
        return [
            Finding(
                code="model.unverified",
                severity="warning",
                message=f"Could not check {spec.model!r} on the Hub ({m.detail}); the job downloads it.",
                fix="Make sure the job's machine can reach the Hub, or pass a local model directory.",
            )
        ]
    return _architecture(spec, m)


def _architecture(spec: JobSpec, m: ModelFacts) -> list[Finding]:
    config = m.config or {}
    model_type = config.get("model_type")
    if not model_type:
        return [
            _error(
                "model.architecture",
                f"{spec.model}'s config.json has no model_type.",
                "Use a model saved by transformers (save_pretrained writes model_type).",
            )
        ]
    if not is_known(model_type):
        return [
            _error(
                "model.architecture",
                f"transformers does not know model_type {model_type!r}.",
                "Upgrade transformers in the job's environment, or pick a supported model.",
            )
        ]
    if not is_causal_lm(model_type):
        return [
            _error(
                "model.architecture",
                f"{model_type!r} has no causal-LM head, which SFT needs.",
                "Pick a decoder (causal LM) model such as Qwen2, Llama, Mistral or Gemma.",
            )
        ]
    vocab, positions = m.text_config.get("vocab_size"), m.max_positions
    return [
        Finding(
            code="model.ok", severity="info", message=f"{model_type}: vocabulary {vocab}, up to {positions} positions."
        )
    ]


def check_chat_template(spec: JobSpec, facts: Facts, conversational: bool) -> list[Finding]:
    if conversational and facts.model is not None and facts.model.has_chat_template is False:
        return [
            _error(
                "model.chat_template",
                f"The data is conversational but {spec.model} has no chat template.",
                "Use an instruct/chat model, or convert the data to text or prompt/completion form.",
            )
        ]
    return []


# --- data, hyperparameters, config ------------------------------------------------------


def check_dataset(spec: JobSpec, facts: Facts) -> list[Finding]:
    """validate_dataset's findings for the method, on exactly the rows the job will see (mapped)."""
    report = facts.dataset
    if report is None:
        return []
    # Unmeasured token lengths are the norm for a Hub model (its tokenizer is not downloaded in
    # preflight): worth knowing, not a warning on every remote submit.
    findings = [f.model_copy(update={"severity": "info"}) if f.code == "dataset.tokens" else f for f in report.findings]
    return [*findings, *check_chat_template(spec, facts, report.conversational)]


def check_hyperparameters(spec: JobSpec, facts: Facts) -> list[Finding]:
    return [*hyperparams.check_names(spec.method, spec.hyperparameters), *check_passthrough(spec)]


def check_method_rules(spec: JobSpec, facts: Facts) -> list[Finding]:
    """GRPO's batch arithmetic and rewards, DPO/KTO betas, a user reward file that must parse."""
    user = {"function": spec.reward_function} if spec.reward_file else None
    findings = check_method(facts.job_values, user)
    if spec.reward_file and facts.reward_problem:
        findings.append(facts.reward_problem)
    elif spec.reward_file and facts.reward_source is not None:
        findings += check_reward_source(facts.reward_source, spec.reward_file, spec.reward_function or "reward")
    return findings


def check_config(spec: JobSpec, facts: Facts) -> list[Finding]:
    values = facts.job_values
    h = values.given  # "4096" is judged as the 4096 the job gets
    findings: list[Finding] = []
    positions, max_length = max_positions(facts), h.get("max_length")
    if positions and isinstance(max_length, int) and max_length > positions:
        findings.append(
            _error(
                "config.max_length",
                f"max_length {max_length} exceeds the model's {positions} positions.",
                f"Set max_length={positions} (or less).",
            )
        )
    evaluates = h.get("eval_strategy", "no") not in ("no", None) or h.get("do_eval")
    if evaluates and not (spec.eval_dataset or h.get("eval_split_ratio")):
        findings.append(
            _error(
                "config.eval_without_data",
                "eval_strategy is set but the job has nothing to evaluate on: the trainer would fail at start.",
                "Pass eval_dataset=... (held-out rows in the training data's format), or hyperparameters "
                "eval_split_ratio=0.1 (a held-out slice of the training rows); or remove eval_strategy.",
            )
        )
    gpu = flavor_gpu(spec.flavor)
    if gpu in NO_BF16_GPUS and h.get("bf16"):
        findings.append(
            _error(
                "config.bf16_unsupported",
                f"bf16 was requested but the {gpu} has no bf16.",
                "Drop bf16 (the job picks fp16 on GPUs without bf16), or choose an L4/A10G/A100 flavor.",
            )
        )
    if gpu in SLOW_COMPILE_GPUS and h.get("torch_compile"):
        findings.append(
            Finding(
                code="config.torch_compile",
                severity="warning",
                message=f"torch.compile on a {gpu} usually costs more compile time than it saves.",
                fix="Remove torch_compile unless the run is long.",
            )
        )
    backend = traits_of(spec.backend)
    if spec.flavor and not backend.flavors:
        findings.append(
            Finding(
                code="config.flavor_ignored",
                severity="warning",
                message=f"flavor={spec.flavor!r} has no effect on the {backend.name} backend.",
                fix="Drop flavor, or use a remote backend.",
            )
        )
    return findings


# --- remote backends ----------------------------------------------------------------------


def check_remote(spec: JobSpec, facts: Facts) -> list[Finding]:
    backend = traits_of(spec.backend)
    if backend.runs_here:
        return []
    findings = check_remote_paths(spec, facts)
    if backend.output != "hub_repo":  # the token pushes the job's output: a job that pushes nothing needs none
        return findings
    findings = [*_remote_token(facts, backend.place), *findings]
    if spec.output and not (HUB_ID.match(spec.output) and "/" in spec.output):
        findings.append(
            _error(
                "output.repo",
                f"output={spec.output!r} is not a Hub repo id; a remote job's disk is gone when it ends.",
                "Pass output='<your-user-or-org>/<model-name>' (it is created, private, when the job starts).",
            )
        )
    return findings


def check_timeout_unit(spec: JobSpec, facts: Facts) -> list[Finding]:
    """A timeout under a minute ends any job before it trains (imports and the model load alone take longer):
    timeout=30 was meant in minutes, and a number alone is seconds. A warning: a test of timeouts may mean it."""
    seconds = spec.timeout_s
    if seconds is None or seconds >= MIN_TRAINING_TIMEOUT_S:
        return []
    return [
        Finding(
            code="timeout.seconds",
            severity="warning",
            message=f"timeout is {seconds} seconds: a job needs longer than that to import its libraries and load "
            "the model, so it would time out before its first step.",
            fix=f'timeout="{seconds}m" if minutes were meant (a number alone is seconds), or leave timeout out.',
        )
    ]


def check_estimate(spec: JobSpec, facts: Facts) -> list[Finding]:
    """Remote jobs: the flavor holds the job, and the timeout covers the estimate + 30%. Local jobs:
    a timeout shorter than this machine's estimate + 30% is a warning (a CPU estimate is rough)."""
    backend = traits_of(spec.backend)
    if backend.runs_here:
        return _local_timeout(spec, facts.estimate)
    if backend.flavors and not spec.flavor:
        return [
            _error(
                "flavor.missing",
                "No flavor chosen for the HF job.",
                "Pass flavor=... (estimate_cost recommends the cheapest that fits; hardware lists them).",
            )
        ]
    if facts.estimate_error or facts.estimate is None or not spec.flavor:
        # Without flavors a job runs on the backend's own machines, which the flavor table does not hold.
        unread = "the model's config.json could not be read"
        why = facts.estimate_error or (unread if spec.flavor else f"{backend.place} has no flavor table")
        return [
            Finding(
                code="estimate.unavailable",
                severity="warning",
                message=f"Memory and run time could not be estimated ({why}); the timeout and the fit were "
                "not checked.",
                fix='Pass a timeout with room to spare, e.g. timeout="4h".',
            )
        ]
    e = facts.estimate
    findings: list[Finding] = []
    if not e.fits.get(spec.flavor, True):
        better = f"flavor={e.recommended_flavor!r}" if e.recommended_flavor else "a bigger flavor"
        findings.append(
            _error(
                "memory.does_not_fit",
                f"The job needs ~{e.memory.total_gb:.1f} GB{_per_gpu(e)} but {spec.flavor} offers "
                f"{e.usable_gb:.1f} GB usable{' on each' if _per_gpu(e) else ''}.",
                f"Use {better}, or cut memory: smaller per_device_train_batch_size, shorter max_length, peft='lora'.",
            )
        )
    if e.hours is None:  # preflight always passes a size; without one there is no time to judge
        return findings
    needed = math.ceil(e.hours * 3600 * TIMEOUT_BUFFER)
    estimated = human_duration(e.hours * 3600)
    if spec.timeout_s is None:
        findings.append(
            Finding(
                code="timeout.default",
                severity="info",
                message=f"No timeout given: using {e.recommended_timeout} (estimate {estimated} + "
                "30%, rounded up; HF's own 30-minute default kills most training).",
                fix=None,
            )
        )
    elif spec.timeout_s < needed:
        findings.append(
            _error(
                "timeout.short",
                f"timeout {human_duration(spec.timeout_s)} is shorter than the "
                f"estimated {estimated} (+30% buffer = {human_duration(needed)}).",
                f'timeout="{e.recommended_timeout}"',
            )
        )
    findings.append(
        Finding(
            code="estimate",
            severity="info",
            message=f"~{human_duration(e.hours * 3600)} on {spec.flavor}, ~${e.cost_usd:.2f}; "
            f"{e.memory.total_gb:.1f} of {e.usable_gb:.1f} GB.",
        )
    )
    return findings


def check_launcher(spec: JobSpec, facts: Facts) -> list[Finding]:
    """One worker per GPU at most (NCCL gives each its own); the choice made is said when it is many workers."""
    requested, gpus = requested_processes(facts.job_values), facts.gpus
    backend = traits_of(spec.backend)
    where = str(spec.flavor) if backend.flavors else backend.place
    if too_many_processes(gpus, requested):
        bigger = f", or a flavor with {requested} GPUs (hardware() lists them)" if backend.flavors else ""
        return [
            _error(
                "launcher.too_many_processes",
                f"num_processes={requested} but {where} has {gpus} GPU{'s' if gpus != 1 else ''}: each worker "
                "needs a GPU of its own.",
                f"Set hyperparameters num_processes to {gpus} or fewer (or leave it out: one per GPU){bigger}.",
            )
        ]
    if facts.launcher.num_processes == 1:
        return []
    return [Finding(code="launcher", severity="info", message=describe(facts.launcher, gpus, where))]


def _per_gpu(e: EstimateResult) -> str:
    """What the estimate's memory counts when the job runs one worker per GPU: one GPU's share."""
    strategy = {"ddp": "DDP", "fsdp": "sharded with FSDP"}.get(e.launcher.strategy)
    return f" per GPU ({e.launcher.num_processes} workers, {strategy})" if strategy else ""


def _local_timeout(spec: JobSpec, e: EstimateResult | None) -> list[Finding]:
    if e is None or e.hours is None or spec.timeout_s is None:
        return []
    needed = math.ceil(e.hours * 3600 * TIMEOUT_BUFFER)
    if spec.timeout_s >= needed:
        return []
    return [
        Finding(
            code="timeout.short",
            severity="warning",
            message=f"timeout {human_duration(spec.timeout_s)} is shorter than this machine's estimated "
            f"{human_duration(e.hours * 3600)} (+30% buffer = {human_duration(needed)}).",
            fix=f'timeout="{e.recommended_timeout}", or fewer max_steps',
        )
    ]


def _remote_token(facts: Facts, place: str) -> list[Finding]:
    if not facts.has_token:
        return [
            _error(
                "auth.no_token",
                f"{place} needs a Hugging Face token, and none is set for the jobtrail server.",
                "Create a write token at https://huggingface.co/settings/tokens and set HF_TOKEN "
                "in the server's environment.",
            )
        ]
    identity = facts.identity
    if identity is None or identity.error:
        detail = identity.error if identity else "not checked"
        if identity and identity.status == 401:
            return [
                _error(
                    "auth.invalid",
                    f"The Hub rejected the token ({detail}).",
                    "Create a new token at https://huggingface.co/settings/tokens and set HF_TOKEN.",
                )
            ]
        return [
            Finding(
                code="auth.unverified",
                severity="warning",
                message=f"Could not check the token ({detail}).",
                fix="Make sure the server can reach the Hub.",
            )
        ]
    if identity.can_write_repos is False:
        return [
            _error(
                "auth.cannot_push",
                f"The token of {identity.name} ({identity.role}) cannot write repos, so the "
                "trained model could not be pushed and all training would be lost.",
                "Use a write token, or a fine-grained token with repo write access, as HF_TOKEN.",
            )
        ]
    if identity.can_write_repos is None:
        return [
            Finding(
                code="auth.push_unverified",
                severity="warning",
                message="The token's write access to the output repo could not be confirmed (fine-grained token).",
                fix="Give the token write access to the output repo's namespace, or use a write token.",
            )
        ]
    return []


def check_remote_paths(spec: JobSpec, facts: Facts) -> list[Finding]:
    """A remote job cannot see this machine's files."""
    if traits_of(spec.backend).runs_here:
        return []
    findings = []
    if looks_local(spec.model):
        findings.append(
            _error(
                "remote.local_model",
                f"{spec.model} is a local path; an HF job cannot see this machine's files.",
                f"Push it first: hf upload <your-user>/{Path(spec.model).name} "
                f"{spec.model}  then pass that id as model.",
            )
        )
    if spec.dataset and looks_local(spec.dataset):
        name = Path(spec.dataset).stem
        findings.append(
            _error(
                "remote.local_dataset",
                f"{spec.dataset} is a local file; an HF job cannot see this machine's files.",
                f"Push it first: hf upload <your-user>/{name} {spec.dataset} "
                "--repo-type dataset  then pass that id as dataset.",
            )
        )
    return findings


def check_output_dir(spec: JobSpec, facts: Facts) -> list[Finding]:
    """A local job's chosen output directory is confined (outputs.py)."""
    return check_output(spec, facts.output)


def check_output_target(spec: JobSpec, facts: Facts) -> list[Finding]:
    """A remote training job's Hub repo: one its token may create or write (outputs.py)."""
    return check_output_repo(facts.output_repo, facts.identity)


Check = Callable[[JobSpec, Facts], list[Finding]]
TRAINING_CHECKS: tuple[Check, ...] = (
    check_output_dir,
    check_model,
    check_lora_targets,
    check_dataset,
    check_hyperparameters,
    check_learning_rate,
    check_method_rules,
    check_config,
    check_run_length,
    check_dependencies,
    check_remote,
    check_output_target,
    check_trackio,
    check_launcher,
    check_estimate,
    check_timeout_unit,
    check_caps,
)
# What a config cannot be built without: names it knows, method values it can hold, and a directory
# it may write into (force never sends a job into someone's files). Other errors block the submission,
# yet a forced one still has its config.
CONFIG_CHECKS: tuple[Check, ...] = (check_output_dir, check_hyperparameters, check_method_rules)


def judge(spec: JobSpec, facts: Facts, checks: tuple[Check, ...] = TRAINING_CHECKS) -> tuple[list[Finding], bool]:
    """(every finding of `checks`, in order; whether the config can be built): each rule runs once."""
    results = [(check, check(spec, facts)) for check in checks]
    config_ok = not any(
        f.code != hyperparams.OUT_OF_RANGE
        for check, found in results
        if check in CONFIG_CHECKS
        for f in blocking(found)
    )
    return [finding for _, found in results for finding in found], config_ok


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def flavor_gpu(flavor: str | None) -> str | None:
    """The GPU of a flavor in the bundled catalog (enough to know bf16 and compile support)."""
    found = next((f for f in BUNDLED if f.name == flavor), None)
    return found.gpu if found else None


# Checks that end in one error read alike (check_dependencies): each states its own fact.
def _error(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="error", message=message, fix=fix)
