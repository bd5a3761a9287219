"""Issue 7's templates: dpo, grpo, reward and kto trained for real on CPU, GRPO's rewards (built-in
and a user's reward file), checking a reward file before submission, and the method rules.

Jobs are rendered with jobtrail.templates.render from a config built the way the server builds one
(`method_config` below shows the integration), and run as subprocesses against the offline tiny
model, side by side; their `JOBTRAIL {...}` events are the evidence. Nothing is mocked.
"""

from __future__ import annotations

import ast
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobtrail.methods.effective import Effective, effective
from jobtrail.methods.registry import training_defaults
from jobtrail.methods.rewards import BUILTIN_REWARDS, REWARD_HYPERPARAMETERS
from jobtrail.preflight import hyperparams
from jobtrail.preflight.methods import check_method
from jobtrail.preflight.reward_file import check_reward_file
from jobtrail.templates import pep723
from jobtrail.templates.configs import rewards_config
from jobtrail.templates.render import QLORA_REQUIREMENT, render_script, scripts_dir
from jobtrail.templates.versions import job_lock, pin
from support.jobs import (
    JobRun,
    assert_templates_import_light,
    load_script_module,
    run_jobs,
    succeeded,
    top_level_names,
    write_jsonl,
)

SCRIPTS = scripts_dir()
METHODS = ("dpo", "grpo", "reward", "kto")
RUNTIME_MODULES = ("_runtime.py", "_training.py", "_mapping.py", "_metrics.py")
# Small and fast: 2 steps, a checkpoint at each, tiny sequences; GRPO makes 2 completions per prompt.
FAST = {
    "max_steps": 2,
    "save_steps": 1,
    "logging_steps": 1,
    "learning_rate": 1e-3,
    "seed": 0,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "lora_r": 4,
    "lora_alpha": 8,
}
FAST_BY_METHOD: dict[str, dict[str, Any]] = {
    "dpo": {"max_length": 48},
    "reward": {"max_length": 48},
    "kto": {"max_length": 48},
    "grpo": {"num_generations": 2, "max_completion_length": 8},
}
USER_REWARD = '''"""Rewards short answers that name a number word."""
import re

NUMBER_WORDS = frozenset({"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"})
WORD = re.compile(r"[a-z]+")


def names_a_number(prompts, completions, answer, **kwargs):
    return [float(bool(NUMBER_WORDS & set(WORD.findall(str(c).lower())))) for c in completions]


if __name__ == "__main__":
    print(names_a_number(["q"], ["It is two."], ["two"]))
'''
WRONG_LENGTH_REWARD = "def broken(completions, **kwargs):\n    return [1.0]\n"


# --- building and running jobs -------------------------------------------------------------------


def _values(method: str, hyperparameters: dict[str, Any]) -> Effective:
    """The effective hyperparameters of a job of `method` without an eval_dataset (as a plan computes them)."""
    return effective(method, hyperparameters, eval_dataset=False)


