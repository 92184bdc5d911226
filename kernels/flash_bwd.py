"""FlashAttention-2 backward in Triton, by recomputation.

Dao, "FlashAttention-2" (2023), Algorithm 2, split as in Triton's fused-attention tutorial into
three launches so no program ever needs atomics:

1. ``_attn_bwd_preprocess``: delta_i = Σ_d O_id · dO_id (one fp32 per query row).
2. ``_attn_bwd_dkdv``: one program per (key block, batch·head) holds K_j, V_j and accumulates
   dV_j = Σ_i P_ijᵀ dO_i and dK_j = scale · Σ_i dS_ijᵀ Q_i over the query blocks that can see it.
3. ``_attn_bwd_dq``: one program per (query block, batch·head) accumulates
   dQ_i = scale · Σ_j dS_ij K_j over its visible key blocks.

P is recomputed tile by tile from the forward's logsumexp, P_ij = exp(S_ij − lse_i), and
dS = P ∘ (dP − delta) with dP = dO Vᵀ. Only q, k, v, o and lse are kept from the forward; nothing
N×N is ever written. Any N works: full tiles run unmasked, the ragged tails and the causal
diagonal run masked (the tutorial's backward needs N % 128 == 0).

Matmuls per (query tile, key tile): S recomputed in both kernels, dP recomputed in both, plus
dV, dK and dQ: 7 tile matmuls against the forward's 2 (the 2.5x FLOP convention counts 5: S and
dP once, plus the three gradients; see profiler.model.fused.executed_flops).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attention_core.shape import Shape
from kernels import flash_bwd_hopper
from kernels._autotune import LOG2E, LOG2E_C, autotune, configs_from, default_tile, dot_precision, pruner, seq_bucket
from kernels._checks import check_backward_inputs, check_triton_device, dtype_name
from kernels._layout import empty_in_layout
from kernels.flash_bwd_hopper import rows_delta

HEAD_DIMS = (16, 32, 64, 128)


# (BLOCK_M, BLOCK_N, num_warps, num_stages) candidates, as in flash_fwd, ordered by the H200 timings in
# reports/perf-h200/tune_round3.jsonl. The dK/dV kernel walks
# query tiles, so it wants a tall key tile and short query tiles (BLOCK_N % BLOCK_M == 0 keeps the
# causal diagonal aligned); the dQ kernel is the mirror image (BLOCK_M % BLOCK_N == 0).
DKDV_CANDIDATES = {
    "d64": [(64, 128, 4, 3), (32, 128, 4, 3), (32, 64, 4, 3)],
    "d128": [(64, 64, 4, 2), (32, 64, 4, 3), (64, 128, 8, 3)],
    "fp32": [(32, 64, 4, 2), (16, 32, 4, 2)],
}
DQ_CANDIDATES = {
    "d64": [(128, 64, 8, 3), (64, 64, 4, 3), (128, 64, 4, 3)],
    "d128": [(128, 64, 8, 3), (64, 64, 4, 2), (64, 32, 4, 3)],
    "fp32": [(64, 32, 4, 2), (32, 16, 4, 2)],
}


def backward_tiles(head_dim: int, dtype: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(BLOCK_M, BLOCK_N) of the dK/dV and of the dQ kernel by default for this head_dim and dtype."""
    return default_tile(DKDV_CANDIDATES, head_dim, dtype), default_tile(DQ_CANDIDATES, head_dim, dtype)


