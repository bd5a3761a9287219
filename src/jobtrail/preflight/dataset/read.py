"""Where a dataset's rows come from: a local file, a directory of data files, or one data file
of a Hub dataset's split fetched with huggingface_hub; and a model's tokenizer. With files.py,
the only I/O of validate_dataset: everything after reading is pure.

A source that cannot be read at all raises SourceError with one Finding saying why and what to
do. huggingface_hub and transformers are imported only by the code path that needs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jobtrail.models import Finding
from jobtrail.preflight.data_roots import confined
from jobtrail.preflight.dataset.files import read_file
from jobtrail.preflight.dataset.table import SourceError, Table
from jobtrail.results.dataset import finding
from jobtrail.util.data import read_json_object
from jobtrail.util.hub import hub_unreachable as _hub_unreachable
from jobtrail.util.refs import DATA_EXTENSIONS, looks_local

SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}


def read_local(ref: str, split: str, max_rows: int, home: Path | None = None) -> Table:
    """A local data file (always the 'train' split, as `datasets` loads it) or a directory's split; `home`: the
    service's state, where a directory's file may lead (data_roots.confined)."""
    path = Path(ref).expanduser()
    if not path.exists():
        raise SourceError(
            finding(
                "dataset.missing",
                f"Dataset file {ref} does not exist.",
                "Pass an existing .jsonl, .json, .csv or .parquet file, or a Hub dataset id like 'org/name'.",
            )
        )
    try:
        if path.is_dir():
            return _read_directory(path, split, max_rows, home)
        table = read_file(path, max_rows)
    except OSError as exc:  # permissions, a file vanishing mid-read, a device that is not a file
        raise SourceError(
            finding(
                "dataset.unreadable",
                f"{ref} cannot be read: {short_error(exc)}.",
                "Check that the file exists and is readable.",
            )
        ) from None
    if split != "train":
        table.findings.append(
            finding(
                "dataset.split",
                f"A single data file is always loaded as the 'train' split; split={split!r} is ignored.",
                'Pass split="train", or a directory / Hub dataset that has a file for that split.',
                "warning",
            )
        )
    return table


# What a model or adapter directory holds: its config.json (or tokenizer.json) is JSON, not rows of data.
_MODEL_MARKERS = ("config.json", "adapter_config.json")
_WEIGHTS = ("*.safetensors", "*.bin", "*.gguf")


def _read_directory(path: Path, split: str, max_rows: int, home: Path | None) -> Table:
    if any((path / marker).is_file() for marker in _MODEL_MARKERS) and any(
        next(path.glob(pattern), None) for pattern in _WEIGHTS
    ):
        raise SourceError(
            finding(
                "dataset.is_model",
                f"{path} is a model directory (config.json and weights), not a dataset.",
                "Pass it as model=...; dataset= takes a .jsonl/.json/.csv/.parquet file or a directory of them.",
            )
        )
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    picked = split_files(files, split)
    if not picked:
        raise SourceError(_no_split_finding(str(path), split, files))
    # A file in the directory may be a link to somewhere no input may come from.
    table = read_file(confined(str(path / picked[0]), "dataset", home=home), max_rows)
    return _one_of(table, picked, split)


def _one_of(table: Table, picked: list[str], split: str) -> Table:
    """Mark a table read from the first of several files of a split."""
    table.data_file = picked[0]
    if len(picked) > 1:
        table.total = None
        table.findings.append(
            finding(
                "dataset.sampled",
                f"Split {split!r} has {len(picked)} data files; only {picked[0]} was checked.",
                None,
                "info",
            )
        )
    return table


def split_files(files: Iterable[str], split: str) -> list[str]:
    """The data files of `split`, the way `datasets` finds them by name (train-*, */train/*, ...)."""
    data = [
        f for f in files if f.lower().endswith(DATA_EXTENSIONS) and not any(p.startswith(".") for p in f.split("/"))
    ]
    words = set(SPLIT_KEYWORDS.get(split.lower(), ())) | {split.lower()}
    matched = [f for f in data if _name_tokens(f) & words]
    if matched or split.lower() != "train":
        return sorted(matched)
    # No file is named after any split: `datasets` then takes every file as the train split.
    any_split = {w for ws in SPLIT_KEYWORDS.values() for w in ws}
    return sorted(data) if not any(_name_tokens(f) & any_split for f in data) else []


def _name_tokens(path: str) -> set[str]:
    return set(re.split(r"[/\-_.\s\d]+", path.lower()))


def _no_split_finding(where: str, split: str, files: list[str]) -> Finding:
    data = [f for f in files if f.lower().endswith(DATA_EXTENSIONS)]
    seen = ", ".join(data[:8]) + (" ..." if len(data) > 8 else "") if data else "none"
    return finding(
        "dataset.split",
        f"{where} has no .jsonl/.json/.csv/.parquet file for split {split!r} (data files: {seen}).",
        'Pass the split that exists (e.g. split="train"), or a path to one data file.',
    )


def read_hub(repo_id: str, split: str, max_rows: int) -> Table:
    """Find the split's data file in a Hub dataset repo, download it, and read it like a local file."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    # HF_ENDPOINT is read now, not when huggingface_hub was first imported.
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    unreachable = _hub_unreachable(api.endpoint)  # one quick request: the listing below retries for ~25 s
    if unreachable:
        raise SourceError(_unverified(repo_id, unreachable))
    try:
        files = api.list_repo_files(repo_id, repo_type="dataset")
        picked = split_files(files, split)
        if not picked:
            raise SourceError(_no_split_finding(f"Hub dataset {repo_id}", split, files))
        local = api.hf_hub_download(repo_id, picked[0], repo_type="dataset")
    except GatedRepoError:
        raise SourceError(_access(repo_id, "is gated and this token has not been granted access")) from None
    except RepositoryNotFoundError:
        raise SourceError(
            finding(
                "dataset.not_found",
                f"Hub dataset {repo_id} does not exist (or is private and this token cannot see it).",
                "Check the id on huggingface.co/datasets, or log in with a token that can read it (HF_TOKEN).",
            )
        ) from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise SourceError(_access(repo_id, f"refused access (HTTP {status})")) from None
        raise SourceError(_unverified(repo_id, short_error(exc))) from None
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001  transport errors come from whichever HTTP client huggingface_hub uses
        raise SourceError(_unverified(repo_id, short_error(exc))) from None
    return _one_of(read_file(Path(local), max_rows), picked, split)


def _unverified(repo_id: str, why: str) -> Finding:
    return finding(
        "dataset.unverified",
        f"Hub dataset {repo_id} could not be checked: {why}. Its format is unknown until the job downloads it.",
        "Run validate_dataset where the Hub is reachable, or download the data and pass the local file.",
        "warning",
    )


def _access(repo_id: str, why: str) -> Finding:
    return finding(
        "dataset.access",
        f"Hub dataset {repo_id} {why}.",
        f"Request access on https://huggingface.co/datasets/{repo_id} and use a token that has it (HF_TOKEN).",
    )


def short_error(exc: BaseException) -> str:
    """The exception on one line, at most 300 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:297] + "..."


def load_tokenizer(model: str) -> tuple[Any | None, str | None]:
    local = looks_local(model)
    path = Path(model).expanduser()
    if local and not path.is_dir():
        return None, f"model directory {model} does not exist"
    try:
        from transformers import AutoTokenizer

        # A Hub model is used only if its tokenizer is already cached: no downloads in preflight.
        return AutoTokenizer.from_pretrained(str(path) if local else model, local_files_only=not local), None
    except Exception as exc:  # noqa: BLE001  transformers raises OSError, ValueError, ImportError ... for a bad model dir
        return None, f"the tokenizer of {model} could not be loaded ({short_error(exc)})"


def model_positions(model: str) -> int | None:
    """The longest sequence a local model takes (max_position_embeddings, also under text_config)."""
    config = read_json_object(Path(model).expanduser() / "config.json") if looks_local(model) else None
    if config is None:
        return None
    text = config.get("text_config")
    text = text if isinstance(text, dict) else {}
    positions = config.get("max_position_embeddings") or text.get("max_position_embeddings")
    return positions if isinstance(positions, int) and positions > 0 else None
