"""A run that diverges, through the service: the job's alert, the `diverged` ending, and a retry that is
refused without a change (its fix names one) and accepted with it."""

from __future__ import annotations

from pathlib import Path

from jobtrail.app import build_service
from jobtrail.models import JobSpec
from jobtrail.requests import SubmitOptions
from support.jobs import TINY_SFT
from support.waiting import wait_until_terminal


def test_a_diverging_run_ends_diverged_and_is_retried_only_with_a_lower_learning_rate(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path
) -> None:
    service = build_service(tmp_path / "home")
    # 1e20 is out of learning_rate's range: preflight refuses it, force submits it anyway.
    spec = JobSpec(
        method="sft",
        model=str(tiny_model),
        dataset=str(chat_dataset),
        hyperparameters={**TINY_SFT, "learning_rate": 1e20},
    )
    job_id = service.submit(spec, SubmitOptions(force=True, max_retries=2)).job_id
    done = wait_until_terminal(lambda: service.inspect(job_id), 180, "the diverging job to end")
    assert (done.status, done.termination_reason) == ("failed", "diverged"), done.to_markdown()
    assert len(done.attempts) == 1  # max_retries never retries a diverged run without a change
    assert done.termination_message and "The loss became nan at step 2" in done.termination_message
    (alert,) = done.alerts
    assert (alert["code"], alert["step"]) == ("nan_loss", 2)
    assert f'retry(job_id="{job_id}", changes={{"learning_rate": 0.0001}})' in alert["fix"]
    assert "Alert (nan_loss, step 2)" in done.to_markdown()
    assert done.retries_stopped and "NaN or infinite" in done.retries_stopped

    refused = service.retry(job_id)
    assert not refused.retried and refused.fix
    # Ten times 1e20 lower is still absurd: the method's default instead.
    assert refused.fix.startswith(f"retry(job_id=\"{job_id}\", changes={{'learning_rate': 0.0002}})")

    answer = service.retry(job_id, {"learning_rate": 1e-3})
    assert answer.retried and answer.changes == {"learning_rate": 1e-3}
    healed = wait_until_terminal(lambda: service.inspect(job_id), 240, "the retry", attempts=2)
    assert healed.status == "succeeded" and healed.alerts == [], healed.to_markdown()
