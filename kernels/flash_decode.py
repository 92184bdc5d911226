"""Split-KV forward for decode shapes (FlashDecoding), with grouped-query attention.

When a K/V head has few query rows (its group's heads × Nq, at most attention_core.split_kv.MAX_ROWS),
the tiled forward would launch one program per batch·head and leave most SMs idle while each one
streams the whole K/V cache. This path instead:

1. ``_decode_split``: one program per (key split, batch·K/V head). It stacks the query rows of
   every head in the K/V head's group into one block (row r is head r // Nq, query r % Nq), so each
   K and V tile is loaded once for the whole group, runs the online softmax over its key tiles
   (split s takes tiles s, s + splits, ...; or, not strided, one contiguous chunk), and writes an
   fp32 partial output and logsumexp per row. With a single split it writes the final output and
   logsumexp directly.
2. ``_decode_combine``: one program per query row merges the splits:
   lse = log Σ_s exp(lse_s), o = Σ_s exp(lse_s − lse) · o_s (each o_s is normalised over its split).

The split count comes from attention_core.split_kv.plan, which the cost model also calls.
Causal masking is top-left aligned, as SDPA's ``is_causal`` and our tiled kernels: query i sees
keys j <= i, so with Nq < Nkv a query sees only the start of the cache; a decode step that should
see all of it is non-causal. Pointer arithmetic only (triton 3.6 and 3.9).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attention_core import split_kv
from kernels._autotune import INTERPRET, LN2_C, LOG2E, dot_precision
from kernels._checks import cuda_properties, dtype_name
from kernels._launch import LaunchCache, layout_key

# (num_warps, num_stages) by head_dim: 128 from the H100 sweep in docs/perf-notes.md ("Decode"); the
# others are untuned (a small block of rows needs few warps; head_dim 256 tiles need fewer stages).
LAUNCH = {16: (4, 2), 32: (4, 2), 64: (4, 2), 128: (4, 2), 256: (4, 1)}


@triton.jit
def _decode_inner(
    acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    query, first, last, step, hi, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Online softmax over key tiles first, first + step, ... (< last); keys from ``hi`` on are masked."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for tile in range(first, last, step):
        cols = tile * BLOCK_N + offs_n
        k_ptrs = k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < hi, other=0.0)  # (BLOCK_N, HEAD_DIM)
            v = tl.load(v_ptrs, mask=cols[:, None] < hi, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N), fp32
        if MASKED:
            visible = cols[None, :] < hi
            if CAUSAL:
                visible = visible & (cols[None, :] <= query[:, None])
            qk = tl.where(visible, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        # A row that sees no key of this tile yet (causal) keeps m = -inf: subtract 0 instead, so
        # exp2(-inf) gives 0 rather than exp2(-inf + inf) = NaN.
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk * qk_scale - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _decode_split(
    Q, K, V, O, LSE, O_PART, LSE_PART,
    qk_scale,  # sm_scale · log2(e)
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    kv_heads, seq_q, seq_kv, chunk, splits,
    GROUP: tl.constexpr,  # query heads per K/V head
    STRIDED: tl.constexpr,  # split s takes key tiles s, s + splits, ... instead of one chunk
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    DIRECT: tl.constexpr,  # one split: write O and LSE, no partials
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PDL: tl.constexpr = False,  # let the combine kernel launch early (programmatic dependent launch)
):
    if PDL:
        # Once every split program has started, the combine kernel's programs may be scheduled; they
        # wait in gdc_wait until this grid has finished and its stores are visible (sm_90+).
        tl.extra.cuda.gdc_launch_dependents()
    split = tl.program_id(0)
    off_zk = tl.program_id(1)
    off_z = (off_zk // kv_heads).to(tl.int64)
    off_hk = (off_zk % kv_heads).to(tl.int64)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < GROUP * seq_q
    head = off_hk * GROUP + rows // seq_q  # (BLOCK_M,) the query head of each stacked row
    query = rows % seq_q  # its position in the query sequence
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_z * stride_qz + head[:, None] * stride_qh + query[:, None] * stride_qm
                + offs_d[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)  # (BLOCK_M, HEAD_DIM)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = seq_kv
    if CAUSAL:
        hi = tl.minimum(hi, seq_q)  # the last query row sees keys up to seq_q - 1 (top-left)
    # Whole tiles run unmasked, the ragged last one masked; causal: every tile masked.
    full = 0 if CAUSAL else hi // BLOCK_N
    tiles = tl.cdiv(hi, BLOCK_N)
    if STRIDED:  # tiles split, split + splits, ...: at any moment the programs read neighbouring tiles
        first, step = split, splits
        last_full = full
        first_masked = full + (split - full % splits + splits) % splits
        last = tiles
    else:  # one contiguous chunk of chunk // BLOCK_N tiles
        first, step = split * (chunk // BLOCK_N), 1
        last = tl.minimum(first + chunk // BLOCK_N, tiles)
        last_full = tl.minimum(last, full)
        first_masked = tl.maximum(first, full)
    k_base = K + off_z * stride_kz + off_hk * stride_kh
    v_base = V + off_z * stride_vz + off_hk * stride_vh
    acc, l_i, m_i = _decode_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                                  query, first, last_full, step, hi, qk_scale,
                                  HEAD_DIM, BLOCK_N, False, CAUSAL, DOT_PRECISION)
    acc, l_i, m_i = _decode_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                                  query, first_masked, last, step, hi, qk_scale,
                                  HEAD_DIM, BLOCK_N, True, CAUSAL, DOT_PRECISION)

    # Rows of (batch, head, query) in the contiguous O (B, H, Nq, D), LSE (B, H, Nq) and partials.
    row = (off_z * (kv_heads * GROUP) + head) * seq_q + query
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # a row with no visible key in this chunk: o = 0, lse = -inf
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2_C)
    o = acc / l_safe[:, None]
    if DIRECT:
        tl.store(O + row[:, None] * HEAD_DIM + offs_d[None, :], o.to(O.dtype.element_ty), mask=row_ok[:, None])
        tl.store(LSE + row, lse, mask=row_ok)
    else:
        part = row * splits + split
        tl.store(O_PART + part[:, None] * HEAD_DIM + offs_d[None, :], o, mask=row_ok[:, None])
        tl.store(LSE_PART + part, lse, mask=row_ok)


@triton.jit
def _decode_combine(
    O, LSE, O_PART, LSE_PART, splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,  # splits, padded to a power of two
    PDL: tl.constexpr = False,  # launched early by _decode_split: wait for its partials first
):
    if PDL:
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0).to(tl.int64)
    # the largest logsumexp is finite: split 0 holds key 0, which every query row sees
    merge_splits(O_PART, LSE_PART, row, splits, O + row * HEAD_DIM, LSE + row, BLOCK_S, HEAD_DIM)


@triton.jit
def merge_splits(O_PART, LSE_PART, row, splits, o_out, lse_out, BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Merge row ``row``'s ``splits`` partial outputs (each normalised over its own keys, fp32, at O_PART's rows
    row · splits + s) and logsumexps, lse = log Σ_s exp(lse_s), o = Σ_s exp(lse_s − lse) · o_s, and store them at
    ``o_out`` (HEAD_DIM elements, unit-stride, in its dtype) and ``lse_out``. ``row`` int64; BLOCK_S: splits padded
    to a power of two."""
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    lse_s = tl.load(LSE_PART + row * splits + offs_s, mask=offs_s < splits, other=float("-inf"))
    top = tl.max(lse_s, 0)
    w = tl.exp(lse_s - top)  # (BLOCK_S,)
    o_s = tl.load(O_PART + (row * splits + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=(offs_s < splits)[:, None], other=0.0)  # (BLOCK_S, HEAD_DIM)
    total = tl.sum(w, 0)
    o = tl.sum(w[:, None] * o_s, 0) / total
    tl.store(o_out + offs_d, o.to(o_out.dtype.element_ty))
    tl.store(lse_out, top + tl.log(total))


def flash_decode_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                         plan: split_kv.SplitPlan, launch: tuple[int, int] | None = None, strided: bool | None = None,
                         pdl: bool | None = None, layout: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The split-KV forward on checked inputs (kernels.flash_fwd.flash_attention_forward calls it
    when attention_core.split_kv.plan gives a plan). q: (B, H, Nq, D); k, v: (B, Hkv, Nkv, D).
    Returns o (B, H, Nq, D) contiguous in q's dtype and lse (B, H, Nq) fp32, natural log.
    ``launch`` = (num_warps, num_stages) overrides :data:`LAUNCH` and ``strided`` the plan's tile
    assignment (for sweeps). ``pdl`` launches the combine kernel with programmatic dependent launch
    (default: on an NVIDIA GPU of sm_90 or later, not under the interpreter), so its launch and start
    overlap the split kernel's last programs (measured in docs/perf-notes.md, "Decode at batch 1 and
    the short causal D64 forward"). ``layout``: q, k, v's _launch.layout_key where the caller has
    it; with the defaults, both kernels are launched from what their first launch at this layout and plan
    compiled (_launch.LaunchCache), leaving out most of a launch's host time."""
    if pdl is None:
        pdl = (q.is_cuda and not INTERPRET and torch.version.hip is None
               and cuda_properties(q.device.index).major >= 9)
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    o = torch.empty((batch, heads, seq_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=q.device)
    direct = plan.splits == 1
    if direct:
        o_part, lse_part = o, lse  # unused
    else:
        o_part = torch.empty((batch, heads, seq_q, plan.splits, head_dim), dtype=torch.float32, device=q.device)
        lse_part = torch.empty((batch, heads, seq_q, plan.splits), dtype=torch.float32, device=q.device)
    # Everything the launches' int arguments and constexprs follow from (the outputs are new, aligned allocations).
    key = None if launch is not None or strided is not None or not _SPLIT.enabled else (
        layout or layout_key(q, k, v), bool(causal), plan, pdl)
    key = None if key is not None and key[0] is None else key
    num_warps, num_stages = launch or LAUNCH[head_dim]
    _SPLIT(key, (plan.splits, batch * kv_heads), (
        q, k, v, o, lse, o_part, lse_part, scale * LOG2E,
        *q.stride(), *k.stride(), *v.stride(),
        kv_heads, seq_q, seq_kv, plan.chunk, plan.splits), dict(
        GROUP=heads // kv_heads, STRIDED=plan.strided if strided is None else strided, HEAD_DIM=head_dim,
        CAUSAL=bool(causal), DIRECT=direct,
        DOT_PRECISION=dot_precision(dtype_name(q.dtype)), BLOCK_M=plan.block_m, BLOCK_N=split_kv.BLOCK_N,
        PDL=pdl and not direct), num_warps=num_warps, num_stages=num_stages,
    )
    if not direct:
        _COMBINE(key, (batch * heads * seq_q,), (o, lse, o_part, lse_part, plan.splits),
                 dict(HEAD_DIM=head_dim, BLOCK_S=triton.next_power_of_2(plan.splits), PDL=pdl), num_warps=4,
                 **({"launch_pdl": True} if pdl else {}))
    return o, lse


_SPLIT = LaunchCache(_decode_split)
_COMBINE = LaunchCache(_decode_combine)
