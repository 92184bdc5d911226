"""Attention shapes of common models, so a user types ``--preset llama3-8b`` instead of three numbers.

Each entry is (query heads, K/V heads, head_dim), from the model's published config.json on the
Hugging Face Hub (num_attention_heads, num_key_value_heads, hidden_size / num_attention_heads).
"""

from __future__ import annotations

from typing import NamedTuple


class Preset(NamedTuple):
    heads: int
    kv_heads: int
    head_dim: int
    source: str


PRESETS: dict[str, Preset] = {
    "llama3-8b": Preset(32, 8, 128, "meta-llama/Meta-Llama-3-8B config.json: 32 heads, 8 KV heads, hidden 4096"),
    "llama3-70b": Preset(64, 8, 128, "meta-llama/Meta-Llama-3-70B config.json: 64 heads, 8 KV heads, hidden 8192"),
    "mistral-7b": Preset(32, 8, 128, "mistralai/Mistral-7B-v0.1 config.json: 32 heads, 8 KV heads, hidden 4096"),
    "qwen2.5-7b": Preset(28, 4, 128, "Qwen/Qwen2.5-7B config.json: 28 heads, 4 KV heads, hidden 3584"),
    "llama2-7b": Preset(32, 32, 128, "meta-llama/Llama-2-7b-hf config.json: 32 heads, no GQA, hidden 4096"),
}


def preset_of(heads: int, kv_heads: int, head_dim: int) -> str | None:
    """The first preset with these heads, K/V heads and head_dim (the dashboard labels rows by it)."""
    return next((name for name, p in PRESETS.items() if p[:3] == (heads, kv_heads, head_dim)), None)
