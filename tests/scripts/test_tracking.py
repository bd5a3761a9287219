"""The job side of trackio and of the model card (scripts/_tracking.py, scripts/_model_card.py), run for real.

Real SFT jobs on the tiny model report to trackio in a folder of their own (TRACKIO_DIR), read back with
trackio's own API in a subprocess (trackio reads TRACKIO_DIR once, when it is imported). A trackio that
cannot write, or cannot even be imported, gives an alert and a job that succeeds.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobtrail.templates.render import render_script
from jobtrail.templates.versions import job_lock, pin
from jobtrail.util.digest import config_json, sha256_text
from support.jobs import JobKit, JobRun, load_script_module, run_jobs, succeeded

RUN_ID = "jt-track001"
IDS = {"JOBTRAIL_RUN_ID": RUN_ID, "JOBTRAIL_ATTEMPT_ID": f"{RUN_ID}/1"}
# A trackio whose import fails, first on the job's path.
BROKEN_TRACKIO = "raise ImportError('trackio is broken on purpose')\n"


@pytest.fixture(scope="module")
def tracking() -> ModuleType:
    """scripts/_tracking.py as a module (its `from _runtime import emit` resolves next to it)."""
    return load_script_module("_tracking")


@pytest.fixture(scope="module")
def card() -> ModuleType:
    return load_script_module("_model_card")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, chat_dataset: Path, job_env: dict[str, str]):
    """Five SFT jobs side by side: trackio in a folder; in a folder it cannot create; with a trackio that
    cannot be imported; with report_to="none"; and one whose absurd learning rate makes it diverge."""
    root = tmp_path_factory.mktemp("tracking")
    kit = JobKit(tiny_model, chat_dataset, job_env)
    (root / "a-file").write_text("not a folder")
    broken = root / "broken-path" / "trackio"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(BROKEN_TRACKIO)
    envs = {
        "ok": {"TRACKIO_DIR": str(root / "trackio")},
        "unwritable": {"TRACKIO_DIR": str(root / "a-file" / "trackio")},
        "no_import": {"TRACKIO_DIR": str(root / "trackio-2"), "PYTHONPATH": str(broken.parent)},
        "off": {"TRACKIO_DIR": str(root / "trackio-off")},
        "diverges": {"TRACKIO_DIR": str(root / "trackio-nan")},
    }
    changes: dict[str, dict[str, Any]] = {"off": {"report_to": "none"}, "diverges": {"learning_rate": 1e20}}
    jobs = [kit.job(root / name, env={**IDS, **env}, **changes.get(name, {})) for name, env in envs.items()]
    done = dict(zip(envs, run_jobs(*jobs), strict=True))
    return {name: (done[name], root / name, Path(env["TRACKIO_DIR"])) for name, env in envs.items()}


def _trackio_logs(trackio_dir: Path, project: str, run: str) -> dict[str, Any]:
    """The run as trackio itself reads it back: its metric logs, its config and its alerts."""
    code = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
        "print(json.dumps({'runs': S.get_runs(sys.argv[1]), 'logs': S.get_logs(sys.argv[1], sys.argv[2]), "
        "'config': S.get_run_config(sys.argv[1], sys.argv[2]), 'alerts': S.get_alerts(sys.argv[1], sys.argv[2])}, "
        "default=str))"
    )
    env = {**os.environ, "TRACKIO_DIR": str(trackio_dir)}
    done = subprocess.run(
        [sys.executable, "-c", code, project, run], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _alerts(run: JobRun) -> list[dict[str, Any]]:
    return run.named("alert", code="trackio.failed")


def test_a_training_job_reports_every_step_to_trackio(runs) -> None:
    run, _, trackio_dir = runs["ok"]
    succeeded(run)
    announced = run.one("trackio")
    assert announced["project"] == "model"  # the base model's name: runs of one model share a dashboard
    assert (announced["run"], announced["group"]) == (f"{RUN_ID}-attempt-1", RUN_ID)
    assert announced["dir"] == str(trackio_dir.resolve()) and announced["space_id"] is None
    assert announced["version"] == importlib.metadata.version("trackio")
    assert _alerts(run) == []

    stored = _trackio_logs(trackio_dir, "model", f"{RUN_ID}-attempt-1")
    assert stored["runs"] == [f"{RUN_ID}-attempt-1"]
    losses = {log["step"]: log["train/loss"] for log in stored["logs"] if "train/loss" in log}
    assert losses == {e["step"]: pytest.approx(e["loss"]) for e in run.named("step")}
    assert all("train/learning_rate" in log and "train/grad_norm" in log for log in stored["logs"])
    assert stored["config"]["job_id"] == RUN_ID and stored["config"]["method"] == "sft"


def test_the_jobs_alerts_show_on_its_trackio_run(runs) -> None:
    run, _, trackio_dir = runs["diverges"]
    assert run.termination["reason"] == "diverged", run.describe()
    alerts = [a for a in run.named("alert") if a["code"] != "trackio.failed"]
    assert alerts and not _alerts(run)
    stored = _trackio_logs(trackio_dir, "model", f"{RUN_ID}-attempt-1")["alerts"]
    assert [a["title"] for a in stored] == [a["code"] for a in alerts]
    assert all(a["message"] in stored_alert["text"] for a, stored_alert in zip(alerts, stored, strict=True))


def test_a_trackio_that_cannot_write_is_an_alert_and_the_job_succeeds(runs) -> None:
    run, _, trackio_dir = runs["unwritable"]
    succeeded(run)
    assert run.steps() == [1, 2, 3, 4, 5, 6]  # training went on
    alerts = _alerts(run)
    assert alerts and all(a["step"] is not None and "report_to" in a["fix"] for a in alerts)
    assert any(str(trackio_dir) in a["message"] for a in alerts), alerts


def test_a_trackio_that_cannot_be_imported_is_an_alert_and_the_job_succeeds(runs) -> None:
    run, _, _ = runs["no_import"]
    succeeded(run)
    assert run.steps() == [1, 2, 3, 4, 5, 6] and run.one("trackio")["run"] == f"{RUN_ID}-attempt-1"
    (alert,) = _alerts(run)
    assert "could not be imported" in alert["message"] and "broken on purpose" in alert["message"]
    assert alert["step"] == 0  # said before training started


def test_report_to_none_leaves_trackio_out(runs) -> None:
    run, _, trackio_dir = runs["off"]
    succeeded(run)
    assert run.named("trackio") == [] and _alerts(run) == [] and not trackio_dir.exists()


# --- the model card ---------------------------------------------------------------------------


def test_the_final_model_card_names_base_model_data_method_and_receipt(runs, tiny_model: Path) -> None:
    run, workdir, _ = runs["ok"]
    out = workdir / "out"
    text = (out / "final" / "README.md").read_text()
    assert (out / "README.md").read_text() == text  # TRL's own card ("fine-tuned version of [None]") is replaced
    assert "[None]" not in text and "More Information Needed" not in text
    config = _job_config(workdir / "job.py")
    data = run.one("data_manifest")
    assert f"a LoRA adapter for `{tiny_model}`" in text
    assert f"sha256 `{data['sha256']}`" in text and str(data["source"]) in text and "64 rows" in text
    assert "SFT with LoRA (r=8, alpha=16" in text and "6 steps, training loss" in text
    assert f"**Config sha256**: `{sha256_text(config_json(config))}`" in text
    assert f"**Job**: `{RUN_ID}`, attempt `{RUN_ID}/1`" in text
    assert f"project `model`, run `{RUN_ID}-attempt-1`" in text
    assert f"PeftModel.from_pretrained(base, {str(out / 'final')!r})" in text
    # The card is part of the committed final model: its manifest covers it.
    manifest = json.loads((out / "final" / "jobtrail_manifest.json").read_text())
    assert "README.md" in json.dumps(manifest)


def _job_config(script: Path) -> dict[str, Any]:
    line = next(line for line in script.read_text().splitlines() if line.startswith("CONFIG: dict = json.loads("))
    namespace: dict[str, Any] = {}
    exec("import json\n" + line, namespace)
    return namespace["CONFIG"]


def test_card_for_a_hub_model_links_base_model_and_data(card: ModuleType) -> None:
    config = {
        "template": "dpo",
        "template_version": 1,
        "model": "Qwen/Qwen2.5-0.5B",
        "peft": {"method": "qlora", "r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"},
        "training_args": {"learning_rate": 5e-6},
    }
    data = {"source": "trl-lib/ultrafeedback", "kind": "hub", "revision": "abc123", "split": "train", "rows": 9}
    text = card.trained_model_card(
        config,
        base_model="Qwen/Qwen2.5-0.5B",
        where="alice/qwen-dpo",
        run_id="jt-x",
        attempt_id="jt-x/2",
        data=data,
        result={"global_step": 40, "train_loss": 0.5},
        packages={"trl": "1.16.0", "peft": None},
        trackio={"project": "Qwen2.5-0.5B", "run": "jt-x-attempt-2", "space_id": "alice/jobtrail-trackio"},
    )
    front = text.split("---\n")[1]
    assert 'base_model: "Qwen/Qwen2.5-0.5B"' in front and '- "base_model:adapter:Qwen/Qwen2.5-0.5B"' in front
    assert 'datasets:\n- "trl-lib/ultrafeedback"' in front and "library_name: peft" in front
    assert text.splitlines()[text.splitlines().index("---", 1) + 2] == "# qwen-dpo"
    assert "a QLoRA adapter for [Qwen/Qwen2.5-0.5B](https://huggingface.co/Qwen/Qwen2.5-0.5B)" in text
    assert "revision `abc123`" in text and "trained with DPO (TRL 1.16.0)" in text
    assert "[alice/jobtrail-trackio](https://huggingface.co/spaces/alice/jobtrail-trackio)" in text
    assert "peft None" not in text  # a package not installed is left out
    assert f"**Config sha256**: `{card.config_sha256(config)}`" in text


def test_load_snippets_for_adapters_full_models_and_reward_heads(card: ModuleType) -> None:
    adapter = card.load_snippet("/out/final", "org/base", adapter=True)
    assert "base = AutoModelForCausalLM.from_pretrained('org/base')" in adapter
    assert "PeftModel.from_pretrained(base, '/out/final')" in adapter and "merge_and_unload()" in adapter
    full = card.load_snippet("alice/m", "org/base", adapter=False)
    assert "AutoModelForCausalLM.from_pretrained('alice/m')" in full and "peft" not in full
    reward = card.load_snippet("/o", "org/base", adapter=True, reward_head=True)
    assert "AutoModelForSequenceClassification.from_pretrained('org/base', num_labels=1)" in reward
    for code in (adapter, full, reward):
        compile(code, "<snippet>", "exec")


# --- small pure pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("report_to", "wanted", "for_trl"),
    [
        (None, True, "none"),
        ("trackio", True, "none"),
        ("none", False, "none"),
        (["trackio", "wandb"], True, ["wandb"]),
        (["tensorboard"], False, ["tensorboard"]),
    ],
)
def test_report_to_decides_trackio_and_trl_never_gets_it(tracking: ModuleType, report_to, wanted, for_trl) -> None:
    assert tracking.split_report_to(report_to) == (wanted, for_trl)


def test_trainer_logs_become_train_and_eval_series(tracking: ModuleType) -> None:
    logs = {"loss": 1.5, "grad_norm": 0.3, "train_tokens_per_second": 900.0, "train_runtime": 2.0, "epoch": 0.5}
    assert tracking.trackio_metrics(logs) == {
        "train/loss": 1.5,
        "train/grad_norm": 0.3,
        "train/tokens_per_second": 900.0,
        "train/epoch": 0.5,
    }
    assert tracking.trackio_metrics({"eval_loss": 2.0, "eval_runtime": 1.0}) == {"eval/loss": 2.0, "eval/runtime": 1.0}
    assert tracking.trackio_metrics({"train_loss": 1.0, "train_runtime": 3.0}) == {}  # the end-of-run summary


def test_trackio_target_names_the_project_after_the_model_and_the_run_after_the_job(tracking: ModuleType) -> None:
    config = {"training_args": {}}
    target = tracking.trackio_target(config, "jt-a", "jt-a/3", "Qwen/Qwen2.5-0.5B")
    assert target == {
        "project": "Qwen2.5-0.5B",
        "run": "jt-a-attempt-3",
        "group": "jt-a",
        "space_id": None,
        "bucket_id": None,
    }
    chosen = {"training_args": {"project": "mine", "trackio_space_id": "alice/dash"}}
    assert tracking.trackio_target(chosen, "jt-a", "jt-a/1", "/m")["project"] == "mine"
    assert tracking.trackio_target(chosen, "jt-a", "jt-a/1", "/m")["space_id"] == "alice/dash"


def test_every_training_template_lists_trackio_with_the_train_extras_bound() -> None:
    import tomllib

    from jobtrail.templates import pep723
    from jobtrail.templates.render import scripts_dir

    extra = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["train"]
    (bound,) = [r for r in extra if r.startswith("trackio")]
    for template in ("sft", "dpo", "kto", "reward", "grpo"):
        header = pep723.read_metadata((scripts_dir() / f"{template}.py").read_text())
        assert bound in header["dependencies"], template
    qlora = {**_example(), "peft": {"method": "qlora"}}
    newest = pep723.read_metadata(render_script("sft", qlora, dependency_versions="newest"))
    assert newest["dependencies"][-2:] == [bound, "bitsandbytes>=0.46.1"]
    tested = pep723.read_metadata(render_script("sft", qlora))  # the same entries, pinned as tested
    assert tested["dependencies"][-2:] == [pin(r, job_lock()) for r in (bound, "bitsandbytes>=0.46.1")]


def _example() -> dict[str, Any]:
    return JobKit(Path("/m"), Path("/d.jsonl"), {}).config(Path("/o"))
