"""The Hub emulator, proven against the real huggingface_hub client (no mocks, no network)."""

from __future__ import annotations

import json
import os
import struct
import textwrap
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, JobInfo, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    JobNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import get_session

from support.hub_emulator import HubEmulator
from support.waiting import wait_for

NS = "alice"


@pytest.fixture
def api(hub: HubEmulator) -> HfApi:
    """alice's write-token client, pointed at the emulator explicitly."""
    hub.add_token("tok-alice", NS, "write", orgs=["acme"])
    hub.add_token("tok-alice-read", NS, "read")
    hub.add_token("tok-alice-fg", NS, "fineGrained")
    hub.add_token("tok-bob", "bob", "write")
    return HfApi(endpoint=hub.url, token="tok-alice")


def _safetensors(shapes: dict[str, list[int]]) -> bytes:
    header = {name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]} for name, shape in shapes.items()}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


def _run(api: HfApi, code: str, **kwargs: object) -> JobInfo:
    command = ["python", "-c", code]
    return api.run_job(image="python:3.12", command=command, namespace=NS, **kwargs)  # type: ignore[arg-type]


def _wait_stage(api: HfApi, job_id: str, stages: set[str], timeout: float = 15) -> JobInfo:
    return wait_for(
        lambda: (job := api.inspect_job(job_id=job_id, namespace=NS)).status.stage in stages and job,
        timeout,
        f"job {job_id} to reach {stages}",
    )


# -- accounts ----------------------------------------------------------------------------------


def test_whoami_good_bad_and_fine_grained_tokens(hub: HubEmulator, api: HfApi) -> None:
    me = api.whoami()
    assert me["name"] == NS
    assert [org["name"] for org in me["orgs"]] == ["acme"]
    assert me["auth"]["accessToken"]["role"] == "write"

    fine = HfApi(endpoint=hub.url).whoami(token="tok-alice-fg")["auth"]["accessToken"]
    assert fine["role"] == "fineGrained"
    assert "repo.write" not in fine["fineGrained"]["scoped"][0]["permissions"]

    with pytest.raises(HfHubHTTPError, match="Invalid user token") as bad:
        api.whoami(token="not-a-token")
    assert bad.value.response.status_code == 401
    # The X-Error-Message keeps a 401 from being mistaken for a missing repo.
    with pytest.raises(HfHubHTTPError) as jobs_401:
        api.list_jobs_hardware(token="not-a-token")
    assert jobs_401.value.response.status_code == 401
    assert not isinstance(jobs_401.value, RepositoryNotFoundError)


