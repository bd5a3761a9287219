"""A full disk is `disk_full`, named where it filled, from the job's own account.

The kernel's own ENOSPC, without root or a small filesystem: a file the job is about to write is a symlink to
/dev/full, whose every write fails with ENOSPC. The job runs for real (TRL on the tiny model)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import ModuleType

import pytest

from support.jobs import JobKit, load_script_module, run_jobs


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    return load_script_module("_runtime")


def _raised(exc: BaseException, rt: ModuleType, phase: str | None = None) -> BaseException:
    try:
        if phase:
            with rt.phase(phase):
                raise exc
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the test wants whatever was raised
        return caught


@pytest.mark.parametrize(
    ("phase", "exc"),
    [
        ("train", OSError(errno.ENOSPC, "No space left on device")),
        ("train", OSError(errno.EDQUOT, "Disk quota exceeded")),
        # datasets filling its cache: before the data rules, which would call an OSError there bad_input
        ("data", OSError(errno.ENOSPC, "No space left on device", "/cache/datasets/x.arrow")),
        # safetensors (Rust) and other libraries wrap the errno in their own words
        ("train", RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "x" })')),
        ("train", RuntimeError("Failed: No space left on device (os error 28)")),
    ],
)
def test_every_wording_of_a_full_disk_is_disk_full(rt: ModuleType, phase: str, exc: BaseException) -> None:
    assert rt.classify_exception(_raised(exc, rt, phase)) == "disk_full"


def test_a_short_write_is_disk_full_only_where_the_disk_is_nearly_full(
    rt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.save's writer loses the errno ('unexpected pos'); what is free where the job writes decides."""
    short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
    monkeypatch.setitem(rt._WRITES, "checkpoint", tmp_path / "checkpoint-4")  # not created: its folder is measured
    assert rt.classify_exception(_raised(short, rt, "train")) == "unknown"  # this disk has room
    monkeypatch.setattr(rt, "NEARLY_FULL_BYTES", os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize + 1)
    assert rt.classify_exception(_raised(short, rt, "train")) == "disk_full"


def test_the_ending_names_the_path_what_is_free_and_what_a_checkpoint_takes(rt: ModuleType, tmp_path: Path) -> None:
    exc = _raised(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "x.bin")), rt, "train")
    facts = rt.disk_full_facts(exc)
    assert facts["path"] == str(tmp_path / "out" / "x.bin")
    assert isinstance(facts["free_bytes"], int) and facts["free_bytes"] > 0  # measured at its nearest folder
    assert facts["message"].startswith(f"No space left on device writing {tmp_path / 'out' / 'x.bin'} (")
    assert "free there" in facts["message"] and len(facts["message"]) <= rt.MESSAGE_LIMIT
    cache = _raised(OSError(errno.ENOSPC, "No space left on device"), rt, "model")  # no file named: the Hub cache
    assert rt.disk_full_facts(cache)["path"] == str(Path(os.environ["HF_HOME"]).expanduser())


def test_a_real_job_whose_checkpoint_write_finds_the_disk_full_ends_disk_full(kit: JobKit, tmp_path: Path) -> None:
    """The second checkpoint's trainer_state.json (written by Python's own file objects) goes to /dev/full: the
    job ends disk_full, naming the checkpoint it was writing and the size of the one it committed before."""
    script, env = kit.job(tmp_path, max_steps=6, save_steps=2)
    blocked = tmp_path / "out" / "checkpoint-4"
    blocked.mkdir(parents=True)
    (blocked / "trainer_state.json").symlink_to("/dev/full")
    (run,) = run_jobs((script, env))
    ending = run.termination
    assert run.returncode == 1 and ending["reason"] == "disk_full", run.describe()
    assert ending["path"] == str(blocked), ending
    committed = run.named("checkpoint", state="committed")
    assert [e["step"] for e in committed] == [2]  # the first checkpoint was whole and committed
    assert ending["needed_bytes"] == committed[0]["bytes"] and ending["free_bytes"] > 0
    assert f"writing {blocked}" in ending["message"] and "a checkpoint of this run takes" in ending["message"]
