"""The pinned llama.cpp: what its converter and quantizer accept, bundled in data/gguf_converter.json.

The bundled facts are read from the pinned llama-cpp-python sdist by scripts/_llama_cpp.py, the
very parser the conversion job runs on the sources it builds (loaded here as a job runtime
module), so the server's preflight and the job read llama.cpp one way. A test re-derives the
bundled file from the cached sdist, so the file cannot drift from the pin silently. Reading the
bundled file needs no llama.cpp, no network and no torch.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jobtrail.templates.runtime import runtime_module
from jobtrail.templates.versions import job_lock
from jobtrail.util.data import data_path

# The sdist whose converter and quantize sources jobs build: the job lock's (`make lock` moves it).
LLAMA_CPP_PYTHON_VERSION = job_lock().require("llama-cpp-python")
FACTS_FILE = data_path("gguf_converter.json")
SDIST_PREFIX = "llama_cpp_python-"  # an sdist's top directory: llama_cpp_python-<version>
BASE_QUANTIZATION = "F16"  # the converter's output, always kept: every other file derives from it
QK_K = 256  # K-quant (and most IQ) super-block: rows of other widths fall back to other types


@dataclass(frozen=True)
class ConverterFacts:
    llama_cpp_python: str
    llama_cpp_commit: str | None
    architectures: frozenset[str]  # HF architectures the converter registers as text models
    quantizations: tuple[str, ...]  # llama-quantize's type names, in its help order (no aliases)
    quantization_aliases: dict[str, str]  # e.g. Q4_K → Q4_K_M
    pre_tokenizers: frozenset[str]  # names the converter can write to tokenizer.ggml.pre
    pre_tokenizer_hashes: dict[str, str]  # the converter's tokenizer hash → pre-tokenizer name
    chktxt: str  # the text the converter tokenizes to compute that hash


@cache
def converter_facts() -> ConverterFacts:
    """The bundled facts of the pinned llama.cpp (gguf_converter.json)."""
    data = json.loads(FACTS_FILE.read_text())
    return ConverterFacts(
        llama_cpp_python=data["llama_cpp_python"],
        llama_cpp_commit=data["llama_cpp_commit"],
        architectures=frozenset(data["architectures"]),
        quantizations=tuple(data["quantizations"]),
        quantization_aliases=data["quantization_aliases"],
        pre_tokenizers=frozenset(data["pre_tokenizers"]),
        pre_tokenizer_hashes=data["pre_tokenizer_hashes"],
        chktxt=data["chktxt"],
    )


def derive_converter_facts(sdist: Path) -> dict[str, Any]:
    """gguf_converter.json's content, read from a llama-cpp-python sdist (.tar.gz) by the job's own
    parser (nothing of llama.cpp is imported or run)."""
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]

        def read(member: str) -> str:
            handle = archive.extractfile(f"{top}/{member}")
            if handle is None:
                raise ValueError(f"{sdist} has no file {member}")
            return handle.read().decode()

        facts: dict[str, Any] = _parser().llama_cpp_facts(read, top.removeprefix(SDIST_PREFIX))
        return facts


def _parser() -> Any:
    """scripts/_llama_cpp.py, the parser and the rules of spelling the conversion job uses too."""
    return runtime_module("_llama_cpp")


# --- quantization names and model architectures ----------------------------------------------


def canonical_quantization(name: str) -> str | None:
    """llama-quantize's own spelling of `name` (it matches case-insensitively), aliases resolved."""
    facts = converter_facts()
    canonical: str | None = _parser().canonical_quantization(name, facts.quantizations, facts.quantization_aliases)
    return canonical


def normalize_quantizations(names: list[str]) -> list[str]:
    """Canonical, de-duplicated, without the F16 base (always produced); unknown names kept as given."""
    out: list[str] = []
    for name in names:
        canonical = canonical_quantization(name) or name
        if canonical != BASE_QUANTIZATION and canonical not in out:
            out.append(canonical)
    return out


def builds_quantizer(config: Mapping[str, Any], *, runs_here: bool) -> bool:
    """Whether a conversion job with this CONFIG builds llama-quantize before it quantizes (minutes): it makes more
    than the F16 base, which the converter writes alone, and its cache holds no build of its llama.cpp (a job that
    runs elsewhere starts with an empty one)."""
    if not config.get("quantizations"):
        return False
    llama = config["llama_cpp"]
    return not runs_here or _parser().quantize_build(Path(llama["cache_dir"]), llama["version"]) is None


def is_k_quant(name: str) -> bool:
    """Types built from 256-value super-blocks (K-quants, most IQ types, ternary)."""
    return "_K" in name or (name.startswith("IQ") and name != "IQ4_NL") or name.startswith("TQ")


def model_architecture(config: dict[str, Any]) -> str | None:
    """The architecture the converter dispatches on: text_config's first, else config.json's first."""
    architecture: str | None = _parser().model_architecture(config)
    return architecture
