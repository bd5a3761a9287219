"""Inputs are confined like outputs (issue 28 item 2): data, eval data, reward files, local models and path-valued
hyperparameters resolve under the data roots, never through a hidden part, a system tree or jobtrail's state,
refused before a byte is read with an error naming JOBTRAIL_DATA_ROOTS; samples never show credentials.

The fake HOME holds what an agent's machine holds: an MCP client's config, Docker's and gcloud's credentials, a
.env file that parses as Python."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from jobtrail.app import build_service, settings
from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec
from jobtrail.preflight.data_roots import confined
from jobtrail.preflight.dataset import validate_dataset
from jobtrail.requests import SubmitOptions
from jobtrail.surface.http_server import auth_token
from jobtrail.util.roots import DATA_ROOTS_ENV
from support.jobs import TINY_SFT

# Built at run time, so that no scanner takes the test for a leak; shaped like the real ones.
HF = "hf_" + "Zx9" * 12
AUTH = "jt-auth-" + "q7" * 12
REWARD = "def reward(completions, **kwargs):\n    return [0.0 for _ in completions]\n"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fake HOME with credentials where tools keep them, the default data roots (working directory and home)."""
    home = tmp_path / "home"
    files = {
        ".cursor/mcp.json": {"mcpServers": {"jobtrail": {"env": {"HF_TOKEN": HF, "JOBTRAIL_AUTH_TOKEN": AUTH}}}},
        ".docker/config.json": {"auths": {"https://index.docker.io/v1/": {"auth": AUTH}}},
        ".config/gcloud/application_default_credentials.json": {"client_secret": AUTH, "refresh_token": HF},
    }
    for name, content in files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(json.dumps(content))
    (home / ".env").write_text(f'HF_TOKEN = "{HF}"\n{REWARD}')
    (home / "data").mkdir()
    (home / "data" / "chat.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    (home / "work").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(DATA_ROOTS_ENV)
    monkeypatch.chdir(home / "work")
    return home


def _refused(call, *args, **kwargs) -> str:
    with pytest.raises(InvalidRequestError) as info:
        call(*args, **kwargs)
    text = str(info.value)
    assert DATA_ROOTS_ENV in text and HF not in text and AUTH not in text, text
    return text


@pytest.mark.parametrize(
    "name", [".cursor/mcp.json", ".docker/config.json", ".config/gcloud/application_default_credentials.json"]
)
def test_credential_files_in_hidden_folders_are_refused_before_they_are_read(home, tmp_path, name):
    service = build_service(tmp_path / "jt-home")
    for ref in (str(home / name), f"~/{name}"):
        text = _refused(service.validate_dataset, ref, None, "train", None, None)
        assert "through the hidden ." in text
    # A link in an ordinary data folder leads where it leads: the hidden file, refused just the same.
    (home / "data" / "train.json").symlink_to(home / name)
    assert "through the hidden ." in _refused(validate_dataset, str(home / "data" / "train.json"))
    # A folder of data whose file is such a link: the file read is judged, not only the folder.
    (home / "data" / "set").mkdir()
    (home / "data" / "set" / "train.json").symlink_to(home / name)
    _refused(validate_dataset, str(home / "data" / "set"))
    # The ordinary data next to them validates, under the default roots (the home).
    assert validate_dataset(str(home / "data" / "chat.jsonl"), "sft").methods["sft"].status == "READY"


def test_a_reward_file_is_a_py_file_under_the_roots(home, tmp_path, tiny_model, monkeypatch):
    monkeypatch.setenv(DATA_ROOTS_ENV, os.pathsep.join([str(home), str(tiny_model.parent)]))
    service = build_service(tmp_path / "jt-home")

    def dry_run(reward_file: str) -> None:
        spec = JobSpec(
            method="grpo",
            model=str(tiny_model),
            dataset=str(home / "data" / "chat.jsonl"),
            reward_file=reward_file,
            reward_function="reward",
        )
        service.submit(spec, SubmitOptions(dry_run=True, include_script=True))

    assert "through the hidden .env" in _refused(dry_run, str(home / ".env"))
    (home / "data" / "notes.txt").write_text(REWARD)
    assert "not a .py file" in _refused(dry_run, str(home / "data" / "notes.txt"))
    (home / "data" / "reward.py").symlink_to(home / ".env")
    _refused(dry_run, str(home / "data" / "reward.py"))
    assert service.ps().jobs == []


def test_outside_the_roots_is_refused_with_the_setting_inside_validates(tmp_path, monkeypatch):
    roots, elsewhere = tmp_path / "roots", tmp_path / "elsewhere"
    for folder in (roots, elsewhere):
        folder.mkdir()
        (folder / "chat.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    monkeypatch.setenv(DATA_ROOTS_ENV, str(roots))
    text = _refused(validate_dataset, str(elsewhere / "chat.jsonl"))
    assert "outside the data roots" in text and f"add its folder to {DATA_ROOTS_ENV}" in text
    # Missing or there, outside is outside: the refusal says nothing of what exists there.
    assert "outside the data roots" in _refused(validate_dataset, str(elsewhere / "missing.jsonl"))
    (roots / "escape.jsonl").symlink_to(elsewhere / "chat.jsonl")
    assert "resolves to" in _refused(validate_dataset, str(roots / "escape.jsonl"))
    assert validate_dataset(str(roots / "chat.jsonl"), "sft").methods["sft"].status == "READY"


@pytest.mark.parametrize("ref", ["/etc/hosts", "/proc/self/environ", "/usr/lib/os-release", "/var/log/x.json"])
def test_system_trees_are_refused_whatever_the_roots(ref, monkeypatch):
    monkeypatch.setenv(DATA_ROOTS_ENV, "/")
    assert "system directory" in _refused(validate_dataset, ref)


def test_jobtrail_state_is_refused_but_what_jobs_made_is_an_input(tmp_path, monkeypatch):
    home = tmp_path / "jt-home"
    ledger = home / "runs" / "jt-aaaaaaaa" / "attempt-1"
    ledger.mkdir(parents=True)
    (ledger / "config.json").write_text("{}")
    assert "jobtrail's state" in _refused(confined, str(ledger / "config.json"), "dataset", home=home)
    monkeypatch.setenv("JOBTRAIL_HOME", str(home))  # the server's own home, as validate_dataset knows it
    assert "jobtrail's state" in _refused(validate_dataset, str(ledger / "config.json"))
    final = home / "runs" / "jt-aaaaaaaa" / "output" / "final"
    assert confined(str(final), "model", home=home) == final.resolve()
    assert confined(str(home / "demo" / "chat.jsonl"), "dataset", home=home) == (home / "demo" / "chat.jsonl")
    # A directory a job claimed as its output (its marker) is an input, wherever it is.
    monkeypatch.setenv(DATA_ROOTS_ENV, str(tmp_path / "data"))
    claimed = tmp_path / "out"
    (claimed / "final").mkdir(parents=True)
    (claimed / ".jobtrail-output").write_text('{"run_id": "jt-aaaaaaaa"}')
    assert confined(str(claimed / "final"), "model") == (claimed / "final").resolve()
    assert "outside the data roots" in _refused(confined, str(tmp_path / "other"), "model")


def test_path_hyperparameters_and_local_models_are_confined(tmp_path, tiny_model, chat_dataset, monkeypatch):
    service = build_service(tmp_path / "jt-home")

    def dry_run(model: str = str(tiny_model), **hyper: object) -> object:
        spec = JobSpec(method="sft", model=model, dataset=str(chat_dataset), hyperparameters={**TINY_SFT, **hyper})
        return service.submit(spec, SubmitOptions(dry_run=True))

    hidden_cache = str(Path.home() / ".cache" / "elsewhere")
    assert "model_init_kwargs.cache_dir" in _refused(dry_run, model_init_kwargs={"cache_dir": hidden_cache})
    assert "hyperparameters deepspeed" in _refused(dry_run, deepspeed="/etc/passwd")
    assert "relative path" in _refused(dry_run, chat_template_path="./template.jinja")
    assert "fsdp_config" in _refused(dry_run, fsdp_config=str(tmp_path / ".." / ".." / ".secret" / "fsdp.json"))
    hidden_model = tmp_path / ".models" / "tiny"
    shutil.copytree(tiny_model, hidden_model)
    (tmp_path / "model-link").symlink_to(hidden_model)
    for model in (hidden_model, tmp_path / "model-link"):
        assert "through the hidden .models" in _refused(dry_run, model=str(model))
    # A path given through a hidden folder is refused even where the link leads under a root.
    (tmp_path / ".links").mkdir()
    (tmp_path / ".links" / "tiny").symlink_to(tiny_model)
    assert "through the hidden .links" in _refused(confined, str(tmp_path / ".links" / "tiny"), "model")
    # Paths under the roots, a JSON object for a dict field and a Hub id for chat_template_path pass.
    (tmp_path / "ds.json").write_text("{}")
    planned = dry_run(
        model_init_kwargs={"cache_dir": str(tmp_path / "cache")},
        chat_template_path="Qwen/Qwen2.5-0.5B-Instruct",
        accelerator_config='{"split_batches": false}',
    )
    assert planned.status == "dry_run"  # type: ignore[attr-defined]
    assert service.ps().jobs == []


def test_samples_mask_credentials_by_key_and_by_shape(tmp_path):
    rows = [
        {"text": "hello", "api_key": "abc123456789", "meta": {"Authorization": "Bearer x", "keywords": "k"}},
        {"text": f"a note with {HF} inside", "num_tokens": 3, "apiKey": "zzz"},
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    samples = validate_dataset(str(data), "sft").samples
    assert HF not in json.dumps(samples) and "abc123456789" not in json.dumps(samples)
    first, second = samples
    assert first["text"] == "hello" and first["meta"]["keywords"] == "k" and "***" in first["meta"]["Authorization"]
    assert second["text"].startswith("a note with hf_***") and second["num_tokens"] == 3 and "***" in second["apiKey"]


def test_http_beyond_loopback_needs_explicit_roots_and_a_relative_root_stops_the_start(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_AUTH_TOKEN", "t" * 32)
    monkeypatch.delenv(DATA_ROOTS_ENV)
    with pytest.raises(InvalidRequestError) as info:
        auth_token("0.0.0.0")
    assert DATA_ROOTS_ENV in info.value.message and DATA_ROOTS_ENV in (info.value.fix or "")
    assert auth_token("127.0.0.1") == "t" * 32
    monkeypatch.setenv(DATA_ROOTS_ENV, str(tmp_path))
    assert auth_token("0.0.0.0") == "t" * 32
    monkeypatch.setenv(DATA_ROOTS_ENV, "data")
    with pytest.raises(InvalidRequestError) as info:
        settings(tmp_path / "jt-home")
    assert "not an absolute path" in info.value.message
