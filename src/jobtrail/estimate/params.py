"""Parameter counts from a model's config.json alone (weights are never needed).

A decoder layer is described by its Linear layers as (in_features, out_features) pairs: that
list gives the frozen matmul weights (what QLoRA quantises, what the FLOPs count), and the
adapter sizes PEFT creates for target_modules="all-linear" (every Linear but the output layer).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from jobtrail.errors import InvalidRequestError

# Keys a family's config.json may leave out because its transformers config class has a default;
# the values are those defaults (transformers 5.23). Gemma 3's multimodal configs rely on them
# heavily: their text_config often names only a handful of sizes.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"tie_word_embeddings": False},
    "mistral": {"tie_word_embeddings": False},
    "qwen2": {"tie_word_embeddings": False},
    "qwen3": {"tie_word_embeddings": False, "head_dim": 128},
    "phi3": {"tie_word_embeddings": False, "vocab_size": 32064},
    "gemma": {"tie_word_embeddings": True, "head_dim": 256, "vocab_size": 256000},
    "gemma2": {
        "tie_word_embeddings": True,
        "head_dim": 256,
        "vocab_size": 256000,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
    "gemma3_text": {
        "tie_word_embeddings": True,
        "head_dim": 256,
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
}
# Families whose layers have extra RMSNorms: gemma2/3 norm before AND after attention and MLP
# (4 per layer); qwen3 and gemma3 also normalise queries and keys per head (q_norm, k_norm).
_NORMS_PER_LAYER = {"gemma2": 4, "gemma3_text": 4}
_QK_NORM = {"qwen3", "gemma3_text"}
_FUSED = {"phi3"}  # qkv_proj and gate_up_proj are single Linears (fewer LoRA parameters)
KNOWN = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3")
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
_ALIASES = {  # generic decoders (GPT-2 style names) → the llama-style names used here
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
}


class ModelShape(BaseModel):
    """The sizes of a decoder-only language model that memory and FLOPs depend on."""

    architecture: str = Field(description="model_type of the language model, e.g. 'qwen2' or 'gemma3_text'.")
    known: bool = Field(description="False when the generic decoder fallback described the model.")
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    gated_mlp: bool = Field(description="SwiGLU/GeGLU MLP (gate, up, down) rather than up, down.")
    tied_embeddings: bool
    attention_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: bool = False
    fused_projections: bool = False
    vision_params: int = Field(0, description="A multimodal checkpoint's vision tower (loaded, frozen, not in params).")

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_linears(self) -> list[tuple[int, int]]:
        """(in, out) of each Linear in one decoder layer, as PEFT's "all-linear" finds them."""
        h, i = self.hidden_size, self.intermediate_size
        if self.fused_projections:
            return [(h, self.q_dim + 2 * self.kv_dim), (self.q_dim, h), (h, 2 * i), (i, h)]
        attention = [(h, self.q_dim), (h, self.kv_dim), (h, self.kv_dim), (self.q_dim, h)]
        mlp = [(h, i), (h, i), (i, h)] if self.gated_mlp else [(h, i), (i, h)]
        return attention + mlp

    @property
    def linear_params(self) -> int:
        """Weights of every Linear in the decoder layers (excludes embeddings and the head)."""
        return self.num_layers * sum(a * b for a, b in self.layer_linears())

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def small_params(self) -> int:
        """Biases and norm weights: never quantised, never adapted, negligible for FLOPs."""
        bias = self.q_dim + 2 * self.kv_dim if self.attention_bias else 0
        qk = 2 * self.head_dim if self.qk_norm else 0
        per_layer = bias + qk + self.norms_per_layer * self.hidden_size
        return self.num_layers * per_layer + self.hidden_size  # + the final norm

    @property
    def params(self) -> int:
        """Total parameters of the language model (what model cards quote; no vision tower)."""
        head = 0 if self.tied_embeddings else self.embedding_params
        return self.embedding_params + head + self.linear_params + self.small_params

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token: the layers and the output head
        (a tied head still multiplies; an embedding lookup does not)."""
        return self.linear_params + self.embedding_params


def lora_params(shape: ModelShape, r: int) -> int:
    """Adapter parameters of LoRA rank r on every decoder Linear (A: r×in, B: out×r)."""
    return shape.num_layers * sum(r * (a + b) for a, b in shape.layer_linears())


def model_shape(config: dict[str, Any]) -> ModelShape:
    """Describe the language model of a config.json (the text_config of a multimodal one)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    arch = _architecture(config, text)
    cfg = {**_DEFAULTS.get(arch, {}), **(text if text is not None else config)}
    _refuse_moe(cfg)
    if text is not None and "tie_word_embeddings" in config and "tie_word_embeddings" not in text:
        cfg["tie_word_embeddings"] = config["tie_word_embeddings"]
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    gated = arch in KNOWN or "intermediate_size" in cfg
    return ModelShape(
        architecture=arch,
        known=arch in KNOWN,
        vocab_size=_int(cfg, "vocab_size"),
        hidden_size=hidden,
        num_layers=_int(cfg, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or cfg.get("num_kv_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=_int(cfg, "intermediate_size", default=4 * hidden),
        gated_mlp=gated,
        # transformers' PretrainedConfig ties by default; the llama-style families override it.
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        attention_bias=arch == "qwen2" or bool(cfg.get("attention_bias", False)),
        norms_per_layer=_NORMS_PER_LAYER.get(arch, 2),
        qk_norm=arch in _QK_NORM,
        fused_projections=arch in _FUSED,
        vision_params=_vision_params(config.get("vision_config")),
    )


def _architecture(config: dict[str, Any], text: dict[str, Any] | None) -> str:
    if text is not None:
        inner = text.get("model_type")
        if inner:
            return str(inner)
        outer = str(config.get("model_type", ""))
        return f"{outer}_text" if outer == "gemma3" else outer or "unknown"
    return str(config.get("model_type") or "unknown")


def _refuse_moe(cfg: dict[str, Any]) -> None:
    experts = [k for k in _MOE_KEYS if cfg.get(k) not in (None, 0, 1)]
    if experts:
        raise InvalidRequestError(
            f"This config describes a mixture-of-experts model ({experts[0]}={cfg[experts[0]]}); "
            "the estimator counts dense decoders only.",
            fix="Estimate a dense model of similar total size, and treat the result as a lower bound.",
        )


def _int(cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    for name in _ALIASES.get(key, (key,)):
        if cfg.get(name) is not None:
            return int(cfg[name])
    if default is not None:
        return default
    raise InvalidRequestError(
        f"config.json has no {key!r}, so the model's size cannot be counted.",
        fix="Check that the model is a decoder-only language model with a standard transformers config.json.",
    )


def _vision_params(vision: Any) -> int:
    """A ViT/SigLIP tower: patch embedding, position embedding, and per layer attention (4h²)
    + MLP (2·h·I) + biases and norms. Close enough for the memory it occupies."""
    if not isinstance(vision, dict) or "hidden_size" not in vision:
        return 0
    h = int(vision["hidden_size"])
    i = int(vision.get("intermediate_size") or 4 * h)
    layers = int(vision.get("num_hidden_layers") or 0)
    patch = int(vision.get("patch_size") or 14)
    positions = (int(vision.get("image_size") or 224) // patch) ** 2
    channels = int(vision.get("num_channels") or 3)
    per_layer = 4 * h * h + 2 * h * i + 9 * h + i  # weights + biases + two LayerNorms
    return layers * per_layer + channels * patch * patch * h + positions * h + 2 * h
