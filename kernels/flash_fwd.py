"""FlashAttention-2 forward in Triton.

Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning" (2023),
Algorithm 1, in the shape of Triton's fused-attention tutorial: one program per (query block,
batch·head) keeps its Q tile in registers, streams K and V in ``BLOCK_N`` tiles, and keeps the
online-softmax state (``m_i``, ``l_i``, ``acc``) in fp32. The N×N scores never reach HBM.

Details that matter for speed or correctness:
- exp2 with log2(e) folded into the softmax scale (one FMA per score instead of a multiply and exp).
- The key loop runs in two stages: full tiles with no masks, then the masked tiles (the ragged tail
  of N, and for causal attention the diagonal tiles). Fully masked causal tiles are never visited.
- Any sequence length (N=1 works), any strides, head_dim in {16, 32, 64, 128, 256},
  fp16 / bf16 / fp32 (fp32 dots use IEEE fp32, not tf32, so fp32 means fp32).
- Pointer arithmetic only: triton 3.9 removed ``tl.make_block_ptr``; this runs on 3.6 and 3.9.
- It returns the natural-log logsumexp of each row, which the backward pass recomputes P from.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attention_core import split_kv
from attention_core.shape import Shape
from kernels import _launch, flash_fwd_hopper
from kernels._autotune import LN2_C, LOG2E, autotune, configs_from, default_tile, dot_precision, pruner, seq_bucket
from kernels._checks import check_qkv, check_triton_device, dtype_name, resolve_scale
from kernels._launch import Memo, layout_key
from kernels._layout import empty_in_layout
from kernels.flash_decode import flash_decode_forward

HEAD_DIMS = (16, 32, 64, 128, 256)

# Candidate (BLOCK_M, BLOCK_N, num_warps, num_stages) per class of problem, from the H200 sweeps in
# docs/perf-notes.md. The first of each list is the default when autotuning is off
# (ATTN_AUTOTUNE=0); the autotuner times the rest once per key (head_dim, causal, precision,
# dtype, sequence bucket) and caches the winner on disk where Triton can (cache_results).
FWD_CANDIDATES = {
    "d64": [(128, 64, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3)],
    "d128": [(128, 128, 8, 3), (256, 64, 16, 3), (128, 64, 8, 4), (64, 64, 4, 3)],
    "d256": [(64, 32, 4, 2), (64, 64, 8, 2), (128, 32, 8, 2)],
    "fp32": [(64, 32, 4, 2), (32, 32, 4, 2), (64, 32, 8, 2)],
}


def forward_tile(head_dim: int, dtype: str) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) the forward runs with by default for this head_dim and dtype name."""
    return default_tile(FWD_CANDIDATES, head_dim, dtype)


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q,
    k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    offs_m, offs_d, lo, hi, seq_kv, qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,)
        kt_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd  # Kᵀ tile
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            kt = tl.load(kt_ptrs, mask=cols[None, :] < seq_kv, other=0.0)  # (HEAD_DIM, BLOCK_N)
        else:
            kt = tl.load(kt_ptrs)
        qk = tl.dot(q, kt, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N), fp32
        if MASKED:
            visible = cols[None, :] < seq_kv
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            qk = tl.where(visible, qk, float("-inf"))
        # Online softmax in log2 units: m_i is the running max of qk · qk_scale.
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_ij)  # rescales the old sum and accumulator
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < seq_kv, other=0.0)  # (BLOCK_N, HEAD_DIM)
        else:
            v = tl.load(v_ptrs)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)  # (BLOCK_M, HEAD_DIM)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    Q, K, V, O, LSE,
    qk_scale,  # sm_scale · log2(e)
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    H, GROUP, seq_q, seq_kv,  # GROUP: query heads per K/V head (grouped-query attention)
    SEQ_BUCKET,  # autotune key only, see seq_bucket()
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0, "BLOCK_M % BLOCK_N != 0: a diagonal key tile would straddle")
    if CAUSAL:
        # Query blocks near the end see the most keys: start those first, so that the short ones
        # fill the tail of the grid instead of the long ones (+2 to 4% causal, docs/perf-notes.md).
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + (off_h // GROUP) * stride_kh  # the K/V head of this query head's group
    v_base = V + off_z * stride_vz + (off_h // GROUP) * stride_vh

    offs_m = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)  # (BLOCK_M, HEAD_DIM), stays on chip

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    full_kv = (seq_kv // BLOCK_N) * BLOCK_N  # keys in whole tiles
    if CAUSAL:
        # Tiles left of this query block are fully visible; tiles right of its diagonal are skipped.
        hi_unmasked = tl.minimum(start_m, full_kv)
        hi = tl.minimum(start_m + BLOCK_M, seq_kv)
    else:
        hi_unmasked = full_kv
        hi = seq_kv
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, 0, hi_unmasked, seq_kv, qk_scale,
        BLOCK_N, False, CAUSAL, DOT_PRECISION,
    )
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, hi_unmasked, hi, seq_kv, qk_scale,
        BLOCK_N, True, CAUSAL, DOT_PRECISION,
    )

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * LN2_C  # log2 domain -> natural log
    tl.store(LSE + off_hz.to(tl.int64) * seq_q + offs_m, lse, mask=row_ok)
    o_base = O + off_z * stride_oz + off_h * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             acc.to(O.dtype.element_ty), mask=row_ok[:, None])


