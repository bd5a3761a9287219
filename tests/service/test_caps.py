"""Spending caps against the HF Jobs emulator: preflight refuses an over-cap job with the fix, a running job that
reaches its cap ends `budget`, the daily budget holds at submit and at dispatch, report shows spend against caps."""

from __future__ import annotations

import time

import pytest

from jobtrail.app import build_service
from jobtrail.backends.hf_jobs import SCRIPT_VARIABLE, unpack_script
from jobtrail.ledger.store import Ledger
from jobtrail.models import ExitRecord, JobSpec, JobStatus, LogChunk, Placement, Probe, RunRecord, TerminationReason
from jobtrail.requests import SubmitOptions
from jobtrail.service.facade import JobService
from support.records import new_attempt
from support.remote import publish, remote_spec
from support.waiting import wait_for, wait_until_terminal

TOKEN = "hf_alice_write_secret_token_42"
HYPER = {"max_steps": 6, "logging_steps": 1, "per_device_train_batch_size": 2, "max_length": 64}
ENDLESS = {**HYPER, "max_steps": 100000, "save_steps": 100000}
HOUR = 3600.0


@pytest.fixture
def remote(hub, tiny_model, chat_dataset, tmp_path, monkeypatch):
    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    return build_service(tmp_path / "home")


def _price(hub, flavor: str, per_hour: float) -> None:
    """The emulator's live price list (per minute, as the Hub bills): read by a service on its first use."""
    entry = next(h for h in hub.hardware if h["name"] == flavor)
    entry["unitCostMicroUSD"] = round(per_hour / 60 * 1_000_000)
    entry["unitCostUSD"] = entry["unitCostMicroUSD"] / 1_000_000


def _finding(result, code: str):
    return next(f for f in result.findings if f.code == code)


def test_an_over_cap_job_is_refused_with_a_cheaper_flavor_fewer_retries_or_the_cap_to_pass(
    remote, tiny_model, chat_dataset, monkeypatch
):
    # The tiny job's estimate: ~3 minutes, ~$0.10 on a10g-large, ~$0.03 on t4-small.
    refused = remote.submit(remote_spec(flavor="a10g-large", hyperparameters=HYPER), SubmitOptions(max_cost_usd=0.05))
    assert refused.status == "rejected" and refused.job_id is None and refused.max_cost_usd == 0.05
    over = _finding(refused, "budget.over_cap")
    assert over.severity == "error" and "above max_cost_usd $0.05" in over.message
    assert "flavor='t4-small'" in over.fix and "max_cost_usd=0.1" in over.fix and "max_steps" in over.fix
    # Retries count: each may pay for the whole run again; the fix names the max_retries that fits.
    retried = remote.submit(
        remote_spec(flavor="t4-small", hyperparameters=HYPER),
        SubmitOptions(dry_run=True, max_retries=2, max_cost_usd=0.05),
    )
    over = _finding(retried, "budget.over_cap")
    assert "× 3 attempts" in over.message and "max_retries=0" in over.fix
    fits = remote.submit(
        remote_spec(flavor="t4-small", hyperparameters=HYPER), SubmitOptions(dry_run=True, max_cost_usd=0.05)
    )
    assert _finding(fits, "budget").severity == "info" and not [f for f in fits.findings if f.severity == "error"]
    # JOBTRAIL_MAX_COST_USD is the default cap; a local job costs nothing and is never judged.
    monkeypatch.setenv("JOBTRAIL_MAX_COST_USD", "0.01")
    capped = build_service(remote.home)
    by_default = capped.submit(remote_spec(flavor="t4-small", hyperparameters=HYPER), SubmitOptions(dry_run=True))
    assert by_default.max_cost_usd == 0.01 and "max_cost_usd=" in _finding(by_default, "budget.over_cap").fix
    local = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=HYPER)
    assert not [f for f in capped.submit(local, SubmitOptions(dry_run=True)).findings if f.code.startswith("budget")]


