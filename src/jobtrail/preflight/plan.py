"""ONE preflight pass for every job jobtrail starts: training (submit, a retry with changes), an
evaluation, a GGUF conversion.

    plan(spec, env, task=None, previous=None) -> Plan(facts, findings, config, script, push_to, smoke)
    Plan.accepts(force) / Plan.forced(force) the verdict: whether a job starts from it, forced or not
    job_values(spec) -> Effective            a training job's effective hyperparameters
    estimate_alone(EstimateRequest(...))    estimate_cost asked without a job (the tool)

Before anything, two refusals that no force passes (raised, so nothing is read, stored or rendered): credentials in
the hyperparameters or dataset_mapping (credentials.py), and a local input outside the data roots (data_roots.py).

0. a training job's effective hyperparameters are computed once (job_values): the facts carry them
   to every rule, the estimate and the speedups read them, and the config is built from them;
1. facts.py gathers everything from outside, first: the model, the data, a reward file, the Hub
   identity, whether it may write the output repo, and the estimate (remote), what the job's
   interpreter lacks of the template's dependencies (local);
2. the pure rules run once (rules.py; conversion.py's for a conversion);
3. the config is built (templates/configs.py, outcomes/evals.py) unless a finding leaves nothing
   to build it from, with a training job's speed measures for its device (speedups.py);
4. the script is rendered from it (a remote job's header says how HF Jobs runs it: [tool.hf-jobs]),
   and for a job submitted with smoke_steps, the smoke run's config and script too.

Nothing after the plan judges, edits or renders: a submission, a dry run, a retry and a follower take
its verdict, config and script as they are, so a dry run says what a submit would do. Only the launch
acts on what the plan judged: it claims a local output directory or creates the Hub repo (outputs.py).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from jobtrail.backends.hf_jobs import DEFAULT_FLAVOR
from jobtrail.backends.registry import traits_of
from jobtrail.errors import InvalidRequestError
from jobtrail.estimate import DataStats, EstimateResult, Flavor, estimate_cost
from jobtrail.estimate.estimator import choice
from jobtrail.estimate.memory import device_for
from jobtrail.estimate.microbatch import tunable
from jobtrail.methods import METHODS, TrainingMethod
from jobtrail.methods.effective import Effective, effective
from jobtrail.models import SINGLE_PROCESS, Finding, JobSpec, Launcher, Speedups
from jobtrail.outcomes.evals import Evaluation, eval_config
from jobtrail.preflight import caps, hyperparams, rules, speedups
from jobtrail.preflight.conversion import check_conversion
from jobtrail.preflight.credentials import refuse_credentials
from jobtrail.preflight.data_roots import refuse_unconfined
from jobtrail.preflight.dependencies import check_dependencies
from jobtrail.preflight.facts import (
    Facts,
    PlanEnv,
    gather_conversion,
    gather_evaluation,
    gather_output_repo,
    gather_training,
)
from jobtrail.preflight.job_refs import refuse_job_as_dataset
from jobtrail.preflight.methods import unknown_method
from jobtrail.preflight.probes import PushedModelFacts
from jobtrail.preflight.remote_code import remote_code
from jobtrail.preflight.run_length import RunLength, fit_logging, run_length, smoke_too_long
from jobtrail.requests import EstimateRequest
from jobtrail.templates.configs import REMOTE_OUTPUT_DIR, build_config, conversion_config, default_repo, retry_config
from jobtrail.templates.llama_cpp import LLAMA_CPP_PYTHON_VERSION
from jobtrail.templates.render import render_script

if TYPE_CHECKING:
    from jobtrail.ledger.store import Ledger

__all__ = ["Conversion", "Evaluation", "Plan", "PlanEnv", "SmokeRun", "estimate_alone", "job_values", "plan"]

# Where a remote conversion job builds llama.cpp: its machine is fresh, so no cache survives it.
REMOTE_LLAMA_CPP_CACHE = Path("/tmp/jobtrail-llama-cpp")


@dataclass(frozen=True)
class Conversion:
    """What a conversion makes, beyond its spec (model: the source; output: a directory or Hub repo)."""

    quantizations: list[str]
    pre_tokenizer: str | None = None


@dataclass(frozen=True)
class SmokeRun:
    """The first attempt of a job submitted with smoke_steps: the job's config for that many steps, pushing
    nothing and, where output is a directory, writing into one of its own (so the full job never finds and
    resumes from its checkpoints), and its script."""

    config: dict[str, Any]
    script: str


@dataclass(frozen=True)
class Plan:
    facts: Facts
    findings: list[Finding]
    config: dict[str, Any] | None  # None when a finding leaves nothing to build it from
    script: str  # "" without a config
    push_to: str | None = None  # the Hub repo a remote job pushes to
    # The timeout the job runs with: the one given, else a remote training job's estimate + 30% (rounded
    # up to hours; HF's own 30-minute default kills most training).
    timeout_s: int | None = None
    smoke: SmokeRun | None = None  # a job planned with smoke_steps: what its first attempt runs

    @property
    def blocked(self) -> bool:
        return bool(rules.blocking(self.findings))

    def accepts(self, force: bool = False) -> bool:
        """The verdict: a job starts from this plan when nothing blocks it, or when it is forced (force=true, which
        its receipt records) past errors force may pass: a config was built, and no finding is one that force
        never overrides (the daily budget, caps.UNFORCEABLE)."""
        if self.config is None:
            return False
        return not self.blocked or (force and not caps.unforceable(self.findings))

    def forced(self, force: bool) -> bool:
        """Whether a job started from this plan with `force` is forced past its errors."""
        return self.blocked and self.accepts(force)

    @property
    def first_run(self) -> tuple[dict[str, Any], str]:
        """(config, script) of the job's first attempt: its smoke run when it has one, else the job itself."""
        if self.smoke is not None:
            return self.smoke.config, self.smoke.script
        assert self.config is not None, "a plan without a config starts nothing (accepts is False)"
        return self.config, self.script

    @property
    def estimate(self) -> EstimateResult | None:
        return self.facts.estimate

    @property
    def launcher(self) -> Launcher:
        """How the job's processes start (an evaluation or a conversion is always one process)."""
        return self.facts.launcher if self.config and "launcher" in self.config else SINGLE_PROCESS


