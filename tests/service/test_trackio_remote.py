"""trackio and the model card of a job on backend="hf-jobs" (the Hub emulator runs the script for real).

The emulator runs no Space (nor Buckets, which trackio 0.43 keeps a Space's data in), so trackio fails in
the job the way it does for a token without the rights: an alert, and a job that succeeds all the same.
The receipt still says where the run was meant to go; the model card pushed with the model names the
base model, the data, the method and the receipt."""

from __future__ import annotations

from jobtrail.app import build_service
from support.remote import publish, remote_spec
from support.waiting import wait_until_terminal

TOKEN = "hf_alice_write_secret_token_42"
SPACE = "alice/jobtrail-trackio"
HYPER = {"max_steps": 3, "logging_steps": 1, "save_steps": 3, "per_device_train_batch_size": 2, "max_length": 64}


def test_a_remote_job_reports_to_a_private_space_and_a_trackio_failure_never_fails_it(
    hub, tiny_model, chat_dataset, tmp_path, monkeypatch
):
    publish(hub, TOKEN, tiny_model, chat_dataset, monkeypatch)
    service = build_service(tmp_path / "home")
    submitted = service.submit(remote_spec(timeout_s=1800, hyperparameters=HYPER))
    assert submitted.job_id, submitted.to_markdown()
    done = wait_until_terminal(lambda: service.inspect(submitted.job_id), 240, "the remote job to end", interval=0.5)
    assert done.status == "succeeded", (done.termination_message, service.logs(done.job_id, tail=40).lines)
    attempt = done.attempts[0]
    assert attempt.findings and "trackio.space" in [f.code for f in attempt.findings]

    trackio = done.trackio
    assert trackio is not None and (trackio.space_id, trackio.local_dir) == (SPACE, None)
    assert trackio.url == trackio.open == f"https://huggingface.co/spaces/{SPACE}"
    assert (trackio.project, trackio.run) == ("tiny", f"{done.job_id}-attempt-1")
    failed = [a for a in done.alerts if a["code"] == "trackio.failed"]
    assert failed and trackio.failed == failed[0]["message"] and "'report_to': 'none'" in failed[0]["fix"]
    assert done.progress.step == 3  # every step trained and logged
    assert ("space", SPACE) not in hub.repos  # jobtrail never makes the Space

    card = hub.repo_files("alice/tiny-sft")["README.md"].decode()
    assert 'base_model: "alice/tiny"' in card and 'datasets:\n- "alice/data"' in card
    assert f"**Config sha256**: `{attempt.config_sha256}`" in card
    assert f"**Job**: `{done.job_id}`, attempt `{attempt.attempt_id}`" in card
    assert "PeftModel.from_pretrained(base, 'alice/tiny-sft')" in card
    assert f"[{SPACE}](https://huggingface.co/spaces/{SPACE})" in card

    load = next(step for step in done.next_steps if step.action == "load")
    assert (
        "from_pretrained('alice/tiny')" in load.call
        and "PeftModel.from_pretrained(base, 'alice/tiny-sft')" in load.call
    )
    watch = next(step for step in done.next_steps if step.action == "watch")
    assert (watch.kind, watch.call) == ("url", f"https://huggingface.co/spaces/{SPACE}")
