"""Shared fixtures. Nothing here reaches the network or the user's Hugging Face cache.

Heavy work (building the tiny model) runs in a subprocess with the job environment. The test
process imports transformers only where the server does (a submit measuring token lengths with the
model's tokenizer); importing the server itself never does, which other tests check in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.jobs import JobKit

# The HF Hub + Jobs emulator's `hub` fixture, and a real PostgreSQL (`postgres_url`, `ledger_location`: both engines).
pytest_plugins = ["support.hub_emulator", "support.postgres"]


@pytest.fixture(scope="session", autouse=True)
def _private_caches(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Jobs started by the service inherit this process's environment: keep their caches here, and give each
    one torch thread, as support.jobs runs them (the tiny model gains nothing from more; with two, a job whose
    threads wait on each other while this process polls it took 3x as long: the 60-step watch test 59 -> 19 s).

    HF_HUB_OFFLINE is deliberately not set globally: Hub emulator tests need the client live.
    """
    root = tmp_path_factory.mktemp("caches")
    os.environ["HF_HOME"] = str(root / "hf-home")
    os.environ["TRACKIO_DIR"] = str(root / "trackio")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["OMP_NUM_THREADS"] = "1"


def make_job_env(tmp: Path, **extra: str) -> dict[str, str]:
    """Environment for a job subprocess: offline, caches under `tmp`, unbuffered output."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(tmp / "hf-home"),
        TRACKIO_DIR=str(tmp / "trackio"),
        PYTHONUNBUFFERED="1",
        TOKENIZERS_PARALLELISM="false",  # silences the fork warning in datasets.map
    )
    env.update(extra)
    return env


@pytest.fixture(scope="session", autouse=True)
def _data_roots(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests keep their data, models and reward files under pytest's temporary folders (and read a few of the
    repository's own files): those are the data roots, as a user would set JOBTRAIL_DATA_ROOTS for theirs. Every
    other rule of preflight/data_roots.py (hidden, system, jobtrail's state) holds under them as it does anywhere."""
    roots = (tmp_path_factory.getbasetemp().resolve(), Path(__file__).resolve().parents[1])
    os.environ["JOBTRAIL_DATA_ROOTS"] = os.pathsep.join(str(root) for root in roots)


@pytest.fixture(autouse=True)
def _fresh_hub_probes() -> None:
    """Tests reuse ports: a Hub found unreachable in one test may answer there in the next."""
    from jobtrail.util.hub import forget_unreachable

    forget_unreachable()


@pytest.fixture
def two_local_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Services built in this test run two local jobs at once (JOBTRAIL_MAX_CONCURRENT=2, the default is 1): a
    tiny job is mostly imports on one core, so independent jobs side by side use the machine's other core."""
    monkeypatch.setenv("JOBTRAIL_MAX_CONCURRENT", "2")


@pytest.fixture(scope="session")
def job_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """make_job_env() with one cache dir for the session (jobs share the datasets cache).

    Copy before changing: `{**job_env, "JOBTRAIL_ATTEMPT_ID": "a-2"}`.
    """
    return make_job_env(tmp_path_factory.mktemp("job-env"))


_BUILD_TINY_MODEL = (
    "import json, sys; from pathlib import Path; from jobtrail.demo.tinymodel import build_tiny_model; "
    "build_tiny_model(Path(sys.argv[1]), **json.loads(sys.argv[2]))"
)


def _build_tiny_model(dest: Path, job_env: dict[str, str], **shape: int) -> Path:
    subprocess.run(
        [sys.executable, "-c", _BUILD_TINY_MODEL, str(dest), json.dumps(shape)], env=job_env, check=True, timeout=300
    )
    return dest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, job_env: dict[str, str]) -> Path:
    """A tiny random-init Qwen2 + BPE tokenizer (jobtrail.demo.tinymodel), built once per session."""
    return _build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model", job_env)


@pytest.fixture(scope="session")
def tiny256(tmp_path_factory: pytest.TempPathFactory, job_env: dict[str, str]) -> Path:
    """The tiny Qwen2 at hidden size 256 / intermediate 512, whose rows fill whole K-quant blocks: what the GGUF
    tests convert. Built once per session; nothing writes into it (copy it to change it)."""
    return _build_tiny_model(
        tmp_path_factory.mktemp("tiny256") / "model", job_env, hidden_size=256, intermediate_size=512
    )


@pytest.fixture(scope="session")
def chat_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 rows of toy chat data in `messages` format (jsonl)."""
    from jobtrail.demo.tinymodel import write_chat_dataset

    return write_chat_dataset(tmp_path_factory.mktemp("data") / "chat.jsonl")


@pytest.fixture(scope="session")
def kit(tiny_model: Path, chat_dataset: Path, job_env: dict[str, str]) -> JobKit:
    """Renders and runs small SFT jobs on the tiny model and the chat data (support.jobs.JobKit)."""
    return JobKit(tiny_model, chat_dataset, job_env)


# Modules whose tests run minute-long jobs (measured with --durations): they start first, so that while the last of
# them runs the other worker still has short tests to take, and the two workers end together instead of one of them
# finishing a long job test alone. Order only; a module missing from the suite is simply not there to move.
_LONG_RUNNING = (
    "service/test_crash_resume.py",
    "bench/test_train_throughput.py",
    "scripts/test_methods.py",
    "scripts/test_job_watchdog.py",
    "scripts/test_tracking.py",
    "estimate/test_calibrated.py",
    "service/test_remote_evaluate.py",
    "service/test_retry.py",
    "service/test_shared_ledger.py",
    "scripts/test_job_side.py",
    "scripts/test_gguf.py",
    "service/test_convert_gguf_tool.py",
    "bench/test_ledger_scale.py",
    "service/test_attempt_progress.py",
    "service/test_pipelines.py",
    "scripts/test_evaluate.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        module = item.nodeid.partition("::")[0].removeprefix("tests/")
        return _LONG_RUNNING.index(module) if module in _LONG_RUNNING else len(_LONG_RUNNING)

    items.sort(key=rank)  # stable: tests keep their order within a module and among the rest
