"""A model's attention module on our roofline: a worked example for BSHD code.

    python -m profiler capture --impl naive,sdpa_flash,examples/bshd_module.py:attention

Many models keep activations as (batch, seq, heads, head_dim) and call
``F.scaled_dot_product_attention`` inside a module. ``register(..., layout="bshd")`` adapts such a
callable to our BHSD convention through strides (transposed views, no copies), so the profiler runs
it like any other implementation: checked against the oracle, timed, in its own NVTX ranges.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from profiler import register


class AttentionCore(nn.Module):
    """The attention inside a transformer block, on BSHD tensors, as a model would hold it."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                sm_scale: float | None = None) -> torch.Tensor:
        # q: (batch, seq_q, heads, head_dim); SDPA wants heads before seq, as most models do it.
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=causal, scale=sm_scale)
        return o.transpose(1, 2)  # (batch, seq_q, heads, head_dim)


attention = AttentionCore()
register(attention, name="bshd_module", layout="bshd", description="an nn.Module calling SDPA on BSHD tensors")
