"""Everything preflight learns from outside the process, gathered in one place before any rule runs.

The model (its directory or the Hub), the data, a GRPO reward file, the Hub identity of the
token, the estimate on the chosen flavor, and what the job's interpreter lacks of the template's
dependencies. Probes (probes.py, dataset/, conversion.py) do the reading; the rules (rules.py)
only look at the Facts they leave, which carry the training job's effective hyperparameters too
(plan.py computes them once; the probes, the estimate and every rule read those).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jobtrail.backends.registry import traits_of
from jobtrail.errors import BackendError, JobtrailError
from jobtrail.estimate import EstimateResult, estimate_cost
from jobtrail.estimate.estimator import sized_length
from jobtrail.estimate.hardware import BUNDLED, LOCAL, flavor_gpu_count, gpu_facts, local_flavor
from jobtrail.estimate.parallel import choose_launcher
from jobtrail.methods.effective import Effective
from jobtrail.models import SINGLE_PROCESS, Finding, JobSpec, Launcher
from jobtrail.outcomes.evals import Evaluation
from jobtrail.preflight import probes
from jobtrail.preflight.conversion import ConversionFacts, conversion_facts
from jobtrail.preflight.data_size import data_stats
from jobtrail.preflight.dataset import DatasetReport, validate_dataset
from jobtrail.preflight.outputs import OutputFacts, OutputRepoFacts, probe_output, probe_output_repo
from jobtrail.preflight.probes import HubIdentity, ModelFacts, PushedModelFacts, SpaceFacts, UntestedVersion
from jobtrail.preflight.reward_file import read_reward_file
from jobtrail.preflight.speedups import Target
from jobtrail.templates.configs import trained_max_length
from jobtrail.templates.trackio_target import trackio_space
from jobtrail.util.refs import HUB_ID, looks_local

EVAL_DEFAULT_SPLIT = "test"  # scripts/evaluate.py's DEFAULT_SPLIT: held-out data
CHECKPOINT_LABEL = re.compile(r"checkpoint-(\d+)")  # an evaluated checkpoint's label names its step


@dataclass(frozen=True)
class BudgetFacts:
    """A submission's spending limits and what is already spent (outcomes/budget.py says what they mean)."""

    max_cost_usd: float | None  # the job's own cap
    attempts: int  # how many times, at worst, it pays for its whole run (its first attempt + max_retries)
    daily_budget_usd: float | None = None
    spent_24h_usd: float = 0.0  # every job's spend in the last 24 hours
    cap_given: bool = False  # max_cost_usd is the submission's own, not the server's default (JOBTRAIL_MAX_COST_USD)


@dataclass(frozen=True)
class PlanEnv:
    """What planning needs from the service around it."""

    job_python: str  # the local backend's interpreter for jobs
    llama_cpp_cache: Path  # where local conversions keep their llama.cpp build
    hub_token: str | None = None
    ledger: Any = None  # earlier attempts' measurements calibrate the estimate
    hub_api: Callable[[], Any] | None = None  # live flavor prices; None: the bundled table
    run_id: str = ""  # the run being planned: a chosen output directory it claimed earlier is its own
    home: Path | None = None  # $JOBTRAIL_HOME, which no output may be or hold
    budget: BudgetFacts | None = None  # a submission's caps (None: nothing to check, e.g. a retry)


@dataclass(frozen=True)
class Facts:
    model: ModelFacts | None = None  # the model trained or evaluated
    dataset: DatasetReport | None = None
    reward_source: str | None = None  # the GRPO reward file's text, when it could be read
    reward_problem: Finding | None = None  # why it could not be
    missing_adapter: str | None = None  # an evaluated local adapter directory that is not there
    pushed: PushedModelFacts | None = None  # an evaluated remote job's final model or checkpoint, on the Hub
    conversion: ConversionFacts | None = None
    missing_requirements: list[str] | None = None  # None: not checked (a remote backend)
    untested_requirements: list[UntestedVersion] | None = None  # installed, not as tested (local jobs)
    python_error: str | None = None  # the job's interpreter could not be run
    job_packages: dict[str, str] | None = None  # what the job's interpreter has (local jobs; probes.SPEED_PACKAGES too)
    identity: HubIdentity | None = None  # whoami of the token, for remote backends
    trackio_space: SpaceFacts | None = None  # the Space a remote job's trackio run goes to, as it is now
    has_token: bool = False
    estimate: EstimateResult | None = None  # remote backends: memory, hours and timeout on the flavor
    estimate_error: str | None = None
    output: OutputFacts | None = None  # a local job's chosen output directory, as it is now
    output_repo: OutputRepoFacts | None = None  # a remote training job's Hub repo, as its token sees it now
    gpus: int = 0  # GPUs of the job's machine: the flavor's (remote), the visible ones of this machine (local)
    # The job's processes, chosen once from the facts above (with_launcher): the estimate's choice when
    # there is one (it knows whether the model fits one GPU), else one per GPU or the user's num_processes.
    launcher: Launcher = SINGLE_PROCESS
    budget: BudgetFacts | None = None  # a submission's caps and the spend so far (caps.py: only billed jobs spend)
    target: Target | None = None  # the device a training job runs on (what its speedups are chosen for)
    values: Effective | None = None  # a training job's effective hyperparameters, as the plan computed them

    @property
    def job_values(self) -> Effective:
        """The training job's effective hyperparameters: every training rule judges these, the ones its config holds."""
        if self.values is None:
            raise ValueError("a training job's facts carry its effective hyperparameters (preflight/plan.py)")
        return self.values