def plan(
    spec: JobSpec, env: PlanEnv, task: Evaluation | Conversion | None = None, previous: Mapping[str, Any] | None = None
) -> Plan:
    """Facts → findings → config → script for `spec`; `task` says what an evaluation or a conversion
    does, `previous` is the config of the attempt a retry follows (its output is kept)."""
    refuse_credentials(spec)  # raises: not even a forced job may store one
    refuse_unconfined(spec, env.home)  # raises: nothing outside the data roots is read, by preflight or the job
    if isinstance(task, Evaluation):
        return _evaluation(spec, task, env)
    if isinstance(task, Conversion):
        return _conversion(spec, task, env)
    if spec.method not in METHODS:
        return Plan(facts=Facts(), findings=unknown_method(spec.method), config=None, script="")
    refuse_job_as_dataset(spec.dataset, env.ledger)  # raises: a job's id is no dataset, local or on the Hub
    # The names people write for a field (lr, batch, epochs) are that field from here on: every rule, the estimate
    # and the config read the field's own name.
    named = hyperparams.read_names(spec.method, spec.hyperparameters)
    code = remote_code(spec.model, named.values, traits_of(spec.backend).runs_here)  # the model's Python, Hub kernels
    return _training(spec.model_copy(update={"hyperparameters": named.values}), env, previous, [*named.findings, *code])


def job_values(spec: JobSpec) -> Effective:
    """A training job's effective hyperparameters, from every input that changes them (its method, its
    hyperparameters, whether it has an eval_dataset): computed here once per plan and handed to every reader,
    and here too for a config or an estimate made without a plan (estimate_alone, tools/, bench/)."""
    return effective(spec.method, spec.hyperparameters, eval_dataset=bool(spec.eval_dataset))


