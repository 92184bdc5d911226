"""Row softmax with the online (streaming) algorithm, as a standalone Triton kernel.

Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018), and the second seed
post: one pass over the row in blocks keeps a running max ``m_i`` and a running sum ``l_i`` of
exp(x − m_i); whenever a block raises the max, the sum so far is rescaled by exp(m_old − m_new).
A second pass writes exp(x − m) / l. Against the textbook three passes (max, sum, normalise) this
reads the row twice instead of three times; FlashAttention fuses the same update into its K/V loop.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._autotune import LOG2E_C
from kernels._checks import check_triton_device


@triton.jit
def _online_softmax_kernel(
    X, Y,
    stride_xm, stride_xn,
    stride_ym, stride_yn,
    n_cols,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_xm
    y_row = Y + row * stride_ym
    offs = tl.arange(0, BLOCK_N)

    # Pass 1: running max and running sum, both in log2 units (x · log2 e) so exp2 can be used.
    m_i = float("-inf")
    l_i = 0.0
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols * stride_xn, mask=cols < n_cols, other=float("-inf"))
        x = x.to(tl.float32) * LOG2E_C  # (BLOCK_N,) in log2 units
        m_new = tl.maximum(m_i, tl.max(x, axis=0))
        # While every value so far is -inf (a masked prefix), subtract 0 instead of -inf: -inf - -inf
        # would be NaN, and exp2(-inf - 0) = 0 is the right contribution.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_i = l_i * tl.math.exp2(m_i - m_safe) + tl.sum(tl.math.exp2(x - m_safe), axis=0)
        m_i = m_new

    # Pass 2: normalise with the final max and sum.
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols * stride_xn, mask=mask, other=float("-inf"))
        y = tl.math.exp2(x.to(tl.float32) * LOG2E_C - m_i) / l_i
        tl.store(y_row + cols * stride_yn, y.to(Y.dtype.element_ty), mask=mask)


def online_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of ``x`` (any leading shape), computed online in fp32.

    x: (..., n) in fp16, bf16 or fp32 -> same shape and dtype. A row of all -inf gives NaN, as
    ``torch.softmax`` does.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"dtype {x.dtype} is not supported; allowed: float16, bfloat16, float32")
    if x.dim() == 0 or x.numel() == 0:
        raise ValueError(f"x must have at least one element and one dimension, got shape {tuple(x.shape)}")
    check_triton_device(x, "x")
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)  # a view when it can be one; strides handle the rest
    y2 = torch.empty_like(x2)
    block_n = min(triton.next_power_of_2(n_cols), 1024)
    _online_softmax_kernel[(x2.shape[0],)](
        x2, y2, *x2.stride(), *y2.stride(), n_cols, BLOCK_N=block_n, num_warps=4 if block_n >= 512 else 2,
    )
    return y2.reshape(x.shape)