def method_config(
    method: str,
    model: Path,
    dataset: Path,
    output_dir: Path,
    hyperparameters: dict[str, Any],
    user_reward: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job config in the CONFIG contract, built the way service.build_config should for `method`:
    training_defaults(method) under the user's values, jobtrail's peft/job knobs split off, and for
    GRPO the reward knobs moved from training_args into the `rewards` block."""
    merged = {**training_defaults(method), **hyperparams.PEFT_DEFAULTS, **hyperparams.JOB_DEFAULTS, **hyperparameters}
    peft = {
        "method": merged.pop("peft"),
        "r": merged.pop("lora_r"),
        "alpha": merged.pop("lora_alpha"),
        "dropout": merged.pop("lora_dropout"),
        "target_modules": merged.pop("lora_target_modules"),
    }
    job = {name: merged.pop(name) for name in hyperparams.JOB_DEFAULTS}
    training_args = {k: v for k, v in merged.items() if k not in REWARD_HYPERPARAMETERS}
    config = {
        "template": method,
        "template_version": 1,
        "model": str(model),
        "dataset": {"source": str(dataset), "split": job["dataset_split"], "mapping": None},
        "output_dir": str(output_dir),
        "peft": peft,
        "training_args": training_args,
        "checkpoint_retention": job["checkpoint_retention"],
        "push_to_hub": False,
        "hub_model_id": None,
    }
    if method == "grpo":
        config["rewards"] = rewards_config(_values("grpo", hyperparameters).inputs, user_reward)
    return config


@dataclass
class MethodJobs:
    """Fast jobs of any method on one model, in one job environment."""

    model: Path
    env: dict[str, str]

    def job(
        self, workdir: Path, method: str, dataset: Path, user_reward: dict[str, Any] | None = None, **hyper: Any
    ) -> tuple[Path, dict[str, str]]:
        """(script, env) for run_jobs: a fast job of `method` training into workdir/out."""
        workdir.mkdir(parents=True, exist_ok=True)
        config = method_config(
            method, self.model, dataset, workdir / "out", {**FAST, **FAST_BY_METHOD[method], **hyper}, user_reward
        )
        script = workdir / "job.py"
        script.write_text(render_script(method, config))
        return script, self.env


def _toy_pairs() -> list[tuple[str, str, str]]:
    """(prompt, good answer, bad answer) from the tiny model's toy world."""
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    return [(f"What comes after {w}?", words[(i + 1) % 10], words[(i + 5) % 10]) for i, w in enumerate(words)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny datasets in TRL's formats: preference pairs, unpaired with a boolean label, prompt-only."""
    root, pairs = tmp_path_factory.mktemp("method-data"), _toy_pairs()
    return {
        "pairs": write_jsonl(
            root / "pairs.jsonl",
            [
                {"prompt": p, "chosen": f" After it comes {good}.", "rejected": f" After it comes {bad}."}
                for p, good, bad in pairs
            ],
        ),
        "unpaired": write_jsonl(
            root / "unpaired.jsonl",
            [
                {"prompt": p, "completion": f" It is {good if i % 2 else bad}.", "label": bool(i % 2)}
                for i, (p, good, bad) in enumerate(pairs)
            ],
        ),
        "prompts": write_jsonl(root / "prompts.jsonl", [{"prompt": p, "answer": good} for p, good, _ in pairs]),
    }


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, data: dict[str, Path], job_env: dict[str, str]
) -> dict[str, tuple[JobRun, Path]]:
    """Every method trained side by side, plus two jobs that must fail the right way."""
    root = tmp_path_factory.mktemp("method-runs")
    reward_file = root / "reward_fn.py"
    reward_file.write_text(USER_REWARD)
    assert not [f for f in check_reward_file(reward_file, "names_a_number") if f.severity == "error"]
    broken_file = root / "broken.py"
    broken_file.write_text(WRONG_LENGTH_REWARD)
    job = MethodJobs(tiny_model, job_env).job
    jobs = {
        "dpo": job(root / "dpo", "dpo", data["pairs"]),
        "reward": job(root / "reward", "reward", data["pairs"]),
        "kto": job(root / "kto", "kto", data["unpaired"]),
        "grpo": job(
            root / "grpo", "grpo", data["prompts"], reward_funcs=["exact_match", "length"], reward_length_target=4
        ),
        "grpo_user": job(
            root / "grpo_user",
            "grpo",
            data["prompts"],
            user_reward={"file": reward_file, "function": "names_a_number"},
            max_steps=1,
        ),
        "grpo_broken_reward": job(
            root / "grpo_broken", "grpo", data["prompts"], user_reward={"file": broken_file, "function": "broken"}
        ),
        "qlora_on_cpu": job(root / "qlora", "dpo", data["pairs"], peft="qlora"),
    }
    results = run_jobs(*jobs.values())
    return {name: (run, script.parent / "out") for (name, (script, _)), run in zip(jobs.items(), results, strict=True)}


# --- real runs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "template", "data_format", "steps"),
    [
        ("dpo", "dpo", "preference", [1, 2]),
        ("reward", "reward", "preference", [1, 2]),
        ("kto", "kto", "unpaired_preference", [1, 2]),
        ("grpo", "grpo", "prompt_only", [1, 2]),
        ("grpo_user", "grpo", "prompt_only", [1]),
    ],
)
def test_each_method_trains_to_a_committed_checkpoint(
    runs: dict[str, tuple[JobRun, Path]], name: str, template: str, data_format: str, steps: list[int]
) -> None:
    run, out = runs[name]
    succeeded(run)
    assert [e["event"] for e in run.events[:2]] == ["start", "environment"]
    assert run.one("start")["template"] == template
    assert run.one("data_manifest")["format"] == data_format
    assert run.one("resume")["checkpoint"] is None
    assert run.steps() == steps and all(isinstance(e["loss"], float) for e in run.named("step"))
    rt = load_script_module("_runtime")
    last = out / f"checkpoint-{steps[-1]}"
    assert [e["path"] for e in run.named("checkpoint", state="committed")][-2:] == [str(last), str(out / "final")]
    assert rt.verify_checkpoint(last) == (True, "ok") and rt.find_resume_target(out)[1] == steps[-1]
    assert (last / "optimizer.pt").is_file() and (out / "final" / "adapter_model.safetensors").is_file()
    assert run.one("artifact")["kind"] == "final_model"
    assert run.one("metrics")["global_step"] == steps[-1]