def estimate_alone(
    request: EstimateRequest,
    *,  # shape shared with estimator.estimate_cost: its own options, passed through as they are
    tune_micro_batch: bool = False,
    config: dict[str, Any] | None = None,
    calibration: Ledger | None = None,
    api: Any = None,
    data: DataStats | None = None,
    machine: Flavor | None = None,
) -> EstimateResult:
    """estimate_cost asked without a job (the tool): the job submit would run with the request's
    hyperparameters, estimated (estimate/estimator.py says the rest). `machine` describes a flavor that no
    catalog names (a bench's own host), in place of the request's."""
    chosen = cast(TrainingMethod, choice("method", request.method, METHODS))
    named = hyperparams.read_names(chosen, request.hyperparameters())
    job = JobSpec(method=chosen, model=request.model, dataset=request.dataset or "", hyperparameters=named.values)
    return estimate_cost(
        request.model,
        job_values(job),
        request.dataset,
        request.num_examples,
        request.avg_tokens,
        machine or request.flavor,
        tune_micro_batch=tune_micro_batch,
        config=config,
        calibration=calibration,
        api=api,
        data=data,
    )


def _training(spec: JobSpec, env: PlanEnv, previous: Mapping[str, Any] | None, named: list[Finding]) -> Plan:
    """A training job's plan; `named`: what reading its hyperparameters' names found (read_names), and the code it
    would run that nobody wrote here (remote_code: an error there, like a conflict, leaves no config to build)."""
    facts = gather_training(spec, job_values(spec), env)
    report = facts.dataset
    length = run_length(facts.job_values, report.rows if report else None, facts.launcher.num_processes)
    fitted, fitting = fit_logging(facts.job_values, length)
    facts = replace(facts, values=fitted)
    push_to = _push_target(spec, facts, previous)
    facts = gather_output_repo(facts, push_to, env.hub_token)
    judged, config_ok = rules.judge(spec, facts)
    findings = [*named, *judged, *fitting]
    config_ok = config_ok and not rules.blocking(named)  # two values for one field: which one is meant is unknown
    config = None
    if config_ok:
        target = facts.target or speedups.Target(flavor=spec.flavor or "local")
        chosen = _speedups(spec, facts, target)
        findings = [*findings, *speedups.attention_findings(target, facts.job_values.given, chosen)]
        config = _training_config(spec, facts, previous, push_to, chosen)
    timeout_s = spec.timeout_s
    # A job run elsewhere gets its backend's default timeout without one (HF's 30 minutes); this machine's runs on.
    if timeout_s is None and not traits_of(spec.backend).runs_here and facts.estimate is not None:
        timeout_s = facts.estimate.recommended_timeout_s
    hf_jobs = _hf_jobs_table(spec, env, timeout_s)
    return Plan(
        facts=facts,
        findings=findings,
        config=config,
        script=_render(spec, spec.method, config, hf_jobs),
        push_to=push_to,
        timeout_s=timeout_s,
        smoke=_smoke_run(spec, env, config, hf_jobs, length),
    )


def _push_target(spec: JobSpec, facts: Facts, previous: Mapping[str, Any] | None) -> str | None:
    """The Hub repo the job pushes to: a retry's keeps its run's; a job whose results go to the Hub pushes to the
    output given, else to a new repo of the token's user; a job writing to a directory pushes nowhere."""
    if previous is not None:
        return previous.get("hub_model_id")
    if traits_of(spec.backend).output != "hub_repo":
        return None
    owner = facts.identity.name if facts.identity and facts.identity.name else None
    return spec.output or (default_repo(owner, spec) if owner else None)


