"""Preflight for convert_gguf: can this source become GGUF files with the pinned llama.cpp?

What the pinned converter and quantizer accept comes from preflight/llama_cpp.py. Two layers, as
in preflight/: `conversion_facts` reads the source's small JSON files (and, when the `tokenizers`
package is present, hashes its tokenizer the way the converter does); `check_conversion` turns
facts into Findings and does no I/O. Nothing here imports torch.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobtrail.models import Finding
from jobtrail.templates.llama_cpp import (
    QK_K,
    canonical_quantization,
    converter_facts,
    is_k_quant,
    model_architecture,
    normalize_quantizations,
)
from jobtrail.util.data import read_json_object
from jobtrail.util.refs import looks_local

# Need an importance matrix (llama-quant.cpp, tensor_requires_imatrix), which convert_gguf does
# not compute: llama-quantize refuses them without one.
IMATRIX_QUANTIZATIONS = frozenset({"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "Q2_K_S"})
# COPY re-writes the input; F32/BF16 cannot add precision to the F16 base file.
POINTLESS_QUANTIZATIONS = frozenset({"COPY", "F32", "BF16"})
# Split regexes of well-known BPE families → llama.cpp's pre-tokenizer name for them, to suggest
# a name when the converter does not recognise a tokenizer by its hash.
KNOWN_SPLIT_REGEXES = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
}
_EMBEDDING_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
_SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024


# --- facts about a source --------------------------------------------------------------------


@dataclass(frozen=True)
class TokenizerFacts:
    present: bool
    kind: str | None = None  # "sentencepiece", "bpe", or tokenizer.json's model type in lower case
    size: int | None = None  # number of token ids (highest id + 1)
    split_regex: str | None = None  # the pre-tokenizer's Split regex, when it has one
    converter_hash: str | None = None  # as convert_hf_to_gguf computes it; None when not computable
    hash_error: str | None = None  # why it could not be computed
    has_chat_template: bool = False


@dataclass(frozen=True)
class ModelDirFacts:
    path: str
    exists: bool
    config: dict[str, Any] | None = None  # config.json
    adapter_config: dict[str, Any] | None = None  # adapter_config.json (a PEFT adapter)
    adapter_embedding_rows: int | None = None  # rows of input-embedding weights the adapter carries
    tokenizer: TokenizerFacts | None = None


@dataclass(frozen=True)
class ConversionFacts:
    source: str
    local: bool
    model: ModelDirFacts | None  # the source directory (None: a Hub id, not read here)
    base_ref: str | None = None  # an adapter's base model, as named by it or by base_model=
    base: ModelDirFacts | None = None  # that base, when it is a local directory


def conversion_facts(source: str, *, base_model: str | None = None) -> ConversionFacts:
    """Read what the checks need from a local source dir (and an adapter's local base)."""
    if not looks_local(source):
        return ConversionFacts(source=source, local=False, model=None)
    model = model_dir_facts(Path(source).expanduser())
    base_ref = None
    if model.adapter_config is not None:
        base_ref = base_model or model.adapter_config.get("base_model_name_or_path")
    base = model_dir_facts(Path(base_ref).expanduser()) if base_ref and looks_local(base_ref) else None
    return ConversionFacts(source=source, local=True, model=model, base_ref=base_ref, base=base)


def model_dir_facts(path: Path) -> ModelDirFacts:
    if not path.is_dir():
        return ModelDirFacts(path=str(path), exists=False)
    adapter_config = read_json_object(path / "adapter_config.json")
    return ModelDirFacts(
        path=str(path),
        exists=True,
        config=read_json_object(path / "config.json"),
        adapter_config=adapter_config,
        adapter_embedding_rows=_adapter_embedding_rows(path) if adapter_config is not None else None,
        tokenizer=tokenizer_facts(path),
    )


def tokenizer_facts(path: Path) -> TokenizerFacts:
    has_json, has_model = (path / "tokenizer.json").is_file(), (path / "tokenizer.model").is_file()
    has_vocab = (path / "vocab.json").is_file() and (path / "merges.txt").is_file()
    chat = _has_chat_template(path)
    if not (has_json or has_model or has_vocab):
        return TokenizerFacts(present=False, has_chat_template=chat)
    if has_model:  # the converter reads tokenizer.model with sentencepiece first: no hash involved
        return TokenizerFacts(present=True, kind="sentencepiece", has_chat_template=chat)
    if not has_json:  # vocab.json + merges.txt alone: a slow BPE tokenizer, not hashed here
        return TokenizerFacts(present=True, kind="bpe", hash_error="no tokenizer.json to hash", has_chat_template=chat)
    data = read_json_object(path / "tokenizer.json") or {}
    kind = str((data.get("model") or {}).get("type", "")).lower() or None
    converter_hash, hash_error = _converter_hash(path / "tokenizer.json") if kind == "bpe" else (None, None)
    return TokenizerFacts(
        present=True,
        kind=kind,
        size=_tokenizer_size(data),
        split_regex=_split_regex(data.get("pre_tokenizer")),
        converter_hash=converter_hash,
        hash_error=hash_error,
        has_chat_template=chat,
    )


def _converter_hash(tokenizer_json: Path) -> tuple[str | None, str | None]:
    """sha256 of str(token ids of chktxt), as get_vocab_base_pre computes it to name a tokenizer."""
    try:
        from tokenizers import Tokenizer  # the train extra has it; the bare server may not
    except ImportError:
        return None, "the tokenizers package is not installed on the server"
    try:
        ids = Tokenizer.from_file(str(tokenizer_json)).encode(converter_facts().chktxt).ids
    except Exception as exc:  # noqa: BLE001 - any failure is reported as "could not check"
        return None, f"{type(exc).__name__}: {exc}"
    return hashlib.sha256(str(ids).encode()).hexdigest(), None


def _tokenizer_size(data: dict[str, Any]) -> int | None:
    vocab = (data.get("model") or {}).get("vocab")
    ids = list(vocab.values()) if isinstance(vocab, dict) else []
    ids += [t["id"] for t in data.get("added_tokens") or [] if isinstance(t.get("id"), int)]
    return max(ids) + 1 if ids else None


def _split_regex(pre_tokenizer: Any) -> str | None:
    """The first Split regex in a tokenizer.json pre_tokenizer (possibly inside a Sequence)."""
    if not isinstance(pre_tokenizer, dict):
        return None
    if pre_tokenizer.get("type") == "Split":
        return (pre_tokenizer.get("pattern") or {}).get("Regex")
    for inner in pre_tokenizer.get("pretokenizers") or []:
        found = _split_regex(inner)
        if found:
            return found
    return None


def _has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    return bool((read_json_object(path / "tokenizer_config.json") or {}).get("chat_template"))


def _adapter_embedding_rows(path: Path) -> int | None:
    """Rows of the input embedding an adapter saved (PEFT saves it when the vocab was resized)."""
    header = _safetensors_header(path / "adapter_model.safetensors") or {}
    for name, info in header.items():
        if name.endswith(_EMBEDDING_SUFFIXES) and isinstance(info, dict) and info.get("shape"):
            return int(info["shape"][0])
    return None


def _safetensors_header(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            return json.loads(f.read(length)) if length < _SAFETENSORS_HEADER_LIMIT else None
    except (OSError, struct.error, ValueError):
        return None


# --- the checks (pure) -----------------------------------------------------------------------


def check_conversion(
    facts: ConversionFacts, quantizations: list[str], pre_tokenizer: str | None = None
) -> list[Finding]:
    """Findings for converting `facts.source` to F16 + `quantizations` with the pinned llama.cpp."""
    return [
        *check_quantizations(quantizations),
        *check_pre_tokenizer_name(pre_tokenizer),
        *check_source(facts, quantizations, pre_tokenizer),
    ]


def check_source(facts: ConversionFacts, quantizations: list[str], pre_tokenizer: str | None) -> list[Finding]:
    """The source (or an adapter's base): present, supported architecture, K-quant shapes, tokenizer."""
    if not facts.local:
        return [_hub_source_unverified(facts.source)]
    model = facts.model
    if model is None or not model.exists:
        return [
            _finding(
                "gguf.source_missing",
                "error",
                f"{facts.source} is not a directory.",
                "Pass a jobtrail job id, a local model or adapter directory, or a Hub id.",
            )
        ]
    if model.adapter_config is not None:
        findings, config, base_tokenizer = _check_adapter(facts)
    elif model.config is None:
        return [
            _finding(
                "gguf.source_missing",
                "error",
                f"{facts.source} has neither config.json (a model) nor adapter_config.json (a LoRA adapter).",
                "Point source at the directory holding the model's config.json and weights, or at the adapter's.",
            )
        ]
    else:
        findings, config, base_tokenizer = [], model.config, None
    if config is not None:
        findings += check_architecture(config) + check_k_quant_shapes(config, quantizations)
    tokenizer = model.tokenizer if model.tokenizer and model.tokenizer.present else base_tokenizer
    return findings + check_tokenizer(tokenizer, pre_tokenizer)


def check_quantizations(names: list[str]) -> list[Finding]:
    known = converter_facts().quantizations
    findings: list[Finding] = []
    for name in names:
        canonical = canonical_quantization(name)
        if canonical is None:
            close = difflib.get_close_matches(name.upper(), known, n=3, cutoff=0.5)
            hint = f"Did you mean {' or '.join(close)}? " if close else ""
            findings.append(
                _finding(
                    "gguf.quantization_unknown",
                    "error",
                    f"llama-quantize has no quantization type {name!r}.",
                    f"{hint}Use one of: {', '.join(_usable(known))}.",
                )
            )
        elif canonical in IMATRIX_QUANTIZATIONS:
            findings.append(
                _finding(
                    "gguf.quantization_needs_imatrix",
                    "error",
                    f"{canonical} needs an importance matrix, which convert_gguf does not compute.",
                    "Use a K-quant such as Q4_K_M, Q5_K_M or Q6_K, or Q8_0.",
                )
            )
        elif canonical in POINTLESS_QUANTIZATIONS:
            findings.append(
                _finding(
                    "gguf.quantization_pointless",
                    "error",
                    f"{canonical} would only re-encode the F16 base file, which is always produced.",
                    f"Drop {canonical}; the F16 file is kept as the base.",
                )
            )
    return findings


def _usable(known: tuple[str, ...]) -> list[str]:
    return [q for q in known if q not in IMATRIX_QUANTIZATIONS | POINTLESS_QUANTIZATIONS]


def check_pre_tokenizer_name(name: str | None) -> list[Finding]:
    known = converter_facts().pre_tokenizers
    if name is None or name in known:
        return []
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.5)
    hint = f"Did you mean {' or '.join(close)}? " if close else ""
    return [
        _finding(
            "gguf.pre_tokenizer_unknown",
            "error",
            f"llama.cpp knows no pre-tokenizer named {name!r}.",
            f"{hint}Known names include: {', '.join(sorted(known))}.",
        )
    ]


def check_architecture(config: dict[str, Any]) -> list[Finding]:
    arch = model_architecture(config)
    facts = converter_facts()
    if arch is None:
        return [
            _finding(
                "gguf.architecture_missing",
                "error",
                "config.json names no architecture, so llama.cpp's converter cannot pick a model class.",
                'Add "architectures": ["<Name>ForCausalLM"] to config.json (as transformers saves it).',
            )
        ]
    if arch in facts.architectures:
        return []
    close = difflib.get_close_matches(arch, sorted(facts.architectures), n=3, cutoff=0.6)
    hint = f" Closest supported: {', '.join(close)}." if close else ""
    return [
        _finding(
            "gguf.architecture_unsupported",
            "error",
            f"llama.cpp's converter (llama-cpp-python {facts.llama_cpp_python}) does not support {arch}.{hint}",
            "Convert a model of a supported architecture, or wait for a llama.cpp release that adds it "
            "(jobtrail pins the converter it has tested).",
        )
    ]


def check_k_quant_shapes(config: dict[str, Any], quantizations: list[str]) -> list[Finding]:
    """K-quants pack rows in blocks of 256: rows of other widths fall back to other types."""
    wanted = [q for q in normalize_quantizations(quantizations) if is_k_quant(q)]
    dims = row_widths(config)
    odd = {name: width for name, width in dims.items() if width % QK_K}
    if not wanted or not odd:
        return []
    widths = ", ".join(f"{name} {width}" for name, width in odd.items())
    small = " (smaller than one block)" if dims.get("hidden_size", QK_K) < QK_K else ""
    return [
        _finding(
            "gguf.k_quant_fallback",
            "warning",
            f"{', '.join(wanted)} quantize rows in blocks of {QK_K} values, but this model's {widths} "
            f"{'is' if len(odd) == 1 else 'are'} not a multiple of {QK_K}{small}: llama-quantize stores those "
            "tensors in other types, so the files are not the K-quants their names say.",
            "Use Q8_0 (or Q4_0/Q5_0, blocks of 32) for this model; K-quants need hidden and "
            f"intermediate sizes that are multiples of {QK_K}.",
        )
    ]


def row_widths(config: dict[str, Any]) -> dict[str, int]:
    """Input widths of the model's linear layers (the dimension a quantization block runs along)."""
    text = config.get("text_config") or config
    hidden = _first_int(text, "hidden_size", "n_embd", "d_model")
    widths = {"hidden_size": hidden, "intermediate_size": _first_int(text, "intermediate_size", "ffn_dim", "n_inner")}
    heads, head_dim = _first_int(text, "num_attention_heads", "n_head"), _first_int(text, "head_dim")
    head_width = head_dim or (hidden // heads if hidden and heads else None)
    if heads and head_width:
        widths["attention width"] = heads * head_width
    return {name: width for name, width in widths.items() if width}


def _first_int(config: dict[str, Any], *keys: str) -> int | None:
    return next((config[k] for k in keys if isinstance(config.get(k), int)), None)


def check_tokenizer(tokenizer: TokenizerFacts | None, pre_tokenizer: str | None) -> list[Finding]:
    if tokenizer is None or not tokenizer.present:
        return [
            _finding(
                "gguf.tokenizer_missing",
                "error",
                "No tokenizer (tokenizer.json, tokenizer.model, or vocab.json + merges.txt) next to the model: "
                "a GGUF file must carry its tokenizer.",
                "Save the tokenizer into the source directory (tokenizer.save_pretrained(dir)); jobtrail "
                "training jobs do this for their final model and checkpoints.",
            )
        ]
    findings = (
        []
        if tokenizer.has_chat_template
        else [
            _finding(
                "gguf.chat_template_missing",
                "warning",
                "The tokenizer has no chat template, so the GGUF files carry none: llama.cpp, Ollama and "
                "LM Studio will need one supplied to chat with the model.",
                "Set tokenizer.chat_template and save it with the model before converting, if it is a chat model.",
            )
        ]
    )
    return findings + _pre_tokenizer_findings(tokenizer, pre_tokenizer)


def _pre_tokenizer_findings(tokenizer: TokenizerFacts, pre_tokenizer: str | None) -> list[Finding]:
    if tokenizer.kind != "bpe" or pre_tokenizer is not None:
        return []
    if tokenizer.converter_hash is None:
        return [
            _finding(
                "gguf.pre_tokenizer_unverified",
                "info",
                f"Could not check whether llama.cpp recognises this BPE tokenizer ({tokenizer.hash_error}).",
                "If the job stops with 'pre-tokenizer not recognized', pass pre_tokenizer=... naming the "
                "tokenizer family (e.g. 'qwen2').",
            )
        ]
    if tokenizer.converter_hash in converter_facts().pre_tokenizer_hashes:
        return []
    suggestion = KNOWN_SPLIT_REGEXES.get(tokenizer.split_regex or "")
    named = (
        f"Its split regex is {suggestion!r}-style: pass pre_tokenizer={suggestion!r}."
        if suggestion
        else "Pass pre_tokenizer=... naming the family it was built from (e.g. 'qwen2' for "
        "Qwen2's split regex, 'llama-bpe' for Llama 3's)."
    )
    return [
        _finding(
            "gguf.pre_tokenizer_needed",
            "warning",
            "llama.cpp's converter identifies BPE tokenizers by a hash of their output and does not know this "
            f"one ({tokenizer.converter_hash[:12]}…, e.g. a custom-trained tokenizer): conversion will stop "
            "unless the pre-tokenizer is named.",
            named,
        )
    ]


def _check_adapter(facts: ConversionFacts) -> tuple[list[Finding], dict[str, Any] | None, TokenizerFacts | None]:
    """Findings about an adapter's base, the base's config and tokenizer (None when not readable)."""
    model, base = facts.model, facts.base
    assert model is not None
    if not facts.base_ref:
        return (
            [
                _finding(
                    "gguf.adapter_base_missing",
                    "error",
                    f"The adapter in {facts.source} names no base model (base_model_name_or_path).",
                    f"Set base_model_name_or_path in {facts.source}/adapter_config.json to the local directory "
                    "or Hub id of the model it was trained on, then convert again.",
                )
            ],
            None,
            None,
        )
    if base is None:  # a Hub id: the job downloads it
        return (
            [
                _finding(
                    "gguf.adapter_base_unverified",
                    "warning",
                    f"The adapter's base {facts.base_ref} is a Hub id: it was not checked here and the job "
                    "downloads it before merging.",
                    "Make sure the job can read it (a token for gated or private repos).",
                )
            ],
            None,
            None,
        )
    if not base.exists or base.config is None:
        return (
            [
                _finding(
                    "gguf.adapter_base_missing",
                    "error",
                    f"The adapter's base model {facts.base_ref} is not a model directory here"
                    f" ({'missing' if not base.exists else 'no config.json'}): it cannot be merged.",
                    f"Put the base model at {facts.base_ref}, or set base_model_name_or_path in "
                    f"{facts.source}/adapter_config.json to where it is (a local directory or Hub id).",
                )
            ],
            None,
            None,
        )
    return _check_resized_embeddings(model, base), base.config, base.tokenizer


def _check_resized_embeddings(adapter: ModelDirFacts, base: ModelDirFacts) -> list[Finding]:
    base_rows = _first_int((base.config or {}).get("text_config") or base.config or {}, "vocab_size")
    rows = adapter.adapter_embedding_rows
    if base_rows is None:
        return []
    if rows is not None and rows != base_rows:
        return [
            _finding(
                "gguf.embeddings_resized",
                "info",
                f"The adapter carries {rows}-row embeddings (the base has {base_rows}): the job resizes the base "
                "to match before merging.",
                None,
            )
        ]
    tokens = adapter.tokenizer.size if adapter.tokenizer else None
    if rows is None and tokens is not None and tokens > base_rows:
        return [
            _finding(
                "gguf.embeddings_untrained",
                "error",
                f"The adapter's tokenizer has {tokens} tokens but the base embeds only {base_rows}, and the adapter "
                "carries no embedding weights: the added tokens would have no trained embeddings.",
                "Retrain with the embeddings saved (LoRA modules_to_save=['embed_tokens', 'lm_head'], or "
                "save_embedding_layers=True), or convert with the base's own tokenizer.",
            )
        ]
    return []


def _hub_source_unverified(source: str) -> Finding:
    return _finding(
        "gguf.source_unverified",
        "warning",
        f"{source} is a Hub id: its architecture and tokenizer are checked by the job after download, not here.",
        "Nothing to do if the repo is a transformers model or a PEFT adapter the job's token can read.",
    )


def _finding(code: str, severity: str, message: str, fix: str | None) -> Finding:
    return Finding(code=code, severity=severity, message=message, fix=fix)  # type: ignore[arg-type]
