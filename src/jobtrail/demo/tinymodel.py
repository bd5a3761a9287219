"""A tiny Qwen2 model and toy datasets, built offline (tests and `jobtrail demo`).

Nothing here reaches the Hub. The tokenizer is a byte-level BPE trained with `tokenizers` on a
made-up corpus, with exactly Qwen2's normalizer (NFC) and split regex: transformers 5 loads
Qwen2Tokenizer for model_type=qwen2 and re-applies that pre-tokenizer, so a tokenizer trained
any other way would give different ids depending on the loader.

Heavy imports (torch, transformers, tokenizers) happen inside functions: importing this module
must stay cheap, because the server imports it for the demo command.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import Qwen2Tokenizer

COMPLETE_MARKER = ".jobtrail-complete"
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

# Copied from transformers/models/qwen2/tokenization_qwen2.py (PRETOKENIZE_REGEX); kept here so
# building the tokenizer does not depend on a private module path.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# ChatML; {% generation %} marks assistant tokens so TRL's assistant_only_loss=True works.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The toy world the datasets talk about: a small closed vocabulary with a fixed mapping, so a
# tiny model learns it (and the loss visibly drops) within a handful of steps.
_THINGS = {
    "apple": "red",
    "sky": "blue",
    "grass": "green",
    "snow": "white",
    "coal": "black",
    "lemon": "yellow",
    "plum": "purple",
    "carrot": "orange",
}
_NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "do", "fa", "gu", "hi"]


def build_tiny_model(
    dest: Path,
    *,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    vocab_size: int = 800,
    max_positions: int = 512,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Build a random-init Qwen2ForCausalLM + trained BPE tokenizer in `dest`; idempotent.

    max_positions and dtype matter for a stand-in of a real model's shape (bench/train_throughput.py on a
    machine without the Hub): the sequence length it takes, and the precision its weights are stored in
    ("bfloat16" like the Hub's checkpoints, so a trainer loading dtype="auto" gets what it would get there).

    The model is written to a temporary sibling directory and renamed into place, so a crash
    never leaves a half-built model that a later call would mistake for a complete one.
    """
    dest = Path(dest)
    if (dest / COMPLETE_MARKER).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent))
    try:
        tokenizer = _train_tokenizer(vocab_size, seed)
        hf_tokenizer = _save_tokenizer(tokenizer, staging, max_positions)
        _save_model(
            staging,
            _special_token_ids(hf_tokenizer),
            seed,
            vocab_size=max(vocab_size, len(hf_tokenizer)),
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads,
            max_position_embeddings=max_positions,
            dtype=dtype,
        )
        _check_round_trip(tokenizer, staging)
        (staging / COMPLETE_MARKER).write_text(json.dumps({"seed": seed, "vocab_size": vocab_size}))
        # mkdtemp makes it 0700 whatever the umask: give it the mode of the folder it joins instead
        # (ordinary data in a shared folder, private under jobtrail's home).
        staging.chmod(stat.S_IMODE(dest.parent.stat().st_mode))
        _publish(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already unless something failed
    return dest


def _publish(staging: Path, dest: Path) -> None:
    """Rename the finished build into place, tolerating a concurrent builder that won."""
    if (dest / COMPLETE_MARKER).is_file():
        return
    if dest.exists():  # a leftover without the marker: a build that died before the rename
        shutil.rmtree(dest, ignore_errors=True)
    try:
        os.replace(staging, dest)
    except OSError:
        if not (dest / COMPLETE_MARKER).is_file():
            raise


def _corpus(seed: int) -> list[str]:
    """Made-up text covering the toy datasets' words plus enough variety to fill the merges."""
    rng = random.Random(seed)
    lines: list[str] = []
    for thing, colour in _THINGS.items():
        lines += [f"What color is the {thing}?", f"The {thing} is {colour}.", f"{thing} {colour}"]
    for i, word in enumerate(_NUMBERS):
        lines += [f"What comes after {word}?", f"After {word} comes {_NUMBERS[(i + 1) % 10]}."]
    for _ in range(1500):
        words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(3, 9))]
        lines.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ", 42.", "\n"]))
    lines += ["Hello, world! It's 2024; numbers 0123456789 and ÜñíçØdé text."] * 3
    return lines


def _train_tokenizer(vocab_size: int, seed: int) -> Tokenizer:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    return tokenizer