def _training_config(
    spec: JobSpec, facts: Facts, previous: Mapping[str, Any] | None, push_to: str | None, chosen: Speedups
) -> dict[str, Any]:
    """The job's config, built with its speed measures: a retry's from the attempt it follows (same output)."""
    values, positions = facts.job_values, rules.max_positions(facts)
    if previous is not None:
        return retry_config(
            previous, spec, values, facts.reward_source, facts.launcher, max_positions=positions, speedups=chosen
        )
    return build_config(
        spec,
        values,
        _output_dir(spec),
        positions,
        push_to=push_to,
        reward_source=facts.reward_source,
        launcher=facts.launcher,
        speedups=chosen,
    )


def _smoke_run(
    spec: JobSpec,
    env: PlanEnv,
    config: dict[str, Any] | None,
    hf_jobs: dict[str, str | list[str]] | None,
    length: RunLength,
) -> SmokeRun | None:
    """The smoke run of a job planned with smoke_steps: its config for smoke_steps steps, pushing nothing, and
    locally into a directory of its own (a remote job's working directory is its own anyway), with its script.
    smoke_steps must be fewer than the steps the job trains for, when they are known: its max_steps, or those
    its rows make (raised, as for any argument that cannot be turned into a job)."""
    steps = spec.smoke_steps
    if steps is None or config is None:
        return None
    max_steps = config["training_args"].get("max_steps")
    if isinstance(max_steps, int) and 0 < max_steps <= steps:
        too_long: str | None = f"smoke_steps={steps} is not fewer than the job's max_steps ({max_steps})"
    else:
        too_long = smoke_too_long(steps, length)
    if too_long is not None:
        whole = max_steps if isinstance(max_steps, int) and max_steps > 0 else length.steps
        assert whole is not None
        raise InvalidRequestError(
            f"{too_long}: the smoke run would be the whole job.",
            fix=f"Pass smoke_steps below {whole} (a few steps, e.g. {max(1, min(5, whole // 4))}), "
            "or leave smoke_steps out: the job is that short already.",
        )
    smoke = copy.deepcopy(config)
    smoke["training_args"]["max_steps"] = steps
    smoke["push_to_hub"], smoke["hub_model_id"] = False, None
    if traits_of(spec.backend).output == "directory":
        assert env.home is not None, "a local smoke run writes under the service's home"
        smoke["output_dir"] = str(env.home / "runs" / env.run_id / "smoke")
    return SmokeRun(config=smoke, script=_render(spec, spec.method, smoke, hf_jobs))


def _speedups(spec: JobSpec, facts: Facts, target: speedups.Target) -> Speedups:
    """The training job's speed measures, from its device, model, hyperparameters and estimate."""
    model = facts.model.text_config if facts.model else {}
    estimate = facts.estimate
    device = device_for(gpu_count=1 if target.gpu else 0, bf16=target.bf16)
    why = facts.estimate_error or "no estimate of the job's memory (its model's config.json)"
    train_s, train_unknown = None, why
    if estimate is not None:
        why = tunable(device, spec.method) or "the estimate chose no split"
        if estimate.steps is not None and estimate.step_time_s is not None:
            train_s = estimate.steps * estimate.step_time_s
        train_unknown = f"the estimate has no training time ({estimate.time_unknown or 'no step time'})"
    values = facts.job_values
    args = values.training_args
    workload = speedups.Workload(
        family=model.get("model_type"),
        multimodal=bool(facts.model and (facts.model.config or {}).get("vision_config")),
        processes=facts.launcher.num_processes,
        effective_batch=int(args["per_device_train_batch_size"]) * int(args["gradient_accumulation_steps"]),
        train_s=train_s,
        train_unknown=train_unknown,
    )
    return speedups.choose(
        spec.method,
        target,
        values.given,
        workload,
        micro_batch=estimate.micro_batch if estimate else None,
        micro_batch_off=why,
    )


