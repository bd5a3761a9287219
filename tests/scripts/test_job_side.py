"""The job side: scripts/_runtime.py and the rendered SFT template, run for real on CPU.

Job tests render scripts/sft.py with jobtrail.templates.render, run the script in a subprocess against the
offline tiny model, and read its `JOBTRAIL {...}` event lines; nothing is mocked.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, strategies as st

from jobtrail.demo.tinymodel import write_prompt_completion_dataset, write_text_dataset
from jobtrail.templates.render import render_script
from jobtrail.templates.runtime import runtime_module
from support.jobs import (
    SCRIPTS,
    JobKit,
    JobRun,
    assert_templates_import_light,
    load_script_module,
    marker,
    parse_events,
    run_jobs,
    succeeded,
    top_level_names,
)


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    return load_script_module("_runtime")


# --- the rendered script -------------------------------------------------------------------------


def test_rendered_script_is_self_contained(tmp_path: Path) -> None:
    config = JobKit(Path("/models/tiny"), Path("/data/chat.jsonl"), {}).config(tmp_path / "out")
    text = render_script("sft", config)
    assert "import jobtrail" not in text and "from jobtrail" not in text
    assert "from _runtime" not in text
    assert "def commit_checkpoint(" in text  # the runtime is inlined
    assert text.startswith("# /// script\n")
    ast.parse(text)  # valid Python (so no misplaced `from __future__` in the runtime either)
    assert render_script("sft", config) == text  # deterministic
    config_line = next(line for line in text.splitlines() if line.startswith("CONFIG: dict = json.loads("))
    namespace: dict[str, Any] = {}
    exec("import json\n" + config_line, namespace)
    assert namespace["CONFIG"] == config


def test_template_does_not_shadow_the_inlined_runtime() -> None:
    clash = top_level_names(SCRIPTS / "sft.py") & top_level_names(SCRIPTS / "_runtime.py")
    assert not clash, f"sft.py redefines runtime names once inlined: {clash}"


def test_template_imports_without_heavy_packages(job_env: dict[str, str]) -> None:
    """The template runs as is from scripts/, and importing it loads no ML package."""
    assert_templates_import_light(["sft"], job_env)


# --- real SFT runs -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory: pytest.TempPathFactory, kit: JobKit) -> dict[str, tuple[JobRun, Path]]:
    """The module's two jobs that need no other, side by side (a job is mostly imports on one core): `lora`,
    6 LoRA steps, a checkpoint every 2, retention 2; `attempt-1`, the first attempt the resume tests continue."""
    workdir = tmp_path_factory.mktemp("lora-run")
    ids = {"JOBTRAIL_RUN_ID": "run-1", "JOBTRAIL_ATTEMPT_ID": "att-1"}
    attempt_1 = tmp_path_factory.mktemp("attempt-1")
    jobs = {
        "lora": (kit.job(workdir, env=ids), workdir),
        "attempt-1": (kit.job(attempt_1, env={"JOBTRAIL_ATTEMPT_ID": "att-1"}, max_steps=4, retention=3), attempt_1),
    }
    runs = run_jobs(*(job for job, _ in jobs.values()))
    return {name: (run, root / "out") for (name, (_, root)), run in zip(jobs.items(), runs, strict=True)}


@pytest.fixture(scope="module")
def lora_run(first_runs: dict[str, tuple[JobRun, Path]]) -> tuple[JobRun, Path]:
    """6 LoRA steps, a checkpoint every 2, retention 2."""
    return first_runs["lora"]


def test_lora_run_succeeds_with_full_event_trail(lora_run: tuple[JobRun, Path], kit: JobKit, rt: ModuleType) -> None:
    run, out = lora_run
    succeeded(run)
    assert [e["event"] for e in run.events[:2]] == ["start", "environment"]
    start = run.one("start")
    assert (start["template"], start["run_id"], start["attempt_id"]) == ("sft", "run-1", "att-1")

    env = run.one("environment")
    assert env["device"] == "cpu" and env["gpu"] is None and env["torch"]
    assert env["packages"]["trl"] and env["packages"]["transformers"] and env["python"]

    data = run.one("data_manifest")
    assert data["kind"] == "file" and data["sha256"] == rt.sha256_file(kit.chat_dataset)
    assert (data["rows"], data["columns"], data["format"]) == (64, ["messages"], "messages")
    assert data["fingerprint"]

    assert run.one("resume")["checkpoint"] is None
    assert run.steps() == [1, 2, 3, 4, 5, 6]
    losses = [e["loss"] for e in run.named("step")]
    assert all(isinstance(loss, float) for loss in losses) and losses[-1] < losses[0]
    assert all(e["learning_rate"] is not None and e["tokens"] > 0 for e in run.named("step"))
    # The trainer's count, kept on the device between logs (_training.DeviceTokenCount), is TRL's own to the token.
    assert [e["tokens"] for e in run.named("step")] == [e["metrics"]["num_tokens"] for e in run.named("step")]
    committed = run.named("checkpoint", state="committed")
    assert [e["step"] for e in committed if "checkpoint-" in e["path"]] == [2, 4, 6]
    assert [e["step"] for e in run.named("checkpoint", state="superseded")] == [2]

    artifact = run.one("artifact")
    assert artifact["kind"] == "final_model" and artifact["path"] == str(out / "final")
    assert rt.verify_checkpoint(out / "final") == (True, "ok")
    assert (out / "final" / "adapter_model.safetensors").is_file()
    metrics = run.one("metrics")
    assert metrics["global_step"] == 6 and metrics["train_loss"] > 0
    assert metrics["peak_memory_bytes"] > 0 and metrics["tokens_per_second"] > 0


def test_lora_run_announces_its_phases_in_order(lora_run: tuple[JobRun, Path]) -> None:
    run, _ = lora_run
    phases = run.named("phase")
    # Data first (cheap to refuse), then the model, then the trainer tokenizes; saving after the last step.
    assert [e["phase"] for e in phases] == ["tokenizing", "loading_model", "tokenizing", "training", "saving"]
    training = phases[3]
    assert (training["max_steps"], training["step"]) == (6, 0)
    where = {id(e): i for i, e in enumerate(run.events)}
    steps = [where[id(e)] for e in run.named("step")]
    assert where[id(training)] < steps[0] and where[id(phases[4])] > steps[-1]


def test_lora_run_commits_checkpoints_and_keeps_the_newest(lora_run: tuple[JobRun, Path], rt: ModuleType) -> None:
    _, out = lora_run
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]
    trainer_files = ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth")
    for step in (4, 6):
        ckpt = out / f"checkpoint-{step}"
        assert rt.verify_checkpoint(ckpt) == (True, "ok")
        assert marker(ckpt)["step"] == step and marker(ckpt)["attempt_id"] == "att-1"
        assert all((ckpt / name).is_file() for name in (*trainer_files, "trainer_state.json"))
    assert rt.find_resume_target(out)[:2] == (str(out / "checkpoint-6"), 6)


def test_text_and_prompt_completion_formats_train(tmp_path: Path, kit: JobKit) -> None:
    datasets = {
        "text": write_text_dataset(tmp_path / "text.jsonl"),
        "prompt_completion": write_prompt_completion_dataset(tmp_path / "pc.jsonl"),
    }
    jobs = [kit.job(tmp_path / name, dataset=path, max_steps=2) for name, path in datasets.items()]
    for name, run in zip(datasets, run_jobs(*jobs), strict=True):
        succeeded(run)
        assert run.one("data_manifest")["format"] == name
        assert run.steps() == [1, 2] and all(isinstance(s["loss"], float) for s in run.named("step"))
        assert run.one("artifact")["kind"] == "final_model"


# --- resume --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def first_attempt(first_runs: dict[str, tuple[JobRun, Path]]) -> Path:
    """An output dir after attempt 1 stopped at step 4 (checkpoints 2 and 4 committed). Copy it."""
    run, out = first_runs["attempt-1"]
    assert succeeded(run).steps() == [1, 2, 3, 4]
    return out


def _make_partial_checkpoint(out: Path, step: int) -> Path:
    """What a crash mid-save leaves: bytes, no marker."""
    partial = out / f"checkpoint-{step}"
    partial.mkdir()
    (partial / "adapter_model.safetensors").write_bytes(b"half written")
    return partial


def _tamper(out: Path) -> None:
    """Flip the last byte of checkpoint-4's weights: same size, so only the sha256 can tell."""
    weights = out / "checkpoint-4" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def second_attempts(
    tmp_path_factory: pytest.TempPathFactory, first_attempt: Path, kit: JobKit
) -> dict[str, tuple[JobRun, Path]]:
    """Attempt 2 on two copies of attempt 1's output, side by side: `continues` (a partial checkpoint-99 added,
    trains to step 6) and `tampered` (checkpoint-4 tampered with as well, trains to step 4)."""
    root = tmp_path_factory.mktemp("attempt-2")
    plans = {"continues": (6, False), "tampered": (4, True)}
    jobs = []
    for name, (max_steps, tampered) in plans.items():
        out = root / name / "out"
        shutil.copytree(first_attempt, out)
        if tampered:
            _tamper(out)
        _make_partial_checkpoint(out, 99)
        jobs.append(kit.job(root / name, env={"JOBTRAIL_ATTEMPT_ID": "att-2"}, max_steps=max_steps, retention=3))
    runs = run_jobs(*jobs)
    return {name: (succeeded(run), root / name / "out") for name, run in zip(plans, runs, strict=True)}


