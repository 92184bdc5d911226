"""Analytical cost model: FLOPs and HBM bytes of each attention step, as pure functions of a Shape.

Conventions (each formula below names its source):
- Matmul FLOPs are 2·M·N·K (one multiply and one add per term).
- Elementwise FLOPs: ``scale_mask`` counts 1 per element (the multiply; the causal select is not
  arithmetic), ``softmax`` counts 5 per element (max, subtract, exp, sum, divide), as in the seed
  post on arithmetic intensity, where that count gives softmax 5 / (2 · 2 bytes) = 1.25 FLOP/byte
  in fp16/bf16.
- ``torch.utils.flop_counter.FlopCounterMode`` counts only matmuls (2·M·N·K) and ignores
  elementwise work and the causal mask; the tests cross-check our matmul steps against it and
  expect 0 for the elementwise ones.
- Fused FLOPs are "algorithmic": 4·B·H·Nq·Nk·D forward (the two matmuls of attention), halved
  when causal (FlashAttention papers, Triton's fused-attention tutorial, tritonbench), and
  backward = 2.5x forward (FlashAttention-2 paper, §4: five matmuls S, dP, dV, dK, dQ against the
  forward's two). ``executed_flops`` instead counts what our kernels really multiply: whole tiles,
  including masked halves of diagonal tiles and padded tails, and our backward's seven matmuls
  (S and dP are recomputed in both the dK/dV and the dQ kernel).
- Which of these an implementation gets is declared by its registry entry (``Impl.costing``,
  profiler.model.costing); :func:`cost_of` is the one place that applies it, for every command.
- Bytes assume every input read from and every output written to HBM once per kernel, in the
  tensor's dtype. PyTorch's fp16/bf16 softmax computes in fp32 registers but reads and writes
  fp16/bf16, so its bytes are those of the input dtype. The fused kernels have two byte counts:
  ``compulsory`` (Q, K, V read once; O and logsumexp written once: what DRAM sees when L2 holds K
  and V) and ``tile`` (each query block re-reads the K and V tiles it visits: what L2 serves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

from profiler.model import split_kv
from profiler.model.costing import Costing, Tiles

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
MODES = ("fwd", "bwd", "fwd+bwd")
NAIVE_STEPS = ("qk_matmul", "scale_mask", "softmax", "pv_matmul")
LSE_BYTES = 4  # the logsumexp is kept in fp32 (kernels.flash_fwd)


@dataclass(frozen=True)
class Shape:
    """One attention problem. Tensors are BHSD: (batch, heads, seq, head_dim)."""

    batch: int
    heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    dtype: str = "fp16"
    causal: bool = False
    mode: str = "fwd"
    # Heads of K and V (grouped-query attention: query head h reads K/V head h // (heads // kv_heads),
    # as SDPA's enable_gqa and repeat_interleave do). None means heads (multi-head attention).
    kv_heads: int | None = None

    def __post_init__(self):
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for name in ("batch", "heads", "seq_q", "seq_kv", "head_dim", "kv_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads {self.kv_heads} must divide heads {self.heads} (each K/V head serves "
                             "an equal group of query heads)")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype '{self.dtype}' is not supported; allowed: {', '.join(DTYPE_BYTES)}")
        if self.mode not in MODES:
            raise ValueError(f"mode '{self.mode}' is not supported; allowed: {', '.join(MODES)}")

    @classmethod
    def square(cls, batch: int, heads: int, seq: int, head_dim: int, **kw) -> Shape:
        return cls(batch, heads, seq, seq, head_dim, **kw)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def bh(self) -> int:
        return self.batch * self.heads

    @property
    def group(self) -> int:
        """Query heads per K/V head: 1 for multi-head, heads for multi-query attention."""
        return self.heads // self.kv_heads

    @property
    def score_elems(self) -> int:
        """Elements of the N×N matrix S (or P) over all batches and heads."""
        return self.bh * self.seq_q * self.seq_kv

    @property
    def label(self) -> str:
        """'B4 H32 N=8192 D64 fp16', 'B1 H32/8 Nq=1 Nkv=32768 D128 bf16 causal': for titles and progress."""
        heads = f"H{self.heads}" + (f"/{self.kv_heads}" if self.group > 1 else "")
        lengths = f"N={self.seq_q}" if self.seq_q == self.seq_kv else f"Nq={self.seq_q} Nkv={self.seq_kv}"
        return f"B{self.batch} {heads} {lengths} D{self.head_dim} {self.dtype}{' causal' if self.causal else ''}"

    def with_mode(self, mode: str) -> Shape:
        return replace(self, mode=mode)

    @classmethod
    def from_row(cls, row) -> Shape:
        """The shape of a stored row (a dict, a pandas row or a namedtuple with the store's shape
        columns); a row without ``mode`` (validation tables: forward only) reads as fwd."""
        get = row.get if hasattr(row, "get") else lambda k, default=None: getattr(row, k, default)
        kv_heads = get("kv_heads")
        return cls(int(get("batch")), int(get("heads")), int(get("seq_q")), int(get("seq_kv")),
                   int(get("head_dim")), str(get("dtype")), bool(get("causal")), str(get("mode", "fwd") or "fwd"),
                   None if kv_heads is None or kv_heads != kv_heads else int(kv_heads))  # NaN: a capture before GQA


def _tensor_bytes(shape: Shape, rows: int, heads: int | None = None) -> int:
    """Bytes of one (B, heads, rows, D) tensor in the shape's dtype (heads: the query heads unless given)."""
    return shape.batch * (heads or shape.heads) * rows * shape.head_dim * shape.elem_bytes