def test_grpo_resumes_from_its_newest_committed_checkpoint(
    runs: dict[str, tuple[JobRun, Path]],
    tmp_path: Path,
    tiny_model: Path,
    data: dict[str, Path],
    job_env: dict[str, str],
) -> None:
    shutil.copytree(runs["grpo"][1], tmp_path / "out")
    second = MethodJobs(tiny_model, {**job_env, "JOBTRAIL_ATTEMPT_ID": "att-2"}).job(
        tmp_path, "grpo", data["prompts"], reward_funcs=["exact_match", "length"], reward_length_target=4, max_steps=3
    )
    (run,) = run_jobs(second)
    succeeded(run)
    assert run.one("resume")["checkpoint"] == str(tmp_path / "out" / "checkpoint-2")
    assert run.steps() == [3] and run.one("metrics")["global_step"] == 3


def test_step_events_carry_every_metric_trl_logs(runs: dict[str, tuple[JobRun, Path]]) -> None:
    grpo = {"reward", "reward_std", "frac_reward_zero_std", "completions/clipped_ratio", "completions/mean_length"}
    for name in ("grpo", "grpo_user"):
        run, _ = runs[name]
        assert all(grpo <= set(e["metrics"]) for e in run.named("step")), run.describe()
    per_function = {k for k in runs["grpo"][0].named("step")[-1]["metrics"] if k.startswith("rewards/")}
    assert len([k for k in per_function if k.endswith("/mean")]) == 2, per_function  # exact_match and length
    preference = {"rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected"}
    assert all(preference <= set(e["metrics"]) for e in runs["dpo"][0].named("step"))
    assert all({"accuracy", "margin"} <= set(e["metrics"]) for e in runs["reward"][0].named("step"))
    assert all("kl" in e["metrics"] for e in runs["kto"][0].named("step"))


def test_grpo_alerts_about_what_its_steps_show(runs: dict[str, tuple[JobRun, Path]], grpo_template: ModuleType) -> None:
    for name in ("grpo", "grpo_user"):
        run, _ = runs[name]
        steps = [{"step": e["step"], **e["metrics"]} for e in run.named("step")]
        config = {"training_args": {"max_completion_length": 8}}
        # The job asks after every log once SHARE_MIN_LOGS are in, and once more as training ends; each code once.
        expected: dict[str, dict] = {}
        for seen in [*(steps[:n] for n in range(3, len(steps) + 1)), steps]:
            for alert in grpo_template.step_alerts(seen, config):
                expected.setdefault(alert["code"], {"event": "alert", **alert})
        alerts = [{k: v for k, v in e.items() if k != "time"} for e in run.named("alert")]
        assert [a for a in alerts if a["code"].startswith("grpo_")] == list(expected.values())
        # 8 tokens of a tiny random model: the completions run to the limit, and the run says so.
        assert "grpo_completions_clipped" in [a["code"] for a in alerts], run.describe()
        assert not run.named("warning")
    assert not [a for a in runs["dpo"][0].named("alert") if a["code"].startswith("grpo_")]