def test_resume_continues_from_newest_committed_checkpoint(
    second_attempts: dict[str, tuple[JobRun, Path]], rt: ModuleType
) -> None:
    run, out = second_attempts["continues"]

    resume = run.one("resume")
    assert (resume["checkpoint"], resume["step"]) == (str(out / "checkpoint-4"), 4)
    assert [s["path"] for s in resume["skipped"]] == [str(out / "checkpoint-99")]
    assert "no commit marker" in resume["skipped"][0]["why"]
    assert run.steps() == [5, 6]
    assert run.one("metrics")["global_step"] == 6
    assert marker(out / "checkpoint-6")["attempt_id"] == "att-2"
    assert marker(out / "checkpoint-4")["attempt_id"] == "att-1"
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6
    # A partial directory newer than the newest commit is left alone (never loaded, never deleted).
    assert (out / "checkpoint-99").is_dir()
    assert rt.find_resume_target(out)[1] == 6


def test_resume_skips_tampered_and_partial_checkpoints(
    second_attempts: dict[str, tuple[JobRun, Path]], rt: ModuleType
) -> None:
    run, out = second_attempts["tampered"]

    resume = run.one("resume")
    assert (resume["checkpoint"], resume["step"]) == (str(out / "checkpoint-2"), 2)
    skipped = {Path(s["path"]).name: s["why"] for s in resume["skipped"]}
    assert set(skipped) == {"checkpoint-99", "checkpoint-4"}
    assert "sha256" in skipped["checkpoint-4"]
    assert run.steps() == [3, 4]
    # Step 4 was trained again and re-committed over the corrupt copy.
    assert rt.verify_checkpoint(out / "checkpoint-4") == (True, "ok")
    assert marker(out / "checkpoint-4")["attempt_id"] == "att-2"