def _save_tokenizer(tokenizer: Tokenizer, out: Path, max_positions: int) -> Qwen2Tokenizer:
    """Wrap the trained BPE as Qwen2Tokenizer (what AutoTokenizer picks for qwen2) and save it."""
    from transformers import Qwen2Tokenizer

    model = json.loads(tokenizer.to_str())["model"]
    merges: list[tuple[str, str]] = []
    for merge in model["merges"]:  # "left right" in older tokenizers' JSON, ["left", "right"] in newer
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        merges.append((left, right))
    # transformers annotates `merges` as list[str], yet hands it to tokenizers' BPE, which takes pairs.
    hf_tokenizer = Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,  # type: ignore[arg-type]
        unk_token=ENDOFTEXT,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=max_positions,
    )
    hf_tokenizer.chat_template = CHAT_TEMPLATE
    hf_tokenizer.save_pretrained(out)
    return hf_tokenizer


def _special_token_ids(tokenizer: Qwen2Tokenizer) -> dict[str, int]:
    ids: dict[str, int] = {}
    for token in SPECIAL_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if not isinstance(token_id, int):  # one token in gives one id out; the signature covers lists too
            raise RuntimeError(f"the tokenizer has no single id for {token!r}: {token_id!r}")
        ids[token] = token_id
    return ids


def _save_model(out: Path, token_ids: dict[str, int], seed: int, dtype: str, **sizes: Any) -> None:
    """A random-init Qwen2 model of the given sizes (Qwen2Config's names), ChatML's end token as EOS,
    made and stored in `dtype` (a torch dtype's name)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config

    config = Qwen2Config(
        **sizes,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=token_ids[IM_END],
        pad_token_id=token_ids[ENDOFTEXT],
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=token_ids[IM_END], pad_token_id=token_ids[ENDOFTEXT])
    model.save_pretrained(out)  # safetensors is the default (and only) format in transformers 5


def _check_round_trip(tokenizer: Tokenizer, out: Path) -> None:
    """AutoTokenizer must give the same ids as the trained tokenizer, or training data differs."""
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(out)
    for sample in [
        "The apple is red. What comes after three?",
        "Hello, world! It's 2024;\n  numbers 0123 and ÜñíçØdé.",
        f"{IM_START}user\nWhat color is the sky?{IM_END}\n",
    ]:
        expected = tokenizer.encode(sample).ids
        got = loaded(sample, add_special_tokens=False)["input_ids"]
        if got != expected:
            raise RuntimeError(f"tokenizer ids differ after reload for {sample!r}: {got} != {expected}")
        if loaded.decode(got) != sample:
            raise RuntimeError(f"tokenizer does not round-trip {sample!r}")


# --- toy datasets -------------------------------------------------------------------------


def _qa_pairs(rows: int, seed: int) -> list[tuple[str, str]]:
    """Deterministic question/answer pairs from the toy world."""
    rng = random.Random(seed)
    things = sorted(_THINGS)
    pairs: list[tuple[str, str]] = []
    for _ in range(rows):
        if rng.random() < 0.5:
            thing = rng.choice(things)
            pairs.append((f"What color is the {thing}?", f"The {thing} is {_THINGS[thing]}."))
        else:
            i = rng.randrange(len(_NUMBERS))
            word, nxt = _NUMBERS[i], _NUMBERS[(i + 1) % len(_NUMBERS)]
            pairs.append((f"What comes after {word}?", f"After {word} comes {nxt}."))
    return pairs


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def write_chat_dataset(path: Path, rows: int = 64, seed: int = 0) -> Path:
    """`messages` rows (user → assistant), jsonl."""
    return _write_jsonl(
        path,
        [
            {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            for q, a in _qa_pairs(rows, seed)
        ],
    )


def write_text_dataset(path: Path, rows: int = 32, seed: int = 0) -> Path:
    """Plain `text` rows (language modelling), jsonl."""
    return _write_jsonl(path, [{"text": f"{q} {a}"} for q, a in _qa_pairs(rows, seed)])


def write_prompt_completion_dataset(path: Path, rows: int = 32, seed: int = 0) -> Path:
    """`prompt` / `completion` rows, jsonl."""
    return _write_jsonl(path, [{"prompt": q, "completion": " " + a} for q, a in _qa_pairs(rows, seed)])