def gather_training(spec: JobSpec, values: Effective, env: PlanEnv) -> Facts:
    """A training job's facts: model, data (mapped as the job will map it), reward file, then the
    Hub identity and the estimate (remote) or the interpreter's requirements (local). `values`: the
    job's effective hyperparameters, which the facts carry on to the rules."""
    facts = Facts(model=probes.model_facts(spec.model, env.hub_token), values=values)
    max_length = values.training_args.get("max_length")
    if max_length is not None:
        max_length = trained_max_length(spec, max_length, facts.model.max_positions if facts.model else None)
    # The model's tokenizer measures the rows as the trainer will cut them: a dataset.too_long
    # warning says how many rows max_length truncates (or dataset.tokens why nothing was measured).
    facts = replace(
        facts,
        dataset=validate_dataset(
            spec.dataset,
            spec.method,
            split=str(values.job["dataset_split"]),
            model=spec.model,
            max_length=_positive_int(max_length),
            mapping=spec.dataset_mapping,
            home=env.home,
        ),
    )
    if spec.reward_file:
        source, problem = read_reward_file(spec.reward_file)
        facts = replace(facts, reward_source=None if problem else source, reward_problem=problem)
    backend = traits_of(spec.backend)
    if backend.runs_here:
        facts = gather_requirements(
            facts, spec.method, env.job_python, qlora=values.peft_method == "qlora", training_args=values.training_args
        )
        facts = replace(facts, target=gather_target(spec, facts.job_packages or {}))
        facts = replace(gather_output(facts, spec, env), gpus=local_flavor().gpu_count, budget=env.budget)
        # A local job's timeout is judged against this machine's estimate (no timeout: nothing to judge); on a
        # GPU the estimate fills its memory (speedups) and, with several, says whether the model fits one or
        # must be sharded.
        if spec.timeout_s is not None or facts.gpus > 0:
            facts = gather_estimate(facts, spec, env, flavor=LOCAL)
        return with_launcher(facts)
    facts = replace(facts, target=gather_target(spec))
    facts = replace(gather_identity(facts, env.hub_token), gpus=flavor_gpu_count(spec.flavor), budget=env.budget)
    if backend.trackio == "space":
        facts = gather_trackio_space(facts, spec, env.hub_token)
    return with_launcher(gather_estimate(facts, spec, env))


def with_launcher(facts: Facts) -> Facts:
    """The training job's facts with its launcher: the estimate's (the same choose_launcher, told whether the
    job fits one GPU), or one chosen from the GPUs and the user's num_processes alone."""
    if facts.estimate is not None:
        return replace(facts, launcher=facts.estimate.launcher)
    return replace(facts, launcher=choose_launcher(facts.gpus, requested_processes(facts.job_values)))


def requested_processes(values: Effective) -> int | None:
    """The user's num_processes, when it is one (a wrong value is the hyperparameter rules' to refuse)."""
    return _positive_int(values.job["num_processes"])


def gather_evaluation(spec: JobSpec, task: Evaluation, env: PlanEnv) -> Facts:
    """An evaluation's facts: the base model, the adapter directory (or what a remote job pushed to its Hub
    repo), the data as it can be read."""
    split = task.split
    if split is None:  # the evaluator's default, except that a data file is its own single split
        split = "train" if looks_local(spec.dataset) and Path(spec.dataset).is_file() else EVAL_DEFAULT_SPLIT
    adapter = task.adapter
    missing = adapter if adapter and looks_local(adapter) and not Path(adapter).is_dir() else None
    pushed = None
    if adapter and task.hub is not None:
        wanted = CHECKPOINT_LABEL.fullmatch(task.label)
        pushed = probes.pushed_model_facts(adapter, task.hub, int(wanted[1]) if wanted else None, env.hub_token)
    facts = Facts(
        model=probes.model_facts(spec.model, env.hub_token),
        missing_adapter=missing,
        pushed=pushed,
        dataset=validate_dataset(spec.dataset, None, split=split, home=env.home),
    )
    return gather_requirements(facts, "evaluate", env.job_python) if traits_of(spec.backend).runs_here else facts


def gather_conversion(spec: JobSpec, env: PlanEnv) -> Facts:
    """A conversion's facts: the source's small JSON files and tokenizer (conversion.py's probes)."""
    facts = Facts(conversion=conversion_facts(spec.model))
    if not traits_of(spec.backend).runs_here:
        return facts
    return gather_output(gather_requirements(facts, "convert_gguf", env.job_python), spec, env)


