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

import os

import torch
import triton
import triton.language as tl

from kernels._checks import check_qkv, check_triton_device, resolve_scale

HEAD_DIMS = (16, 32, 64, 128, 256)
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x · log2 e)

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


# Candidate (BLOCK_M, BLOCK_N, num_warps, num_stages, warp_specialize) per class of problem; the
# first of each list is the default when autotuning is off (ATTN_AUTOTUNE=0), the rest are what the
# autotuner times once per (head_dim, causal, precision, dtype, sequence bucket) and caches.
FWD_CANDIDATES = {
    "d64": [(128, 64, 4, 3, False), (128, 128, 8, 3, False), (128, 64, 8, 3, False), (64, 64, 4, 3, False)],
    "d128": [(128, 64, 8, 3, False), (128, 64, 4, 3, False), (128, 128, 8, 2, False), (64, 64, 4, 3, False)],
    "d256": [(64, 32, 4, 2, False), (64, 64, 8, 2, False), (128, 32, 8, 2, False)],
    "fp32": [(64, 32, 4, 2, False), (32, 32, 4, 2, False), (64, 32, 8, 2, False)],
}
INTERPRET_CANDIDATE = (32, 16, 4, 1, False)


def candidate_class(head_dim: int, dot_precision: str) -> str:
    if dot_precision == "ieee":
        return "fp32"
    return "d64" if head_dim <= 64 else f"d{head_dim}"


def _config_tuple(config: triton.Config) -> tuple:
    kw = config.kwargs
    extra = (kw["WARP_SPECIALIZE"],) if "WARP_SPECIALIZE" in kw else ()
    return (kw["BLOCK_M"], kw["BLOCK_N"], config.num_warps, config.num_stages, *extra)


def configs_from(candidates: dict[str, list[tuple]], interpret: tuple = INTERPRET_CANDIDATE) -> list[triton.Config]:
    """Every distinct candidate as a triton.Config; under the interpreter a single small one
    (autotuning two or more configs fails there, and speed is moot). A candidate is
    (BLOCK_M, BLOCK_N, num_warps, num_stages[, WARP_SPECIALIZE])."""
    tuples = [interpret] if INTERPRET else list(dict.fromkeys(c for cs in candidates.values() for c in cs))
    configs = []
    for bm, bn, warps, stages, *ws in tuples:
        kwargs = {"BLOCK_M": bm, "BLOCK_N": bn, **({"WARP_SPECIALIZE": ws[0]} if ws else {})}
        configs.append(triton.Config(kwargs, num_warps=warps, num_stages=stages))
    return configs


def pruner(candidates: dict[str, list[tuple]]):
    """An ``early_config_prune`` that keeps this problem's candidates (only the default one when
    ATTN_AUTOTUNE=0, e.g. in tests, so each shape compiles one kernel, not four)."""

    def keep(configs, named_args, **kwargs):
        if INTERPRET:
            return configs[:1]
        args = {**named_args, **kwargs}
        wanted = candidates[candidate_class(args["HEAD_DIM"], args["DOT_PRECISION"])]
        if os.environ.get("ATTN_AUTOTUNE", "1") == "0":
            wanted = wanted[:1]
        as_tuple = {_config_tuple(c): c for c in configs}
        return [as_tuple[t] for t in wanted if t in as_tuple]

    return keep


def seq_bucket(seq_q: int, seq_kv: int) -> int:
    """Autotune key for sequence length: short (< 1024), medium (< 8192) or long."""
    longest = max(seq_q, seq_kv)
    return 0 if longest < 1024 else (1 if longest < 8192 else 2)


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q,
    k_base, v_base, k_desc, v_desc, stride_kn, stride_kd, stride_vn, stride_vd,
    offs_m, offs_d, lo, hi, seq_kv, qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    USE_TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE and not MASKED):
        cols = start_n + offs_n  # (BLOCK_N,)
        if USE_TMA:
            # The tensor-memory accelerator copies the tile; rows past seq_kv arrive as zeros.
            kt = k_desc.load([start_n, 0]).T  # (HEAD_DIM, BLOCK_N)
        elif MASKED:
            kt_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd  # Kᵀ tile
            kt = tl.load(kt_ptrs, mask=cols[None, :] < seq_kv, other=0.0)  # (HEAD_DIM, BLOCK_N)
        else:
            kt = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd)
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
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if USE_TMA:
            v = v_desc.load([start_n, 0])  # (BLOCK_N, HEAD_DIM)
        elif MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < seq_kv, other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)  # (BLOCK_M, HEAD_DIM)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _exp2_fma(x):
    """2**x for x <= 0 on the FMA and integer pipes instead of the special-function unit (SFU).

    x = j + f with j = round(x) and f in [-0.5, 0.5]; 2**f is a cubic (least squares weighted by
    2**-f on Chebyshev nodes, max relative error 7.7e-5, below fp16's rounding of P at 4.9e-4) and
    2**j goes straight into the exponent bits. The same trick as FlashAttention-4 (Dao et al., 2025).
    """
    x = tl.maximum(x, -125.0)  # keeps the exponent field of the result positive; 2**-125 rounds to 0 in fp16
    t = x + 12582912.0  # 1.5 · 2**23: the sum holds round(x) in its low mantissa bits
    j = t.to(tl.int32, bitcast=True) - 0x4B400000
    f = x - (t - 12582912.0)
    poly = (0.055088683807517684 * f + 0.24260405145949465) * f + 0.6932762416819623
    poly = poly * f + 0.9999289403695104
    return (poly.to(tl.int32, bitcast=True) + (j << 23)).to(tl.float32, bitcast=True)


