"""Issue 6's crash test: a local SFT job SIGKILLed at random moments always resumes correctly.

The heavy test drives tests/support/crash_harness.py through 20 kills (a few land inside a save)
with decoy checkpoints planted along the way, in two lineages of 10 run side by side (each its own
output directory; an attempt is mostly imports on one core); bench/crash_resume.py runs the same
harness with more, in one lineage.
The fast tests pin the two decoys against the runtime directly, without training.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from support.crash_harness import (
    DECOY_STEP,
    LOSS_TOLERANCE,
    load_runtime,
    max_steps_for,
    plant_corrupt,
    plant_partial,
    render_job,
    run_lineages,
    run_uninterrupted,
    run_with_kills,
)

TRIALS = 20
LINEAGES = 2  # 10 kills each, side by side
RNG_SEED = 6


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    return load_runtime()


# ~23 job processes at ~5 s each (mostly imports), two at a time: about a minute on an idle 2-core
# machine; the limit leaves room for a loaded one.
@pytest.mark.timeout(900)
def test_random_sigkills_always_resume_from_the_newest_verified_commit(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path, job_env: dict[str, str]
) -> None:
    max_steps = max_steps_for(TRIALS // LINEAGES)
    uninterrupted = render_job(tmp_path / "uninterrupted", tiny_model, chat_dataset, job_env, max_steps=max_steps)
    reference = run_uninterrupted(uninterrupted)
    crashed = [
        render_job(tmp_path / f"crashed-{n}", tiny_model, chat_dataset, job_env, max_steps=max_steps)
        for n in range(LINEAGES)
    ]
    report = run_lineages(crashed, reference, TRIALS, RNG_SEED)

    assert not report.violations, report.summary() + "\n" + "\n".join(report.violations)
    # Every lineage's last attempt resumes too.
    assert report.trials == TRIALS and report.resumes_checked == TRIALS + LINEAGES, report.summary()
    assert report.kills_in_save > 0 and report.decoys_partial > 0 and report.decoys_corrupt > 0, report.summary()
    assert report.max_abs_dloss <= LOSS_TOLERANCE, report.summary()


# Issue 15: the same with two gloo workers (every worker restores its own RNG state and data position, and a
# checkpoint is committed only once both wrote their part). Two kills: each attempt starts three processes.
@pytest.mark.timeout(900)
def test_random_sigkills_of_a_two_worker_job_always_resume_from_the_newest_verified_commit(
    tmp_path: Path, tiny_model: Path, chat_dataset: Path, job_env: dict[str, str]
) -> None:
    trials, max_steps = 2, max_steps_for(2)
    jobs = [
        render_job(tmp_path / name, tiny_model, chat_dataset, job_env, max_steps=max_steps, num_processes=2)
        for name in ("uninterrupted", "crashed")
    ]
    reference = run_uninterrupted(jobs[0])
    report = run_with_kills(jobs[1], reference, trials, RNG_SEED)

    assert not report.violations, report.summary() + "\n" + "\n".join(report.violations)
    assert report.trials == trials and report.resumes_checked == trials + 1, report.summary()
    assert report.max_abs_dloss <= LOSS_TOLERANCE, report.summary()


def _committed(out: Path, step: int, rt: ModuleType, capsys: pytest.CaptureFixture[str]) -> Path:
    """A committed checkpoint with the files the decoy planters expect."""
    ckpt = out / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_model.safetensors").write_bytes(bytes(range(256)) * (step + 1))
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    rt.commit_checkpoint(ckpt, step, "run", "att")
    capsys.readouterr()  # the commit's event line is not under test
    return ckpt


def test_a_partial_checkpoint_with_a_higher_step_is_never_chosen(
    tmp_path: Path, rt: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed between manifest and marker: every byte and a valid manifest, only no marker."""
    good = _committed(tmp_path, 6, rt, capsys)
    partial = plant_partial(tmp_path, good, DECOY_STEP, rt)
    assert (partial / rt.MANIFEST_NAME).read_bytes() == (good / rt.MANIFEST_NAME).read_bytes()

    path, step, skipped = rt.find_resume_target(tmp_path)
    assert (path, step) == (str(good), 6)
    assert [s["path"] for s in skipped] == [str(partial)] and "no commit marker" in skipped[0]["why"]


def test_retention_is_not_fooled_by_a_newer_checkpoint_corrupted_in_place(
    tmp_path: Path, rt: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same sizes pass retention's cheap check; counting the decoy as the newest commit would
    make keep=1 delete the real newest checkpoint (and the partial decoy's evidence)."""
    _committed(tmp_path, 3, rt, capsys)
    newest = _committed(tmp_path, 6, rt, capsys)
    partial = plant_partial(tmp_path, newest, DECOY_STEP, rt)
    corrupt = plant_corrupt(tmp_path, newest, DECOY_STEP + 1, rt)
    assert rt.verify_checkpoint(corrupt, deep=False) == (True, "ok")
    assert "sha256" in rt.verify_checkpoint(corrupt)[1]

    removed = rt.apply_retention(tmp_path, 1, just_committed=6)
    assert removed == [str(tmp_path / "checkpoint-3")]
    assert partial.is_dir() and corrupt.is_dir()
    assert rt.find_resume_target(tmp_path)[:2] == (str(newest), 6)


def test_a_committed_checkpoint_renamed_to_a_higher_step_is_not_chosen(tmp_path: Path) -> None:
    runtime = load_runtime()
    good = tmp_path / "checkpoint-4"
    good.mkdir()
    (good / "weights.bin").write_bytes(b"w" * 64)
    runtime.commit_checkpoint(good, 4, "jt-x", "jt-x/1")
    shutil.copytree(good, tmp_path / "checkpoint-40")
    path, step, skipped = runtime.find_resume_target(tmp_path)
    assert (path, step) == (str(good), 4)
    assert any("checkpoint-40" in s["path"] and "marker says step 4" in s["why"] for s in skipped)