def _kv_bytes(shape: Shape) -> int:
    """Bytes of K (or V): (B, kv_heads, Nk, D). With grouped-query attention each K/V head is read
    once for its whole group of query heads (Ainslie et al., "GQA", 2023, §2: the point of GQA is
    that the K/V cache shrinks by heads / kv_heads)."""
    return _tensor_bytes(shape, shape.seq_kv, shape.kv_heads)


# ---------------------------------------------------------------------------------------------
# Naive, stepwise attention (kernels.reference). Forward steps; the backward of each step is the
# autograd of that step.
# ---------------------------------------------------------------------------------------------


def naive_step_flops(shape: Shape, step: str) -> int:
    """FLOPs of one naive step in the shape's mode (fwd, bwd or both)."""
    b, n_q, n_k, d = shape.bh, shape.seq_q, shape.seq_kv, shape.head_dim
    s = shape.score_elems
    fwd = {
        "qk_matmul": 2 * b * n_q * n_k * d,  # S = Q Kᵀ: 2·M·N·K
        "scale_mask": s,  # one multiply per element; the causal select is not arithmetic
        "softmax": 5 * s,  # max, subtract, exp, sum, divide (seed post on arithmetic intensity)
        "pv_matmul": 2 * b * n_q * n_k * d,  # O = P V: 2·M·N·K
    }
    bwd = {
        "qk_matmul": 4 * b * n_q * n_k * d,  # dQ = dS K and dK = dSᵀ Q: two matmuls
        "scale_mask": s,  # dS · scale (the mask's gradient is a select)
        "softmax": 4 * s,  # dS = P ∘ (dP − rowsum(dP ∘ P)): multiply, sum, subtract, multiply
        "pv_matmul": 4 * b * n_q * n_k * d,  # dP = dO Vᵀ and dV = Pᵀ dO: two matmuls
    }
    _check_step(step)
    return _by_mode(shape, fwd[step], bwd[step])


def _mask_zeroed(shape: Shape) -> int:
    """Entries of the Nq×Nk causal mask on or below the diagonal (key j <= query i), which
    ``triu_(1)`` sets to False: sum over rows i of min(i + 1, Nk)."""
    full = max(0, shape.seq_q - shape.seq_kv)  # rows that see every key
    partial = shape.seq_q - full  # rows i < Nk see i + 1 keys
    return partial * (partial + 1) // 2 + full * shape.seq_kv


