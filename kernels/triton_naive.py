"""Naive attention in Triton: one program per (query row, batch·head).

The educational kernel of the first seed post: each program owns a single query row, walks over
the keys with a running max ``m_i`` and running sum ``l_i`` (the online softmax), and accumulates
``acc = Σ p_j v_j``. It is correct for any shape but slow by design: a row at a time means no
tensor cores (the dot products are elementwise multiply + reduce) and every program re-reads all of
K and V from memory, so K and V move Nq times.

Where the seed post steps over keys one at a time, this kernel steps over ``BLOCK_N`` keys per
iteration; the algorithm and its memory traffic are the same, and the interpreter on CPU runs it
in reasonable time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._autotune import LOG2E
from kernels._checks import check_qkv, check_triton_device, resolve_scale

HEAD_DIMS = (16, 32, 64, 128, 256)


@triton.jit
def _attn_row_fwd(
    Q, K, V, O,
    qk_scale,  # sm_scale · log2(e), so the kernel can use exp2
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    H, GROUP, seq_kv,  # GROUP: query heads per K/V head
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    row = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)

    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q + off_z * stride_qz + off_h * stride_qh + row * stride_qm + offs_d * stride_qd)
    q = q.to(tl.float32)  # (HEAD_DIM,)
    k_base = K + off_z * stride_kz + (off_h // GROUP) * stride_kh
    v_base = V + off_z * stride_vz + (off_h // GROUP) * stride_vh

    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    hi = seq_kv
    if CAUSAL:  # key j is visible to row i when j <= i (top-left aligned)
        hi = tl.minimum(row + 1, seq_kv)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,)
        valid = cols < hi
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=valid[:, None], other=0.0)  # (BLOCK_N, HEAD_DIM)
        s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * qk_scale  # (BLOCK_N,) in log2 units
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.math.exp2(m_i - m_new)  # rescales what was summed under the old max
        p = tl.math.exp2(s - m_new)  # (BLOCK_N,)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=valid[:, None], other=0.0)  # (BLOCK_N, HEAD_DIM)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)  # (HEAD_DIM,)
        m_i = m_new
    acc = acc / l_i
    tl.store(O + off_z * stride_oz + off_h * stride_oh + row * stride_om + offs_d * stride_od,
             acc.to(O.dtype.element_ty))


def triton_naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Row-per-program attention. q: (batch, heads, seq_q, head_dim); k, v: (batch, kv_heads, seq_kv,
    head_dim), kv_heads dividing heads; returns o like q. head_dim in {16, 32, 64, 128, 256}; fp16, bf16 or fp32."""
    batch, heads, seq_q, seq_kv, head_dim = check_qkv(q, k, v, head_dims=HEAD_DIMS)
    check_triton_device(q)
    scale = resolve_scale(sm_scale, head_dim)
    o = torch.empty_like(q)
    grid = (seq_q, batch * heads)
    _attn_row_fwd[grid](
        q, k, v, o, scale * LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        heads, heads // k.shape[1], seq_kv,
        HEAD_DIM=head_dim, BLOCK_N=64 if head_dim <= 64 else 32, CAUSAL=causal,
        num_warps=2 if head_dim <= 64 else 4,
    )
    return o
