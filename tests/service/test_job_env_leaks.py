"""The issue's case, through the service: a GRPO reward function prints the job's environment, and the server's
credentials it found some other way. It sees none of them in its environment, and logs, inspect and the ledger's
events show every one masked (issue 28 item 1)."""

from __future__ import annotations

import json
import secrets

import pytest

from jobtrail.app import build_service
from jobtrail.backends.job_env import PASS_ENV
from jobtrail.service.secrets import REDACTED
from support.jobs import job_spec, write_jsonl
from support.waiting import wait_until_terminal

PASSWORD = "pw-" + secrets.token_hex(8)
# Set once the service is built: JOBTRAIL_LEDGER_URL would point the service itself at that (unreachable) ledger.
CREDENTIALS = {
    "JOBTRAIL_AUTH_TOKEN": "jt-auth-" + secrets.token_hex(12),
    "JOBTRAIL_LEDGER_URL": f"postgresql://jobtrail:{PASSWORD}@db.invalid:5432/team",
    "FOO_SECRET": "foo-" + secrets.token_hex(10),
}
REWARD = """import json, os, re

_shown = []


def numeric(prompts, completions, **kwargs):
    if not _shown:  # once: the first batch's call
        _shown.append(True)
        print("ENV " + json.dumps(sorted(os.environ)), flush=True)
        for value in open({stash!r}).read().splitlines():  # found some other way, printed anyway
            print("FOUND " + value, flush=True)
            print("JOBTRAIL " + json.dumps({{"event": "warning", "time": 0.0, "code": "found", "message": value}}))
    return [1.0 if re.search(r"[0-9]", str(c)) else 0.0 for c in completions]
"""


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv(PASS_ENV, "JT_PASSED_SETTING")
    monkeypatch.setenv("JT_PASSED_SETTING", "passed-through")
    monkeypatch.setenv("JT_UNLISTED_SETTING", "unlisted")
    built = build_service(tmp_path / "home")
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return built


def test_a_reward_function_sees_no_server_credential_and_prints_none(service, tiny_model, tmp_path):
    stash = tmp_path / "found.txt"
    stash.write_text("\n".join([*CREDENTIALS.values(), PASSWORD]))
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD.format(stash=str(stash)))
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": f"What is {i} + {i}?"} for i in range(8)])
    hyper = {
        "max_steps": 1,
        "logging_steps": 1,
        "per_device_train_batch_size": 2,
        "num_generations": 2,
        "max_completion_length": 8,
        "lora_r": 4,
        "lora_alpha": 8,
    }
    spec = job_spec(
        "grpo", tiny_model, prompts, hyperparameters=hyper, reward_file=str(reward), reward_function="numeric"
    )
    submitted = service.submit(spec)
    assert submitted.job_id, [f.model_dump() for f in submitted.findings if f.severity == "error"]
    job = submitted.job_id
    done = wait_until_terminal(lambda: service.inspect(job), 240, "the GRPO job to end")
    lines = service.logs(job, tail=5000).lines
    assert done.status == "succeeded", (done.termination_message, lines[-30:])

    seen = set(json.loads(next(line for line in lines if line.startswith("ENV ")).removeprefix("ENV ")))
    assert not seen & {*CREDENTIALS, "JT_UNLISTED_SETTING", "JOBTRAIL_HOME", PASS_ENV}, sorted(seen)
    assert {"JT_PASSED_SETTING", "JOBTRAIL_RUN_ID", "JOBTRAIL_ATTEMPT_ID", "PATH", "HF_HOME"} <= seen

    found = [line for line in lines if line.startswith("FOUND ")]
    assert found == [f"FOUND {REDACTED}"] * (len(CREDENTIALS) + 1), found
    attempt = service.context.latest(job)
    echoes = [
        e["message"] for e in service.context.ledger.events(attempt.attempt_id, "warning") if e["code"] == "found"
    ]
    assert echoes == [REDACTED] * (len(CREDENTIALS) + 1), echoes
    results = [done, service.logs(job, tail=5000), service.inspect(job), service.ps()]
    shown = "\n".join(text for r in results for text in (r.model_dump_json(), r.to_markdown()))
    for value in [*CREDENTIALS.values(), PASSWORD]:
        assert value not in shown
