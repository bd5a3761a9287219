"""A local job's `output` is confined: a new or empty directory, or its own run's; never a home, system,
hidden or foreign non-empty one, whatever `~`, `..` or a symlink hides; force does not change that."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobtrail.models import JobSpec
from jobtrail.preflight.outputs import MARKER, check_output, claim_output, probe_output, read_owner

RUN = "jt-aaaaaaaa"


def judged(requested: str, run_id: str = RUN, home: Path | None = None) -> list[str]:
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl", output=requested)
    return [f.code for f in check_output(spec, probe_output(requested, run_id, home))]


@pytest.mark.parametrize(
    "requested",
    ["~", os.environ.get("HOME", "/root"), "~/.ssh", "/", "/etc", "/usr/local/lib", "/tmp", "/home", "/var/log/x"],
)
def test_home_system_and_hidden_directories_are_forbidden(requested):
    assert judged(requested) == ["output.forbidden"]


def test_dot_dot_and_symlinks_are_resolved_before_judging(tmp_path, monkeypatch):
    monkeypatch.chdir("/usr/lib")
    assert judged("../../etc") == ["output.forbidden"]
    assert judged(f"{tmp_path}/{'../' * len(tmp_path.parts)}etc") == ["output.forbidden"]
    (tmp_path / "link").symlink_to(Path.home() / ".ssh")
    assert judged(str(tmp_path / "link")) == ["output.forbidden"]
    assert judged(str(tmp_path / "proj" / ".cache" / "out")) == ["output.forbidden"]  # hidden anywhere on the path


def test_jobtrail_home_and_what_holds_it_are_forbidden(tmp_path):
    home = tmp_path / "jt-home"
    for requested in (home, home / "runs" / RUN / "output", tmp_path):
        assert judged(str(requested), home=home) == ["output.forbidden"], requested


def test_new_empty_and_own_directories_pass_a_foreign_one_is_refused_with_a_free_directory(tmp_path):
    assert judged(str(tmp_path / "new" / "out")) == []
    (tmp_path / "empty").mkdir()
    assert judged(str(tmp_path / "empty")) == []

    user = tmp_path / "user"
    (user / "checkpoint-1").mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    spec = JobSpec(method="sft", model="/m", dataset="/d.jsonl", output=str(user))
    [finding] = check_output(spec, probe_output(str(user), RUN, None))
    assert finding.code == "output.not_empty" and finding.severity == "error"
    assert "2 entries (checkpoint-1, notes.txt)" in finding.message and "did not write" in finding.message
    assert f"output='{user}-2'" in finding.fix and not (tmp_path / "user-2").exists()
    (user / "f").write_text("x")
    assert judged(str(user / "f")) == ["output.not_a_directory"]

    own = tmp_path / "own"
    assert claim_output(own, RUN) is None and read_owner(own) == RUN
    (own / "checkpoint-2").mkdir()
    assert judged(str(own)) == []  # a later attempt of the same run
    other = judged(str(own), run_id="jt-bbbbbbbb")
    assert other == ["output.not_empty"]


def test_claim_is_exclusive_and_never_takes_a_directory_with_foreign_files(tmp_path):
    target = tmp_path / "out"
    assert claim_output(target, RUN) is None
    assert claim_output(target, RUN) is None  # the same run again: a retry
    assert "claimed by job jt-aaaaaaaa first" in (claim_output(target, "jt-bbbbbbbb") or "")
    assert json.loads((target / MARKER).read_text())["run_id"] == RUN

    filled = tmp_path / "filled"
    filled.mkdir()
    (filled / "data.bin").write_text("user data")
    assert "1 entries jobtrail did not write (data.bin)" in (claim_output(filled, RUN) or "")
    assert sorted(os.listdir(filled)) == ["data.bin"]  # left as it was, no marker

    (tmp_path / "file").write_text("x")
    assert "is not a directory" in (claim_output(tmp_path / "file", RUN) or "")
