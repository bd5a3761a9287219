"""Checkpoints commit in the background (scripts/_runtime.py BackgroundCommits): training goes on while a thread
hashes, and still the marker is written last, commits land in step order, the job's termination event follows
every commit, a commit's failure is the job's, and a job killed while it hashes leaves nothing a resume loads."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.jobs import SCRIPTS, load_script_module, parse_events

GATE_TIMEOUT_S = 30.0


@pytest.fixture
def rt() -> ModuleType:
    """A fresh _runtime per test: its COMMITS is the process's, and a test leaves it as it found it."""
    return load_script_module("_runtime")


@pytest.fixture
def restore_sigterm() -> Any:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def written_checkpoint(rt: ModuleType, root: Path, step: int) -> Path:
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    rt.begin_checkpoint(ckpt, step)
    (ckpt / "model.safetensors").write_bytes(bytes(range(256)) * 4096)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return ckpt


def gated_commit(rt: ModuleType, ckpt: Path, step: int, gate: threading.Event) -> Any:
    """A commit that starts hashing once the gate opens, as a slow disk would make it."""

    def work() -> None:
        assert gate.wait(GATE_TIMEOUT_S), "the test never opened the gate"
        rt.commit_checkpoint(ckpt, step, "run", "att", written_at=1.0)

    return work


def test_training_goes_on_while_the_commit_runs_and_the_termination_follows_it(
    tmp_path: Path, rt: ModuleType, capsys: pytest.CaptureFixture[str], restore_sigterm: Any
) -> None:
    gate = threading.Event()

    def main() -> None:
        ckpt = written_checkpoint(rt, tmp_path, 2)
        rt.COMMITS.submit(gated_commit(rt, ckpt, 2, gate))
        rt.emit("step", step=3)  # training went on: the commit has not even started hashing
        assert rt.verify_checkpoint(ckpt)[0] is False  # and until its marker lands, nobody loads it
        gate.set()

    rt.run_job(main)
    events = parse_events(capsys.readouterr().out)
    said = [(e["event"], e.get("state") or e.get("reason") or e.get("step")) for e in events]
    assert said == [("checkpoint", "writing"), ("step", 3), ("checkpoint", "committed"), ("termination", "succeeded")]
    assert events[2]["written_at"] == 1.0
    assert rt.verify_checkpoint(tmp_path / "checkpoint-2") == (True, "ok")


def test_a_job_that_fails_meanwhile_still_commits_before_its_termination(
    tmp_path: Path, rt: ModuleType, capsys: pytest.CaptureFixture[str], restore_sigterm: Any
) -> None:
    gate = threading.Event()

    def main() -> None:
        rt.COMMITS.submit(gated_commit(rt, written_checkpoint(rt, tmp_path, 4), 4, gate))
        gate.set()
        raise MemoryError("the next step ran out of memory")

    with pytest.raises(SystemExit):
        rt.run_job(main)
    events = parse_events(capsys.readouterr().out)
    assert [e.get("state") or e.get("reason") for e in events] == ["writing", "committed", "oom"]
    assert rt.find_resume_target(tmp_path)[:2] == (str(tmp_path / "checkpoint-4"), 4)  # the retry resumes there


def test_a_commit_that_fails_fails_the_job(
    tmp_path: Path, rt: ModuleType, capsys: pytest.CaptureFixture[str], restore_sigterm: Any
) -> None:
    ckpt = written_checkpoint(rt, tmp_path, 2)
    (ckpt / rt.MANIFEST_NAME).mkdir()  # the manifest cannot be put in place (root or not)

    with pytest.raises(SystemExit):
        rt.run_job(lambda: rt.COMMITS.submit(lambda: rt.commit_checkpoint(ckpt, 2, "run", "att")))
    termination = parse_events(capsys.readouterr().out)[-1]
    assert (termination["event"], termination["error_type"]) == ("termination", "IsADirectoryError")
    assert not (ckpt / rt.MARKER_NAME).exists()


def test_commits_land_one_at_a_time_in_step_order(tmp_path: Path, rt: ModuleType) -> None:
    gate, first_done = threading.Event(), threading.Event()
    seen: list[tuple[int, bool]] = []

    def first() -> None:
        assert gate.wait(GATE_TIMEOUT_S)
        seen.append((1, True))
        first_done.set()

    rt.COMMITS.submit(first)
    # The second save comes while the first commit still waits: its submit waits for it (in a thread here, so
    # that the test can open the gate; in a job the training thread waits, its watchdog paused).
    second = threading.Thread(target=rt.COMMITS.submit, args=(lambda: seen.append((2, first_done.is_set())),))
    second.start()
    gate.set()
    second.join(GATE_TIMEOUT_S)
    rt.COMMITS.wait()
    assert seen == [(1, True), (2, True)]


KILLED_WHILE_HASHING = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import _runtime as rt

def hashing_forever(f):
    rt.emit("hashing")
    threading.Event().wait()

rt._sha256_of = hashing_forever
ckpt = Path(sys.argv[2]) / "checkpoint-3"
ckpt.mkdir(parents=True)
rt.begin_checkpoint(ckpt, 3)
(ckpt / "model.safetensors").write_bytes(b"weights" * 1000)
rt.COMMITS.submit(lambda: rt.commit_checkpoint(ckpt, 3, "run", "att"))
rt.emit("step", step=4)
threading.Event().wait()  # training on, until the kill
"""


def test_a_job_killed_while_it_hashes_leaves_a_checkpoint_no_resume_loads(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(KILLED_WHILE_HASHING)
    out = tmp_path / "out"
    with subprocess.Popen(
        [sys.executable, str(script), str(SCRIPTS), str(out)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(e["event"] for e in _events_until(proc, "hashing")))
        reader.start()
        reader.join(GATE_TIMEOUT_S)
        proc.kill()
    assert "hashing" in seen and "step" in seen, seen
    rt = load_script_module("_runtime")
    assert rt.verify_checkpoint(out / "checkpoint-3") == (False, "no commit marker (partial, or still being written)")
    assert rt.find_resume_target(out)[:2] == (None, None)


def _events_until(proc: subprocess.Popen[str], last: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        events.extend(parse_events(line))
        if events and events[-1]["event"] == last:
            break
    return events