def test_default_endpoint_follows_patch_not_env(hub: HubEmulator, api: HfApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_ENDPOINT is read at import: only the fixture's patch redirects a bare HfApi()."""
    assert HfApi().endpoint == hub.url
    assert HfApi(token="tok-alice").whoami()["name"] == NS
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert HfApi().endpoint == hub.url  # changing the variable after import changes nothing


def test_side_calls_are_answered(hub: HubEmulator) -> None:
    assert get_session().get(f"{hub.url}/api/agent-harnesses").json() == {"standardEnvVars": [], "harnesses": {}}
    assert get_session().head(f"{hub.url}/api/telemetry/trl/sft").status_code == 200


# -- repos ---------------------------------------------------------------------------------------


def test_repo_metadata_listing_and_downloads(hub: HubEmulator, api: HfApi, tmp_path: Path) -> None:
    local = tmp_path / "train.jsonl"
    local.write_text('{"text": "hi"}\n')
    config = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}
    sha = hub.add_repo(
        "alice/tiny",
        files={
            "config.json": json.dumps(config),
            "model.safetensors": _safetensors({"a": [4, 8], "b": [8]}),
            "nested/deep/notes.txt": "deep",
        },
        info={"library_name": "transformers"},
    )
    hub.add_repo("alice/chat", repo_type="dataset", files={"data/train.jsonl": local})

    info = api.model_info("alice/tiny")
    assert info.sha == sha and info.private is False and info.gated is False
    assert sorted(s.rfilename for s in info.siblings) == ["config.json", "model.safetensors", "nested/deep/notes.txt"]
    assert info.config == config and info.library_name == "transformers"
    assert info.safetensors is not None and info.safetensors.total == 40
    assert api.model_info("alice/tiny", revision=sha).sha == sha
    assert api.dataset_info("alice/chat").siblings[0].rfilename == "data/train.jsonl"
    assert api.list_repo_files("alice/chat", repo_type="dataset") == ["data/train.jsonl"]

    tree = {entry.path for entry in api.list_repo_tree("alice/tiny", "nested/deep")}
    assert tree == {"nested/deep/notes.txt"}
    assert ("GET", "/api/models/alice/tiny/tree/main/nested%2Fdeep") in hub.requests
    paths = api.get_paths_info("alice/tiny", ["config.json", "nested", "missing.txt"])
    assert [(p.path, type(p).__name__) for p in paths] == [("config.json", "RepoFile"), ("nested", "RepoFolder")]

    # A branch name with "/" travels as %2F in resolve URLs and tree listings.
    hub.create_branch("alice/tiny", "exp/v1")
    all_files = ["config.json", "model.safetensors", "nested/deep/notes.txt"]
    assert api.list_repo_files("alice/tiny", revision="exp/v1") == all_files
    cache = tmp_path / "cache"
    path = api.hf_hub_download("alice/tiny", "nested/deep/notes.txt", revision="exp/v1", cache_dir=cache)
    assert Path(path).read_text() == "deep"
    assert ("HEAD", "/alice/tiny/resolve/exp%2Fv1/nested/deep/notes.txt") in hub.requests
    dataset_file = hf_hub_download(
        "alice/chat", "data/train.jsonl", repo_type="dataset", cache_dir=cache, endpoint=hub.url
    )
    assert Path(dataset_file).read_bytes() == local.read_bytes()
    snapshot = Path(snapshot_download("alice/tiny", cache_dir=cache, endpoint=hub.url))
    assert json.loads((snapshot / "config.json").read_text()) == config

    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download("alice/tiny", "nope.txt", cache_dir=cache)
    with pytest.raises(RevisionNotFoundError):
        api.model_info("alice/tiny", revision="no-such-branch")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("alice/missing")


def test_auth_check_public_gated_private(hub: HubEmulator, api: HfApi, tmp_path: Path) -> None:
    hub.add_repo("org/public", files={"a.txt": "a"})
    hub.add_repo("org/gated", files={"a.txt": "a"}, gated="manual")
    hub.add_repo("alice/secret", files={"a.txt": "a"}, private=True)
    bob = HfApi(endpoint=hub.url, token="tok-bob")
    anonymous = HfApi(endpoint=hub.url, token=False)

    api.auth_check("org/public")
    anonymous.auth_check("org/public")
    # Gated: metadata and file list are visible, access is not.
    assert bob.model_info("org/gated").gated == "manual"
    assert bob.list_repo_files("org/gated") == ["a.txt"]
    with pytest.raises(GatedRepoError):
        bob.auth_check("org/gated")
    with pytest.raises(GatedRepoError):
        bob.hf_hub_download("org/gated", "a.txt", cache_dir=tmp_path)
    hub.grant_access("org/gated", "bob")
    bob.auth_check("org/gated")
    # Private: invisible to others and to anonymous callers, visible to the owner.
    api.auth_check("alice/secret")
    assert api.model_info("alice/secret").private is True
    for outsider in (bob, anonymous):
        with pytest.raises(RepositoryNotFoundError):
            outsider.auth_check("alice/secret")
        with pytest.raises(RepositoryNotFoundError):
            outsider.model_info("alice/secret")
    # Write access: a read token passes the read check only.
    reader = HfApi(endpoint=hub.url, token="tok-alice-read")
    reader.auth_check("alice/secret")
    api.auth_check("alice/secret", write=True)
    with pytest.raises(HfHubHTTPError) as refused:
        reader.auth_check("alice/secret", write=True)
    assert refused.value.response.status_code == 403


