"""One pass decides: a dry run and a submit of the same inputs give the same verdict (accepted or rejected, forced or
not, or the same refused argument), the same findings and the same planned config and script, across a table of
local and HF Jobs (emulator) inputs: good jobs, refused ones, errors forced past and errors force cannot pass,
smoke runs, eval data, output repos the token may not write, unknown hyperparameters, data the method cannot read,
spending caps. A submit that starts a job is cancelled at once (a remote one never leaves the emulator's
scheduling); before this, a submit created the output repo after the plan, so only it could refuse one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jobtrail.app import build_service
from jobtrail.errors import JobtrailError
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from jobtrail.service.facade import JobService
from jobtrail.util.roots import DATA_ROOTS_ENV
from support.jobs import TINY_SFT, job_spec, write_jsonl
from support.remote import SHORT_TRAINING, publish, remote_spec

TOKEN = "hf_alice_write_token_for_verdicts"
LONG = {**TINY_SFT, "max_steps": 400}  # never reached: every started job is cancelled at once
PROMPTS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(16)]
DAILY_USD = "0.0001"


@dataclass(frozen=True)
class Case:
    name: str
    spec: Callable[[Path], JobSpec]  # from the folder the test writes its own files into
    expected: str  # "accepted", "forced" (accepted past its errors), "rejected" or "raised"
    code: str | None = None  # a finding (or, raised, words of the refusal) the verdict turns on
    options: dict[str, Any] = field(default_factory=dict)  # submit's force, max_cost_usd
    service: str = "main"  # "daily": a server whose daily budget is spent before any job


def _local(
    method: str = "sft",
    data: str | None = None,
    hyperparameters: dict[str, Any] = LONG,
    *,
    evals: bool = False,
    **fields: Any,
) -> Callable[[Path], JobSpec]:
    """A local job on the tiny model and the chat rows (or `data`); `evals`: the chat rows are its eval data too."""

    def build(tmp: Path) -> JobSpec:
        chat = str(tmp / "chat.jsonl")
        extra = {**fields, "eval_dataset": chat} if evals else fields
        return job_spec(method, tmp / "model", data or chat, hyperparameters=hyperparameters, **extra)

    return build


def _remote(**changes: Any) -> Callable[[Path], JobSpec]:
    return lambda tmp: remote_spec(**{"hyperparameters": {**SHORT_TRAINING, "max_steps": 400}, **changes})


def _crowded(tmp: Path) -> JobSpec:
    taken = tmp / "taken"
    taken.mkdir(exist_ok=True)
    (taken / "notes.txt").write_text("someone's files")
    return _local(output=str(taken))(tmp)


def _grpo(tmp: Path, **hyper: Any) -> JobSpec:
    data = write_jsonl(tmp / "prompts.jsonl", PROMPTS)
    base = {"max_steps": 400, "reward_funcs": ["format"], "per_device_train_batch_size": 3, "logging_steps": 1}
    return job_spec("grpo", tmp / "model", data, hyperparameters={**base, **hyper}, eval_dataset=str(data))


FORCE = {"force": True}
CASES = [
    Case("a good local job", _local(), "accepted"),
    Case("an unknown hyperparameter", _local(hyperparameters={**LONG, "learning_rte": 1e-3}), "rejected"),
    Case(
        "an unknown hyperparameter, forced",
        _local(hyperparameters={**LONG, "learning_rte": 1e-3}),
        "rejected",
        "hyperparameters.unknown",
        FORCE,
    ),
    Case("a learning rate that diverges", _local(hyperparameters={**LONG, "learning_rate": 1e20}), "rejected"),
    Case(
        "a learning rate that diverges, forced",
        _local(hyperparameters={**LONG, "learning_rate": 1e20}),
        "forced",
        options=FORCE,
    ),
    Case("a smoke run first", _local(smoke_steps=2), "accepted"),
    Case(
        "a smoke run as long as the job",
        _local(hyperparameters={**LONG, "max_steps": 12}, smoke_steps=12),
        "raised",
        "smoke_steps=12 is not fewer than the job's max_steps (12)",
    ),
    Case("eval data", _local(evals=True), "accepted"),
    Case("preference training on chat rows", _local("dpo"), "rejected", "dataset.incompatible"),
    Case("a reward model on chat rows, forced", _local("reward"), "forced", "dataset.incompatible", FORCE),
    Case("a data file that is not there", _local(data="nonexistent/rows.jsonl"), "rejected"),  # under the cwd, a root
    Case("a data file outside the data roots", _local(data="/nonexistent/rows.jsonl"), "raised", DATA_ROOTS_ENV),
    Case("an output directory holding others' files, forced", _crowded, "rejected", "output.not_empty", FORCE),
    Case(
        "GRPO evaluating in batches its generations do not divide",
        lambda t: _grpo(t, num_generations=3),
        "rejected",
        "grpo.eval_batch",
    ),
    Case("a good remote job", _remote(), "accepted"),
    Case("a remote smoke run first", _remote(smoke_steps=2), "accepted"),
    Case("an output repo in another namespace", _remote(output="someorg/out"), "rejected", "output.permission"),
    Case("an output repo someone else owns", _remote(output="bob/taken"), "rejected", "output.permission"),
    Case(
        "an output repo in another namespace, forced",
        _remote(output="someorg/out"),
        "forced",
        "output.permission",
        FORCE,
    ),
    Case("a remote unknown hyperparameter", _remote(hyperparameters={**SHORT_TRAINING, "warmup_step": 3}), "rejected"),
    Case("over its own cost cap", _remote(flavor="a10g-large"), "rejected", "budget.over_cap", {"max_cost_usd": 0.01}),
    Case(
        "over its own cost cap, forced",
        _remote(flavor="a10g-large"),
        "forced",
        "budget.over_cap",
        {"max_cost_usd": 0.01, **FORCE},
    ),
    Case("over the daily budget, forced", _remote(flavor="a10g-large"), "rejected", "budget.daily", FORCE, "daily"),
]


def _verdict(service: JobService, spec: JobSpec, options: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
    """What a submit (or a dry run) decided: accepted, forced past errors, rejected, or the argument refused."""
    try:
        result = service.submit(spec, SubmitOptions(dry_run=dry_run, **options))
    except JobtrailError as exc:
        return {"verdict": "raised", "message": exc.message}
    errors = [f for f in result.findings if f.severity == "error"]
    if result.status == "dry_run":
        verdict = "forced" if result.forced else "rejected" if errors else "accepted"
        assert ("the job would be accepted" in result.summary) is (verdict != "rejected"), result.summary
    else:
        verdict = "rejected" if result.status == "rejected" else "forced" if result.forced else "accepted"
    return {
        "verdict": verdict,
        "findings": [(f.code, f.severity) for f in result.findings],
        "config_sha256": result.config_sha256,
        "script_sha256": result.script_sha256,
        "job_id": result.job_id,
    }


def _cancel_everything(service: JobService) -> None:
    for job in service.ps().jobs:
        if job.status not in ("succeeded", "failed", "cancelled"):
            service.cancel(job.job_id)


@pytest.fixture
def services(hub, tiny_model, chat_dataset, tmp_path, monkeypatch) -> dict[str, JobService]:
    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    hub.add_repo("bob/taken", owner="bob")  # public: alice sees it, and may not write to it
    hub.scheduling_delay = 3600.0  # an emulated job waits to be scheduled until it is cancelled: nothing trains
    (tmp_path / "model").symlink_to(tiny_model)
    (tmp_path / "chat.jsonl").symlink_to(chat_dataset)
    main = build_service(tmp_path / "home")
    monkeypatch.setenv("JOBTRAIL_DAILY_BUDGET_USD", DAILY_USD)
    return {"main": main, "daily": build_service(tmp_path / "home-daily")}


def test_a_dry_run_gives_the_verdict_its_submit_acts_on(services, tmp_path):
    assert len(CASES) >= 15
    seen: dict[str, str] = {}
    try:
        for case in CASES:
            service = services[case.service]
            spec = case.spec(tmp_path)
            dry = _verdict(service, spec, case.options, dry_run=True)
            submitted = _verdict(service, spec, case.options, dry_run=False)
            _cancel_everything(service)
            assert dry["verdict"] == case.expected, (case.name, dry)
            assert submitted.pop("job_id", None) is not None or case.expected in ("rejected", "raised"), case.name
            assert dry.pop("job_id", None) is None
            assert dry == submitted, case.name
            if case.code:
                shown = dry.get("message", "") + " ".join(code for code, _ in dry.get("findings", []))
                assert case.code in shown, (case.name, dry)
            seen[case.name] = dry["verdict"]
    finally:
        for service in services.values():
            _cancel_everything(service)
    assert set(seen.values()) == {"accepted", "forced", "rejected", "raised"}