def test_a_running_job_that_reaches_its_cap_is_cancelled_as_budget_and_resumes_only_under_a_larger_cap(remote, hub):
    _price(hub, "cpu-basic", 36.0)  # a cent a second
    submitted = remote.submit(
        remote_spec(timeout_s=1800, hyperparameters=ENDLESS),
        SubmitOptions(force=True, max_retries=2, max_cost_usd=0.05),
    )
    assert submitted.job_id and submitted.forced  # the estimate is over the cap: forced, the tracker still holds it
    assert "budget.over_cap" in {f.code for f in submitted.findings}
    job_id = submitted.job_id
    done = wait_until_terminal(lambda: remote.inspect(job_id), 120, "the capped job to stop", interval=0.5)
    assert done.status == "cancelled" and done.termination_reason == "budget", done.termination_message
    assert "reaching max_cost_usd $0.05" in done.termination_message and done.max_cost_usd == 0.05
    assert 0.05 <= done.spent_usd < 0.05 + 0.01 * 60, done.spent_usd  # stopped within a minute of reaching it
    [attempt] = done.attempts  # never retried automatically, whatever max_retries says
    job = hub.jobs[attempt.placement.remote_id]
    assert job.stage == "CANCELED"
    # HF Jobs itself was told to stop it by the time the cap buys (at least a minute): the receipt says so.
    assert job.timeout_s == 60 and attempt.timeout_s == 60
    script = unpack_script(job.spec["environment"][SCRIPT_VARIABLE])
    assert '# [tool.hf-jobs]\n# flavor = "cpu-basic"\n# timeout = "30m"\n# secrets = ["HF_TOKEN"]\n' in script
    refused = remote.retry(job_id)
    assert not refused.retried and "max_cost_usd" in refused.fix and "$0.05" in refused.message
    [step] = remote.inspect(job_id).next_steps
    assert step.action == "fix" and "changes={'max_cost_usd': 0.1}" in step.why
    assert step.call == f'retry(job_id="{job_id}", changes={{"max_cost_usd": 0.1}})'  # the exact call, not prose
    report = remote.report()
    [capped] = report.job_caps
    assert capped.job_id == job_id and capped.termination_reason == "budget" and capped.spent_usd >= 0.05
    assert report.spent_last_24h_usd >= 0.05 and "1 stopped by its cap" in report.summary
    # A larger cap resumes it; the cap covers every attempt together.
    resumed = remote.retry(job_id, {"max_cost_usd": 0.1})
    assert resumed.retried, resumed.message
    again = wait_for(
        lambda: (r := remote.inspect(job_id)).status == "cancelled" and len(r.attempts) == 2 and r,
        120,
        "the resumed attempt to reach the larger cap",
        interval=0.5,
    )
    assert again.termination_reason == "budget" and again.max_cost_usd == 0.1 and again.spent_usd >= 0.1


def _seed_spend(
    ledger, run_id: str, cost: float | None, started_ago_h: float, ended_ago_h: float | None, reason=None, cap=None
) -> None:
    now = time.time()
    spec = remote_spec()
    reason = reason or TerminationReason.SUCCEEDED
    ledger.add_run(
        RunRecord(
            run_id=run_id,
            created_at=now - started_ago_h * HOUR,
            method="sft",
            model=spec.model,
            dataset=spec.dataset,
            backend="hf-jobs",
            flavor="a10g-large",
            spec=spec,
            max_cost_usd=cap,
        ),
        new_attempt(
            attempt_id=f"{run_id}/1",
            run_id=run_id,
            number=1,
            status=reason.status if ended_ago_h is not None else JobStatus.RUNNING,
            termination_reason=reason if ended_ago_h is not None else None,
            created_at=now - started_ago_h * HOUR,
            started_at=now - started_ago_h * HOUR,
            ended_at=now - ended_ago_h * HOUR if ended_ago_h is not None else None,
            backend="hf-jobs",
            flavor="a10g-large",
            output_dir="/tmp/jobtrail-tests/output",
            cost_usd=cost,
        ),
    )


