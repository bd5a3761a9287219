"""A local job's environment is an allow-list: real supervisors and jobs that print what they were given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtrail.app import settings
from jobtrail.backends import job_env
from jobtrail.backends.local import LocalBackend
from jobtrail.errors import InvalidRequestError
from jobtrail.models import LaunchRequest, Placement, Probe
from support.waiting import wait_for

# The server's settings and credentials, and variables nobody listed: none may reach a job.
WITHHELD = {
    "JOBTRAIL_AUTH_TOKEN": "jt-auth-3c5a0f9e1b7d4a2c",
    "JOBTRAIL_LEDGER_URL": "postgresql://jobtrail:pw-7f3e9a1c5b@db.invalid:5432/team",
    "JOBTRAIL_HOME": "/srv/jobtrail-home",
    "FOO_SECRET": "foo-secret-8e2d4c6a0b",
    "NVIDIA_API_KEY": "nvapi-5d7f9b1a3c",  # a credential under a prefix whose settings do pass
    "HF_TOKEN": "hf_notgiventothisjob123",  # reaches a job only as a secret
    "SOME_UNLISTED_SETTING": "unlisted",
    "PYTHONPATH": "/srv/server-modules",
    "LD_PRELOAD": "/srv/inject.so",
    "SSH_AUTH_SOCK": "/run/user/1000/ssh-agent",
    "RANK": "3",
}
# What a training job needs from the server, and a name JOBTRAIL_JOB_ENV_PASS adds.
GIVEN = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/someone",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TMPDIR": "/var/tmp",
    "https_proxy": "http://proxy.invalid:3128",
    "NO_PROXY": "localhost",
    "REQUESTS_CA_BUNDLE": "/etc/ssl/site.pem",
    "CUDA_VISIBLE_DEVICES": "1",
    "NCCL_DEBUG": "WARN",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "OMP_NUM_THREADS": "1",
    "HF_HOME": "/srv/hf-home",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "VIRTUAL_ENV": "/srv/venv",
    "JT_PASSED_SETTING": "passed-through",
}
SHOW_ENV = 'import json, os\nprint("ENV " + json.dumps(dict(os.environ)))\n'


@pytest.fixture
def server_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {**WITHHELD, **GIVEN}.items():
        if name not in ("PATH", "HOME"):  # the test process needs its own to start the supervisor
            monkeypatch.setenv(name, value)
    yield


def _run(backend: LocalBackend, tmp_path: Path, **request: Any) -> dict[str, str]:
    placement = backend.launch(
        LaunchRequest(attempt_id="env", script=SHOW_ENV, workdir=str(tmp_path / "attempt"), **request)
    )

    def ended(probe: Probe) -> Probe | None:
        return probe if probe.phase != "running" else None

    probe = wait_for(lambda: ended(backend.probe(placement)), 20, "the job to end")
    assert probe.exit is not None and probe.exit.exit_code == 0, _log(backend, placement)
    line = next(line for line in _log(backend, placement) if line.startswith("ENV "))
    seen: dict[str, str] = json.loads(line.removeprefix("ENV "))
    return seen


def _log(backend: LocalBackend, placement: Placement) -> list[str]:
    return backend.read_log(placement).lines


def test_a_local_job_sees_what_it_needs_and_nothing_else(server_env: None, tmp_path: Path) -> None:
    backend = LocalBackend(grace_s=0.5, job_env_pass=("JT_PASSED_SETTING",))
    seen = _run(
        backend,
        tmp_path,
        env={"JOBTRAIL_RUN_ID": "jt-abc", "JOBTRAIL_ATTEMPT_ID": "jt-abc/1", "TRACKIO_DIR": "/srv/trackio"},
        secrets={"WANDB_API_KEY": "wandb-given-0123456789"},
        output_dir=str(tmp_path / "out"),
    )
    assert not set(WITHHELD) & set(seen), sorted(set(WITHHELD) & set(seen))
    for name, value in GIVEN.items():
        if name not in ("PATH", "HOME"):
            assert seen.get(name) == value, name
    assert {"PATH", "HOME"} <= set(seen)
    assert seen["WANDB_API_KEY"] == "[REDACTED]"  # given, and hidden from its log
    assert (seen["JOBTRAIL_RUN_ID"], seen["TRACKIO_DIR"]) == ("jt-abc", "/srv/trackio")
    assert seen["JOBTRAIL_OUTPUT_DIR"] == str(tmp_path / "out") and seen["PYTHONUNBUFFERED"] == "1"
    given = {"WANDB_API_KEY", "JOBTRAIL_RUN_ID", "JOBTRAIL_ATTEMPT_ID", "TRACKIO_DIR"}
    given |= {"JOBTRAIL_OUTPUT_DIR", "PYTHONUNBUFFERED", "JT_PASSED_SETTING"}
    # Every other name the job holds is one a rule lets through (the interpreter adds LC_CTYPE under a C locale).
    assert all(job_env.passed(name) for name in set(seen) - given), sorted(set(seen) - given)


def test_without_the_setting_a_listed_name_stays_with_the_server(server_env: None, tmp_path: Path) -> None:
    seen = _run(LocalBackend(grace_s=0.5), tmp_path)
    assert "JT_PASSED_SETTING" not in seen and "SOME_UNLISTED_SETTING" not in seen and "HF_HOME" in seen


@pytest.mark.parametrize(
    ("name", "passes"),
    [("CUDA_HOME", True), ("CUDA_API_TOKEN", False), ("HF_ENDPOINT", True), ("HF_TOKEN", False),
     ("HF_HUB_TOKEN", False), ("NVIDIA_VISIBLE_DEVICES", True), ("NVIDIA_API_KEY", False), ("LC_CTYPE", True),
     ("TORCH_HOME", True), ("TORCHELASTIC_RUN_ID", False), ("JOBTRAIL_IMAGE", False), ("jobtrail_home", False),
     ("TRACKIO_DIR", False), ("http_proxy", True), ("Path", False), ("PYTHONPATH", False), ("CC", True),
     ("PIP_INDEX_URL", True), ("PIP_REQUIRE_VIRTUALENV", False)],
)  # fmt: skip
def test_prefixes_admit_settings_never_credentials_or_jobtrails_own(name: str, passes: bool) -> None:
    assert job_env.passed(name) is passes


def test_the_setting_is_read_at_start_and_never_names_jobtrails_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(job_env.PASS_ENV, " WANDB_PROJECT, MY_SETTING ,")
    assert settings(tmp_path / "home").job_env_pass == ("WANDB_PROJECT", "MY_SETTING")
    for raw in ("WANDB_PROJECT,JOBTRAIL_AUTH_TOKEN", "jobtrail_ledger_url", "BAD-NAME", "A B"):
        monkeypatch.setenv(job_env.PASS_ENV, raw)
        with pytest.raises(InvalidRequestError) as info:
            settings(tmp_path / "home")
        assert job_env.PASS_ENV in info.value.message


def test_no_secret_sets_the_output_dir_of_a_job_given_none(tmp_path: Path) -> None:
    request = LaunchRequest(
        attempt_id="x", script="", workdir=str(tmp_path), secrets={job_env.OUTPUT_DIR_ENV: "/elsewhere"}
    )
    assert job_env.OUTPUT_DIR_ENV not in job_env.local_env(request, {})