# --- failures end with a classified termination event -------------------------------------------


def test_failures_are_classified(tmp_path: Path, kit: JobKit) -> None:
    wrong_columns = tmp_path / "wrong.jsonl"
    wrong_columns.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    not_json = tmp_path / "broken.jsonl"
    not_json.write_text(kit.chat_dataset.read_text() + "this line is not json\n")
    fake_trl = tmp_path / "fake-site" / "trl"
    fake_trl.mkdir(parents=True)
    (fake_trl / "__init__.py").write_text("raise ImportError('simulated broken trl install')\n")
    broken_trl = {"PYTHONPATH": str(fake_trl.parent)}

    cases = {  # name: (job, expected reason, text the message must contain)
        "missing_column": (kit.job(tmp_path / "c1", dataset=wrong_columns), "bad_input", "columns"),
        "not_json": (kit.job(tmp_path / "c2", dataset=not_json), "bad_input", "Error"),
        "missing_file": (kit.job(tmp_path / "c3", dataset=tmp_path / "no.jsonl"), "bad_input", "no.jsonl"),
        "unknown_arg": (kit.job(tmp_path / "c4", not_a_real_arg=1), "config_error", "not_a_real_arg"),
        "dependency": (kit.job(tmp_path / "c5", env=broken_trl), "dependency_error", "simulated"),
    }
    runs = run_jobs(*(job for job, _, _ in cases.values()))
    for (name, (_, reason, needle)), run in zip(cases.items(), runs, strict=True):
        assert run.returncode != 0, f"{name}: {run.describe()}"
        term = run.termination
        assert term["reason"] == reason, f"{name}: {term}\n{run.stderr[-2000:]}"
        assert needle in term["message"] and "\n" not in term["message"] and len(term["message"]) <= 500
        assert term["error_type"]
        assert not run.named("step") and "Traceback" in run.stderr
        assert run.named("environment"), f"{name}: environment must come before any heavy import"


