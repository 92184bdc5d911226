"""Outputs laid out like their inputs, for every kernel (portable and Gluon): a model that hands over
(batch, seq, heads, head_dim) storage as a BHSD view gets its output and gradients back in that memory
order, so its transpose back copies nothing."""

from __future__ import annotations

import torch


def empty_in_layout(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An uninitialised tensor of t's shape whose dimensions lie in memory in t's order (largest
    stride outermost; head_dim always innermost and unit-stride, as every kernel writes it), dense: a
    BSHD view's output (or gradient) is a BSHD view too, so the caller's transpose back to (batch,
    seq, heads, head_dim) copies nothing. Unlike ``torch.empty_like`` it keeps the order also for a
    slice of a packed QKV tensor, which is not dense; an expanded dimension (stride 0) goes inside
    the others."""
    last = t.dim() - 1
    order = sorted(range(last), key=lambda d: -t.stride(d)) + [last]  # stable: ties keep BHSD order
    dense = torch.empty([t.shape[d] for d in order], dtype=dtype or t.dtype, device=t.device)
    return dense.permute([order.index(d) for d in range(t.dim())])
