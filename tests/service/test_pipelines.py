"""Jobs that follow jobs (after=...) and smoke runs (smoke_steps=N) on the local backend, for real: an SFT job
with a smoke run, then DPO on its final model, then its GGUF conversion and evaluation, in order; and a job
whose smoke run diverges, whose followers are cancelled without ever starting."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.requests import ConvertRequest, EvaluateRequest, SubmitOptions
from support.jobs import FIRST_BUILD_TIMEOUT_S, LLAMA_CPP_CACHE, TINY_SFT, job_spec, write_jsonl
from support.waiting import wait_for, wait_until_terminal

FAST = {
    "max_steps": 2,
    "save_steps": 1,
    "logging_steps": 1,
    "per_device_train_batch_size": 2,
    "max_length": 48,
    "lora_r": 4,
    "lora_alpha": 8,
    "report_to": "none",
}


def _pairs(path: Path) -> Path:
    return write_jsonl(path, [{"prompt": f"Count to {i}.", "chosen": f" {i}", "rejected": " no"} for i in range(1, 9)])


@pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S + 900)
def test_sft_then_dpo_then_gguf_and_evaluation_run_in_order(tmp_path, tiny_model, chat_dataset, monkeypatch):
    # Room for every job at once: only `after` keeps them in order.
    monkeypatch.setenv("JOBTRAIL_MAX_CONCURRENT", "4")
    monkeypatch.setenv("JOBTRAIL_LLAMA_CPP_CACHE", str(LLAMA_CPP_CACHE.parent))  # llama.cpp built once per machine
    service = build_service(tmp_path / "home")
    pairs = _pairs(tmp_path / "pairs.jsonl")
    sft = service.submit(
        job_spec("sft", tiny_model, chat_dataset, hyperparameters={**FAST, "max_steps": 3}, smoke_steps=1)
    )
    assert sft.job_id and sft.smoke_steps == 1 and "smoke run of 1 steps" in sft.summary
    # model naming a job: DPO on the SFT job's final model (after defaults to it).
    dpo = service.submit(job_spec("dpo", sft.job_id, pairs, hyperparameters=FAST))
    assert dpo.job_id and dpo.status == "queued" and dpo.after == sft.job_id
    assert dpo.waiting_for and dpo.waiting_for.startswith(f"{sft.job_id} to succeed")
    assert "after.checked_on_stand_in" in {f.code for f in dpo.findings}  # checked on tiny_model for now
    gguf = service.convert_gguf(
        ConvertRequest(dpo.job_id, quantizations=["Q8_0"], pre_tokenizer="qwen2", after=dpo.job_id)
    )
    assert gguf.job_id and gguf.status == "queued" and gguf.source == dpo.job_id, gguf.summary
    evaluation = service.evaluate(EvaluateRequest(str(pairs), job_id=dpo.job_id, after=dpo.job_id))
    assert evaluation.job_id and evaluation.status == "queued" and evaluation.checkpoint == "final"

    ps = {row.job_id: row for row in service.ps().jobs}
    assert ps[sft.job_id].children == [dpo.job_id] and ps[dpo.job_id].after == sft.job_id
    assert ps[dpo.job_id].children == [gguf.job_id, evaluation.job_id]
    waiting = service.inspect(gguf.job_id)
    assert waiting.status == "queued" and waiting.waiting_for.startswith(f"{dpo.job_id} to succeed")
    assert f"Waiting for {dpo.job_id} to succeed" in waiting.summary
    waited = service.wait(gguf.job_id, timeout_s=0)
    assert waited.waiting_for.startswith(f"{dpo.job_id} to succeed") and f"It waits for {dpo.job_id}" in waited.summary

    done = wait_until_terminal(lambda: service.inspect(gguf.job_id), FIRST_BUILD_TIMEOUT_S + 600, "the chain")
    assert done.status == "succeeded", (done.termination_message, service.logs(gguf.job_id, tail=30).lines)
    assert {a["quantization"] for a in done.artifacts if a.get("kind") == "gguf"} == {"F16", "Q8_0"}
    scored = wait_until_terminal(lambda: service.inspect(evaluation.job_id), 300, "the evaluation")
    assert scored.status == "succeeded" and scored.evaluation and scored.evaluation["metrics"], scored.summary

    # One receipt, two attempts: the smoke run (its own directory, 1 step, nothing pushed), then the full job
    # from step 0.
    sft_done = service.inspect(sft.job_id)
    smoke, full = service.ledger.attempts(sft.job_id)
    assert (smoke.smoke_steps, smoke.status.value, full.smoke_steps, full.status.value) == (
        1,
        "succeeded",
        None,
        "succeeded",
    )
    assert smoke.config["training_args"]["max_steps"] == 1 and full.config["training_args"]["max_steps"] == 3
    assert smoke.config["output_dir"].endswith(f"{sft.job_id}/smoke") and not smoke.config["push_to_hub"]
    assert smoke.output_dir == smoke.config["output_dir"] and full.output_dir.endswith(f"{sft.job_id}/output")
    assert full.resumed_from is None and "smoke run (attempt 1, 1 steps) succeeded" in (full.retry_note or "")
    assert "1 (smoke, 1 steps)" in sft_done.to_markdown()
    # In order: each follower started after the job it followed had ended.
    dpo_attempt = service.ledger.attempts(dpo.job_id)[0]
    assert dpo_attempt.started_at and full.ended_at and dpo_attempt.started_at >= full.ended_at
    for follower in (gguf.job_id, evaluation.job_id):
        started = service.ledger.attempts(follower)[0].started_at
        assert started and dpo_attempt.ended_at and started >= dpo_attempt.ended_at
    # Each ran on its parent's final model, planned again at dispatch.
    sft_final = str(Path(full.output_dir) / "final")
    assert dpo_attempt.config["model"] == sft_final and dpo_attempt.spec and dpo_attempt.spec.model == sft_final
    dpo_final = str(Path(dpo_attempt.output_dir) / "final")
    gguf_attempt = service.ledger.attempts(gguf.job_id)[0]
    assert gguf_attempt.config["source"]["path_or_id"] == dpo_final
    assert service.ledger.attempts(evaluation.job_id)[0].config["adapter"] == dpo_final
    links = service.inspect(dpo.job_id)
    assert links.after and (links.after.job_id, links.after.status) == (sft.job_id, "succeeded")
    assert [c.job_id for c in links.children] == [gguf.job_id, evaluation.job_id]
    assert any(e["eval_job_id"] == evaluation.job_id for e in links.evaluations)


def test_a_diverged_smoke_run_ends_the_run_and_holds_its_followers(tmp_path, tiny_model, chat_dataset):
    service = build_service(tmp_path / "home")
    # 1e20 diverges at step 2: preflight refuses it, force submits it anyway, and the smoke run catches it.
    parent = service.submit(
        job_spec("sft", tiny_model, chat_dataset, hyperparameters={**TINY_SFT, "learning_rate": 1e20}, smoke_steps=3),
        SubmitOptions(force=True, max_retries=2),
    )
    assert parent.job_id
    child = service.submit(job_spec("sft", parent.job_id, chat_dataset, hyperparameters=TINY_SFT))
    evaluation = service.evaluate(EvaluateRequest(str(chat_dataset), job_id=parent.job_id, after=parent.job_id))
    conversion = service.convert_gguf(ConvertRequest(parent.job_id, after=parent.job_id))
    followers = [child.job_id, evaluation.job_id, conversion.job_id]
    assert all(followers)

    done = wait_until_terminal(lambda: service.inspect(parent.job_id), 240, "the smoke run to fail")
    assert (done.status, done.termination_reason) == ("failed", "diverged"), done.summary
    (smoke,) = done.attempts  # never the full job, never an automatic retry
    assert smoke.smoke_steps == 3 and "smoke" in (done.retries_stopped or "")
    # Held, not cancelled (issue 25): a retry of the parent with a lower learning rate can still give them a model.
    for job_id in followers:
        held = wait_for(
            lambda job_id=job_id: (r := service.inspect(job_id)).waiting_for and r.waiting_for.startswith("held") and r,
            30,
            f"{job_id} held",
        )
        (attempt,) = held.attempts
        assert held.status == "queued" and attempt.placement is None and attempt.started_at is None  # never ran
        assert f"held: {parent.job_id} ended diverged" in held.waiting_for
        assert held.after and held.after.termination_reason == "diverged"
        assert service.cancel(job_id).status == "cancelled"  # the call the hold names drops it

    with pytest.raises(InvalidRequestError, match=r"already ended failed \(diverged\)") as refused:
        service.submit(job_spec("sft", parent.job_id, chat_dataset))
    # The call that says which fix its ending calls for (issue 27: chaining.py names inspect, whose next steps hold
    # the retry with a lower learning rate, instead of a bare retry the policy may refuse).
    assert f'inspect(job_id="{parent.job_id}")' in str(refused.value)