def _fwd_step_io(shape: Shape, step: str) -> tuple[int, int]:
    """(bytes read, bytes written) of one forward naive step, each operand read once and each
    result written once.

    Causal scale_mask is the multiply, then masked_fill_ in place with one Nq×Nk bool mask that
    every batch and head shares. kernels/reference.py builds it each call: a fill writes all of it,
    the in-place triu_ writes only the entries it zeroes (it reads nothing: the counters show
    12 KB). Each operand is read once, so the mask counts once, not once per head; at N = 4096 the
    16 MB mask is partly re-read from DRAM (reports/validate-h200)."""
    s_bytes = shape.score_elems * shape.elem_bytes
    q, kv, o = _tensor_bytes(shape, shape.seq_q), _kv_bytes(shape), _tensor_bytes(shape, shape.seq_q)
    mask = shape.seq_q * shape.seq_kv
    io = {
        "qk_matmul": (q + kv, s_bytes),  # read Q, K; write S
        # read S, write S·scale; causal: masked_fill_ reads it and the mask, writes it; the mask's build
        "scale_mask": (2 * s_bytes + mask, 2 * s_bytes + mask + _mask_zeroed(shape)) if shape.causal
        else (s_bytes, s_bytes),
        "softmax": (s_bytes, s_bytes),  # read S, write P
        "pv_matmul": (s_bytes + kv, o),  # read P, V; write O
    }
    _check_step(step)
    return io[step]


def naive_step_bytes(shape: Shape, step: str) -> int:
    """HBM bytes of one naive step: each operand read once and each result written once. The
    backward's masked_fill reads the gradient and the causal mask and writes a new gradient."""
    s_bytes = shape.score_elems * shape.elem_bytes
    q, kv, o = _tensor_bytes(shape, shape.seq_q), _kv_bytes(shape), _tensor_bytes(shape, shape.seq_q)
    mask = shape.seq_q * shape.seq_kv if shape.causal else 0
    bwd = {
        "pv_matmul": 2 * o + 2 * kv + 2 * s_bytes,  # read dO, V, P, dO; write dP, dV (dO read per matmul)
        "softmax": 3 * s_bytes,  # read P, dP; write dS
        "scale_mask": 2 * s_bytes + (2 * s_bytes + mask if shape.causal else 0),  # read dS, write dS·scale
        "qk_matmul": s_bytes + kv + q + s_bytes + q + kv,  # dQ = dS K; dK = dSᵀ Q: each reads dS
    }
    return _by_mode(shape, sum(_fwd_step_io(shape, step)), bwd[step])


def _check_step(step: str) -> None:
    if step not in NAIVE_STEPS:
        raise ValueError(f"unknown naive step '{step}'; allowed: {', '.join(NAIVE_STEPS)}")


def _by_mode(shape: Shape, fwd: int, bwd: int) -> int:
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[shape.mode]


# ---------------------------------------------------------------------------------------------
# Fused attention (FlashAttention and the SDPA backends, one kernel or three for backward).
# ---------------------------------------------------------------------------------------------

BWD_FLOP_RATIO = 2.5  # FlashAttention-2 paper §4: backward = 2.5x forward (5 matmuls vs 2)


def fused_flops(shape: Shape) -> float:
    """Algorithmic FLOPs: 4·B·H·Nq·Nk·D forward (Q Kᵀ and P V, 2·M·N·K each), ×0.5 when causal
    (FlashAttention papers, Triton's tutorial, tritonbench), ×2.5 for backward."""
    fwd = 4 * shape.bh * shape.seq_q * shape.seq_kv * shape.head_dim
    if shape.causal:
        fwd *= 0.5
    return _by_mode(shape, fwd, BWD_FLOP_RATIO * fwd)


def _visible_keys(shape: Shape, row_end: int) -> int:
    """Keys visible to the query rows below ``row_end`` (top-left causal: key j <= query i)."""
    return min(row_end, shape.seq_kv) if shape.causal else shape.seq_kv


def _tiles_visited(shape: Shape, block_m: int, block_n: int) -> int:
    """Sum over query blocks of the key tiles each visits (whole tiles, masked ones included)."""
    total = 0
    for m in range(math.ceil(shape.seq_q / block_m)):
        total += math.ceil(_visible_keys(shape, (m + 1) * block_m) / block_n)
    return total