def test_create_repo_new_existing_and_read_only(hub: HubEmulator, api: HfApi) -> None:
    url = api.create_repo("out-model")
    assert url.repo_id == "alice/out-model" and url.startswith(hub.url)
    assert api.create_repo("alice/out-model", exist_ok=True).repo_id == "alice/out-model"
    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo("alice/out-model")
    assert conflict.value.response.status_code == 409

    ds = api.create_repo("acme/out-data", repo_type="dataset", private=True)
    assert ds.repo_type == "dataset" and api.dataset_info("acme/out-data").private is True

    reader = HfApi(endpoint=hub.url, token="tok-alice-read")
    with pytest.raises(HfHubHTTPError) as forbidden:
        reader.create_repo("alice/new-one")
    assert forbidden.value.response.status_code == 403
    # exist_ok with a read token falls back to repo_info, as on the Hub.
    assert reader.create_repo("alice/out-model", exist_ok=True).repo_id == "alice/out-model"


def test_upload_file_and_folder(hub: HubEmulator, api: HfApi, tmp_path: Path) -> None:
    api.create_repo("alice/out")
    commit = api.upload_file(path_or_fileobj=b"weights", path_in_repo="model.bin", repo_id="alice/out")
    assert commit.oid == api.model_info("alice/out").sha
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    (folder / "README.md").write_text("# tiny\n")
    (folder / "sub" / "adapter.json").write_text("{}")
    api.upload_folder(folder_path=folder, repo_id="alice/out", path_in_repo="final")
    assert hub.repo_files("alice/out") == {
        "model.bin": b"weights",
        "final/README.md": b"# tiny\n",
        "final/sub/adapter.json": b"{}",
    }
    assert Path(api.hf_hub_download("alice/out", "model.bin", cache_dir=tmp_path / "c")).read_bytes() == b"weights"

    for token in ("tok-alice-read", "tok-alice-fg", "tok-bob"):
        with pytest.raises(HfHubHTTPError) as refused:
            HfApi(endpoint=hub.url, token=token).upload_file(
                path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="alice/out"
            )
        assert refused.value.response.status_code == 403


# -- jobs ----------------------------------------------------------------------------------------


def test_run_job_lifecycle_and_logs(hub: HubEmulator, api: HfApi) -> None:
    # Longer than the 1 s past the response's Date that a non-follow read waits for.
    hub.scheduling_delay = 2.0
    code = "import os; print('step 1'); print('env', os.environ['MODE'], os.environ['MY_SECRET'] == 'hunter2')"
    secrets = {"MY_SECRET": "hunter2"}
    job = _run(api, code, env={"MODE": "sft"}, secrets=secrets, labels={"exp": "e1"}, flavor="a10g-large")
    assert job.status.stage == "SCHEDULING"
    assert job.secrets == {"MY_SECRET": None}  # names only, never values
    assert job.owner.name == NS and job.owner.type == "user"
    assert job.labels is not None and job.labels["exp"] == "e1" and job.flavor == "a10g-large"
    assert list(api.fetch_job_logs(job_id=job.id, namespace=NS)) == []  # nothing while SCHEDULING

    # follow=True, started while SCHEDULING: every line once, "Job started" dropped by the client.
    followed = list(api.fetch_job_logs(job_id=job.id, namespace=NS, follow=True))
    expected = ["step 1", "env sft True", "===== Job finished: status=COMPLETED ====="]
    assert followed == expected
    assert hub.jobs[job.id].logs[0].startswith("===== Job started")

    done = api.inspect_job(job_id=job.id, namespace=NS)
    assert done.status.stage == "COMPLETED" and done.started_at and done.finished_at
    assert done.durations is not None and done.durations.total_secs is not None
    assert list(api.fetch_job_logs(job_id=job.id, namespace=NS)) == expected
    assert list(api.fetch_job_logs(job_id=job.id, namespace=NS, tail=2)) == expected[1:]

    hub.scheduling_delay = 0.2
    failed = _run(api, "import sys; print('boom'); sys.exit(3)")
    failed = _wait_stage(api, failed.id, {"ERROR"})
    assert failed.status.message is not None and "exit code: 3" in failed.status.message
    rerun = api.rerun_job(job_id=failed.id, namespace=NS)
    assert rerun.id != failed.id and rerun.command == failed.command
    assert _wait_stage(api, rerun.id, {"COMPLETED", "ERROR"}).status.stage == "ERROR"
    with pytest.raises(JobNotFoundError):
        api.inspect_job(job_id="0" * 24, namespace=NS)


