"""PyTorch FlexAttention on our roofline: a worked example of bringing your own attention.

    python -m profiler capture --impl triton_flash,sdpa_cudnn,examples/flex_attention.py:flex_attention
    python -m profiler bench --impl triton_flash,sdpa_cudnn,examples/flex_attention.py:flex_attention --causal both

``torch.nn.attention.flex_attention`` is compiled into one fused Triton kernel on a GPU; on a CPU it
runs eagerly (slow, but correct: the tests use it). Causal attention is a block mask built once per
(seq_q, seq_kv, device), so the timed calls measure the kernel, not the mask.

The costing tells the cost model which tiles the compiled kernel iterates, so the tile (L2) bytes
are FlexAttention's own: on sm_90 (H100, H200) torch's Triton template heuristics
(torch/_inductor/template_heuristics/triton.py, ``h100_default_flex_config`` and the "sm90" entry of
``get_flex_attn_bwd_configs``, torch 2.11 and 2.13) give forward (BLOCK_M, BLOCK_N) = (128, 128) at
head_dim 64 and (128, 64) at 128, and backward dK/dV (64, 128), dQ (128, 64) for 64 <= head_dim <=
128. Other GPUs, head_dims and fp32 pick other tiles: there no tile bytes are given.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch.nn.attention.flex_attention import create_block_mask
from torch.nn.attention.flex_attention import flex_attention as _flex_attention

from attention_core.costing import Costing, Tiles
from profiler import register

# On a CPU this example runs FlexAttention eagerly on purpose (torch.compile would need a C++
# toolchain there, and CPU timings are not the point); torch warns about that on every first call.
warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


def _causal(batch, head, q_idx, kv_idx):
    return q_idx >= kv_idx  # top-left aligned, as SDPA's is_causal and our kernels


@functools.lru_cache(maxsize=64)
def _causal_block_mask(seq_q: int, seq_kv: int, device: str):
    return create_block_mask(_causal, B=None, H=None, Q_LEN=seq_q, KV_LEN=seq_kv, device=device)


@functools.cache
def _compiled():
    # One static-shape kernel per shape, as a model with fixed shapes would get; a sweep visits
    # many shapes, so let dynamo keep more than its default 8 compiled variants instead of falling
    # back to the slow eager path without a word.
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), 256))
    return torch.compile(_flex_attention, dynamic=False)


def _sm90_tiles(head_dim: int, dtype: str) -> Tiles:
    if dtype == "fp32" or head_dim not in (64, 128):
        return Tiles(None)
    return Tiles((128, 128) if head_dim == 64 else (128, 64), dkdv=(64, 128), dq=(128, 64))


@register(name="flex_attention", description="PyTorch FlexAttention (torch.compile'd on a GPU)",
          costing=Costing("fused", _sm90_tiles, source="torch inductor's sm_90 FlexAttention defaults"), gqa=True)
def flex_attention(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """q: (batch, heads, seq_q, head_dim); k, v: (batch, kv_heads, seq_kv, head_dim), kv_heads dividing
    heads (FlexAttention's enable_gqa). Returns o like q."""
    block_mask = _causal_block_mask(q.shape[2], k.shape[2], str(q.device)) if causal else None
    attend = _compiled() if q.is_cuda else _flex_attention
    return attend(q, k, v, block_mask=block_mask, scale=sm_scale, enable_gqa=k.shape[1] != q.shape[1])
