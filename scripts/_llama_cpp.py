"""What a llama.cpp release accepts, read from its own sources: one reading for the server and the job.

The conversion job reads these facts from the sources it is about to build and run, so it checks a
request against exactly that converter and quantizer. The server bundles the same facts for the
pinned release (gguf_converter.json), derived from the release's sdist by this same module, which
jobtrail.preflight.llama_cpp loads: server and job cannot read llama.cpp two ways. Nothing of
llama.cpp is imported or run here: its Python is parsed with `ast`, its C++ with regexes. Where a
cache keeps the llama-quantize built from a release is read here too: the job reuses that build, and
the server, reading a local job's cache, knows whether a build (minutes) comes first.

render.py inlines this file into the conversion job (the template imports it in its runtime
block). Standard library only, and no `from __future__` import, as for every runtime module.
"""

import ast
import json
import os
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

# The files of a llama-cpp-python sdist the facts come from, relative to its top directory.
CHANGELOG_FILE = "CHANGELOG.md"  # names the llama.cpp commit each release vendors
TEXT_MODELS_FILE = "vendor/llama.cpp/conversion/__init__.py"  # the converter's architectures
VOCAB_FILE = "vendor/llama.cpp/conversion/base.py"  # its BPE pre-tokenizer names and hashes
QUANTIZE_FILE = "vendor/llama.cpp/tools/quantize/quantize.cpp"  # llama-quantize's types
QUANTIZE_TOOL = "llama-quantize"  # the one tool a conversion builds: the converter is Python
BUILD_RECORD = "build.json"  # beside a cached llama-quantize: the version it was built from


def llama_cpp_facts(read: Callable[[str], str], version: str) -> dict[str, Any]:
    """What llama-cpp-python `version`'s converter and quantizer accept (gguf_converter.json's content).

    read(path) returns the text of one file of that release's sdist, `path` relative to the sdist's
    top directory: the server reads them from the .tar.gz, the job from the sources it extracted.
    """
    quantizations, aliases = quantize_options(read(QUANTIZE_FILE))
    vocab_source = read(VOCAB_FILE)
    hashes, chktxt = pre_tokenizer_hashes(vocab_source)
    return {
        "llama_cpp_python": version,
        "llama_cpp_commit": vendored_commit(read(CHANGELOG_FILE), version),
        "architectures": sorted(text_model_map(read(TEXT_MODELS_FILE))),
        "quantizations": quantizations,
        "quantization_aliases": aliases,
        "pre_tokenizers": pre_tokenizer_names(vocab_source),
        "pre_tokenizer_hashes": hashes,
        "chktxt": chktxt,
    }


def text_model_map(source: str) -> dict[str, str]:
    """conversion/__init__.py's TEXT_MODEL_MAP: the architectures get_model_class() accepts."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "TEXT_MODEL_MAP" and node.value:
            mapping: dict[str, str] = ast.literal_eval(node.value)  # architecture → converter class name
            return mapping
    raise ValueError("llama.cpp's conversion/__init__.py defines no TEXT_MODEL_MAP")


def quantize_options(source: str) -> tuple[list[str], dict[str, str]]:
    """quantize.cpp's QUANT_OPTIONS (what `llama-quantize --help` lists): the type names in that
    order, aliases left out, and each alias with the type it stands for (e.g. Q4_K → Q4_K_M)."""
    block = source.split("QUANT_OPTIONS", 1)[1].split("};", 1)[0]
    entries = re.findall(r'\{\s*"(\w+)"\s*,\s*LLAMA_FTYPE_\w+\s*,\s*"([^"]*)"', block)
    aliases = {name: m.group(1) for name, text in entries if (m := re.match(r"alias for (\w+)", text))}
    return [name for name, _ in entries if name not in aliases], aliases


def _vocab_base_pre(source: str) -> ast.FunctionDef:
    """base.py's get_vocab_base_pre: where the converter names a BPE tokenizer's pre-tokenizer."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "get_vocab_base_pre":
            return node
    raise ValueError("llama.cpp's conversion/base.py defines no get_vocab_base_pre")


def pre_tokenizer_hashes(source: str) -> tuple[dict[str, str], str]:
    """({chkhsh: name}, chktxt) from get_vocab_base_pre's `if chkhsh == "...": res = "..."` chain.

    The converter tokenizes chktxt and hashes the ids to recognise a tokenizer; as in its chain of
    plain `if`s, a later test of the same hash wins.
    """
    hashes: dict[str, str] = {}
    chktxt = ""
    for node in _vocab_base_pre(source).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "chktxt":
            chktxt = ast.literal_eval(node.value)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            compared = node.test.comparators[0]
            assigned = node.body[0]
            if isinstance(compared, ast.Constant) and isinstance(assigned, ast.Assign):
                hashes[str(compared.value)] = ast.literal_eval(assigned.value)
    return dict(sorted(hashes.items())), chktxt


def pre_tokenizer_names(source: str) -> list[str]:
    """Every name get_vocab_base_pre can write to tokenizer.ggml.pre (llama.cpp loads each of them),
    including those whose hash a later test shadows."""
    names = {
        node.value.value
        for node in ast.walk(_vocab_base_pre(source))
        if isinstance(node, ast.Assign)
        and getattr(node.targets[0], "id", None) == "res"
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    return sorted(names)


def vendored_commit(changelog: str, version: str) -> str | None:
    """The llama.cpp commit a llama-cpp-python release vendors ("update llama.cpp to ggml-org/llama.cpp@<sha>")."""
    section = changelog.split(f"## [{version}]", 1)[-1].split("\n## [", 1)[0]
    found = re.search(r"llama\.cpp@([0-9a-f]{7,40})", section)
    return found.group(1) if found else None


def canonical_quantization(name: str, quantizations: Collection[str], aliases: Mapping[str, str]) -> str | None:
    """llama-quantize's own spelling of `name` (it matches case-insensitively), an alias resolved;
    None when it has no such type."""
    wanted = name.strip().upper()
    wanted = aliases.get(wanted, wanted)
    return wanted if wanted in quantizations else None


def model_architecture(config: dict[str, Any]) -> str | None:
    """The architecture the converter dispatches on: text_config's first, else config.json's first."""
    for candidate in ((config.get("text_config") or {}).get("architectures"), config.get("architectures")):
        if isinstance(candidate, list) and candidate:
            return str(candidate[0])
    return None


def quantize_dir(cache_dir: Path, version: str) -> Path:
    """Where a llama.cpp cache keeps the llama-quantize built from llama-cpp-python `version`, and its record."""
    return cache_dir / f"quantize-{version}"


def quantize_build(cache_dir: Path, version: str) -> dict[str, Any] | None:
    """The record of the llama-quantize `cache_dir` holds for `version`, when its binary is there and was built
    from that version; None: a job with this cache builds one first."""
    directory = quantize_dir(cache_dir, version)
    try:
        record = json.loads((directory / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return None
    built = isinstance(record, dict) and record.get("version") == version
    return record if built and os.access(directory / QUANTIZE_TOOL, os.X_OK) else None