@triton.jit
def _attn_fwd_inner_split(
    acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    offs_d, lo, hi, qk_scale,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Unmasked tiles in two halves: the SFU exponentiates one half, the FMA pipes the other."""
    HALF: tl.constexpr = BLOCK_N // 2
    offs_h = tl.arange(0, HALF)
    for start_n in range(lo, hi, BLOCK_N):
        ca = start_n + offs_h
        cb = ca + HALF
        qka = tl.dot(q, tl.load(k_base + ca[None, :] * stride_kn + offs_d[:, None] * stride_kd),
                     input_precision=DOT_PRECISION)
        qkb = tl.dot(q, tl.load(k_base + cb[None, :] * stride_kn + offs_d[:, None] * stride_kd),
                     input_precision=DOT_PRECISION)
        m_ij = tl.maximum(m_i, tl.maximum(tl.max(qka, 1), tl.max(qkb, 1)) * qk_scale)
        pa = tl.math.exp2(qka * qk_scale - m_ij[:, None])
        pb = _exp2_fma(qkb * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(pa, 1) + tl.sum(pb, 1)
        acc = acc * alpha[:, None]
        va = tl.load(v_base + ca[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        vb = tl.load(v_base + cb[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        acc = tl.dot(pa.to(va.dtype), va, acc, input_precision=DOT_PRECISION)
        acc = tl.dot(pb.to(vb.dtype), vb, acc, input_precision=DOT_PRECISION)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_inner_rotated(
    acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    offs_d, lo, hi, qk_scale,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Unmasked tiles, software-pipelined: the scores of tile j+1 are issued before the softmax of
    tile j, so the tensor cores can work while the SFU exponentiates (FlashAttention-3's
    intra-warpgroup overlap, Shah et al., 2024)."""
    offs_n = tl.arange(0, BLOCK_N)
    cols = lo + offs_n
    kt = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd, mask=cols[None, :] < hi, other=0.0)
    qk = tl.dot(q, kt, input_precision=DOT_PRECISION)
    for start_n in range(lo, hi, BLOCK_N):
        nxt = tl.minimum(start_n + BLOCK_N, hi - BLOCK_N) + offs_n  # the last one re-reads its own tile, unused
        qk_next = tl.dot(q, tl.load(k_base + nxt[None, :] * stride_kn + offs_d[:, None] * stride_kd),
                         input_precision=DOT_PRECISION)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_base + (start_n + offs_n)[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_ij
        qk = qk_next
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    Q, K, V, O, LSE,
    qk_scale,  # sm_scale · log2(e)
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    H, seq_q, seq_kv,
    SEQ_BUCKET,  # autotune key only, see seq_bucket()
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    USE_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    INNER: tl.constexpr = "plain",  # experiments: "rotated" or "split" for the unmasked tiles (pointer path)
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0)  # the causal split assumes diagonal tiles do not straddle
    if CAUSAL:
        # Query blocks near the end of the sequence see the most keys: start them first, so the
        # short blocks fill the tail of the grid instead of the long ones.
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    o_base = O + off_z * stride_oz + off_h * stride_oh

    offs_m = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    if USE_TMA:
        # One 2-D descriptor per (batch, head) matrix: its bounds are that head's rows, so tiles
        # past the end read zeros and stores past it are dropped, with no masks in the loop.
        q_desc = tl.make_tensor_descriptor(q_base, [seq_q, HEAD_DIM], [stride_qm, 1], [BLOCK_M, HEAD_DIM])
        k_desc = tl.make_tensor_descriptor(k_base, [seq_kv, HEAD_DIM], [stride_kn, 1], [BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_base, [seq_kv, HEAD_DIM], [stride_vn, 1], [BLOCK_N, HEAD_DIM])
        o_desc = tl.make_tensor_descriptor(o_base, [seq_q, HEAD_DIM], [stride_om, 1], [BLOCK_M, HEAD_DIM])
        q = q_desc.load([start_m, 0])  # (BLOCK_M, HEAD_DIM), stays on chip
    else:
        k_desc = k_base  # unused
        v_desc = v_base
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                    mask=row_ok[:, None], other=0.0)

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
    if INNER == "rotated":
        acc, l_i, m_i = _attn_fwd_inner_rotated(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
            offs_d, 0, hi_unmasked, qk_scale, BLOCK_N, DOT_PRECISION,
        )
    elif INNER == "split":
        acc, l_i, m_i = _attn_fwd_inner_split(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
            offs_d, 0, hi_unmasked, qk_scale, BLOCK_N, DOT_PRECISION,
        )
    else:
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, stride_kn, stride_kd, stride_vn, stride_vd,
            offs_m, offs_d, 0, hi_unmasked, seq_kv, qk_scale,
            BLOCK_N, False, CAUSAL, DOT_PRECISION, USE_TMA, WARP_SPECIALIZE,
        )
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, hi_unmasked, hi, seq_kv, qk_scale,
        BLOCK_N, True, CAUSAL, DOT_PRECISION, USE_TMA, False,
    )

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # ln(2): log2 domain -> natural log
    tl.store(LSE + off_hz.to(tl.int64) * seq_q + offs_m, lse, mask=row_ok)
    if USE_TMA:
        o_desc.store([start_m, 0], acc.to(O.dtype.element_ty))
    else:
        tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                 acc.to(O.dtype.element_ty), mask=row_ok[:, None])