def test_scripts_from_repo_url_and_env_var_push_to_hub(hub: HubEmulator, api: HfApi) -> None:
    """uv run <url> and bash + env-var scripts; the job reaches the emulator through HF_ENDPOINT."""
    push = textwrap.dedent(
        """
        import os, sys
        from huggingface_hub import HfApi
        api = HfApi()  # HF_ENDPOINT comes from the job's environment
        print("args", sys.argv[1:], "user", api.whoami(token=os.environ["HF_TOKEN"])["name"])
        api.upload_file(path_or_fileobj=b"trained", path_in_repo="result.txt", repo_id="alice/out",
                        token=os.environ["HF_TOKEN"])
        """
    )
    hub.add_repo("alice/scripts", repo_type="dataset", files={"train.py": push})
    hub.add_repo("alice/private-scripts", files={"train.py": push}, private=True)
    api.create_repo("alice/out")
    url = f"{hub.url}/datasets/alice/scripts/resolve/main/train.py"
    by_url = api.run_job(
        image="ghcr.io/astral-sh/uv:python3.12-bookworm",
        command=["uv", "run", "--with", "trl>=1.16", "-p", "3.12", url, "--lr", "1e-4"],
        secrets={"HF_TOKEN": "tok-alice"},
        namespace=NS,
    )
    by_env = api.run_job(
        image="ghcr.io/astral-sh/uv:python3.12-bookworm",
        command=["bash", "-c", 'printf "%s" "$JOBTRAIL_SCRIPT" > job.py && uv run job.py --epochs 1'],
        env={"JOBTRAIL_SCRIPT": push},
        secrets={"HF_TOKEN": "tok-alice"},
        namespace=NS,
    )
    # uv fetches script URLs without a token: a private repo's script cannot be fetched.
    private_url = f"{hub.url}/alice/private-scripts/resolve/main/train.py"
    unfetchable = api.run_job(image="python:3.12", command=["uv", "run", private_url], namespace=NS)

    assert _wait_stage(api, by_url.id, {"COMPLETED", "ERROR"}, timeout=30).status.stage == "COMPLETED"
    assert "args ['--lr', '1e-4'] user alice" in hub.jobs[by_url.id].logs
    assert _wait_stage(api, by_env.id, {"COMPLETED", "ERROR"}, timeout=30).status.stage == "COMPLETED"
    assert "args ['--epochs', '1'] user alice" in hub.jobs[by_env.id].logs
    assert hub.repo_files("alice/out")["result.txt"] == b"trained"
    assert _wait_stage(api, unfetchable.id, {"COMPLETED", "ERROR"}).status.stage == "ERROR"
    assert any("Failed to fetch" in line for line in hub.jobs[unfetchable.id].logs)


def test_list_jobs_label_filter_and_pagination(hub: HubEmulator, api: HfApi) -> None:
    hub.page_size = 2
    hub.scheduling_delay = 0.05
    ids = [_run(api, "pass", labels={"batch": "b1" if i < 3 else "b2"}).id for i in range(5)]
    for job_id in ids:
        _wait_stage(api, job_id, {"COMPLETED"})

    hub.requests.clear()
    listed = list(api.list_jobs(namespace=NS))
    assert sorted(job.id for job in listed) == sorted(ids)
    assert hub.requests.count(("GET", f"/api/jobs/{NS}")) == 3  # 2 + 2 + 1, following Link rel="next"
    assert sorted(job.id for job in api.list_jobs(labels={"batch": "b1"}, namespace=NS)) == sorted(ids[:3])
    assert len(list(api.list_jobs(status="COMPLETED", labels={"batch": "b2"}, namespace=NS))) == 2
    assert list(api.list_jobs(status="RUNNING", namespace=NS)) == []


def test_cancel_sleeping_job(hub: HubEmulator, api: HfApi) -> None:
    job = _run(api, "import time; print('sleeping', flush=True); time.sleep(60)")
    wait_for(lambda: "sleeping" in hub.jobs[job.id].logs, 15, "the job to start sleeping")
    assert api.inspect_job(job_id=job.id, namespace=NS).status.stage == "RUNNING"
    pid = hub.jobs[job.id].pid
    api.cancel_job(job_id=job.id, namespace=NS)
    assert _wait_stage(api, job.id, {"CANCELED"}, timeout=10).status.stage == "CANCELED"
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # type: ignore[arg-type]  # the whole process group is gone
    logs = list(api.fetch_job_logs(job_id=job.id, namespace=NS))
    assert logs == ["sleeping", "===== Job finished: status=CANCELED ====="]


