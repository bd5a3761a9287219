"""Offline stand-ins of real models' shapes, written in seconds: no random init of a model on the CPU.

A stand-in has the real model's sizes (its config.json's), random weights and the tiny offline tokenizer
(jobtrail.demo.tinymodel's, the one the tests use). Speed, memory and MFU depend on the shape, not on the
weights; the losses start near ln(vocabulary).

Building a 7B this way used to take more than 340 s of CPU (transformers' random init, then save): here the
safetensors file is written tensor by tensor, straight to disk.

  * on a CUDA device: each tensor drawn on the GPU (normal, std 0.02, in the stored dtype), copied to the host
    and written: realistic values, a 7B (~15 GB) in the time the disk takes
  * on the CPU: a fixed block of such draws (a prime number of values, so that no two rows of a matrix start
    alike) tiled through each tensor as it is written: deterministic, and as fast as writing the bytes

Norm weights are ones and biases zeros, as a fresh Qwen2 has them. Which tensors a Qwen2ForCausalLM of the
shape holds is derived here; tests/bench/test_train_throughput.py loads a reduced shape with transformers and
checks nothing is missing or left over.

Usage: python bench/standin.py --shape qwen2.5-7b|SIZES_JSON --dest DIR [--dtype bfloat16] [--max-positions N]
           [--device auto|cpu|cuda]
Prints one JSON line: the folder, its bytes, parameters, the device that drew the weights and the seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

# The real models' sizes (their config.json on the Hub): what a stand-in of that name is built with.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_layers=24,
        num_heads=14,
        num_kv_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
}
INIT_STD = 0.02  # Qwen2Config's initializer_range
TILE_VALUES = 1_000_003  # prime: the CPU fill's block never lines up with a row
SAFETENSORS_DTYPES = {"bfloat16": "BF16", "float32": "F32", "float16": "F16"}
MARKER = ".standin-complete"


def tensor_shapes(shape: dict[str, Any]) -> Iterator[tuple[str, list[int]]]:
    """Every tensor of a Qwen2ForCausalLM of `shape`, by its state-dict name, in the model's order."""
    hidden, inter, vocab = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    head_dim = hidden // shape["num_heads"]
    kv = shape["num_kv_heads"] * head_dim
    yield "model.embed_tokens.weight", [vocab, hidden]
    for i in range(shape["num_layers"]):
        layer = f"model.layers.{i}"
        yield f"{layer}.input_layernorm.weight", [hidden]
        yield f"{layer}.self_attn.q_proj.weight", [hidden, hidden]
        yield f"{layer}.self_attn.q_proj.bias", [hidden]
        yield f"{layer}.self_attn.k_proj.weight", [kv, hidden]
        yield f"{layer}.self_attn.k_proj.bias", [kv]
        yield f"{layer}.self_attn.v_proj.weight", [kv, hidden]
        yield f"{layer}.self_attn.v_proj.bias", [kv]
        yield f"{layer}.self_attn.o_proj.weight", [hidden, hidden]
        yield f"{layer}.post_attention_layernorm.weight", [hidden]
        yield f"{layer}.mlp.gate_proj.weight", [inter, hidden]
        yield f"{layer}.mlp.up_proj.weight", [inter, hidden]
        yield f"{layer}.mlp.down_proj.weight", [hidden, inter]
    yield "model.norm.weight", [hidden]
    if not shape["tie_word_embeddings"]:
        yield "lm_head.weight", [vocab, hidden]


def parameter_count(shape: dict[str, Any]) -> int:
    return sum(math.prod(dims) for _, dims in tensor_shapes(shape))


