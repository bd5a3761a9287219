"""Secrets are references to the server's environment under credentials' names the job's runtime does not read,
long enough to hide, and hidden in every form a job can print them in, before any byte is stored; credentials
never travel as hyperparameters; everything under $JOBTRAIL_HOME is private to its owner."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from jobtrail.service.secrets import REDACTED, Redactor, resolve, validate
from jobtrail.surface.server import build_server
from support.jobs import TINY_SFT
from support.waiting import wait_until_terminal

# Awkward values: quotes and backslashes, non-ASCII, control characters, a line break. Each holds a marker
# that every escaping leaves as it is, so finding the marker anywhere finds the secret in any form.
AWKWARD = {
    "QUOTED_SECRET": 'say "hi" it\'s C:\\tmp\\new mkQUOTEDx1',
    "UNICODE_SECRET": "pässwörd-秘密-🔑 mkUNICODEx2",
    "CONTROL_SECRET": "tab\tbell\x07esc\x1b[31m del\x7f mkCONTROLx3",
    "MULTILINE_SECRET": "first line mkMULTIx4a\nsecond line mkMULTIx4b",
}
MARKERS = ("mkQUOTEDx1", "mkUNICODEx2", "mkCONTROLx3", "mkMULTIx4a", "mkMULTIx4b")


def printed_forms(value: str) -> list[str]:
    """How programs print a string, written out independently of the redactor under test."""
    return [
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        repr(value)[1:-1],
        ascii(value)[1:-1],
        repr(value.encode())[2:-1],
        json.dumps(repr(value))[1:-1],
    ]


def leaks(text: str | bytes) -> list[str]:
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    found = [m for m in MARKERS if m.encode() in data]
    for value in AWKWARD.values():
        found += [f for f in printed_forms(value) if f.encode("utf-8", "surrogateescape") in data]
    return found


# --- names, references and values ----------------------------------------------------------------


def test_only_references_to_the_environment_are_accepted():
    assert validate({"WANDB_API_KEY": "$WANDB_API_KEY"}) == {"WANDB_API_KEY": "$WANDB_API_KEY"}
    assert validate({"HF_TOKEN": "$MY_OTHER_TOKEN"}) == {"HF_TOKEN": "$MY_OTHER_TOKEN"}
    with pytest.raises(InvalidRequestError) as info:
        validate({"WANDB_API_KEY": "abc123secret"})
    assert "$WANDB_API_KEY" in info.value.fix and "abc123secret" not in str(info.value)
    with pytest.raises(InvalidRequestError):
        validate({"K": "$WANDB_API_KEY\n"})  # `$` in a regex matches before a trailing newline


@pytest.mark.parametrize("name", ["bad-name", "1ABC", "TOKEN\n", "TOKEN ", "", "ÄPI_KEY"])
def test_a_secret_name_is_a_plain_identifier(name):
    with pytest.raises(InvalidRequestError) as info:
        validate({name: "$WANDB_API_KEY"})
    assert "letters, digits and underscores" in info.value.fix


@pytest.mark.parametrize(
    "name",
    ["WANDB_API_KEY", "GITHUB_TOKEN", "TOKEN", "COMET_API_KEY", "MY_SECRET", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY",
     "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "NVIDIA_API_KEY", "HF_TOKEN", "wandb_api_key"],
)  # fmt: skip
def test_a_credentials_name_is_accepted(name):
    assert validate({name: "$SOME_SERVER_TOKEN"}) == {name: "$SOME_SERVER_TOKEN"}


# The loader and runtime names (glibc, OpenSSL, resolvers, compilers, node, torch.distributed), the old
# list's, and credentials under a prefix the job's own tools read.
@pytest.mark.parametrize(
    "name",
    ["GLIBC_TUNABLES", "GCONV_PATH", "OPENSSL_CONF", "HOSTALIASES", "CC", "NODE_OPTIONS", "RANK", "MASTER_ADDR",
     "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "PYTHONPATH", "PYTHONSTARTUP", "PATH", "HOME",
     "https_proxy", "SSL_CERT_FILE", "HF_HOME", "HF_ENDPOINT", "CUDA_VISIBLE_DEVICES", "VIRTUAL_ENV",
     "JOBTRAIL_AUTH_TOKEN", "JOBTRAIL_RUN_ID", "UV_PUBLISH_TOKEN", "PIP_PASSWORD", "HF_HUB_TOKEN",
     "HUGGING_FACE_HUB_TOKEN", "TRANSFORMERS_TOKEN", "TOKENIZERS_PARALLELISM", "PASSWORD_FILE", "TOKEN_"],
)  # fmt: skip
def test_a_name_that_is_not_a_credentials_is_refused(name):
    with pytest.raises(InvalidRequestError) as info:
        validate({name: "$SOME_SERVER_TOKEN"})
    assert "not a credential's name" in info.value.message and "WANDB_API_KEY" in info.value.fix


@pytest.mark.parametrize("source", ["$JOBTRAIL_AUTH_TOKEN", "$JOBTRAIL_LEDGER_URL", "$jobtrail_home"])
def test_a_secret_never_refers_to_jobtrails_own_settings(source):
    with pytest.raises(InvalidRequestError) as info:
        validate({"WANDB_API_KEY": source})
    assert "jobtrail's own settings" in info.value.message


def test_resolution_names_the_variable():
    assert resolve({"K": "$MY_K"}, {"MY_K": "v" * 8}) == {"K": "v" * 8}
    with pytest.raises(InvalidRequestError) as info:
        resolve({"K": "$MY_K"}, {})
    assert "MY_K" in info.value.message


@pytest.mark.parametrize("value", ["", "x", "Zq7", "Zq7Wv9k"])
def test_unset_and_too_short_read_the_same_without_showing_the_value(value):
    """One message whether the variable is unset, empty or too short: a refusal tells nothing about the server's
    environment beyond the name the caller gave (formerly two messages: an oracle for which variables exist)."""
    with pytest.raises(InvalidRequestError) as info:
        resolve({"API_KEY": "$MY_K"}, {"MY_K": value})
    with pytest.raises(InvalidRequestError) as unset:
        resolve({"API_KEY": "$MY_K"}, {})
    assert (info.value.message, info.value.fix) == (unset.value.message, unset.value.fix)
    shown = f"{info.value.message} {info.value.fix}"
    assert "unset for the jobtrail server or not usable" in info.value.message and "MY_K" in info.value.fix
    assert len(value) <= 1 or value not in shown


# --- the redactor -------------------------------------------------------------------------------


def test_redaction_is_longest_first():
    redact = Redactor(["hf_abcdefgh", "hf_abcdefgh123", ""])
    assert redact("token=hf_abcdefgh123 short=hf_abcdefgh") == f"token={REDACTED} short={REDACTED}"
    assert redact("nothing here") == "nothing here"


def test_values_too_short_to_hide_are_left_alone():
    assert Redactor(["a", "1234567"])("a loss of 1234567") == "a loss of 1234567"


@pytest.mark.parametrize("value", list(AWKWARD.values()))
def test_every_printed_form_is_hidden_and_event_lines_still_parse(value):
    redact = Redactor([value])
    plain_lines = [
        value,
        f"token={value!r}",
        str({"token": value}),
        json.dumps({"token": value}),
        json.dumps({"token": value}, ensure_ascii=False),
        json.dumps({"error": repr(KeyError(value))}),
        f"{value.encode()}",
        ascii(value),
    ]
    for line in [piece for text in plain_lines for piece in text.split("\n")]:
        assert not leaks(redact(line)), (line, redact(line))

    event = {"event": "warning", "time": 1.5, "code": "echo", "step": 3, "message": f"{value!r} {value}"}
    for dumped in (json.dumps(event, separators=(",", ":")), json.dumps(event, ensure_ascii=False)):
        line = redact("JOBTRAIL " + dumped)
        assert line.startswith("JOBTRAIL ") and not leaks(line)
        parsed = json.loads(line.removeprefix("JOBTRAIL "))
        assert parsed["step"] == 3 and parsed["code"] == "echo" and REDACTED in parsed["message"]
    untouched = 'JOBTRAIL {"event":"step","time":1.0,"step":1,"loss":2.5}'
    assert redact(untouched) == untouched


# --- a real job that prints its secrets -----------------------------------------------------------

# The job's interpreter: it prints every secret in the ways programs do (raw, repr, JSON, an exception,
# a JOBTRAIL event), then runs the job's script (a real training).
JOB_PYTHON = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys, traceback
    names = {names!r}
    if all(name in os.environ for name in names):
        for name in names:
            value = os.environ[name]
            print(value)
            print(repr(value), {{name: value}}, ascii(value), value.encode())
            print(json.dumps(value), json.dumps(value, ensure_ascii=False), json.dumps({{"v": repr(value)}}))
            event = {{"event": "warning", "time": 0.0, "code": "echo", "message": f"{{name}}={{value!r}} {{value}}"}}
            print("JOBTRAIL " + json.dumps(event, separators=(",", ":")))
            traceback.print_exception(KeyError(value), file=sys.stderr)
        sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    """
)