def _evaluation(spec: JobSpec, task: Evaluation, env: PlanEnv) -> Plan:
    facts = gather_evaluation(spec, task, env)
    findings, _ = rules.judge(spec, facts, EVALUATION_CHECKS)
    config = None
    if not rules.blocking(findings):
        if task.hub is not None and facts.pushed is not None and facts.pushed.revision:
            # The commit preflight looked at is the one the job reads, whatever is pushed meanwhile.
            task = replace(task, hub=replace(task.hub, revision=facts.pushed.revision))
        remote = traits_of(spec.backend).output == "hub_repo"  # in the job's own working directory
        config = eval_config(spec.model, spec.dataset, task, output_dir=_output_dir(spec), remote=remote)
    script = _render(spec, "evaluate", config, _hf_jobs_table(spec, env, spec.timeout_s))
    return Plan(facts=facts, findings=findings, config=config, script=script, timeout_s=spec.timeout_s)


def _conversion(spec: JobSpec, task: Conversion, env: PlanEnv) -> Plan:
    facts = gather_conversion(spec, env)
    assert facts.conversion is not None
    findings = [
        *check_conversion(facts.conversion, task.quantizations, task.pre_tokenizer),
        *_conversion_output(spec),
        *rules.check_output_dir(spec, facts),
        *check_dependencies(spec, facts),
    ]
    backend = traits_of(spec.backend)
    remote = backend.output == "hub_repo"
    push_to = spec.output if remote else None
    config = None
    if not rules.blocking(findings):
        cache = env.llama_cpp_cache if backend.runs_here else REMOTE_LLAMA_CPP_CACHE
        config = conversion_config(
            spec.model,
            output_dir=_output_dir(spec),
            cache_dir=cache / LLAMA_CPP_PYTHON_VERSION,
            quantizations=task.quantizations,
            pre_tokenizer=task.pre_tokenizer,
            push_to_hub=remote,
            hub_model_id=push_to,
        )
    script = _render(spec, "convert_gguf", config, _hf_jobs_table(spec, env, spec.timeout_s))
    return Plan(facts=facts, findings=findings, config=config, script=script, push_to=push_to, timeout_s=spec.timeout_s)


def check_adapter(spec: JobSpec, facts: Facts) -> list[Finding]:
    """An evaluated local adapter (a job's final model or checkpoint) must still be on disk."""
    if facts.missing_adapter is None:
        return []
    return [
        Finding(
            code="adapter.missing",
            severity="error",
            message=f"The adapter to evaluate, {facts.missing_adapter}, is not on disk.",
            fix="Evaluate another committed checkpoint (inspect lists them), or the model alone.",
        )
    ]


def check_pushed_model(spec: JobSpec, facts: Facts) -> list[Finding]:
    """An evaluated remote job's final model or checkpoint must be in its Hub repo: its machine is gone."""
    pushed = facts.pushed
    if pushed is None:
        return []
    if pushed.access == "unverified":
        return [
            Finding(
                code="adapter.unverified",
                severity="warning",
                message=f"What {pushed.job_id} pushed to {pushed.repo_id} could not be looked at ({pushed.detail}): "
                "the evaluation reads it when it starts, and fails if it is not there.",
            )
        ]
    problem, fix = _not_pushed(pushed)
    if problem is None:
        return []
    return [Finding(code="adapter.not_pushed", severity="error", message=problem, fix=fix)]


def _not_pushed(pushed: PushedModelFacts) -> tuple[str | None, str | None]:
    """(what is missing from the job's Hub repo, the fix), or (None, None) when the model asked for is there."""
    job, step = pushed.job_id, pushed.checkpoint_step
    if pushed.access != "ok":
        return (
            f"{job}'s Hub repo {pushed.repo_id} cannot be read: {pushed.detail}.",
            "Evaluate through a server whose HF_TOKEN can read that repo (the namespace the job ran in).",
        )
    if pushed.subfolder is None and not pushed.has_final:
        message = (
            f"{pushed.where} holds no final model: {job} pushes it there when it succeeds, and it ended first (or "
            "the push failed)."
        )
        final = f'retry(job_id="{job}"), then evaluate(job_id="{job}", after="{job}", ...) scores its final model'
        if step is None:
            return message, f"It pushed no checkpoint either: {final} once it succeeds."
        return message, f'evaluate(job_id="{job}", checkpoint="checkpoint-{step}", ...) scores the checkpoint it ' + (
            f"pushed; or {final} once it succeeds."
        )
    if pushed.subfolder is not None and step is None:
        return f"{pushed.where} holds no committed checkpoint.", "Leave checkpoint out to evaluate its final model."
    if pushed.subfolder is not None and pushed.wanted_step not in (None, step):
        return (
            f"{pushed.where} holds checkpoint-{step}, not checkpoint-{pushed.wanted_step}.",
            f'Pass checkpoint="checkpoint-{step}", or leave checkpoint out to evaluate its final model.',
        )
    return None, None