def test_grpo_step_alerts(grpo_template: ModuleType) -> None:
    config = {"training_args": {"max_completion_length": 64}}
    flat = [{"step": n, "reward": 0.0, "reward_std": 0.0, "completions/clipped_ratio": 1.0} for n in (1, 2, 3)]
    alerts = grpo_template.step_alerts(flat, config)
    assert [(w["code"], w["step"]) for w in alerts] == [("grpo_reward_std_zero", 3), ("grpo_completions_clipped", 3)]
    assert "3 of 3" in alerts[0]["message"] and "max_completion_length (now 64)" in alerts[1]["fix"]
    healthy = [
        {"step": n, "reward": 0.5, "reward_std": 0.2 * (n > 1), "completions/clipped_ratio": 0.25} for n in (1, 2, 3)
    ]
    assert grpo_template.step_alerts(healthy, config) == []
    assert grpo_template.step_alerts([], config) == []


def test_reward_model_has_a_one_output_classification_head(runs: dict[str, tuple[JobRun, Path]]) -> None:
    _, out = runs["reward"]
    adapter = json.loads((out / "final" / "adapter_config.json").read_text())
    assert adapter["task_type"] == "SEQ_CLS"
    assert "score" in (adapter.get("modules_to_save") or [])  # the new head is trained and saved


def test_a_failing_user_reward_is_a_config_error(runs: dict[str, tuple[JobRun, Path]]) -> None:
    run, _ = runs["grpo_broken_reward"]
    assert run.returncode != 0 and run.termination["reason"] == "config_error", run.describe()
    assert "'broken'" in run.termination["message"] and "list of 2" in run.termination["message"]


def test_qlora_on_cpu_fails_fast_with_the_reason(runs: dict[str, tuple[JobRun, Path]]) -> None:
    run, _ = runs["qlora_on_cpu"]
    term = run.termination
    assert term["reason"] == "config_error" and "QLoRA" in term["message"] and "CUDA GPU" in term["message"]
    assert not run.named("data_manifest")  # refused in the config phase, before any data was read


# --- templates -----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ("sft", *METHODS))
def test_templates_render_self_contained_without_shadowing_the_runtime(method: str, tmp_path: Path) -> None:
    config = method_config(
        method, Path("/m"), Path("/d.jsonl"), tmp_path, {"reward_funcs": ["format"]} if method == "grpo" else {}
    )
    text = render_script(method, config)
    ast.parse(text)
    assert "from _runtime" not in text and "from _training" not in text and "jobtrail:runtime ---\n#" in text
    assert text.count("def commit_checkpoint(") == 1 and text.count("def make_callback(") == 1
    assert "bitsandbytes" not in text.split("# ///\n")[0]  # the header: CPU jobs never need it
    assert not any(f"from {name[:-3]} import" in text for name in RUNTIME_MODULES)
    runtime = [top_level_names(SCRIPTS / name) for name in RUNTIME_MODULES]
    assert all(not a & b for i, a in enumerate(runtime) for b in runtime[i + 1 :])  # one flat namespace once inlined
    assert not top_level_names(SCRIPTS / f"{method}.py") & set().union(*runtime)


def test_qlora_jobs_ask_for_bitsandbytes(tmp_path: Path) -> None:
    config = method_config("kto", Path("/m"), Path("/d.jsonl"), tmp_path, {"peft": "qlora"})
    header = pep723.read_metadata(render_script("kto", config))["dependencies"]
    assert header[-1] == pin(QLORA_REQUIREMENT, job_lock())  # as tested (templates/versions.py)
    newest = pep723.read_metadata(render_script("kto", config, dependency_versions="newest"))["dependencies"]
    assert newest[-1] == QLORA_REQUIREMENT == "bitsandbytes>=0.46.1"


