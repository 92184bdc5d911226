"""Public FlashAttention API: our Triton forward and backward behind one autograd.Function.

The forward saves only q, k, v, o and the per-row logsumexp (O(N) extra memory); the backward
recomputes P from them (see :mod:`kernels.flash_bwd`).
"""

from __future__ import annotations

import torch

from kernels._checks import check_qkv, resolve_scale
from kernels.flash_bwd import flash_attention_backward
from kernels.flash_fwd import HEAD_DIMS, flash_attention_forward


class FlashAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, sm_scale: float):
        o, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=sm_scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        ctx.sm_scale = sm_scale
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None


def flash_attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`flash_attention` but also returns lse: (batch, heads, seq_q) fp32, the
    natural-log logsumexp of each row of the scaled (and masked) scores."""
    check_qkv(q, k, v, head_dims=HEAD_DIMS)
    scale = resolve_scale(sm_scale, q.shape[-1])
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return FlashAttentionFunction.apply(q, k, v, bool(causal), scale)
    # Nothing to differentiate (inference, a decode step): no autograd node, less host time per call.
    return flash_attention_forward(q, k, v, causal=bool(causal), sm_scale=scale)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """softmax(q kᵀ · sm_scale) v with our Triton FlashAttention-2 kernels, differentiable.

    Args:
        q: (batch, heads, seq_q, head_dim)
        k: (batch, kv_heads, seq_kv, head_dim), kv_heads dividing heads (grouped-query attention:
            query head h reads K/V head h // (heads // kv_heads); kv_heads = heads is multi-head)
        v: (batch, kv_heads, seq_kv, head_dim), the shape of k
        causal: mask key j from query i when j > i (top-left aligned, as SDPA's ``is_causal``).
        sm_scale: softmax scale; None means 1/sqrt(head_dim).

    Any strides and sequence lengths; head_dim in {16, 32, 64, 128, 256} (backward up to 128);
    fp16, bf16 or fp32 with fp32 accumulation. Returns o: (batch, heads, seq_q, head_dim).
    """
    return flash_attention_with_lse(q, k, v, causal=causal, sm_scale=sm_scale)[0]