def test_the_daily_budget_is_a_rolling_24_hours_checked_at_submit_and_at_dispatch(remote, monkeypatch):
    ledger = remote.ledger
    _seed_spend(ledger, "jt-inside00", 5.0, started_ago_h=2, ended_ago_h=1, reason=TerminationReason.CANCELLED)
    _seed_spend(ledger, "jt-halfin00", 4.0, started_ago_h=25, ended_ago_h=23)  # half of it inside: $2
    _seed_spend(ledger, "jt-outside0", 100.0, started_ago_h=31, ended_ago_h=30)
    monkeypatch.setenv("JOBTRAIL_DAILY_BUDGET_USD", "6.5")
    service = build_service(remote.home)
    report = service.report(days=2)
    assert report.spent_last_24h_usd == pytest.approx(7.0, abs=0.01) and report.daily_budget_usd == 6.5
    assert "of the daily budget of $6.50" in report.summary
    # Submit: spend so far + the job's worst case must fit; the person's daily budget is not forced past.
    for force in (False, True):
        refused = service.submit(remote_spec(flavor="a10g-large", hyperparameters=HYPER), SubmitOptions(force=force))
        daily = _finding(refused, "budget.daily")
        assert refused.status == "rejected" and "JOBTRAIL_DAILY_BUDGET_USD" in daily.message
    # Dispatch: a queued attempt (here a retry of the cancelled job) is not started while the budget is spent; it
    # ends at once, cancelled as budget, saying why, rather than starting hours later on its own.
    retried = service.retry("jt-inside00")
    assert retried.retried and retried.status == "cancelled"
    ended = service.inspect("jt-inside00")
    assert ended.termination_reason == "budget" and "Not started" in ended.termination_message
    assert "daily budget of $6.50" in ended.termination_message
    assert ended.attempts[1].placement is None  # never launched, never billed
    # Under its own cap (none here), a job the daily budget stopped may be retried once there is room.
    assert service.retry("jt-inside00").retried


def test_the_remote_script_says_how_it_runs_and_never_a_secret_value(remote, tiny_model, chat_dataset, monkeypatch):
    from jobtrail.templates.pep723 import read_metadata

    monkeypatch.setenv("WANDB_KEY_FOR_TEST", "wandb-secret-value-1234567890")
    spec = remote_spec(flavor="t4-small", hyperparameters=HYPER, secrets={"WANDB_API_KEY": "$WANDB_KEY_FOR_TEST"})
    dry = remote.submit(spec, SubmitOptions(dry_run=True, include_script=True))
    assert dry.script and "wandb-secret-value" not in dry.script and TOKEN not in dry.script
    table = read_metadata(dry.script)["tool"]["hf-jobs"]
    assert table == {"flavor": "t4-small", "timeout": "1h", "secrets": ["HF_TOKEN", "WANDB_API_KEY"]}
    local = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=HYPER)
    local_script = remote.submit(local, SubmitOptions(dry_run=True, include_script=True)).script
    # Nothing but this machine runs it: no [tool.hf-jobs]; [tool.uv] pins what uv would resolve (versions.py).
    assert local_script and set(read_metadata(local_script)["tool"]) == {"uv"}


def test_a_remote_job_runs_the_tested_versions_unless_it_asks_for_the_newest(remote):
    """The script HF Jobs runs pins the job lock; dependency_versions="newest" keeps the template's lower bounds,
    and preflight says that nobody tested what it will install."""
    from jobtrail.templates.pep723 import read_metadata
    from jobtrail.templates.versions import job_lock

    tested = remote.submit(remote_spec(hyperparameters=HYPER), SubmitOptions(dry_run=True, include_script=True))
    header = read_metadata(tested.script)
    assert "trl==" + job_lock().require("trl") in header["dependencies"]
    assert header["tool"]["uv"] == {"exclude-newer": job_lock().exclude_newer}
    assert not [f for f in tested.findings if f.code == "dependencies.untested"]
    newest = remote.submit(
        remote_spec(hyperparameters=HYPER, dependency_versions="newest"),
        SubmitOptions(dry_run=True, include_script=True),
    )
    header = read_metadata(newest.script)
    assert "trl>=1.16" in header["dependencies"] and "uv" not in header["tool"]
    [warning] = [f for f in newest.findings if f.code == "dependencies.untested"]
    assert warning.severity == "warning" and "trl " + job_lock().require("trl") in warning.message
    assert "dependency_versions" in warning.fix and "dependencies.untested" in newest.summary