def gather_target(spec: JobSpec, packages: dict[str, str] | None = None) -> Target:
    """The device the job trains on: this machine for the local backend (nvidia-smi, when present), with what
    its job's Python has (`packages`, gather_requirements') and whether Triton finds a C compiler here; else the
    flavor's GPU (the bundled table; a flavor it lacks counts as unknown, so nothing risky is turned on)."""
    local = traits_of(spec.backend).runs_here
    flavor = local_flavor() if local else next((f for f in BUNDLED if f.name == spec.flavor), None)
    if flavor is None:
        return Target(flavor=spec.flavor or "?")
    facts = gpu_facts(flavor.gpu) if flavor.gpu else None
    return Target(
        flavor=flavor.name,
        gpu=flavor.gpu if flavor.gpu_count else None,
        bf16=flavor.bf16,
        compute_capability=facts.compute_capability if facts else None,
        packages=packages if local else None,
        c_compiler=probes.c_compiler() if local else True,
    )


def gather_output(facts: Facts, spec: JobSpec, env: PlanEnv) -> Facts:
    """What is at a local job's chosen output directory (none chosen: the run's own, nothing to look at)."""
    return replace(facts, output=probe_output(spec.output, env.run_id, env.home)) if spec.output else facts


def gather_requirements(
    facts: Facts, template: str, python: str, *, qlora: bool = False, training_args: dict[str, Any] | None = None
) -> Facts:
    """What the job's interpreter lacks of the template's PEP 723 dependencies (and of what the caller's
    training_args add to them: use_liger_kernel), and where its versions are not the tested ones."""
    try:
        found = probes.job_interpreter(template, python, qlora=qlora, training_args=training_args)
        return replace(
            facts, missing_requirements=found.missing, untested_requirements=found.untested, job_packages=found.packages
        )
    except BackendError as exc:
        return replace(facts, python_error=exc.message)


def gather_identity(facts: Facts, token: str | None) -> Facts:
    """For remote backends: whose token this is and whether it can push."""
    if not token:
        return replace(facts, has_token=False)
    return replace(facts, has_token=True, identity=probes.hub_identity(token))


def gather_output_repo(facts: Facts, repo_id: str | None, token: str | None) -> Facts:
    """For remote training jobs: whether the token may write the Hub repo the job pushes to (None: it pushes
    nowhere). Not asked when the token itself could not be checked, or the output is no Hub repo id: those
    findings say so already."""
    identity = facts.identity
    if repo_id is None or "/" not in repo_id or not HUB_ID.match(repo_id) or identity is None or identity.error:
        return facts
    return replace(facts, output_repo=probe_output_repo(repo_id, token))


def remote_trackio_space(spec: JobSpec, values: Effective, identity: HubIdentity | None) -> str | None:
    """The Space a remote job reports to trackio in (None: it does not, or whose namespace is unknown): in the
    output repo's namespace, as the config will say (templates/configs.py)."""
    owner = spec.output.split("/")[0] if spec.output and "/" in spec.output else identity.name if identity else None
    return trackio_space(values.training_args, owner)


def gather_trackio_space(facts: Facts, spec: JobSpec, token: str | None) -> Facts:
    """For remote backends: the trackio Space as the Hub shows it now (it is never created here)."""
    space = remote_trackio_space(spec, facts.job_values, facts.identity)
    if space is None or facts.identity is None or facts.identity.error:
        return facts
    return replace(facts, trackio_space=probes.space_facts(space, token))


def gather_estimate(facts: Facts, spec: JobSpec, env: PlanEnv, flavor: str | None = None) -> Facts:
    """Memory and time on the chosen flavor (or `flavor`), from the model's config.json, the data's size and the
    job's effective hyperparameters (the micro-batch and checkpointing the user left out are chosen as submit
    does: estimate/microbatch.py)."""
    flavor = flavor or spec.flavor
    if facts.model is None or facts.model.config is None or not flavor:
        return facts
    values = facts.job_values
    report = facts.dataset
    # The rows as validate_dataset measured them, with the model's tokenizer where it could be read; unmeasured,
    # each row counts as long as max_length (max_steps, when set, counts the rows itself).
    data = data_stats(report)
    rows = (report.rows or report.rows_checked) if report else 0
    length = sized_length(values)
    try:
        estimate = estimate_cost(
            spec.model,
            values,
            num_examples=max(1, rows),
            avg_tokens=None if data or not isinstance(length, int | float) else float(length),
            data=data,
            tune_micro_batch=True,
            flavor=flavor,
            config=facts.model.config,
            calibration=env.ledger,
            api=env.hub_api() if env.hub_api else None,
        )
    except JobtrailError as exc:
        return replace(facts, estimate_error=str(exc))
    return replace(facts, estimate=estimate)


def _positive_int(value: Any) -> int | None:
    """max_length as validate_dataset takes it; a wrong value is the hyperparameter rules' to refuse."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