def test_timeout_ends_in_error(hub: HubEmulator, api: HfApi) -> None:
    job = _run(api, "import time; time.sleep(60)", timeout=1)
    done = _wait_stage(api, job.id, {"ERROR", "COMPLETED", "CANCELED"}, timeout=10)
    assert done.status.stage == "ERROR"
    assert done.status.message is not None and "timed out" in done.status.message


def test_dropped_log_stream(hub: HubEmulator, api: HfApi) -> None:
    code = "import time\nfor i in range(8):\n    print('line', i)\n    if i == 3: time.sleep(2.5)"
    expected = [f"line {i}" for i in range(8)] + ["===== Job finished: status=COMPLETED ====="]
    hub.inject.drop_logs_after(4)  # "Job started" + 3 lines, then the connection is cut
    job = _run(api, code, env={"PYTHONUNBUFFERED": "1"})
    # follow=True reconnects (the job is still running) and skips what it already yielded.
    # NB the client gives up instead when the job is already terminal after a drop.
    assert list(api.fetch_job_logs(job_id=job.id, namespace=NS, follow=True)) == expected
    assert hub.requests.count(("GET", f"/api/jobs/{NS}/{job.id}/logs")) == 2

    hub.inject.drop_logs_after(4)
    with pytest.raises(httpx2.RemoteProtocolError):  # without follow, a dropped stream raises
        list(api.fetch_job_logs(job_id=job.id, namespace=NS))


def test_list_jobs_hardware(api: HfApi) -> None:
    hardware = {hw.name: hw for hw in api.list_jobs_hardware()}
    a10g = hardware["a10g-large"]
    assert a10g.unit_label == "minute"
    assert a10g.unit_cost_micro_usd == 25_000 and a10g.unit_cost_usd == pytest.approx(1.50 / 60, rel=1e-3)
    assert a10g.accelerator is not None and a10g.accelerator.model == "A10G"
    assert hardware["cpu-basic"].unit_cost_micro_usd == 167 and hardware["cpu-basic"].accelerator is None
    assert hardware["h200x8"].accelerator is not None and hardware["h200x8"].accelerator.quantity == "8"


def test_injected_5xx_and_forced_auth_errors(hub: HubEmulator, api: HfApi) -> None:
    hub.inject.fail(rf"^/api/jobs/{NS}$", 503, times=1, method="GET")
    assert list(api.list_jobs(namespace=NS)) == []  # the client's backoff retried once
    assert hub.requests.count(("GET", f"/api/jobs/{NS}")) == 2

    hub.inject.jobs_auth_error(403)
    with pytest.raises(HfHubHTTPError) as forbidden:
        _run(api, "pass")
    assert forbidden.value.response.status_code == 403
    hub.inject.clear()
    hub.inject.jobs_auth_error(401, times=1)
    with pytest.raises(HfHubHTTPError) as unauthorized:
        api.inspect_job(job_id="0" * 24, namespace=NS)
    assert unauthorized.value.response.status_code == 401
    # A read-only token may look at jobs but not start them.
    with pytest.raises(HfHubHTTPError) as read_only:
        _run(HfApi(endpoint=hub.url, token="tok-alice-read"), "pass")
    assert read_only.value.response.status_code == 403


def test_job_hf_token_replaced_by_limited_token(hub: HubEmulator, api: HfApi) -> None:
    """A session token inside the job that may not push: the 403 shows up in the job's log."""
    api.create_repo("alice/out")
    hub.inject.replace_job_hf_token("tok-alice-fg")
    code = (
        "import os; from huggingface_hub import HfApi; "
        "HfApi().upload_file(path_or_fileobj=b'x', path_in_repo='x', repo_id='alice/out', token=os.environ['HF_TOKEN'])"
    )
    job = _run(api, code, secrets={"HF_TOKEN": "tok-alice"})
    done = _wait_stage(api, job.id, {"COMPLETED", "ERROR"}, timeout=30)
    assert done.status.stage == "ERROR"
    assert any("403" in line for line in hub.jobs[job.id].logs)
