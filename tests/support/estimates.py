"""What estimate tests share: a Hub that cannot be reached for live prices (the bundled flavor table answers),
and the published config.json of the models several tests estimate (no test reaches the Hub)."""

from __future__ import annotations

from typing import Any


class OfflineHub:
    """An HfApi whose hardware listing fails as an unreachable Hub's does."""

    def list_jobs_hardware(self) -> list[Any]:
        raise ConnectionError("no route to the Hub")


OFFLINE = OfflineHub()

LLAMA_31_8B = {  # meta-llama/Llama-3.1-8B
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "bfloat16",
}
QWEN25_05B = {  # Qwen/Qwen2.5-0.5B
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
}
