"""The job runtime with many workers, without training: who speaks, and what the launcher says when
workers fail (scripts/_runtime.py's worker_failure). Real runs are in tests/service/test_multi_process.py."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from support.jobs import load_script_module

SINGLE = {"kind": "python", "num_processes": 1, "strategy": "single"}


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    return load_script_module("_runtime")


@pytest.fixture
def restore_sigterm() -> Iterator[None]:
    """run_job installs the job's SIGTERM handler: pytest's comes back afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@dataclass
class Failure:
    """torch's ProcessFailure, as far as worker_failure reads it."""

    pid: int
    exitcode: int


def _ending(rank: int, reason: str, *, at: float, reported: bool = False, lost_peer: bool = False) -> dict:
    return {
        "rank": rank,
        "reason": reason,
        "message": f"{reason} on rank {rank}",
        "error_type": "RuntimeError",
        "time": at,
        "reported": reported,
        "lost_peer": lost_peer,
    }


def test_only_rank_0_of_the_workers_emits(
    rt: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    rt.emit("step", step=1)
    assert capsys.readouterr().out == "" and rt.world_size() == 2
    monkeypatch.setenv("RANK", "0")
    rt.emit("step", step=1)
    assert json.loads(capsys.readouterr().out.removeprefix(rt.EVENT_PREFIX))["step"] == 1


def test_a_rank_in_the_environment_means_nothing_outside_torchs_launcher(
    rt: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    rt.emit("step", step=1)
    assert capsys.readouterr().out.startswith(rt.EVENT_PREFIX)
    assert (rt.process_rank(), rt.world_size(), rt.is_worker()) == (0, 1, False)
    rt.barrier()  # one process: nothing to wait for (and no torch.distributed to ask)


def test_a_worker_killed_by_a_signal_is_preempted_as_the_server_reads_a_killed_job(rt: ModuleType) -> None:
    lost = [_ending(0, "unknown", at=2.0, lost_peer=True)]  # rank 0 only saw its peer go
    ending, code = rt.worker_failure({1: Failure(pid=42, exitcode=-signal.SIGKILL)}, lost)
    assert ending["reason"] == "preempted" and ending["signal"] == signal.SIGKILL and ending["rank"] == 1
    assert "worker rank 1 (pid 42) was stopped by SIGKILL" in ending["message"] and code == 128 + signal.SIGKILL
    # A worker stopped by SIGTERM exits 143 through run_job: the same.
    assert rt.worker_failure({0: Failure(pid=7, exitcode=143)}, [])[0]["reason"] == "preempted"
    segfault, _ = rt.worker_failure({1: Failure(pid=42, exitcode=-signal.SIGSEGV)}, [])
    assert segfault["reason"] == "unknown" and "SIGSEGV" in segfault["message"]


def test_another_ranks_error_is_the_launchers_to_report_and_rank_0s_is_its_own(rt: ModuleType) -> None:
    other = [_ending(0, "unknown", at=5.0, lost_peer=True), _ending(1, "oom", at=4.0)]
    ending, code = rt.worker_failure({0: Failure(pid=1, exitcode=1)}, other)
    assert (ending["reason"], ending["rank"], code) == ("oom", 1, 1)
    assert ending["message"] == "worker rank 1: oom on rank 1"
    # Rank 0 failed first and said so itself: the launcher adds nothing.
    own = [_ending(0, "bad_input", at=1.0, reported=True), _ending(1, "bad_input", at=1.5)]
    assert rt.worker_failure({1: Failure(pid=2, exitcode=1)}, own) == (None, 1)


def test_a_worker_that_ended_without_a_word_is_unknown(rt: ModuleType) -> None:
    ending, code = rt.worker_failure({1: Failure(pid=9, exitcode=3)}, [])
    assert ending["reason"] == "unknown" and "exited with code 3" in ending["message"] and code == 1


@pytest.mark.parametrize(
    ("message", "lost"),
    [
        ("[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:57042: Connection reset by peer.", True),
        ("NCCL error: remote process exited or there was a network error", True),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
    ],
)
def test_a_collective_failing_because_a_peer_died_is_told_apart(rt: ModuleType, message: str, lost: bool) -> None:
    assert rt._lost_a_peer(RuntimeError(message)) is lost


def test_a_failing_worker_leaves_its_ending_for_the_launcher(
    rt: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    restore_sigterm: None,
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv(rt.WORKER_ENDINGS_ENV, str(tmp_path))

    def bad_data() -> None:
        with rt.phase("data"):
            raise ValueError("dataset column 'messages' is missing")

    with pytest.raises(SystemExit):
        rt.run_job(bad_data)
    assert rt.EVENT_PREFIX not in capsys.readouterr().out  # rank 1 says nothing itself
    [ending] = rt._read_endings(tmp_path)
    assert ending["rank"] == 1 and ending["reason"] == "bad_input" and not ending["reported"]
    assert not ending["lost_peer"]


@pytest.mark.parametrize(("visible", "pinned"), [(None, "0"), ("2,3", "2"), ("", "")])
def test_a_training_job_of_one_process_trains_on_one_gpu(
    rt: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    restore_sigterm: None,
    visible: str | None,
    pinned: str,
) -> None:
    """Not every visible GPU with DataParallel, which the Trainer does when a single process sees several."""
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible or "")  # restored after the test, set or not
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    seen: list[str | None] = []
    rt.run_job(lambda: seen.append(os.environ.get("CUDA_VISIBLE_DEVICES")), SINGLE)
    assert seen == [pinned]
    capsys.readouterr()