def check_evaluation_data(spec: JobSpec, facts: Facts) -> list[Finding]:
    """The data must be readable; which metrics fit its format is the evaluator's choice."""
    return list(facts.dataset.findings) if facts.dataset else []


def check_model_reachable(spec: JobSpec, facts: Facts) -> list[Finding]:
    """A local evaluation downloads a Hub model from this machine: when the Hub cannot be reached
    and the model is not cached, it would fail after its start-up, so it is refused now."""
    m = facts.model
    if not traits_of(spec.backend).runs_here or m is None or m.access != "unverified" or m.cached is not False:
        return []
    return [
        Finding(
            code="model.unreachable",
            severity="error",
            message=f"{spec.model} cannot be downloaded here ({m.detail}) and is not in the local Hugging Face cache.",
            fix="Evaluate when the Hub is reachable, or pass a local model directory as model.",
        )
    ]


EVALUATION_CHECKS: tuple[rules.Check, ...] = (
    rules.check_model,
    check_model_reachable,
    check_adapter,
    check_pushed_model,
    check_evaluation_data,
    check_dependencies,
    rules.check_remote_paths,
)


def _conversion_output(spec: JobSpec) -> list[Finding]:
    if traits_of(spec.backend).output != "hub_repo" or (spec.output and "/" in spec.output):
        return []
    return [
        Finding(
            code="output.repo",
            severity="error",
            message="A remote conversion needs a Hub repo to upload the GGUF files to.",
            fix="Pass output='<your-user-or-org>/<model>-GGUF'.",
        )
    ]


def _output_dir(spec: JobSpec) -> str | None:
    """A job whose results go to the Hub writes them in its own working directory first; a local one writes in the
    chosen directory, else (None) in its run's, which the local backend gives the job at launch: the config never
    holds the job id."""
    if traits_of(spec.backend).output == "hub_repo":
        return REMOTE_OUTPUT_DIR
    return str(Path(spec.output).expanduser().resolve()) if spec.output else None


def _render(
    spec: JobSpec, template: str, config: dict[str, Any] | None, hf_jobs: dict[str, str | list[str]] | None
) -> str:
    if not config:
        return ""
    return render_script(template, config, hf_jobs=hf_jobs, dependency_versions=spec.dependency_versions)


def _hf_jobs_table(spec: JobSpec, env: PlanEnv, timeout_s: int | None) -> dict[str, str | list[str]] | None:
    """How HF Jobs runs a remote job, for its script's header: the flavor and timeout the backend asks for
    (no timeout: HF's default) and the names of the secrets it passes (the token as HF_TOKEN). A backend whose
    scripts need no such table (the local one: nothing but this machine runs its jobs) gets none."""
    if traits_of(spec.backend).script_table is None:
        return None
    table: dict[str, str | list[str]] = {"flavor": spec.flavor or DEFAULT_FLAVOR}
    if timeout_s is not None:
        table["timeout"] = _duration(timeout_s)
    table["secrets"] = sorted(set(spec.secrets) | ({"HF_TOKEN"} if env.hub_token else set()))
    return table


def _duration(seconds: int) -> str:
    """A timeout as HF Jobs' CLI takes it (--timeout 2h): the largest unit that divides it."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
