"""Backends declare their traits (issue 26 item 2): where a job's output goes, whether it is billed, what its host
is, whether it has flavors, its script header and its trackio store are asked of the backend, never read off its
name. A third backend, registered here with traits of its own, gets that behaviour from the service's callers as
they are: a team's cluster runs jobs elsewhere on named flavors, like HF Jobs, yet bills nothing and writes their
output to a shared folder, like the local backend, where the old "not local, so HF Jobs" branches billed it and
looked for its model on the Hub.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobtrail.backends import registry
from jobtrail.backends.base import BackendTraits
from jobtrail.backends.hf_jobs import HfJobsBackend
from jobtrail.backends.local import LocalBackend
from jobtrail.errors import InvalidRequestError
from jobtrail.ledger.store import Ledger
from jobtrail.models import JobStatus
from jobtrail.service.context import ServiceContext
from jobtrail.service.job_outputs import job_output, refuse_unpushed
from jobtrail.service.tracker import Tracker
from jobtrail.surface.prompts import fine_tune
from support.records import add_queued_run

SRC = Path(__file__).resolve().parents[2] / "src" / "jobtrail"
# Comparisons of backend names, as issue 26 counts them.
NAME_COMPARISON = re.compile(r'(==|!=) ?"local"|"hf-jobs"')
# models.BackendName lists the names tools accept; preflight's comparisons are the next wave's to convert.
NAMES_ALLOWED = {"models.py"}
NOT_YET_CONVERTED = "preflight/"

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


def test_no_caller_outside_backends_compares_a_backend_name():
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if not path.relative_to(SRC).as_posix().startswith(("backends/", NOT_YET_CONVERTED))
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
