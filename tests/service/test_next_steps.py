"""After the end, through the service: a real local job's receipt links its trackio run and says what to do
next (load, evaluate, convert, train further, watch), its card names the receipt, `jobtrail dashboard` serves
its run; a failed or cancelled job's next step is what its termination reason calls for."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jobtrail.app import build_service
from jobtrail.models import JobSpec, TerminationReason
from support.jobs import TINY_SFT
from support.records import add_ended_run
from support.waiting import wait_for, wait_until_terminal


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, chat_dataset: Path):
    """A 4-step LoRA SFT job on the local backend, ended."""
    home = tmp_path_factory.mktemp("next-steps") / "home"
    service = build_service(home)
    spec = JobSpec(
        method="sft", model=str(tiny_model), dataset=str(chat_dataset), hyperparameters={**TINY_SFT, "max_steps": 4}
    )
    submitted = service.submit(spec)
    assert submitted.job_id, submitted.to_markdown()
    done = wait_until_terminal(lambda: service.inspect(submitted.job_id), 300, "the job to end", interval=0.5)
    assert done.status == "succeeded", done.to_markdown()
    return service, done


def test_the_receipt_links_the_trackio_run_in_the_servers_trackio_folder(finished) -> None:
    service, done = finished
    run = f"{done.job_id}-attempt-1"
    assert done.trackio is not None and done.trackio == done.attempts[0].trackio
    assert (done.trackio.project, done.trackio.run, done.trackio.group) == ("model", run, done.job_id)
    assert done.trackio.local_dir == str(service.context.trackio_dir) and done.trackio.space_id is None
    assert done.trackio.open == "jobtrail dashboard --project model" and done.trackio.failed is None
    assert done.trackio.version  # the job's trackio, for the receipt
    assert not [a for a in done.alerts if a["code"] == "trackio.failed"]


def test_next_steps_load_evaluate_convert_continue_and_watch(finished, tiny_model: Path) -> None:
    _, done = finished
    final = Path(done.attempts[0].output_dir) / "final"
    steps = {step.action: step for step in done.next_steps}
    assert list(steps) == ["load", "evaluate", "convert_gguf", "continue_training", "watch"]
    load = steps["load"]
    assert load.kind == "python" and f"from_pretrained({str(tiny_model)!r})" in load.call
    assert f"PeftModel.from_pretrained(base, {str(final)!r})" in load.call and "LoRA adapter" in load.why
    assert steps["evaluate"].call == f'evaluate(job_id="{done.job_id}", dataset=...)'  # the data is the agent's
    assert steps["convert_gguf"].call == f'convert_gguf(source="{done.job_id}")'
    again = steps["continue_training"].call
    assert again.startswith('submit(method="sft", model=') and f'init_from="{done.job_id}"' in again
    assert (steps["watch"].kind, steps["watch"].call) == ("shell", "jobtrail dashboard --project model")
    # Claude Code sees only the structured content: its summary names the same calls.
    summary = done.model_dump()["summary"]
    assert f'convert_gguf(source="{done.job_id}")' in summary and "load it in Python" in summary

    # The load code is real: it loads the adapter onto its base model and merges it.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    code = load.call + "\nprint(type(model).__name__, type(tokenizer).__name__)"
    loaded = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.split()[0] == "Qwen2ForCausalLM"


def test_the_model_card_names_the_receipt_of_the_attempt(finished, tiny_model: Path, chat_dataset: Path) -> None:
    _, done = finished
    attempt = done.attempts[0]
    card = (Path(attempt.output_dir) / "final" / "README.md").read_text()
    assert f"**Config sha256**: `{attempt.config_sha256}`" in card
    assert f"**Job**: `{done.job_id}`, attempt `{attempt.attempt_id}`" in card
    assert f"`{tiny_model}`" in card and f"sha256 `{attempt.data_manifest['sha256']}`" in card
    assert str(chat_dataset) in card and "SFT with LoRA" in card


def test_jobtrail_dashboard_serves_the_local_runs(finished) -> None:
    service, done = finished
    env = {**os.environ, "JOBTRAIL_HOME": str(service.home)}
    printed = _dashboard(env, "--print", "--project", "model")
    assert printed.returncode == 0, printed.stderr
    assert f"TRACKIO_DIR={service.context.trackio_dir}" in printed.stdout and "project='model'" in printed.stdout
    refused = _dashboard(env, "--project", "nope", "--no-browser")
    assert refused.returncode == 2 and "holds model" in refused.stderr

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "jobtrail", "dashboard", "--project", "model", "--no-browser", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/get_runs_for_project"
        runs = wait_for(lambda: _runs(url, "model"), 90, "the dashboard to serve", interval=0.5)
        assert f"{done.job_id}-attempt-1" in runs
    finally:
        server.terminate()
        server.wait(timeout=30)


def _dashboard(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "jobtrail", "dashboard", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def _runs(url: str, project: str) -> list[str] | None:
    try:
        response = httpx.post(url, json={"args": [], "kwargs": {"project": project}}, timeout=5)
    except httpx.TransportError:
        return None  # not serving yet
    return [run["name"] for run in response.json()["data"]] if response.status_code == 200 else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- failed and cancelled runs (ledger records: no job needed) ---------------------------------------


@pytest.mark.parametrize(
    ("reason", "actions", "call", "words"),
    [
        (TerminationReason.INFRA_TRANSIENT, ["retry", "logs"], "", "Retrying after infra_transient"),
        (
            TerminationReason.OOM,
            ["fix", "logs"],
            ', changes={"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}',
            "memory",
        ),
        (TerminationReason.DIVERGED, ["fix", "logs"], ', changes={"learning_rate": 2e-05}', "ten times lower"),
        (TerminationReason.TIMEOUT, ["fix", "logs"], ', changes={"timeout": "4h"}', "without advancing"),
        (TerminationReason.BAD_INPUT, ["fix", "validate_dataset", "logs"], None, "validate_dataset"),
        (TerminationReason.CANCELLED, ["retry"], "", "last committed checkpoint"),
    ],
)
def test_a_failed_or_cancelled_job_gets_what_its_reason_calls_for(tmp_path, reason, actions, call, words) -> None:
    service = build_service(tmp_path)
    add_ended_run(
        service.ledger,
        "jt-ended01",
        reason,
        spec={"hyperparameters": {"per_device_train_batch_size": 4}},
        started_at=time.time() - 10,
        config={"training_args": {"learning_rate": 2e-4}},
    )
    shown = service.inspect("jt-ended01")
    assert [s.action for s in shown.next_steps] == actions, shown.next_steps
    first = shown.next_steps[0]
    assert first.call == (None if call is None else f'retry(job_id="jt-ended01"{call})'), first
    assert words in first.why, first
    assert shown.trackio is None  # the job never reported to trackio