def build_standin(
    dest: Path, shape: dict[str, Any], *, dtype: str = "bfloat16", max_positions: int = 512, device: str = "auto"
) -> dict[str, Any]:
    """Write a stand-in of `shape` to `dest` (idempotent; built aside and renamed into place) and say what
    was built: {"path", "bytes", "params", "device", "seconds"}."""
    started = time.perf_counter()
    dest = Path(dest)
    if (dest / MARKER).is_file():
        return dict(json.loads((dest / MARKER).read_text()), seconds=0.0)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent))
    try:
        token_ids = copy_tokenizer(staging, dest.parent / ".standin-tokenizer", max_positions)
        vocab = max(shape["vocab_size"], token_ids["vocab"])
        full = {**shape, "vocab_size": vocab}
        write_config(staging, full, token_ids, dtype=dtype, max_positions=max_positions)
        drawn_on = resolve_device(device)
        size = write_weights(staging / "model.safetensors", full, dtype=dtype, device=drawn_on)
        facts = {"path": str(dest), "bytes": size, "params": parameter_count(full), "device": drawn_on}
        (staging / MARKER).write_text(json.dumps(facts))
        if dest.exists():  # a build that died before its rename
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dict(facts, seconds=time.perf_counter() - started)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def copy_tokenizer(out: Path, source: Path, max_positions: int) -> dict[str, int]:
    """The tiny offline tokenizer (built once in `source`) copied into `out`; its special ids and size."""
    from jobtrail.demo.tinymodel import build_tiny_model

    built = build_tiny_model(source, max_positions=max_positions)
    for path in built.iterdir():
        if path.is_file() and path.name not in ("config.json", "model.safetensors") and not path.name.startswith("."):
            shutil.copy2(path, out / path.name)
    config = json.loads((built / "config.json").read_text())
    return {"eos": config["eos_token_id"], "pad": config["pad_token_id"], "vocab": config["vocab_size"]}


def qwen2_config(shape: dict[str, Any], **fields: Any) -> Any:
    """This transformers' own Qwen2Config of the shape (and any other fields), so its fields are the ones it loads."""
    from transformers import Qwen2Config

    return Qwen2Config(
        hidden_size=shape["hidden_size"],
        intermediate_size=shape["intermediate_size"],
        num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"],
        num_key_value_heads=shape["num_kv_heads"],
        vocab_size=shape["vocab_size"],
        tie_word_embeddings=shape["tie_word_embeddings"],
        **fields,
    )


def write_config(
    out: Path, shape: dict[str, Any], token_ids: dict[str, int], *, dtype: str, max_positions: int
) -> None:
    """config.json of the stand-in."""
    config = qwen2_config(
        shape,
        max_position_embeddings=max_positions,
        bos_token_id=None,
        eos_token_id=token_ids["eos"],
        pad_token_id=token_ids["pad"],
        initializer_range=INIT_STD,
    )
    config.dtype = dtype  # what dtype="auto" loads, as the Hub's checkpoints say
    config.architectures = ["Qwen2ForCausalLM"]
    config.save_pretrained(out)


def write_weights(path: Path, shape: dict[str, Any], *, dtype: str, device: str) -> int:
    """model.safetensors, written tensor by tensor; its size in bytes."""
    import torch

    torch_dtype = getattr(torch, dtype)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    tensors = list(tensor_shapes(shape))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dims in tensors:
        size = math.prod(dims) * itemsize
        header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": dims, "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data that follows starts 8-byte aligned
    generator = torch.Generator(device=device).manual_seed(0)
    tile = (torch.randn(TILE_VALUES, generator=generator, device=device) * INIT_STD).to(torch_dtype).cpu()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name, dims in tensors:
            count = math.prod(dims)
            if name.endswith("norm.weight"):
                write_tensor(f, torch.ones(count, dtype=torch_dtype))
            elif name.endswith(".bias"):
                write_tensor(f, torch.zeros(count, dtype=torch_dtype))
            elif device == "cuda":
                drawn = torch.empty(count, dtype=torch_dtype, device=device).normal_(0, INIT_STD, generator=generator)
                write_tensor(f, drawn.cpu())
            else:
                write_tiled(f, tile, count)
    return path.stat().st_size


def write_tensor(f: BinaryIO, tensor: Any) -> None:
    """A host tensor's bytes as they are in memory (safetensors is little-endian, like x86 and Arm hosts)."""
    import torch

    f.write(tensor.contiguous().view(-1).view(torch.uint8).numpy().data)


def write_tiled(f: BinaryIO, tile: Any, count: int) -> None:
    """`count` values of `tile` repeated, written from the one buffer (no tensor of the whole size is made)."""
    whole, rest = divmod(count, tile.numel())
    for _ in range(whole):
        write_tensor(f, tile)
    write_tensor(f, tile[:rest])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, help=f"one of {', '.join(sorted(SHAPES))}, or its sizes as JSON")
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--dtype", choices=sorted(SAFETENSORS_DTYPES), default="bfloat16")
    parser.add_argument("--max-positions", type=int, default=512)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args()
    shape = SHAPES[args.shape] if args.shape in SHAPES else json.loads(args.shape)
    built = build_standin(args.dest, shape, dtype=args.dtype, max_positions=args.max_positions, device=args.device)
    print(json.dumps(built), flush=True)


if __name__ == "__main__":
    main()