def test_templates_import_without_heavy_packages(job_env: dict[str, str]) -> None:
    assert_templates_import_light(["dpo", "grpo", "reward", "kto"], job_env)


# --- built-in rewards (job side) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def grpo_template() -> ModuleType:
    """scripts/grpo.py as a module (its runtime imports resolve next to it, as when run from scripts/)."""
    return load_script_module("grpo")


def test_server_knows_the_job_side_builtin_rewards(grpo_template: ModuleType) -> None:
    assert tuple(grpo_template.BUILTIN_REWARDS) == BUILTIN_REWARDS
    assert grpo_template.CONFIG["rewards"]["format_regex"] == REWARD_HYPERPARAMETERS["reward_format_regex"]


def test_builtin_rewards_score_completions(grpo_template: ModuleType) -> None:
    funcs = grpo_template.build_reward_funcs(
        rewards_config(_values("grpo", {"reward_funcs": list(BUILTIN_REWARDS), "reward_length_target": 4}).inputs)
    )
    assert [f.__name__ for f in funcs] == list(BUILTIN_REWARDS)  # TRL logs rewards/<name>/mean
    exact, numeric, fmt, length = funcs
    chat = [[{"role": "assistant", "content": "<think>hm</think> <answer>Two.</answer>"}]]
    assert exact(prompts=["q"] * 3, completions=["two", "It is three", chat[0]], answer=["Two", "two", "two"]) == [
        1.0,
        0.0,
        1.0,
    ]
    assert exact(prompts=["q"], completions=["x"], solution=["x"]) == [1.0]
    assert numeric(
        prompts=["q"] * 3, completions=["so 1,000.0", "<answer>41</answer>", "none"], answer=["1000", "42", "7"]
    ) == [1.0, 0.0, 0.0]
    assert numeric(prompts=["q"], completions=["5"], answer=["no number"]) == [None]
    assert fmt(prompts=["q"] * 3, completions=["<think>a\nb</think>\n<answer>c</answer>", "c", chat[0]]) == [
        1.0,
        0.0,
        1.0,
    ]
    assert length(prompts=["q"] * 3, completions=["", "", ""], completion_ids=[[1] * 4, [1] * 2, [1] * 9]) == [
        1.0,
        0.5,
        0.0,
    ]
    with pytest.raises(ValueError, match="unknown built-in reward"):
        grpo_template.build_reward_funcs({"builtin": ["exact"], "user": None})


def test_user_reward_runs_in_its_own_namespace_and_is_checked(grpo_template: ModuleType) -> None:
    source = "CONFIG = 'mine'\ndef main(completions, **kwargs):\n    return [len(c) for c in completions]\n"
    func = grpo_template.load_user_reward({"function": "main", "source": source})
    assert func(prompts=["a"], completions=["abc"]) == [3] and grpo_template.CONFIG["template"] == "grpo"
    bad = grpo_template.load_user_reward({"function": "broken", "source": WRONG_LENGTH_REWARD})
    with pytest.raises(TypeError, match="list of 2"):
        bad(prompts=["a", "b"], completions=["x", "y"])
    with pytest.raises(ValueError, match="failed to load: SyntaxError"):
        grpo_template.load_user_reward({"function": "f", "source": "def f(:\n"})


# --- reward files (server side) ------------------------------------------------------------------


def _reward_file(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "reward.py"
    path.write_text(source)
    return path


def _codes(tmp_path: Path, source: str, function: str = "score") -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in check_reward_file(_reward_file(tmp_path, source), function)]


