"""A user on the Hub emulator with the tiny model and a dataset published, and the HF Jobs spec
that trains on them: what every remote (hf-jobs) test starts from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobtrail.models import JobSpec
from support.hub_emulator import HubEmulator

USER = "alice"
# Six quick steps of the tiny model, a committed checkpoint (pushed to the Hub) every three.
SHORT_TRAINING = {
    "max_steps": 6,
    "logging_steps": 1,
    "save_steps": 3,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "max_length": 64,
    "learning_rate": 1e-3,
}


def model_files(model_dir: Path) -> dict[str, Path]:
    return {p.name: p for p in model_dir.iterdir() if p.is_file() and not p.name.startswith(".")}


def publish(hub: HubEmulator, token: str, model_dir: Path, data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`token` (with write access) belongs to alice, who has alice/tiny and the dataset alice/data;
    the server reads the token from HF_TOKEN."""
    hub.add_token(token, USER)
    hub.add_repo(f"{USER}/tiny", files=model_files(model_dir))
    hub.add_repo(f"{USER}/data", repo_type="dataset", files={"train.jsonl": data})
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def remote_spec(**changes: Any) -> JobSpec:
    """SFT of alice/tiny on alice/data on the cheapest CPU flavor, pushing to alice/tiny-sft."""
    base: dict[str, Any] = dict(
        method="sft",
        model=f"{USER}/tiny",
        dataset=f"{USER}/data",
        backend="hf-jobs",
        flavor="cpu-basic",
        output=f"{USER}/tiny-sft",
    )
    return JobSpec(**{**base, **changes})