def _query_tiles_visited(shape: Shape, block_m: int, block_n: int) -> int:
    """Sum over key blocks of the query tiles each visits (the dK/dV kernel's loop): with causal
    attention, key block n is seen by query rows from its first key on."""
    total = 0
    for n in range(math.ceil(shape.seq_kv / block_n)):
        first_row = min(n * block_n, shape.seq_q) if shape.causal else 0
        total += math.ceil((shape.seq_q - first_row) / block_m)
    return total


def executed_flops(shape: Shape, tiles: Tiles) -> float:
    """FLOPs a tiled kernel really issues: whole (BLOCK_M × BLOCK_N) tiles, 2 matmuls per tile
    forward; 7 backward as our two backward kernels do (S and dP recomputed in both, plus dV, dK,
    dQ). NaN for a pass whose tiles are not known."""
    d = shape.head_dim
    fwd = math.nan if tiles.fwd is None else \
        shape.bh * _tiles_visited(shape, *tiles.fwd) * tiles.fwd[0] * tiles.fwd[1] * 2 * (2 * d)
    if tiles.dkdv is None or tiles.dq is None:
        bwd = math.nan
    else:  # dK/dV kernel: per (key tile, query tile) pair, S, dP, dV and dK: 4 matmuls. dQ kernel: S, dP, dQ.
        bwd = (shape.bh * _query_tiles_visited(shape, *tiles.dkdv) * tiles.dkdv[0] * tiles.dkdv[1] * 4 * (2 * d)
               + shape.bh * _tiles_visited(shape, *tiles.dq) * tiles.dq[0] * tiles.dq[1] * 3 * (2 * d))
    return _by_mode(shape, fwd, bwd)


def split_kv_executed_flops(shape: Shape, plan: split_kv.SplitPlan) -> float:
    """Tensor FLOPs the split-KV forward (kernels.flash_decode) issues: per (split, batch, K/V head)
    a block of ``plan.block_m`` rows (the group's query rows, padded) times the key tiles it takes
    (strided: every visible tile once over all splits; else the tiles of its chunk), two matmuls of
    2·rows·keys·D each. Causal (top-left) attention stops at key seq_q − 1."""
    visible = min(shape.seq_kv, shape.seq_q) if shape.causal else shape.seq_kv
    if plan.strided:
        tiles = math.ceil(visible / split_kv.BLOCK_N)
    else:
        tiles = sum(math.ceil(max(0, min(lo + plan.chunk, visible) - lo) / split_kv.BLOCK_N)
                    for lo in range(0, plan.splits * plan.chunk, plan.chunk))
    return shape.batch * shape.kv_heads * tiles * plan.block_m * split_kv.BLOCK_N * 2 * (2 * shape.head_dim)


def compulsory_bytes(shape: Shape, writes_lse: bool = True) -> int:
    """Fewest HBM bytes a fused kernel can move: each input read once, each output written once.
    Forward: read Q, K, V; write O and (``writes_lse``) the fp32 logsumexp. Backward: read Q, K, V,
    O, dO and the logsumexp; write dQ, dK, dV (the fp32 delta = rowsum(O∘dO) is written and read
    once more). K, V, dK and dV have the shape's kv_heads: with grouped-query attention each K/V
    head moves once for its group."""
    q, kv = _tensor_bytes(shape, shape.seq_q), _kv_bytes(shape)
    row_stats = shape.bh * shape.seq_q * LSE_BYTES
    fwd = q + 2 * kv + q + (row_stats if writes_lse else 0)
    bwd = (q + 2 * kv + q + q + row_stats) + (q + 2 * kv) + 2 * row_stats
    return _by_mode(shape, fwd, bwd)