_attn_fwd_tuned = triton.autotune(
    configs=configs_from(FWD_CANDIDATES),
    key=["HEAD_DIM", "CAUSAL", "DOT_PRECISION", "SEQ_BUCKET", "USE_TMA"],
    prune_configs_by={"early_config_prune": pruner(FWD_CANDIDATES)},
)(_attn_fwd)


def _tma_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory in which each program writes its tensor descriptors (128 bytes each)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def tma_eligible(*tensors: torch.Tensor) -> bool:
    """Whether the tensor-descriptor path applies: Hopper or newer (or the interpreter), unit stride
    along head_dim, every other stride and the base address 16-byte aligned (a TMA rule).
    ATTN_TMA=0 turns it off."""
    if os.environ.get("ATTN_TMA", "1") == "0":
        return False
    if not INTERPRET and (not tensors[0].is_cuda or torch.cuda.get_device_capability(tensors[0].device)[0] < 9):
        return False
    for t in tensors:
        size = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * size) % 16 for s in t.stride()[:-1]):
            return False
    return True


def flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    config: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2 forward, no autograd.

    q: (batch, heads, seq_q, head_dim); k, v: (batch, heads, seq_kv, head_dim), any strides.
    Returns o: (batch, heads, seq_q, head_dim) in q's dtype and contiguous, and
    lse: (batch, heads, seq_q) fp32, the natural-log logsumexp of each row of the scaled scores.
    Causal masking is top-left aligned (key j visible to query i when j <= i), as SDPA's is_causal.
    ``config`` skips the autotuner: BLOCK_M, BLOCK_N, WARP_SPECIALIZE, num_warps, num_stages and
    optionally USE_TMA (for experiments; see scripts/tune_fwd.py).
    """
    batch, heads, seq_q, seq_kv, head_dim = check_qkv(q, k, v, head_dims=HEAD_DIMS)
    check_triton_device(q)
    scale = resolve_scale(sm_scale, head_dim)
    o = torch.empty((batch, heads, seq_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=q.device)
    config = dict(config or {})
    use_tma = config.pop("USE_TMA", tma_eligible(q, k, v, o))
    if use_tma and not INTERPRET:
        triton.set_allocator(_tma_scratch)
    elif use_tma:
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8))

    def grid(meta):
        return (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * heads)

    kernel = _attn_fwd[grid] if config else _attn_fwd_tuned[grid]
    kernel(
        q, k, v, o, lse, scale * LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        heads, seq_q, seq_kv,
        seq_bucket(seq_q, seq_kv),
        HEAD_DIM=head_dim, CAUSAL=bool(causal),
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        USE_TMA=use_tma,
        **config,
    )
    return o, lse
