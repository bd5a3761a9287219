"""Backends declare their traits (issue 26 item 2): where a job's output goes, whether it is billed, what its host
is, whether it has flavors, its script header and its trackio store are asked of the backend, never read off its
name. A third backend, registered here with traits of its own, gets that behaviour from the service's callers and
preflight's rules as they are: a team's cluster runs jobs elsewhere on named flavors, like HF Jobs, yet bills
nothing and writes their output to a shared folder, like the local backend, where the old "not local, so HF Jobs"
branches billed it, capped its spending, asked for an HF token and looked for its model on the Hub.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from jobtrail.backends import registry
from jobtrail.backends.base import BackendTraits
from jobtrail.backends.hf_jobs import HfJobsBackend
from jobtrail.backends.local import LocalBackend
from jobtrail.errors import InvalidRequestError
from jobtrail.estimate import estimate_cost
from jobtrail.ledger.store import Ledger
from jobtrail.methods.effective import effective
from jobtrail.models import JobSpec, JobStatus
from jobtrail.preflight import rules
from jobtrail.preflight.caps import check_caps
from jobtrail.preflight.facts import BudgetFacts, Facts
from jobtrail.service.context import ServiceContext
from jobtrail.service.job_outputs import job_output, refuse_unpushed
from jobtrail.service.tracker import Tracker
from jobtrail.surface.prompts import fine_tune
from support.estimates import OFFLINE, QWEN25_05B
from support.records import add_queued_run

SRC = Path(__file__).resolve().parents[2] / "src" / "jobtrail"
# Comparisons of backend names, as issue 26 counts them.
NAME_COMPARISON = re.compile(r'(==|!=) ?"local"|"hf-jobs"')
# models.BackendName lists the names tools accept.
NAMES_ALLOWED = {"models.py"}

CLUSTER = BackendTraits(
    name="cluster",
    place="the team's cluster",
    runs_here=False,
    output="directory",
    flavors=True,
    billed=False,
    host_noun="cluster",
    host_in="on cluster",
    host_title="Cluster",
    host_set_by="JOBTRAIL_CLUSTER",
    cancel="scancel",
    script_table=None,
    trackio="folder",
)
HOUR = 3600.0


class _ClusterBackend:
    """The third backend as the service holds it: what these callers read of it is its traits and its host."""

    traits = CLUSTER
    name = CLUSTER.name
    max_concurrent = None
    host = "gpu-farm"


@pytest.fixture
def cluster(monkeypatch):
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))  # registered for this test only
    return registry.register(CLUSTER)


@pytest.fixture
def context(tmp_path, cluster) -> ServiceContext:
    backends = {"local": LocalBackend(host="box"), cluster.name: _ClusterBackend()}
    return ServiceContext(ledger=Ledger(tmp_path / "ledger.sqlite"), backends=backends, home=tmp_path, job_python="")


def test_each_backend_declares_its_traits_and_the_registry_finds_them_by_name():
    local, remote = LocalBackend(), HfJobsBackend(token=None)
    assert local.traits is registry.traits_of("local") and local.name == local.traits.name == "local"
    assert remote.traits is registry.traits_of("hf-jobs") and remote.name == remote.traits.name == "hf-jobs"
    on_this_machine = local.traits
    assert on_this_machine.runs_here and on_this_machine.output == "directory" and on_this_machine.trackio == "folder"
    assert not on_this_machine.billed and not on_this_machine.flavors and on_this_machine.script_table is None
    assert (on_this_machine.host_noun, on_this_machine.host_in) == ("host", "on host")
    hf = remote.traits
    assert not hf.runs_here and hf.output == "hub_repo" and hf.trackio == "space"
    assert hf.billed and hf.flavors and hf.script_table == "tool.hf-jobs"
    assert (hf.host_noun, hf.host_in, hf.host_title) == ("namespace", "in namespace", "HF namespace")


def test_an_unknown_name_is_refused_and_a_taken_name_is_not_registered_again(cluster):
    with pytest.raises(InvalidRequestError, match="Unknown backend 'slurm'") as refused:
        registry.traits_of("slurm")
    assert "cluster, hf-jobs, local" in refused.value.fix
    assert registry.register(CLUSTER) is CLUSTER  # the same declaration again: nothing changes
    with pytest.raises(ValueError, match="already registered as 'local'"):
        registry.register(BackendTraits(**{**vars(CLUSTER), "name": "local"}))


def test_a_third_backends_output_is_where_its_traits_say(context):
    # A succeeded job that pushed nothing: on HF Jobs its model is lost, on the cluster it is in its folder.
    config = {"model": "org/base", "hub_model_id": None}
    add_queued_run(context.ledger, "jt-cluster1", backend="cluster", status=JobStatus.SUCCEEDED, config=config)
    add_queued_run(context.ledger, "jt-remote01", backend="hf-jobs", status=JobStatus.SUCCEEDED, config=config)
    on_cluster = context.run("jt-cluster1")
    refuse_unpushed(context, on_cluster)
    assert job_output(context, on_cluster, None).adapter == "/runs/jt-cluster1/output/final"
    with pytest.raises(InvalidRequestError, match="ran on HF Jobs without a Hub repo"):
        job_output(context, context.run("jt-remote01"), None)


def test_a_third_backends_runs_are_billed_as_its_traits_say(context, hub):
    entry = next(h for h in hub.hardware if h["name"] == "a10g-large")
    entry["unitCostMicroUSD"] = round(6.0 / 60 * 1_000_000)  # $6 an hour, billed by the minute
    entry["unitCostUSD"] = entry["unitCostMicroUSD"] / 1_000_000
    started = time.time() - HOUR
    for run_id, backend in (("jt-cluster1", "cluster"), ("jt-remote01", "hf-jobs")):
        running = dict(status=JobStatus.RUNNING, started_at=started, flavor="a10g-large", run={"max_cost_usd": 1.0})
        add_queued_run(context.ledger, run_id, backend=backend, **running)
    tracker = Tracker(context, on_ended=lambda attempt, reason: None, rules=None)
    now = started + HOUR
    # The same hour on the same flavor: HF Jobs bills it at the flavor's price, the cluster does not bill.
    assert tracker.cost(context.latest("jt-remote01"), now) == pytest.approx(6.0)
    assert tracker.cost(context.latest("jt-cluster1"), now) == 0.0
    reached = tracker.spending.cap_reached(context.run("jt-remote01"), now)
    assert reached is not None and "$1.00" in reached, reached
    assert tracker.spending.cap_reached(context.run("jt-cluster1"), now) is None


def test_a_third_backends_host_and_flavors_read_as_its_traits_say(context, cluster):
    add_queued_run(context.ledger, "jt-cluster1", backend="cluster", host="gpu-farm")
    attempt = context.latest("jt-cluster1")
    assert context.reaches(attempt) and context.here("cluster") == "cluster gpu-farm"
    assert context.reached_by(attempt).endswith("on cluster gpu-farm (JOBTRAIL_CLUSTER)")
    assert context.host == "box"  # the server's machine is the one its local backend runs jobs on
    assert "pass flavor= and timeout= on cluster" in fine_tune("org/m", "org/d", backend="cluster")
    assert "pass flavor=" not in fine_tune("org/m", "org/d", backend="local")


def _spec(backend: str, **fields) -> JobSpec:
    """A training job on `backend`; JobSpec's Literal names only the shipped backends, so a registered third one
    is put in without validation, as a future BackendName would let it in."""
    job = JobSpec(method="sft", model="org/base", dataset="org/data", hyperparameters={"max_steps": 50})
    return job.model_copy(update={"backend": backend, **fields})


def _facts(spec: JobSpec, **facts) -> Facts:
    return Facts(values=effective(spec.method, spec.hyperparameters, eval_dataset=False), **facts)


def _codes(findings) -> set[str]:
    return {f.code for f in findings}


def test_whether_a_third_backends_jobs_pick_a_flavor_is_as_its_traits_say(cluster):
    # The cluster picks flavors, like HF Jobs: none chosen is refused, and the launcher's fix offers a bigger one.
    assert "flavor.missing" in _codes(rules.check_estimate(_spec("cluster"), _facts(_spec("cluster"))))
    on_flavor = _spec("cluster", flavor="l4x4", hyperparameters={"num_processes": 8})
    [too_many] = rules.check_launcher(on_flavor, _facts(on_flavor, gpus=4))
    assert "but l4x4 has 4 GPUs" in too_many.message and "a flavor with 8 GPUs" in too_many.fix
    assert "config.flavor_ignored" not in _codes(rules.check_config(on_flavor, _facts(on_flavor)))
    # The same cluster with fixed machines: a flavor is ignored and none is missing, where "not local" required one.
    fixed = registry.register(replace(CLUSTER, name="workstations", flavors=False))
    named = _spec(fixed.name, flavor="a10g-large")
    [ignored] = [f for f in rules.check_config(named, _facts(named)) if f.code == "config.flavor_ignored"]
    assert ignored.message == "flavor='a10g-large' has no effect on the workstations backend."
    [unestimated] = rules.check_estimate(_spec(fixed.name), _facts(_spec(fixed.name)))
    assert unestimated.code == "estimate.unavailable" and "cluster has no flavor table" in unestimated.message
    many = _spec(fixed.name, hyperparameters={"num_processes": 8})
    [too_many] = rules.check_launcher(many, _facts(many, gpus=4))
    assert "but the team's cluster has 4 GPUs" in too_many.message and "a flavor" not in too_many.fix


def test_a_third_backends_spending_caps_are_checked_as_its_billing_says(cluster):
    spec = _spec("cluster", flavor="a10g-large")
    values = _facts(spec).job_values
    estimate = estimate_cost(
        spec.model, values, num_examples=4000, avg_tokens=512.0, flavor="a10g-large", config=QWEN25_05B, api=OFFLINE
    )
    assert estimate.cost_usd is not None and estimate.cost_usd > 0.01
    facts = _facts(spec, estimate=estimate, budget=BudgetFacts(max_cost_usd=0.01, attempts=1, daily_budget_usd=0.01))
    # The same estimate over the same caps: HF Jobs would bill it, so it is refused; the cluster bills nothing.
    assert {"budget.over_cap", "budget.daily"} <= _codes(check_caps(_spec("hf-jobs", flavor="a10g-large"), facts))
    assert check_caps(spec, facts) == []


def test_a_cap_on_a_job_no_backend_bills_is_said_to_have_no_effect(cluster):
    """max_cost_usd on a local job was accepted without a word, as if it capped something."""
    given = BudgetFacts(max_cost_usd=5.0, attempts=1, cap_given=True)
    for backend, place in (("local", "this machine"), ("cluster", "the team's cluster")):
        spec = _spec(backend)
        [said] = check_caps(spec, _facts(spec, budget=given))
        assert (said.code, said.severity) == ("budget.not_billed", "warning")
        assert (
            said.message
            == f"max_cost_usd $5.00 has no effect: jobs on {place} are not billed, so no spend reaches a cap."
        )
        # The server's default cap (JOBTRAIL_MAX_COST_USD) is for billed jobs: a local one is not told about it.
        assert check_caps(spec, _facts(spec, budget=replace(given, cap_given=False))) == []
    billed = _spec("hf-jobs", flavor="a10g-large")
    assert "budget.not_billed" not in _codes(check_caps(billed, _facts(billed, budget=given)))


def test_a_third_backends_output_and_files_are_judged_as_its_traits_say(cluster):
    # Runs elsewhere: this machine's files are out of its reach, as on HF Jobs. Writes to a folder: no Hub repo to
    # name, no token to push with, where the old branches refused both.
    spec = _spec("cluster", model="./my-model", output="/shared/runs/out", flavor="a10g-large")
    assert _codes(rules.check_remote(spec, _facts(spec, has_token=False))) == {"remote.local_model"}
    on_hf = spec.model_copy(update={"backend": "hf-jobs"})
    assert {"remote.local_model", "auth.no_token", "output.repo"} <= _codes(rules.check_remote(on_hf, _facts(on_hf)))
    local = spec.model_copy(update={"backend": "local"})
    assert rules.check_remote(local, _facts(local)) == []


def test_no_caller_outside_backends_compares_a_backend_name():
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if not path.relative_to(SRC).as_posix().startswith("backends/")
        and path.relative_to(SRC).as_posix() not in NAMES_ALLOWED
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if NAME_COMPARISON.search(line)
    ]
    assert not found, "ask the backend's traits (backends/registry.traits_of) instead:\n" + "\n".join(found)


def test_reading_traits_imports_no_backend_runner_and_no_sdk():
    code = (
        "import sys; from jobtrail.backends.registry import traits_of; traits_of('hf-jobs');"
        "print(sorted(m for m in ('huggingface_hub', 'jobtrail.backends.local', 'jobtrail.backends.hf_jobs') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