@triton.jit
def _attn_bwd_preprocess(
    O, DO, Delta,
    stride_oz, stride_oh, stride_om, stride_od,
    stride_dz, stride_dh, stride_dm, stride_dd,
    H, seq_q,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    off_hz = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < seq_q
    delta = rows_delta(O, DO, (off_hz // H).to(tl.int64), (off_hz % H).to(tl.int64), offs_m, row_ok,
                       stride_oz, stride_oh, stride_om, stride_od, stride_dz, stride_dh, stride_dm, stride_dd,
                       HEAD_DIM)  # (BLOCK_M,)
    tl.store(Delta + off_hz.to(tl.int64) * seq_q + offs_m, delta, mask=offs_m < seq_q)


@triton.jit
def _dkdv_inner(
    dk, dv, k, v,
    q_base, do_base, lse_base, delta_base,
    stride_qm, stride_qd, stride_dom, stride_dod,
    offs_n, offs_d, lo, hi, seq_q, qk_scale,
    BLOCK_M: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m0  # (BLOCK_M,)
        q_ptrs = q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd
        do_ptrs = do_base + rows[:, None] * stride_dom + offs_d[None, :] * stride_dod
        if MASKED:
            q = tl.load(q_ptrs, mask=rows[:, None] < seq_q, other=0.0)  # (BLOCK_M, HEAD_DIM)
            do = tl.load(do_ptrs, mask=rows[:, None] < seq_q, other=0.0)
            lse2 = tl.load(lse_base + rows, mask=rows < seq_q, other=0.0) * LOG2E_C
            delta = tl.load(delta_base + rows, mask=rows < seq_q, other=0.0)
        else:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
            lse2 = tl.load(lse_base + rows) * LOG2E_C  # natural -> log2 domain
            delta = tl.load(delta_base + rows)
        qkt = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M) = Sᵀ
        pt = tl.math.exp2(qkt * qk_scale - lse2[None, :])  # Pᵀ recomputed from the logsumexp
        if MASKED:
            if CAUSAL:
                pt = tl.where(rows[None, :] >= offs_n[:, None], pt, 0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=DOT_PRECISION)  # (BLOCK_N, HEAD_DIM)
        dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M) = dPᵀ
        dst = pt * (dpt - delta[None, :])  # dSᵀ
        dk = tl.dot(dst.to(q.dtype), q, dk, input_precision=DOT_PRECISION)  # (BLOCK_N, HEAD_DIM)
    return dk, dv


@autotune(
    configs=configs_from(DKDV_CANDIDATES, interpret=(16, 32, 4, 1)),
    key=["HEAD_DIM", "CAUSAL", "DOT_PRECISION", "SEQ_BUCKET"],
    prune_configs_by={"early_config_prune": pruner(DKDV_CANDIDATES)},
)
@triton.jit
def _attn_bwd_dkdv(
    Q, K, V, DO, DK, DV, LSE, Delta,
    qk_scale, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_doz, stride_doh, stride_dom, stride_dod,
    stride_dkz, stride_dkh, stride_dkn, stride_dkd,  # DK and DV share this layout
    H, seq_q, seq_kv,  # H: query heads
    SEQ_BUCKET,  # autotune key only
    GROUP: tl.constexpr,  # query heads per K/V head (1: multi-head; the loop over them folds away)
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    tl.static_assert(BLOCK_N % BLOCK_M == 0, "BLOCK_N % BLOCK_M != 0: a diagonal query tile would straddle")
    start_n = tl.program_id(0) * BLOCK_N
    off_zk = tl.program_id(1)  # batch · K/V head
    off_z = (off_zk // (H // GROUP)).to(tl.int64)
    off_hk = (off_zk % (H // GROUP)).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n[:, None] < seq_kv
    k = tl.load(K + off_z * stride_kz + off_hk * stride_kh + offs_n[:, None] * stride_kn
                + offs_d[None, :] * stride_kd, mask=col_ok, other=0.0)  # (BLOCK_N, HEAD_DIM)
    v = tl.load(V + off_z * stride_vz + off_hk * stride_vh + offs_n[:, None] * stride_vn
                + offs_d[None, :] * stride_vd, mask=col_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)

    full_q = (seq_q // BLOCK_M) * BLOCK_M  # query rows in whole tiles
    if CAUSAL:
        # Queries above this key block see none of it; the diagonal block is masked; below it,
        # whole query tiles see all of it.
        diag_lo = tl.minimum(start_n, seq_q)
        diag_hi = tl.minimum(start_n + BLOCK_N, seq_q)
    else:
        diag_lo = 0
        diag_hi = 0
    body_hi = tl.maximum(full_q, diag_hi)
    # Grouped-query attention: the K/V head's gradients sum over every query head of its group,
    # so this program walks each of them in turn (no atomics, no copy of K or V).
    for g in range(GROUP):
        off_h = off_hk * GROUP + g
        off_hz = off_z * H + off_h
        q_base = Q + off_z * stride_qz + off_h * stride_qh
        do_base = DO + off_z * stride_doz + off_h * stride_doh
        lse_base = LSE + off_hz * seq_q
        delta_base = Delta + off_hz * seq_q
        dk, dv = _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                             stride_qm, stride_qd, stride_dom, stride_dod,
                             offs_n, offs_d, diag_lo, diag_hi, seq_q, qk_scale,
                             BLOCK_M, True, CAUSAL, DOT_PRECISION)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                             stride_qm, stride_qd, stride_dom, stride_dod,
                             offs_n, offs_d, diag_hi, body_hi, seq_q, qk_scale,
                             BLOCK_M, False, CAUSAL, DOT_PRECISION)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                             stride_qm, stride_qd, stride_dom, stride_dod,
                             offs_n, offs_d, body_hi, seq_q, seq_q, qk_scale,
                             BLOCK_M, True, CAUSAL, DOT_PRECISION)

    dk = dk * sm_scale  # dS was taken w.r.t. the scaled scores: dK = scale · dSᵀ Q
    dk_ptrs = off_z * stride_dkz + off_hk * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd
    tl.store(DK + dk_ptrs, dk.to(DK.dtype.element_ty), mask=col_ok)
    tl.store(DV + dk_ptrs, dv.to(DV.dtype.element_ty), mask=col_ok)


@triton.jit
def _dq_inner(
    dq, q, do, lse2, delta,
    k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    offs_m, offs_d, lo, hi, seq_kv, qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n0
        kt_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd
        vt_ptrs = v_base + cols[None, :] * stride_vn + offs_d[:, None] * stride_vd
        if MASKED:
            kt = tl.load(kt_ptrs, mask=cols[None, :] < seq_kv, other=0.0)  # (HEAD_DIM, BLOCK_N)
            vt = tl.load(vt_ptrs, mask=cols[None, :] < seq_kv, other=0.0)
        else:
            kt = tl.load(kt_ptrs)
            vt = tl.load(vt_ptrs)
        qk = tl.dot(q, kt, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
        if MASKED:
            visible = cols[None, :] < seq_kv
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            p = tl.where(visible, p, 0.0)
        dp = tl.dot(do, vt, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), dq, input_precision=DOT_PRECISION)  # (BLOCK_M, HEAD_DIM)
    return dq


@autotune(
    configs=configs_from(DQ_CANDIDATES, interpret=(32, 16, 4, 1)),
    key=["HEAD_DIM", "CAUSAL", "DOT_PRECISION", "SEQ_BUCKET"],
    prune_configs_by={"early_config_prune": pruner(DQ_CANDIDATES)},
)
@triton.jit
def _attn_bwd_dq(
    Q, K, V, DO, DQ, LSE, Delta,
    qk_scale, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_doz, stride_doh, stride_dom, stride_dod,
    stride_dqz, stride_dqh, stride_dqm, stride_dqd,
    H, GROUP, seq_q, seq_kv,
    SEQ_BUCKET,  # autotune key only
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0, "BLOCK_M % BLOCK_N != 0: a diagonal key tile would straddle")
    if CAUSAL:  # the longest query blocks first, as in the forward
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    q = tl.load(Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)  # (BLOCK_M, HEAD_DIM)
    do = tl.load(DO + off_z * stride_doz + off_h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dod, mask=row_ok[:, None], other=0.0)
    lse2 = tl.load(LSE + off_hz.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=0.0) * LOG2E_C
    delta = tl.load(Delta + off_hz.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    k_base = K + off_z * stride_kz + (off_h // GROUP) * stride_kh  # this query head's K/V head
    v_base = V + off_z * stride_vz + (off_h // GROUP) * stride_vh
    full_kv = (seq_kv // BLOCK_N) * BLOCK_N
    if CAUSAL:
        hi_unmasked = tl.minimum(start_m, full_kv)
        hi = tl.minimum(start_m + BLOCK_M, seq_kv)
    else:
        hi_unmasked = full_kv
        hi = seq_kv
    dq = _dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                   offs_m, offs_d, 0, hi_unmasked, seq_kv, qk_scale, BLOCK_N, False, CAUSAL, DOT_PRECISION)
    dq = _dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                   offs_m, offs_d, hi_unmasked, hi, seq_kv, qk_scale, BLOCK_N, True, CAUSAL, DOT_PRECISION)
    dq = dq * sm_scale
    tl.store(DQ + off_z * stride_dqz + off_h * stride_dqh + offs_m[:, None] * stride_dqm
             + offs_d[None, :] * stride_dqd, dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


def backward_delta(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """delta = Σ_d O·dO per query row, (batch, heads, seq_q) fp32: the preprocess both backwards share."""
    batch, heads, seq_q, head_dim = o.shape
    delta = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=o.device)
    pre_block = 64
    _attn_bwd_preprocess[(triton.cdiv(seq_q, pre_block), batch * heads)](
        o, do, delta, *o.stride(), *do.stride(), heads, seq_q, HEAD_DIM=head_dim, BLOCK_M=pre_block,
    )
    return delta


def flash_attention_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    sm_scale: float,
    gluon: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of o = attention(q, k, v) for upstream ``do``.

    do, o: (batch, heads, seq_q, head_dim); q likewise; k, v: (batch, kv_heads, seq_kv, head_dim), with
    kv_heads dividing heads (dk and dv then sum over each K/V head's group of query heads);
    lse: (batch, heads, seq_q) fp32 from :func:`kernels.flash_fwd.flash_attention_forward`.

    On an H100/H200, fp16/bf16 inputs with head_dim 64 or 128 in layouts a TMA descriptor reads
    (contiguous BHSD, BSHD views, packed-QKV slices) take the
    one-pass Gluon kernel of kernels.flash_bwd_hopper (dQ by TMA reduce-add, so not bit-reproducible
    from run to run: under ``torch.use_deterministic_algorithms(True)`` the default takes the portable
    kernels; docs/perf-notes.md, "Gluon backward"). ``gluon`` False forces the portable kernels, True
    the Gluon one, refusing (ValueError) inputs it does not cover. :func:`backward_path` names the path a call takes.
    """
    batch, heads, seq_q, seq_kv, head_dim = check_backward_inputs(do, q, k, v, o, lse, head_dims=HEAD_DIMS)
    check_triton_device(q)
    if gluon:
        reason = flash_bwd_hopper.unsupported_reason(q, k, v, o)
        if reason is not None:
            raise ValueError(reason)
    use_gluon = bool(gluon) or (gluon is None and _not_gluon(q, k, v, o) is None)

    if use_gluon:  # delta with the stats its loader brings, in one launch (flash_bwd_hopper.backward_stats)
        return flash_bwd_hopper.hopper_backward(do, q, k, v, o, lse, causal, sm_scale)

    delta = backward_delta(o, do)

    precision = dot_precision(dtype_name(q.dtype))
    qk_scale = sm_scale * LOG2E  # as in the forward
    bucket = seq_bucket(seq_q, seq_kv)
    # dq in q's memory order, dk and dv both in k's (the dK/dV kernel stores both through dk's strides),
    # as the Gluon kernel returns them.
    dq = empty_in_layout(q)
    kv_heads = k.shape[1]
    dk = empty_in_layout(k)
    dv = empty_in_layout(k)
    _attn_bwd_dkdv[lambda meta: (triton.cdiv(seq_kv, meta["BLOCK_N"]), batch * kv_heads)](
        q, k, v, do, dk, dv, lse, delta, qk_scale, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(),
        heads, seq_q, seq_kv, bucket,
        GROUP=heads // kv_heads, HEAD_DIM=head_dim, CAUSAL=bool(causal), DOT_PRECISION=precision,
    )
    _attn_bwd_dq[lambda meta: (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * heads)](
        q, k, v, do, dq, lse, delta, qk_scale, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
        heads, heads // kv_heads, seq_q, seq_kv, bucket,
        HEAD_DIM=head_dim, CAUSAL=bool(causal), DOT_PRECISION=precision,
    )
    return dq, dk, dv


def backward_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gluon: bool | None = None) -> str:
    """The path :func:`flash_attention_backward` takes for these inputs and ``gluon`` (o as the
    forward returns it, in q's memory order): 'gluon-ws' (kernels.flash_bwd_hopper) or 'tiled'."""
    if gluon is False:
        return "tiled"
    reason = flash_bwd_hopper.unsupported_reason(q, k, v, q) if gluon else _not_gluon(q, k, v, q)
    return "tiled" if reason else "gluon-ws"


def planned_backward_path(shape: Shape, capability: tuple[int, int] | None) -> str:
    """The path :func:`backward_path` names for contiguous BHSD inputs of ``shape`` on a GPU of that compute
    capability, from the numbers alone: the Gluon backward on sm_90 at its head_dims in fp16 and bf16 (without
    deterministic algorithms), else 'tiled'. For ``python -m profiler model --path auto``."""
    gluon = capability == (9, 0) and shape.head_dim in flash_bwd_hopper.HEAD_DIMS and shape.dtype in ("fp16", "bf16")
    return "gluon-ws" if gluon and not torch.are_deterministic_algorithms_enabled() else "tiled"


def _not_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> str | None:
    """Why the default backward does not take the Gluon kernel here (it cannot, or the caller asked
    for deterministic algorithms: the Gluon kernel adds dQ's shares into fp32 in whatever order the
    programs finish, the portable kernels write each dQ element once), or None when it does."""
    if torch.are_deterministic_algorithms_enabled():
        return "torch.use_deterministic_algorithms(True): the Gluon backward's dQ sums run in a varying order"
    return flash_bwd_hopper.unsupported_reason(q, k, v, o)