def tile_bytes(shape: Shape, tiles: Tiles) -> float:
    """Bytes moved when every query block re-reads the K and V tiles it visits (and, in the dK/dV
    kernel, every key block re-reads Q, dO and the row statistics): the traffic L2 serves, for a
    kernel with these tiles (backward: structured as ours, a dK/dV and a dQ kernel). Forward:
    Q once + Σ_blocks visited·(K+V tile) + O + logsumexp. NaN for a pass whose tiles are unknown."""
    e, d = shape.elem_bytes, shape.head_dim
    q = _tensor_bytes(shape, shape.seq_q)
    row_stats = shape.bh * shape.seq_q * LSE_BYTES
    if tiles.fwd is None:
        fwd = math.nan
    else:
        fwd = q + shape.bh * _tiles_visited(shape, *tiles.fwd) * 2 * tiles.fwd[1] * d * e + q + row_stats
    if tiles.dkdv is None or tiles.dq is None:
        return _by_mode(shape, fwd, math.nan)
    dkdv_tile, dq_tile = tiles.dkdv, tiles.dq
    # dK/dV: K, V once; per visited query tile: Q and dO tiles plus lse and delta rows; write dK, dV.
    kv = _kv_bytes(shape)  # each program of a K/V head walks the query tiles of every head in its group
    q_rows_tile = dkdv_tile[0] * (2 * d * e + 2 * LSE_BYTES)
    dkdv = 2 * kv + shape.bh * _query_tiles_visited(shape, *dkdv_tile) * q_rows_tile + 2 * kv
    # dQ: Q, dO, lse, delta once; per visited key tile: K and V tiles; write dQ.
    dq = 2 * q + 2 * row_stats + shape.bh * _tiles_visited(shape, *dq_tile) * 2 * dq_tile[1] * d * e + q
    preprocess = 2 * q + row_stats  # read O, dO; write delta
    return _by_mode(shape, fwd, dkdv + dq + preprocess)


def per_row_bytes(shape: Shape) -> float:
    """Bytes a one-program-per-query-row kernel moves (kernels.triton_naive): each row reads its
    query and every key and value it sees (top-left causal: min(i + 1, Nk) keys for row i), and
    writes its output row; nothing is shared between rows, so K and V move once per query row.
    Forward only (that kernel has no backward): NaN for bwd."""
    visible = _mask_zeroed(shape) if shape.causal else shape.seq_q * shape.seq_kv  # Σ_rows keys seen
    row = shape.head_dim * shape.elem_bytes
    fwd = shape.bh * (shape.seq_q * row + visible * 2 * row + shape.seq_q * row)
    return _by_mode(shape, fwd, math.nan)


def fa1_paper_bytes(shape: Shape, sram_bytes: int) -> float:
    """HBM traffic of FlashAttention (Dao et al. 2022) Algorithm 1 for SRAM of M bytes, whose
    Theorem 2 gives Θ(N²d²/M): with Bc = ⌈M/(4d)⌉ columns per block, K and V are read once and Q,
    O, ℓ, m are read and O, ℓ, m written once per each of Tc = ⌈N/Bc⌉ outer iterations. Forward
    only; M counted in elements of the shape's dtype, as in the paper."""
    e, d = shape.elem_bytes, shape.head_dim
    m_elems = sram_bytes // e
    block_c = max(1, math.ceil(m_elems / (4 * d)))
    t_c = math.ceil(shape.seq_kv / block_c)
    kv = 2 * shape.seq_kv * d
    per_outer = 3 * shape.seq_q * d + 4 * shape.seq_q  # read Q, O; write O (elements); ℓ, m in and out
    return shape.bh * (kv + t_c * per_outer) * e


class Cost(NamedTuple):
    flops: float
    hbm_bytes: float
    tile_bytes: float


