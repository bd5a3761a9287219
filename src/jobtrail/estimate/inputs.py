"""The estimator's inputs from outside the process: a model's config.json and dataset statistics.

Only config.json is ever read (from a directory, or downloaded alone from the Hub); weights
never are. huggingface_hub is imported only for a Hub id, so importing this stays cheap.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from jobtrail.errors import InvalidRequestError, JobtrailError, NotFoundError
from jobtrail.util.hub import hub_unreachable
from jobtrail.util.values import text_chars

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$|^[A-Za-z0-9][\w.-]*$")
# Rough characters per token for English text with a modern BPE vocabulary (OpenAI's and
# Hugging Face's rule of thumb). Only a fallback: where the model's tokenizer can be read, the
# caller passes the rows it measured (preflight/data_size.py), and the estimate says which it used.
# It is often far off: the demo model's chat rows are ~2.3× longer in tokens once chat-templated.
CHARS_PER_TOKEN = 4
_OFFLINE_FIX = (
    "Retry when the Hub is reachable, or pass a local model directory that holds config.json "
    "(e.g. a save_pretrained copy of the model)."
)


class HubUnreachableError(JobtrailError):
    """The Hub could not be asked for a config.json that is not cached: a check that could not run."""


class DataStats(BaseModel):
    """Rows and per-row token lengths: the same fields validate_dataset's report carries."""

    rows: int
    token_lengths: list[int] = Field(description="Tokens per row, before truncation to max_length.")
    source: str = Field(description="How the lengths were obtained, for the estimate's assumptions.")
    counted: Literal["tokenizer", "characters"] = Field(
        "characters", description="tokenizer: the model's own; characters: characters/CHARS_PER_TOKEN."
    )


def load_model_config(model: str) -> dict[str, Any]:
    """config.json of a local model directory or of a Hub model (that one file only)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return _read_config(path / "config.json", model)
    if model.startswith(("/", "./", "../", "~")) or path.exists() or not _HUB_ID.match(model):
        raise NotFoundError(
            f"No model directory at {model!r}.",
            fix="Pass a directory that holds config.json (save_pretrained output), or a Hub id like "
            "'Qwen/Qwen2.5-0.5B'.",
        )
    return _read_config(_download_config(model), model)


def _download_config(repo_id: str) -> Path:
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    unreachable = hub_unreachable()  # one quick request: the download below retries for ~25 s
    cached = try_to_load_from_cache(repo_id, "config.json") if unreachable else None
    if isinstance(cached, str):
        return Path(cached)
    if unreachable:
        raise HubUnreachableError(
            f"Cannot read {repo_id}'s config.json: {unreachable}, and it is not in the local cache.", fix=_OFFLINE_FIX
        )
    try:
        return Path(hf_hub_download(repo_id, "config.json"))
    except GatedRepoError as exc:
        raise JobtrailError(
            f"{repo_id} is gated: its config.json needs accepted terms and a token.",
            fix=f"Accept the terms on https://huggingface.co/{repo_id} and set HF_TOKEN, or pass a local model "
            "directory.",
        ) from exc
    except RepositoryNotFoundError as exc:
        raise NotFoundError(
            f"No model {repo_id!r} on the Hub (or it is private).",
            fix="Check the id's spelling, e.g. 'Qwen/Qwen2.5-0.5B'; for a private model set HF_TOKEN.",
        ) from exc
    except LocalEntryNotFoundError as exc:  # offline (or HF_HUB_OFFLINE=1) and not cached
        raise HubUnreachableError(
            f"Cannot reach the Hub, and {repo_id}'s config.json is not in the local cache.", fix=_OFFLINE_FIX
        ) from exc
    except EntryNotFoundError as exc:
        raise NotFoundError(
            f"{repo_id} has no config.json, so its size cannot be read.",
            fix="Pass a transformers model repo (one with config.json).",
        ) from exc
    except Exception as exc:  # HTTP errors, and transport errors of whichever client the Hub uses
        raise HubUnreachableError(
            f"Could not download {repo_id}'s config.json: {_one_line(exc)}", fix=_OFFLINE_FIX
        ) from exc


def _read_config(path: Path, model: str) -> dict[str, Any]:
    if not path.is_file():
        raise NotFoundError(
            f"{model!r} has no config.json.",
            fix="Point model at a directory written by save_pretrained (it holds config.json).",
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidRequestError(
            f"{path} is not readable JSON: {_one_line(exc)}", fix="Re-save the model with save_pretrained."
        ) from exc
    if not isinstance(config, dict):
        raise InvalidRequestError(f"{path} does not hold a JSON object.", fix="Re-save the model with save_pretrained.")
    return config


def dataset_stats(dataset: str) -> DataStats | None:
    """Rows and estimated token lengths of a local .jsonl file; None for anything else
    (a Hub dataset, another format), which the caller reports.

    Tokens are estimated as characters / CHARS_PER_TOKEN over every string in a row (message
    contents and roles included), rounded up: no tokenizer is loaded here.
    """
    path = Path(dataset).expanduser()
    if path.suffix.lower() != ".jsonl":
        return None
    if not path.is_file():
        raise NotFoundError(
            f"No dataset file at {dataset!r}.", fix="Check the path, or pass num_examples and avg_tokens."
        )
    lengths: list[int] = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise InvalidRequestError(
                    f"{path.name} line {number} is not JSON: {_one_line(exc)}",
                    fix="Fix that line (validate_dataset shows every bad row), or pass num_examples and avg_tokens.",
                ) from exc
            lengths.append(max(1, math.ceil(text_chars(row) / CHARS_PER_TOKEN)))
    return DataStats(
        rows=len(lengths),
        token_lengths=lengths,
        source=f"{path.name}: characters/{CHARS_PER_TOKEN} per row",
        counted="characters",
    )


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