def test_a_valid_reward_file_passes(tmp_path: Path) -> None:
    assert _codes(tmp_path, USER_REWARD, "names_a_number") == [("reward_file.columns", "warning")]  # `answer`
    source = (
        '"""Doc."""\nfrom __future__ import annotations\nimport math\nimport numpy as np\n'
        "SCALE: float = 2 ** -1\nNAMES = {'a': (1, 2), **{}}\nLABEL = f'{SCALE}'\n"
        "FLAG = math.pi\nclip = lambda x: x\n\n"
        "class Helper:\n    pass\n\n"
        "def score(completions, prompts=None, *, answer=None, **kwargs):\n    return [SCALE for _ in completions]\n"
    )
    assert _codes(tmp_path, source) == []
    assert _codes(tmp_path, "def score(completions, **kwargs):\n    return [0.0] * len(completions)\n") == []


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("def score(completions, **kwargs:\n    return []\n", "reward_file.syntax"),
        ("def other(completions, **kwargs):\n    return []\n", "reward_file.function_missing"),
        ("class score:\n    pass\n", "reward_file.function_missing"),
        ("def score(prompts, completions):\n    return []\n", "reward_file.signature"),  # no **kwargs
        ("def score(prompts, **kwargs):\n    return []\n", "reward_file.signature"),  # no completions
        ("def score(completions, /, **kwargs):\n    return []\n", "reward_file.signature"),
        ("async def score(completions, **kwargs):\n    return []\n", "reward_file.signature"),
        ("print('loading')\ndef score(completions, **kwargs):\n    return []\n", "reward_file.top_level"),
        (
            "import json\nDATA = json.load(open('x'))\ndef score(completions, **kwargs):\n    return []\n",
            "reward_file.top_level",
        ),
        ("for i in range(3):\n    pass\ndef score(completions, **kwargs):\n    return []\n", "reward_file.top_level"),
        ("from .helpers import weight\ndef score(completions, **kwargs):\n    return []\n", "reward_file.import"),
    ],
)
def test_an_invalid_reward_file_is_refused(tmp_path: Path, source: str, code: str) -> None:
    findings = check_reward_file(_reward_file(tmp_path, source), "score")
    assert [f.code for f in findings if f.severity == "error"] == [code]
    assert all(f.fix for f in findings)


def test_reward_file_problems_say_why(tmp_path: Path) -> None:
    [missing] = check_reward_file(tmp_path / "nope.py", "score")
    assert missing.code == "reward_file.missing"
    [top] = check_reward_file(
        _reward_file(tmp_path, "x = open('f')\ndef score(completions, **kwargs):\n  return []\n"), "score"
    )
    assert "Line 1" in top.message and "before training" in top.message
    [imp] = check_reward_file(
        _reward_file(tmp_path, "import sympy\ndef score(completions, **kwargs):\n  return []\n"), "score"
    )
    assert (imp.code, imp.severity) == ("reward_file.import", "warning") and "sympy" in imp.message
    [sig] = check_reward_file(_reward_file(tmp_path, "def score(completions):\n  return []\n"), "score")
    assert "**kwargs" in sig.message and "def score(prompts, completions, **kwargs)" in sig.fix


def test_rewards_config_carries_the_source(tmp_path: Path) -> None:
    path = _reward_file(tmp_path, USER_REWARD)
    settings = _values("grpo", {"reward_funcs": "format", "max_steps": 3}).inputs
    block = rewards_config(settings, {"file": path, "function": "names_a_number"})
    assert block == {
        "builtin": ["format"],
        "user": {"function": "names_a_number", "source": USER_REWARD},
        "format_regex": REWARD_HYPERPARAMETERS["reward_format_regex"],
        "length_target": 256,
    }


# --- method rules --------------------------------------------------------------------------------

GOOD_GRPO = {"reward_funcs": ["exact_match"]}