_attn_fwd_tuned = autotune(
    configs=configs_from(FWD_CANDIDATES),
    key=["HEAD_DIM", "CAUSAL", "DOT_PRECISION", "SEQ_BUCKET"],  # and, by Triton's default, the dtypes
    prune_configs_by={"early_config_prune": pruner(FWD_CANDIDATES)},
)(_attn_fwd)


def flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    config: dict | None = None,
    split: bool | None = None,
    gluon: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2 forward, no autograd.

    q: (batch, heads, seq_q, head_dim); k, v: (batch, kv_heads, seq_kv, head_dim), kv_heads dividing
    heads (grouped-query attention: query head h reads K/V head h // (heads // kv_heads)), any strides.
    Returns o: (batch, heads, seq_q, head_dim) in q's dtype and memory order (a BSHD view's output
    is a BSHD view: kernels._layout.empty_in_layout; the split-KV path, for at most 128 query
    rows per K/V head, writes it contiguous: at one query row that is BSHD's memory too, at a few rows
    a caller's transpose back copies that small output), and
    lse: (batch, heads, seq_q) fp32, the natural-log logsumexp of each row of the scaled scores.
    Causal masking is top-left aligned (key j visible to query i when j <= i), as SDPA's is_causal.
    ``config`` bypasses the autotuner, e.g. ``dict(BLOCK_M=128, BLOCK_N=64, num_warps=8,
    num_stages=3)``, for sweeps such as those in docs/perf-notes.md.

    Decode shapes (few query rows per K/V head) take the split-KV path of kernels.flash_decode when
    attention_core.split_kv.plan gives a plan; ``split`` False forces the tiled kernel, True the
    split-KV path where it applies (tests run both).

    On an H100/H200, fp16/bf16 inputs with head_dim 64 or 128 in layouts a TMA descriptor reads
    (contiguous BHSD, BSHD views, packed-QKV slices: hopper_common.tma_layout_reason) take the
    warp-specialized Gluon kernel of kernels.flash_fwd_hopper, except the shapes where the portable
    kernel measured faster (flash_fwd_hopper.PORTABLE_UP_TO); ``gluon`` False forces the portable
    kernel, True the Gluon one, refusing (ValueError) inputs it does not cover. :func:`forward_path`
    names the path a call takes.
    """
    defaults = config is None and split is None and gluon is None
    layout = layout_key(q, k, v) if defaults and _launch.ENABLED else None
    route = _ROUTES.get((layout, bool(causal))) if layout is not None else None
    if route is None or route[0] == "tiled":  # a new layout is checked (and routed); the tiled kernel needs the sizes
        batch, heads, seq_q, seq_kv, head_dim = check_qkv(q, k, v, head_dims=HEAD_DIMS)
        check_triton_device(q)
        if layout is not None and route is None:
            route = _route(q, k, v, causal, layout)
    scale = resolve_scale(sm_scale, q.shape[-1])
    if route is not None and route[0] == "split":
        return flash_decode_forward(q, k, v, causal, scale, route[1], layout=layout)
    if route is not None and route[0] == "gluon":
        return flash_fwd_hopper.hopper_forward(q, k, v, causal, scale, layout=layout)
    if route is None:  # an explicit config, split or gluon, or the memos off: routed here
        decode = split_kv.plan(batch, k.shape[1], heads // k.shape[1], seq_q, seq_kv)
        if decode is not None and split is not False and config is None:
            return flash_decode_forward(q, k, v, causal, scale, decode)
        if config is None and gluon is not False:
            reason = flash_fwd_hopper.unsupported_reason(q, k, v) if gluon else _not_gluon(q, k, v, causal)
            if reason is None:
                return flash_fwd_hopper.hopper_forward(q, k, v, causal, scale)
            if gluon:
                raise ValueError(reason)
    o = empty_in_layout(q)
    lse = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=q.device)

    def grid(meta):
        return (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * heads)

    kernel = _attn_fwd[grid] if config else _attn_fwd_tuned[grid]
    kernel(
        q, k, v, o, lse, scale * LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        heads, heads // k.shape[1], seq_q, seq_kv,
        seq_bucket(seq_q, seq_kv),
        HEAD_DIM=head_dim, CAUSAL=bool(causal),
        DOT_PRECISION=dot_precision(dtype_name(q.dtype)),
        **(config or {}),
    )
    return o, lse


def forward_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> str:
    """The path :func:`flash_attention_forward` takes for these inputs with its defaults:
    'split-kv xS' (kernels.flash_decode), 'gluon-ws' (kernels.flash_fwd_hopper), 'gluon-ws split-tail AxS' where
    that launch cuts its last wave's A tiles into S chunks of keys each (kernels.tile_schedule.split_tail), or
    'tiled'."""
    layout = layout_key(q, k, v) if _launch.ENABLED else None
    route = _ROUTES.get((layout, bool(causal))) if layout is not None else None
    if route is None:
        check_qkv(q, k, v, head_dims=HEAD_DIMS)
        try:
            check_triton_device(q)
        except ValueError:
            layout = None  # the forward itself refuses these: routed here, never kept for it
        route = _route(q, k, v, causal, layout)
    if route[0] == "gluon":
        tail = flash_fwd_hopper.tail_cut(q, k, causal, layout)
        return "gluon-ws" + (f" {tail.label}" if tail else "")
    return route[1].label if route[0] == "split" else "tiled"


def planned_forward_path(shape: Shape, capability: tuple[int, int] | None, sm_count: int | None) -> str:
    """The path :func:`forward_path` names for contiguous BHSD inputs of ``shape`` (fp16 or bf16) on a GPU of that
    compute capability and SM count, from the numbers alone (a test checks the two agree): the split-KV plan
    (attention_core.split_kv), else the Gluon forward on sm_90 at its head_dims where the portable kernel did not
    measure faster (:func:`flash_fwd_hopper.slower_at`), with its cut tail (:func:`flash_fwd_hopper.planned_cut`),
    else 'tiled'. For ``python -m profiler model --path auto``, which costs the path a named GPU takes."""
    decode = split_kv.plan(shape.batch, shape.kv_heads, shape.group, shape.seq_q, shape.seq_kv)
    if decode is not None:
        return decode.label
    if (capability != (9, 0) or shape.head_dim not in flash_fwd_hopper.HEAD_DIMS or shape.dtype not in ("fp16", "bf16")
            or flash_fwd_hopper.slower_at(shape.head_dim, shape.causal, shape.seq_q)):
        return "tiled"
    tail = flash_fwd_hopper.planned_cut(shape.head_dim, shape.causal, shape.bh, shape.seq_q, shape.seq_kv, sm_count)
    return "gluon-ws" + (f" {tail.label}" if tail else "")


# The route of the default forward by (_launch.layout_key of q, k, v; causal): what the checks, the
# split plan and the Gluon kernel's conditions decided for the first call of a layout, so later calls of
# it (every layer of a model, every step of a training loop) skip them (docs/perf-notes.md: host time).
_ROUTES: Memo = Memo()


def _route(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, layout: tuple | None
           ) -> tuple[str, split_kv.SplitPlan | None]:
    """('split', plan), ('gluon', None) or ('tiled', None) for checked inputs, kept by ``layout``."""
    batch, heads, seq_q, head_dim = q.shape
    decode = split_kv.plan(batch, k.shape[1], heads // k.shape[1], seq_q, k.shape[2])
    route = ("split", decode) if decode is not None else ("tiled" if _not_gluon(q, k, v, causal) else "gluon", None)
    if layout is not None:
        _ROUTES.keep((layout, bool(causal)), route)
    return route


def _not_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> str | None:
    """Why the default forward does not take the Gluon kernel here (it cannot, or the portable
    kernel measured faster), or None when it does."""
    return flash_fwd_hopper.unsupported_reason(q, k, v) or flash_fwd_hopper.slower_reason(q, causal)