def cost_of(costing: Costing, shape: Shape, step: str = "total", path: str = "") -> Cost:
    """FLOPs and bytes of one row (an implementation's ``total``, or one of the naive steps), by
    the implementation's declared costing (``Impl.costing``). Every command and view calls this.

    ``total`` rows share the algorithmic FLOP convention (:func:`fused_flops`) so their TFLOP/s
    compare on equal terms. Bytes: unfused attention (stepwise, or SDPA's math backend) moves the
    four steps' bytes, which are also its tile bytes (nothing is re-read from L2 on purpose); a
    fused kernel moves its compulsory bytes, and its tile bytes follow its tiles (NaN when its
    tiles are not declared) or, on the split-KV path, K and V once per K/V head plus the partials;
    a per-row kernel re-reads K and V for every query row. An implementation that expands GQA
    inputs with repeat_interleave (``repeats_kv``) moves the copy too, and then attends as if every
    query head had its own K and V. ``path`` is the row's recorded kernel path: where it names the
    costing's ``fast_path``, the forward tiles are that kernel's."""
    if step != "total":
        if costing.kind != "stepwise":
            raise ValueError(f"step '{step}' exists only for stepwise implementations; this one is {costing.kind}")
        nbytes = naive_step_bytes(shape, step)
        return Cost(naive_step_flops(shape, step), nbytes, nbytes)
    flops = fused_flops(shape)
    copy = 0
    if costing.repeats_kv and shape.group > 1:
        copy = repeat_kv_bytes(shape)
        shape = replace(shape, kv_heads=shape.heads)
    if costing.kind in ("stepwise", "unfused"):
        nbytes = sum(naive_step_bytes(shape, s) for s in NAIVE_STEPS) + copy
        return Cost(flops, nbytes, nbytes)
    compulsory = compulsory_bytes(shape, costing.writes_lse) + copy
    if costing.kind == "per_row":
        return Cost(flops, compulsory, per_row_bytes(shape) + copy)
    decode = kernel_plan(costing, shape)
    if decode is not None:
        fwd = compulsory_bytes(shape.with_mode("fwd"), costing.writes_lse) + split_kv.partial_bytes(
            shape.batch, shape.heads, shape.seq_q, shape.head_dim, decode.splits)
        bwd = 0.0 if shape.mode == "fwd" else _fused_tile_bytes(costing, shape.with_mode("bwd"), path)
        return Cost(flops, compulsory, (fwd if shape.mode != "bwd" else 0.0) + bwd + copy)
    return Cost(flops, compulsory, _fused_tile_bytes(costing, shape, path) + copy)


def _fused_tile_bytes(costing: Costing, shape: Shape, path: str = "") -> float:
    tiles = costing.tiles_for(shape.head_dim, shape.dtype, path)
    return math.nan if tiles is None else tile_bytes(shape, tiles)


def kernel_plan(costing: Costing, shape: Shape) -> split_kv.SplitPlan | None:
    """The split-KV plan the forward of a ``split_kv`` implementation runs with (None: tiled)."""
    if not costing.split_kv or shape.mode == "bwd":
        return None
    return split_kv.plan(shape.batch, shape.kv_heads, shape.group, shape.seq_q, shape.seq_kv)


def kernel_path(costing: Costing, shape: Shape, forward: str | None = None) -> str:
    """Which code path of a multi-path implementation runs this shape ('split-kv x16', 'tiled',
    'gluon-ws fwd, tiled bwd'), for the store's ``path`` column; '' for implementations with one
    path. ``forward`` is the forward path the implementation reported when the case ran (it can
    depend on the device, e.g. 'gluon-ws' on sm_90); without it, the shape decides."""
    if not costing.split_kv:
        return ""
    if forward is None:
        decode = kernel_plan(costing, shape)
        forward = "tiled" if decode is None else decode.label
    return {"fwd": forward, "bwd": "tiled", "fwd+bwd": f"{forward} fwd, tiled bwd"}[shape.mode]


def repeat_kv_bytes(shape: Shape) -> int:
    """K and V expanded from kv_heads to heads with repeat_interleave: read once, written heads /
    kv_heads times over; its backward sums the expanded gradients back (read the big, write the small)."""
    small, big = _kv_bytes(shape), _tensor_bytes(shape, shape.seq_kv)
    return _by_mode(shape, 2 * (small + big), 2 * (big + small))


def costing_for(impl: str, meta: dict | None = None) -> Costing:
    """The costing of a stored row's implementation: what the capture recorded for a user
    implementation (meta.json's ``user_impls``), else the registry's entry."""
    stored = ((meta or {}).get("user_impls") or {}).get(impl)
    if stored is not None:
        return Costing.from_meta(stored["costing"])
    from kernels.registry import REGISTRY  # loads torch: only when a stored capture names no costing

    if impl not in REGISTRY:
        raise ValueError(f"implementation '{impl}' is neither in the registry nor described in the capture's "
                         "meta.json (user_impls)")
    return REGISTRY[impl].costing