def test_a_restarted_server_adopts_a_remote_job_whose_launch_was_never_recorded_by_its_labels(remote, hub):
    from jobtrail.service.tracker import STALE_CLAIM_S

    job_id = remote.submit(remote_spec(timeout_s=1800, hyperparameters=ENDLESS), SubmitOptions(force=True)).job_id
    attempt_id = f"{job_id}/1"
    launched = wait_for(lambda: remote.ledger.get_attempt(attempt_id).placement, 30, "the launch")
    # As if the launching process died between HF's answer and the ledger write: claimed, no placement.
    remote.ledger.update_attempt(
        attempt_id, status=JobStatus.STARTING, placement=None, started_at=time.time() - STALE_CLAIM_S - 1
    )
    restarted = build_service(remote.home)  # a fresh process: new ledger handle, new backends
    row = next(r for r in restarted.ps().jobs if r.job_id == job_id)
    assert row.status in ("starting", "running"), row  # not lost: found on HF Jobs by its labels
    adopted = restarted.ledger.get_attempt(attempt_id).placement
    assert adopted is not None and adopted.remote_id == launched.remote_id
    assert hub.jobs[adopted.remote_id].spec["labels"]["jobtrail-attempt"] == "1"
    assert restarted.cancel(job_id).status == "cancelled"


class _TimedOutOnHfJobs:
    """HF Jobs as a server that was not running saw it afterwards: every job it is asked about ran into its timeout."""

    name = "hf-jobs"
    max_concurrent = None
    host = None

    def probe(self, placement):
        return Probe(phase="exited", exit=ExitRecord(timed_out=True, ended_at=time.time(), message="Job timed out"))

    def read_log(self, placement, offset=0, max_lines=None):
        return LogChunk(lines=[], offset=offset)

    def read_events(self, placement, offset=0):
        return LogChunk(lines=[], offset=offset)

    def read_tail(self, placement, count):
        return LogChunk(lines=[], offset=0)

    def cancel(self, placement):
        raise AssertionError("an ended job is never cancelled")

    def launch(self, request):
        raise AssertionError("nothing is launched here")

    def find(self, labels, workdir, secret_sources):
        return None


@pytest.mark.parametrize("cap, reason", [(0.5, "budget"), (5.0, "timeout")])
def test_a_job_hf_jobs_stopped_at_the_timeout_its_cap_bought_ends_budget(remote, tmp_path, cap, reason):
    # An hour on a10g-large ($1.50/hour) spent $1.50: past a $0.50 cap that was its timeout; within $5, its own.
    _seed_spend(remote.ledger, "jt-capped00", None, started_ago_h=1, ended_ago_h=None, cap=cap)
    placement = Placement(backend="hf-jobs", host="huggingface.co", workdir=str(tmp_path), started_at=time.time())
    remote.ledger.update_attempt("jt-capped00/1", placement=placement)
    service = JobService(Ledger(remote.ledger.location), {"hf-jobs": _TimedOutOnHfJobs()}, remote.home, "python")
    service.refresh()
    ended = service.inspect("jt-capped00")
    assert ended.termination_reason == reason, ended.termination_message
    if reason == "budget":
        assert "reaching max_cost_usd $0.50" in ended.termination_message and ended.spent_usd >= 1.49


def test_a_cap_on_a_local_job_is_accepted_saying_it_has_no_effect(tmp_path, tiny_model, chat_dataset, monkeypatch):
    """max_cost_usd on a local job was accepted without saying that nothing there is billed."""
    monkeypatch.setenv("JOBTRAIL_MAX_COST_USD", "2")  # the server's default: for billed jobs, never said here
    service = build_service(tmp_path / "home")
    spec = JobSpec(method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters=HYPER)
    capped = service.submit(spec, SubmitOptions(dry_run=True, max_cost_usd=5))
    said = _finding(capped, "budget.not_billed")
    assert said.severity == "warning" and "max_cost_usd $5.00 has no effect" in said.message
    assert "not billed" in capped.summary, capped.summary  # a warning is part of the answer
    plain = service.submit(spec, SubmitOptions(dry_run=True))
    assert "budget.not_billed" not in {f.code for f in plain.findings}