@pytest.mark.parametrize(
    ("method", "hyperparameters", "user", "code"),
    [
        ("grpo", GOOD_GRPO, None, None),
        ("grpo", {}, {"function": "f"}, None),
        ("grpo", {}, None, "grpo.rewards_missing"),
        ("grpo", {"reward_funcs": ["exact_macth"]}, None, "grpo.reward_unknown"),
        (
            "grpo",
            {**GOOD_GRPO, "num_generations": 8, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 3},
            None,
            "grpo.num_generations",
        ),
        (
            "grpo",
            {**GOOD_GRPO, "num_generations": 8, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 3},
            None,
            None,
        ),
        (
            "grpo",
            {**GOOD_GRPO, "num_generations": 8, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1},
            None,
            "grpo.generation_batch_small",
        ),
        ("grpo", {**GOOD_GRPO, "num_generations": 1}, None, "grpo.num_generations"),
        ("grpo", {**GOOD_GRPO, "generation_batch_size": 6}, None, "grpo.generation_batch"),  # per-device batch is 4
        ("grpo", {**GOOD_GRPO, "generation_batch_size": 12, "steps_per_generation": 3}, None, "grpo.generation_batch"),
        ("grpo", {**GOOD_GRPO, "eval_strategy": "steps", "per_device_eval_batch_size": 6}, None, "grpo.eval_batch"),
        ("grpo", {**GOOD_GRPO, "eval_strategy": "steps", "per_device_eval_batch_size": 8}, None, None),
        ("grpo", {**GOOD_GRPO, "auto_find_batch_size": True}, None, "grpo.auto_find_batch_size"),
        ("grpo", {**GOOD_GRPO, "temperature": 0.0}, None, "grpo.temperature"),
        ("grpo", {**GOOD_GRPO, "reward_weights": [1.0, 2.0]}, None, "grpo.reward_weights"),
        ("grpo", {**GOOD_GRPO, "reward_weights": [1.0, 2.0]}, {"function": "f"}, None),
        ("grpo", {"reward_funcs": ["format"], "reward_format_regex": "(<answer>"}, None, "grpo.format_regex"),
        ("grpo", {"reward_funcs": ["length"], "reward_length_target": 0}, None, "grpo.length_target"),
        ("grpo", {"reward_funcs": ["length", "length"]}, None, "grpo.reward_duplicate"),
        ("dpo", {"beta": 0.1}, None, None),
        ("dpo", {"beta": 0}, None, "dpo.beta"),
        ("dpo", {"label_smoothing": 0.6}, None, "dpo.label_smoothing"),
        ("kto", {"beta": 0.05}, None, None),
        ("kto", {"beta": -1.0}, None, "kto.beta"),
        ("kto", {"per_device_train_batch_size": 1}, None, "kto.batch_size"),
        ("kto", {"per_device_train_batch_size": 1, "loss_type": "apo_zero_unpaired"}, None, None),
        ("kto", {"train_sampling_strategy": "random"}, None, "kto.sampling"),
        ("kto", {"undesirable_weight": 0}, None, "kto.undesirable_weight"),
        ("reward", {"center_rewards_coefficient": 0.01}, None, None),
        ("reward", {"center_rewards_coefficient": -1}, None, "reward.center_rewards"),
        ("dpo", {"reward_funcs": ["exact_match"]}, None, "rewards.not_grpo"),
        ("sft", {}, {"function": "f"}, "rewards.not_grpo"),
        ("sft", {}, None, None),
    ],
)
def test_method_rules(
    method: str, hyperparameters: dict[str, Any], user: dict[str, Any] | None, code: str | None
) -> None:
    findings = check_method(_values(method, hyperparameters), user)
    assert [f.code for f in findings] == ([code] if code else []), findings
    assert all(f.fix for f in findings)


def test_grpo_batch_fix_names_exact_values() -> None:
    [finding] = check_method(
        _values(
            "grpo",
            {**GOOD_GRPO, "num_generations": 8, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 3},
        )
    )
    assert "per_device_train_batch_size (4) x gradient_accumulation_steps (3) on 1 process = 12" in finding.message
    assert finding.fix == (
        "Set gradient_accumulation_steps=4, or per_device_train_batch_size=8, or num_generations=4 or 6 or 12."
    )
    [unknown] = check_method(_values("grpo", {"reward_funcs": ["exact_macth"]}))
    assert "Did you mean 'exact_match'?" in unknown.message


@pytest.mark.parametrize("method", ("sft", *METHODS))
def test_training_defaults_are_valid_trl_fields_and_pass_the_rules(method: str) -> None:
    defaults = training_defaults(method)
    assert set(defaults) <= hyperparams.trl_fields(method)
    extra = GOOD_GRPO if method == "grpo" else {}
    assert check_method(_values(method, {**defaults, **extra})) == []
    assert hyperparams.check_names(method, defaults) == []