# --- runtime unit tests ------------------------------------------------------------------------


def test_emit_prints_one_compact_json_line(rt: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    rt.emit("step", step=3, loss=1.5, path=Path("/x"))
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith('JOBTRAIL {"event":"step",')
    record = json.loads(out[len("JOBTRAIL ") :])
    assert list(record)[:2] == ["event", "time"] and isinstance(record["time"], float)
    assert record["path"] == "/x" and ", " not in out


def test_event_times_are_kept_to_the_millisecond(rt: ModuleType) -> None:
    line = rt.event_line("phase", 1795387852.8679912, {"phase": "training"})
    assert line == 'JOBTRAIL {"event":"phase","time":1795387852.868,"phase":"training"}'


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_a_metric_keeps_exactly_its_float32_in_at_most_9_digits(value: float) -> None:
    """What a step event prints of a metric reads back as the same float32: nothing a tensor held is lost."""
    kept = runtime_module("_metrics").as_float32(value)
    try:
        nearest = struct.pack("<f", value)
    except OverflowError:  # past float32's range: no tensor's value, printed whole
        assert kept == value
        return
    assert struct.pack("<f", kept) == nearest
    digits = f"{abs(kept):.9e}".split("e")[0].replace(".", "").rstrip("0")
    assert len(digits) <= 9 and float(f"{kept:.9g}") == kept
    if len(digits) > 1:  # and in the fewest digits: one fewer reads back as another float32
        with contextlib.suppress(OverflowError):  # rounded past float32's largest: no float32 at all
            assert struct.pack("<f", float(f"{kept:.{len(digits) - 1}g}")) != nearest


def test_float32_precision_applies_to_metric_floats_only() -> None:
    as_float32 = runtime_module("_metrics").as_float32
    metrics = {"loss": 2.4210548183258913, "step": 10, "name": "x", "nested": [0.1 + 0.2, None, True]}
    assert as_float32(metrics) == {"loss": 2.4210548, "step": 10, "name": "x", "nested": [0.3, None, True]}
    assert as_float32(math.nan) != as_float32(math.nan) and as_float32(math.inf) == math.inf


def _fake_checkpoint(out: Path, step: int, rt: ModuleType, *, commit: bool = True) -> Path:
    ckpt = out / f"checkpoint-{step}"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "weights.bin").write_bytes(bytes(range(256)) * (step + 1))
    (ckpt / "sub" / "state.json").write_text(json.dumps({"step": step}))
    if commit:
        rt.commit_checkpoint(ckpt, step, "run", "att")
    return ckpt


def test_commit_writes_manifest_and_marker(tmp_path: Path, rt: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _fake_checkpoint(tmp_path, 3, rt)
    event = parse_events(capsys.readouterr().out)[-1]
    assert event["state"] == "committed" and event["files"] == 2 and event["bytes"] > 256
    manifest = json.loads((ckpt / "jobtrail_manifest.json").read_text())
    assert sorted(f["path"] for f in manifest["files"]) == ["sub/state.json", "weights.bin"]
    mark = marker(ckpt)
    assert set(mark) == {"manifest_sha256", "run_id", "attempt_id", "step", "committed_at"}
    manifest_sha256 = rt.sha256_file(ckpt / "jobtrail_manifest.json")
    assert mark["manifest_sha256"] == event["manifest_sha256"] == manifest_sha256
    assert not [p for p in ckpt.iterdir() if p.name.endswith(".tmp")]
    assert rt.verify_checkpoint(ckpt) == (True, "ok")


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda c: (c / "JOBTRAIL_COMMITTED").unlink(), "no commit marker"),
        (lambda c: (c / "weights.bin").unlink(), "missing"),
        (lambda c: (c / "weights.bin").write_bytes(b"short"), "size"),
        (lambda c: (c / "sub" / "state.json").write_text('{"step": 9}'), "sha256"),
        (lambda c: (c / "jobtrail_manifest.json").write_text('{"files": []}'), "manifest does not match"),
    ],
)
def test_verify_detects_damage(tmp_path: Path, rt: ModuleType, damage: Any, why: str) -> None:
    ckpt = _fake_checkpoint(tmp_path, 1, rt)
    damage(ckpt)
    ok, reason = rt.verify_checkpoint(ckpt)
    assert not ok and why in reason