@pytest.fixture
def private_umask() -> Iterator[None]:
    """The usual umask, under which files come out world-readable unless jobtrail makes them private."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def echoing_service(tmp_path, monkeypatch, private_umask):
    job_python = tmp_path / "job-python"
    job_python.write_text(JOB_PYTHON.format(python=sys.executable, names=sorted(AWKWARD)))
    job_python.chmod(0o755)
    for name, value in AWKWARD.items():
        monkeypatch.setenv(f"JT_TEST_{name}", value)
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JOBTRAIL_PYTHON", str(job_python))
    return build_service()


def _mcp_results(server: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    async def go() -> list[str]:
        texts = []
        async with Client(server) as client:
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                texts += [getattr(c, "text", "") for c in result.content]
                texts.append(json.dumps(result.structured_content, ensure_ascii=False))
        return texts

    return anyio.run(go)


def test_a_job_printing_awkward_secrets_leaves_no_trace_a_whole_receipt_and_only_private_files(
    echoing_service, tiny_model, chat_dataset
):
    service = echoing_service
    home = service.context.home
    spec = JobSpec(
        method="sft",
        model=str(tiny_model),
        dataset=str(chat_dataset),
        hyperparameters={**TINY_SFT, "max_steps": 4, "save_steps": 2},
        secrets={name: f"$JT_TEST_{name}" for name in AWKWARD},
    )
    assert service.submit(spec, SubmitOptions(dry_run=True)).status == "dry_run"
    job = service.submit(spec).job_id
    done = wait_until_terminal(lambda: service.inspect(job), 240, "the job to end")
    assert done.status == "succeeded", service.logs(job, tail=80).lines

    # The receipt is whole: redacting the secrets broke no event line.
    attempt = service.context.latest(job)
    assert attempt.last_metrics and attempt.last_metrics["step"] == 4
    assert [c.state for c in service.context.ledger.checkpoints(attempt.attempt_id)].count("committed") >= 1
    echoes = service.context.ledger.events(attempt.attempt_id, "warning")
    assert len(echoes) == len(AWKWARD) and all(REDACTED in e["message"] for e in echoes), echoes

    # Not one byte under the home, in any form.
    for path in home.rglob("*"):
        if path.is_file():
            assert not leaks(path.read_bytes()), path

    # Nor in any tool result: through the service, and through an MCP client.
    results = [service.inspect(job), service.logs(job, tail=5000), service.ps(), service.report()]
    for result in results:
        assert not leaks(result.model_dump_json()) and not leaks(result.to_markdown()), type(result).__name__
    assert REDACTED in "\n".join(service.logs(job, tail=5000).lines)
    texts = _mcp_results(
        build_server(service),
        [
            ("inspect", {"job_id": job}),
            ("logs", {"job_id": job, "tail": 5000}),
            ("ps", {}),
            ("report", {}),
            ("metrics", {"job_id": job}),
            ("plot", {"job_id": job}),  # a PNG under the job's directory
        ],
    )
    assert texts and not leaks("\n".join(texts))

    # Everything the server, the supervisor and the job wrote is private, under umask 022.
    modes = {path.relative_to(home): stat.S_IMODE(path.stat().st_mode) for path in [home, *home.rglob("*")]}
    assert any(p.name == "ledger.sqlite-wal" for p in modes) and any(p.parts[:1] == ("dry-runs",) for p in modes)
    assert any(p.name.startswith("checkpoint-") for p in modes) and any(p.suffix == ".png" for p in modes)
    wrong = {
        str(p): oct(mode)
        for p, mode in modes.items()
        if mode != (0o700 if (home / p).is_dir() else 0o600) and not (home / p).is_symlink()
    }
    assert not wrong, wrong


# --- refused before anything is stored ---------------------------------------------------------------


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTRAIL_HOME", str(tmp_path / "home"))
    return build_service()


def _spec(model: Path, data: Path, **fields: Any) -> JobSpec:
    return JobSpec(method="sft", model=str(model), dataset=str(data), **{"hyperparameters": TINY_SFT, **fields})


def test_submit_refuses_a_short_secret_and_a_name_that_is_not_a_credentials(
    service, tiny_model, chat_dataset, monkeypatch
):
    monkeypatch.setenv("JT_SHORT_SECRET", "Zq7Wv9k")
    monkeypatch.setenv("JT_LONG_SECRET", "a-long-enough-value-42")
    with pytest.raises(InvalidRequestError) as info:
        service.submit(
            _spec(tiny_model, chat_dataset, secrets={"API_KEY": "$JT_SHORT_SECRET"}), SubmitOptions(dry_run=True)
        )
    assert "not usable as a secret" in info.value.message and "Zq7Wv9k" not in str(info.value) + info.value.fix
    for name in ("LD_PRELOAD", "PYTHONPATH", "JOBTRAIL_IMAGE", "PATH", "API_KEY\n", "GLIBC_TUNABLES"):
        with pytest.raises(InvalidRequestError):
            service.submit(_spec(tiny_model, chat_dataset, secrets={name: "$JT_LONG_SECRET"}))
    assert service.ps().jobs == []


HF_LIKE = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


@pytest.mark.parametrize(
    "hyperparameters",
    [{"hub_token": HF_LIKE}, {"hf_token": "x" * 20}, {"api_key": "sk-123456789"}, {"push_to_hub_token": HF_LIKE},
     {"run_name": HF_LIKE}, {"model_init_kwargs": {"token": HF_LIKE}}],
)  # fmt: skip
def test_a_credential_never_travels_as_a_hyperparameter(service, tiny_model, chat_dataset, hyperparameters):
    spec = _spec(tiny_model, chat_dataset, hyperparameters={**TINY_SFT, **hyperparameters})
    for dry_run, force in ((True, False), (False, True)):
        with pytest.raises(InvalidRequestError) as info:
            service.submit(spec, SubmitOptions(dry_run=dry_run, force=force))
        assert "HF_TOKEN" in info.value.fix and "secrets=" in info.value.fix
        assert HF_LIKE not in str(info.value) + info.value.fix
    assert service.ps().jobs == []
    for path in service.context.home.rglob("*"):
        if path.is_file():
            assert HF_LIKE.encode() not in path.read_bytes(), path
    refused = _mcp_results(
        build_server(service),
        [
            (
                "submit",
                {
                    "method": "sft",
                    "model": str(tiny_model),
                    "dataset": str(chat_dataset),
                    **{"hyperparameters": hyperparameters},
                },
            )
        ],
    )
    assert "HF_TOKEN" in refused[0] and HF_LIKE not in "".join(refused)


def test_trust_remote_code_is_a_warning_that_names_the_risk(service, tiny_model, chat_dataset):
    for hyper in ({"trust_remote_code": True}, {"model_init_kwargs": {"trust_remote_code": True}}):
        dry = service.submit(
            _spec(tiny_model, chat_dataset, hyperparameters={**TINY_SFT, **hyper}), SubmitOptions(dry_run=True)
        )
        found = [f for f in dry.findings if f.code == "hyperparameters.trust_remote_code"]
        assert found and found[0].severity == "warning" and "arbitrary Python code" in found[0].message
    plain = service.submit(_spec(tiny_model, chat_dataset), SubmitOptions(dry_run=True))
    assert not [f for f in plain.findings if f.code == "hyperparameters.trust_remote_code"]


def test_the_command_line_keeps_what_it_creates_private(tmp_path, job_env):
    """`jobtrail demo --prepare` writes the tiny model and data under the home: private under umask 022 too."""
    home = tmp_path / "home"
    subprocess.run(
        [sys.executable, "-m", "jobtrail", "demo", "--prepare"],
        env={**job_env, "JOBTRAIL_HOME": str(home)},
        umask=0o022,
        check=True,
        capture_output=True,
        timeout=300,
    )
    paths = [home, *home.rglob("*")]
    assert any(p.name == "config.json" for p in paths)
    wrong = {
        str(p): oct(stat.S_IMODE(p.stat().st_mode))
        for p in paths
        if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)
    }
    assert not wrong, wrong


def test_a_home_and_ledger_left_readable_by_an_older_version_are_narrowed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    older = build_service(home)  # kept open, so the ledger's -wal stays
    older.ps()
    # As an older version left them:
    for path in (home / "ledger.sqlite", home / "ledger.sqlite-wal"):
        path.chmod(0o644)
    home.chmod(0o755)
    monkeypatch.setenv("JOBTRAIL_HOME", str(home))
    build_service()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (home, home / "ledger.sqlite", home / "ledger.sqlite-wal")}
    assert modes == {"home": 0o700, "ledger.sqlite": 0o600, "ledger.sqlite-wal": 0o600}
