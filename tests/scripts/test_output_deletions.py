"""The job's output directory: which one it is (CONFIG's, else the one its backend gave it, else one beside a
script run by hand), and the job side deletes only inside it: retention never follows a symlink named like
a checkpoint to files outside it (the committed checkpoint it points at keeps its marker and bytes)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from jobtrail.backends.local import OUTPUT_DIR_ENV
from support.jobs import load_script_module


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    return load_script_module("_runtime")


def test_the_output_dir_is_configs_else_the_backends_else_beside_the_script(tmp_path, rt, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(OUTPUT_DIR_ENV, raising=False)
    assert rt.job_output_dir({"output_dir": None}, "sft") == tmp_path / "outputs" / "sft"  # a script run by hand
    monkeypatch.setenv(OUTPUT_DIR_ENV, str(tmp_path / "runs" / "jt-1" / "output"))  # as the local backend does
    given = rt.job_output_dir({"output_dir": None}, "sft")
    assert given == tmp_path / "runs" / "jt-1" / "output" and given.is_dir()
    assert rt.job_output_dir({"output_dir": "chosen"}, "sft") == tmp_path / "chosen"  # the caller's choice wins


def _committed(ckpt: Path, step: int, rt: ModuleType) -> Path:
    ckpt.mkdir(parents=True)
    (ckpt / "weights.bin").write_bytes(bytes(range(256)) * 4)
    rt.commit_checkpoint(ckpt, step, "run", "att")
    return ckpt


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_retention_and_resume_never_reach_through_a_symlinked_checkpoint(tmp_path, rt, capsys):
    elsewhere = _committed(tmp_path / "elsewhere" / "checkpoint-1", 1, rt)  # someone's own, committed
    partial_elsewhere = tmp_path / "elsewhere" / "checkpoint-3"
    partial_elsewhere.mkdir()
    (partial_elsewhere / "notes.txt").write_text("not a checkpoint at all")
    before = _snapshot(tmp_path / "elsewhere")

    out = tmp_path / "out"
    out.mkdir()
    (out / "checkpoint-1").symlink_to(elsewhere, target_is_directory=True)
    (out / "checkpoint-3").symlink_to(partial_elsewhere, target_is_directory=True)
    for step in (4, 6):
        _committed(out / f"checkpoint-{step}", step, rt)

    capsys.readouterr()
    removed = rt.apply_retention(out, 1, just_committed=6)
    assert removed == [str(out / "checkpoint-4")]  # only the job's own superseded checkpoint
    assert _snapshot(tmp_path / "elsewhere") == before  # the marker and bytes behind the links are intact
    assert (out / "checkpoint-1").is_symlink() and (out / "checkpoint-3").is_symlink()

    (out / "checkpoint-6" / "weights.bin").write_bytes(b"corrupt" * 10)  # the job's only checkpoint is damaged
    path, step, _ = rt.find_resume_target(out)
    assert (path, step) == (None, None)  # never resumes from (or trusts) a link to someone's checkpoint