def test_find_resume_target_never_picks_partial_or_corrupt(tmp_path: Path, rt: ModuleType) -> None:
    _fake_checkpoint(tmp_path, 2, rt)
    (_fake_checkpoint(tmp_path, 4, rt) / "weights.bin").write_bytes(b"x" * (256 * 5))  # same size, new bytes
    _fake_checkpoint(tmp_path, 99, rt, commit=False)
    (tmp_path / "final").mkdir()  # not a checkpoint-N dir: never a resume target
    path, step, skipped = rt.find_resume_target(tmp_path)
    assert (path, step) == (str(tmp_path / "checkpoint-2"), 2)
    assert [Path(s["path"]).name for s in skipped] == ["checkpoint-99", "checkpoint-4"]
    assert rt.find_resume_target(tmp_path / "missing") == (None, None, [])


def test_retention_keeps_newest_committed(tmp_path: Path, rt: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    for step in (2, 4, 6, 8):
        _fake_checkpoint(tmp_path, step, rt)
    _fake_checkpoint(tmp_path, 3, rt, commit=False)  # dead partial, older than the newest commit
    _fake_checkpoint(tmp_path, 10, rt, commit=False)  # newer partial: may still be being written
    capsys.readouterr()
    rt.apply_retention(tmp_path, 2)
    remaining = sorted(p.name for p in tmp_path.iterdir())
    assert remaining == ["checkpoint-10", "checkpoint-6", "checkpoint-8"]
    events = parse_events(capsys.readouterr().out)
    assert sorted(e["step"] for e in events if e["state"] == "superseded") == [2, 4]
    assert [e["step"] for e in events if e["state"] == "discarded"] == [3]
    rt.apply_retention(tmp_path, 0)  # even "keep none" keeps the newest committed one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-10", "checkpoint-8"]
    rt.apply_retention(tmp_path, None)  # None: retention off
    assert (tmp_path / "checkpoint-8").is_dir()


def test_retention_ignores_a_corrupt_newest(tmp_path: Path, rt: ModuleType) -> None:
    """A damaged newest checkpoint is not 'committed': the last good one must survive."""
    _fake_checkpoint(tmp_path, 2, rt)
    (_fake_checkpoint(tmp_path, 4, rt) / "weights.bin").unlink()
    rt.apply_retention(tmp_path, 1)
    assert rt.find_resume_target(tmp_path)[1] == 2


def test_begin_checkpoint_withdraws_a_stale_commit(tmp_path: Path, rt: ModuleType) -> None:
    ckpt = _fake_checkpoint(tmp_path, 5, rt)
    rt.begin_checkpoint(ckpt, 5)
    assert rt.verify_checkpoint(ckpt)[0] is False
    assert not (ckpt / "jobtrail_manifest.json").exists()


class OutOfMemoryError(RuntimeError):  # stands in for torch.OutOfMemoryError (matched by name)
    pass


class GatedRepoError(OSError):  # stands in for huggingface_hub's
    pass


def _peft_no_match(message: str) -> BaseException:
    from peft import NoMatchingPeftModuleError

    return NoMatchingPeftModuleError(message)


class DatasetGenerationError(Exception):  # stands in for datasets'
    pass


def _raise_in(phase: str | None, exc: BaseException, rt: ModuleType) -> BaseException:
    try:
        if phase:
            with rt.phase(phase):
                raise exc
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the test wants whatever was raised
        return caught


def _wrapped(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("phase", "exc", "reason"),
    [
        ("train", OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "oom"),
        ("train", RuntimeError("DefaultCPUAllocator: can't allocate memory: out of memory"), "oom"),
        ("config", ModuleNotFoundError("No module named 'peft'"), "dependency_error"),
        (None, ImportError("cannot import name 'SFTConfig'"), "dependency_error"),
        ("config", TypeError("SFTConfig() got an unexpected keyword argument 'max_seq_len'"), "config_error"),
        ("setup", TypeError("SFTTrainer() got an unexpected keyword argument 'tokenizer'"), "config_error"),
        ("config", ValueError("--bf16 requires a GPU"), "config_error"),
        ("model", OSError("/m/x is not a local folder and is not a valid model identifier"), "config_error"),
        ("data", KeyError("messages"), "bad_input"),
        ("data", FileNotFoundError("dataset file not found: /d.jsonl"), "bad_input"),
        ("data", ValueError("dataset columns ['a'] fit no SFT format"), "bad_input"),
        ("setup", ValueError("Column 'prompt' is missing from the dataset"), "bad_input"),
        (None, json.JSONDecodeError("Expecting value", "x", 0), "bad_input"),
        ("data", _wrapped(DatasetGenerationError("error"), ValueError("JSON parse error")), "bad_input"),
        ("model", OSError("401 Client Error: Unauthorized for url: https://huggingface.co/x"), "auth_error"),
        ("model", GatedRepoError("Access to model x is restricted"), "auth_error"),
        ("push", RuntimeError("upload failed"), "hub_error"),
        ("model", ConnectionError("Connection reset by peer"), "infra_transient"),
        ("train", RuntimeError("something odd"), "unknown"),
        # PEFT's own class (a ValueError without data words, which read `unknown` before): its target_modules name
        # no module of the model, a setting.
        (None, _peft_no_match("Target modules q_proj,v_proj not found in the base model."), "config_error"),
        ("setup", _peft_no_match("Target modules ['query'] not found in the base model."), "config_error"),
    ],
)
def test_classify_exception(rt: ModuleType, phase: str | None, exc: BaseException, reason: str) -> None:
    assert rt.classify_exception(_raise_in(phase, exc, rt)) == reason


def test_announce_phase_emits_each_change_once(rt: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with rt.phase("model", announce="loading_model"):
        rt.announce_phase("loading_model")  # already there: no second event
    rt.announce_phase("training", max_steps=12)  # a change, with what it brings
    rt.announce_phase("training", max_steps=12, step=4)  # the same phase with fields is said again
    rt.announce_phase("training")
    assert [(e["phase"], e.get("step")) for e in parse_events(capsys.readouterr().out)] == [
        ("loading_model", None),
        ("training", None),
        ("training", 4),
    ]
    with pytest.raises(ValueError, match="unknown phase 'resting'"):
        rt.announce_phase("resting")


def test_an_announcing_phase_still_tags_its_exceptions(rt: ModuleType) -> None:
    exc = OSError("401 Client Error: Unauthorized for url: https://huggingface.co/x")
    with pytest.raises(OSError) as raised, rt.phase("model", announce="loading_model"):
        raise exc
    assert rt.classify_exception(raised.value) == "auth_error"


def test_describe_exception_is_one_bounded_line(rt: ModuleType) -> None:
    exc = _wrapped(RuntimeError("outer\nproblem"), ValueError("x" * 1000))
    text = rt.describe_exception(exc)
    assert text.startswith("RuntimeError: outer problem <- caused by ValueError: xxx")
    assert "\n" not in text and len(text) <= 500


@pytest.fixture
def restore_sigterm() -> Any:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_run_job_reports_success_and_failure(
    rt: ModuleType, capsys: pytest.CaptureFixture[str], restore_sigterm: Any
) -> None:
    rt.run_job(lambda: None)
    event = parse_events(capsys.readouterr().out)[-1]
    assert (event["event"], event["reason"]) == ("termination", "succeeded")

    def broken() -> None:
        with rt.phase("config"):
            import not_a_real_module_jobtrail  # noqa: F401

    with pytest.raises(SystemExit) as exit_info:
        rt.run_job(broken)
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    event = parse_events(captured.out)[-1]
    assert (event["reason"], event["error_type"]) == ("dependency_error", "ModuleNotFoundError")
    assert "not_a_real_module_jobtrail" in event["message"] and "Traceback" in captured.err


def test_sigterm_emits_signal_and_exits_143(tmp_path: Path, job_env: dict[str, str]) -> None:
    script = tmp_path / "sleepy.py"
    script.write_text(
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(SCRIPTS)!r})\n"
        "from _runtime import emit, run_job\n"
        "def main():\n"
        "    emit('ready')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(60)  # interrupted by the handler; never reached in full\n"
        "run_job(main)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], env=job_env, capture_output=True, text=True, timeout=60)
    events = parse_events(proc.stdout)
    assert proc.returncode == 143, proc.stderr
    assert [e["event"] for e in events] == ["ready", "signal"] and events[1]["signal"] == 15