def arithmetic_intensity(flops: float, hbm_bytes: float) -> float:
    """FLOPs per byte of HBM traffic (Williams, Waterman, Patterson, "Roofline", CACM 2009)."""
    if math.isnan(hbm_bytes):
        return math.nan  # bytes the model does not give (a kernel's undeclared tiles)
    return flops / hbm_bytes if hbm_bytes > 0 else math.inf


def predicted_peak_bytes(shape: Shape, fused: bool) -> int:
    """Memory a run allocates beyond its inputs, by the model (the dashboard draws it against
    measured peaks). Unfused attention keeps two N×N matrices alive in the forward (the scaled S
    while P is computed from it) and about four with the backward (S and P saved, dP and dS);
    a fused kernel keeps O(N): the output, the fp32 logsumexp, and in the backward dQ, dK, dV and
    the fp32 delta."""
    o = _tensor_bytes(shape, shape.seq_q)
    grads = _tensor_bytes(shape, shape.seq_q) + 2 * _kv_bytes(shape)  # dQ, dK, dV
    rows = shape.bh * shape.seq_q * LSE_BYTES  # one fp32 per query row
    s_bytes = shape.score_elems * shape.elem_bytes
    if fused:
        return o + rows if shape.mode == "fwd" else o + rows + grads + rows
    return 2 * s_bytes + o if shape.mode == "fwd" else 4 * s_bytes + o + grads


# What the write-back L2 still holds of a kernel's output when the kernel ends, so that Nsight
# Compute does not see it reach DRAM during the kernel, as a fraction of the L2. Measured on an H200
# (62.9 MB L2) by reports/validate-h200, per kernel class, at N = 1024 and 4096 (the N×N outputs are
# 34 and 537 MB), where each class kept a nearly constant amount:
# - cuBLAS matmuls writing S: 26.9 to 27.4 MB in all 16 runs (0.43 of the L2);
# - elementwise and softmax kernels, which read as much as they write: 18.7 to 24.7 MB (0.35);
# - fused attention kernels, whose L2 also serves the K and V re-reads: 5 to 9 MB (1/8).
# These are measured fractions of one GPU, not datasheet figures; at N >= 4096 they change the
# total by under 5%, at N = 1024 by up to three quarters (qk_matmul at D64), which is why the
# classes are kept apart. reports/validate-h200-n2048 checks them on shapes they were not fitted on.
MATMUL_L2_RETENTION = 0.43
STREAMING_L2_RETENTION = 0.35
FUSED_L2_RETENTION = 0.125


def dram_bytes(shape: Shape, impl: str, step: str, l2_bytes: float | None = None, kv_splits: int = 1) -> float:
    """DRAM traffic Nsight Compute sees during a kernel (or a naive step's kernels): every input
    read once (fused kernels: Q, K and V; the L2 serves their re-reads), every output written
    once, less what the write-back L2 still holds at the end of each writing kernel (see the
    retention fractions above; none when ``l2_bytes`` is None). ``kv_splits`` > 1 is
    FlashAttention-2's split-KV path: each split writes an fp32 partial output and logsumexp per
    query row, and a combine kernel reads them back (Dao, flash-attention, flash_fwd_splitkv_kernel)."""
    q, kv = _tensor_bytes(shape, shape.seq_q), _kv_bytes(shape)
    if step == "total":
        partials = kv_splits * shape.bh * shape.seq_q * (shape.head_dim + 1) * 4 if kv_splits > 1 else 0
        reads, writes = q + 2 * kv + partials, q + shape.bh * shape.seq_q * LSE_BYTES + partials
        writers, retention = (2 if partials else 1), FUSED_L2_RETENTION  # split-KV: the splits, then the combine
    else:
        reads, writes = _fwd_step_io(shape, step)
        writers = 2 if step == "scale_mask" and shape.causal else 1  # the multiply and masked_fill_
        retention = MATMUL_L2_RETENTION if step in ("qk_matmul", "pv_matmul") else STREAMING_L2_RETENTION
    retained = 0.0 if l2_bytes is None else min(writes, writers * retention * l2_bytes)
    return reads + writes - retained
