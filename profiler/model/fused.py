"""The cost of fused attention (FlashAttention and the SDPA backends: one kernel forward, up to three
backward): algorithmic and executed FLOPs, compulsory and tile bytes.

Conventions, each with its source:
- Fused FLOPs are "algorithmic": 4·B·H·Nq·Nk·D forward (the two matmuls of attention), halved
  when causal (FlashAttention papers, Triton's fused-attention tutorial, tritonbench), and
  backward = 2.5x forward (FlashAttention-2 paper, §4: five matmuls S, dP, dV, dK, dQ against the
  forward's two). :func:`executed_flops` instead counts what our kernels really multiply: whole
  tiles, including masked halves of diagonal tiles and padded tails, and our portable backward's
  seven matmuls (S and dP are recomputed in both the dK/dV and the dQ kernel; five in the one-pass
  Gluon backward).
- Two byte counts: :func:`compulsory_bytes` (Q, K, V read once; O and logsumexp written once:
  what DRAM sees when L2 holds K and V) and :func:`tile_bytes` (each query block re-reads the K and
  V tiles it visits: what L2 serves).
"""

from __future__ import annotations

import math
import re

from attention_core import split_kv
from attention_core.costing import Tiles
from attention_core.shape import LSE_BYTES, Shape
from profiler.model.naive import by_mode, kv_bytes, mask_zeroed, tensor_bytes

BWD_FLOP_RATIO = 2.5  # FlashAttention-2 paper §4: backward = 2.5x forward (5 matmuls vs 2)


def fused_flops(shape: Shape) -> float:
    """Algorithmic FLOPs: 4·B·H·Nq·Nk·D forward (Q Kᵀ and P V, 2·M·N·K each), ×0.5 when causal
    (FlashAttention papers, Triton's tutorial, tritonbench), ×2.5 for backward."""
    fwd = 4 * shape.bh * shape.seq_q * shape.seq_kv * shape.head_dim
    if shape.causal:
        fwd *= 0.5
    return by_mode(shape, fwd, BWD_FLOP_RATIO * fwd)


def visible_keys(shape: Shape, row_end: int) -> int:
    """Keys visible to the query rows below ``row_end`` (top-left causal: key j <= query i)."""
    return min(row_end, shape.seq_kv) if shape.causal else shape.seq_kv


def tiles_visited(shape: Shape, block_m: int, block_n: int) -> int:
    """Sum over query blocks of the key tiles each visits (whole tiles, masked ones included)."""
    total = 0
    for m in range(math.ceil(shape.seq_q / block_m)):
        total += math.ceil(visible_keys(shape, (m + 1) * block_m) / block_n)
    return total


def packed_tiles_visited(shape: Shape, block_m: int, block_n: int) -> int:
    """:func:`tiles_visited` for a kernel that stacks the query rows of a K/V head's group into one
    tile's rows (FlashAttention-4's PackGQA, FlashAttention-2's decode with its query heads swapped
    into rows): per batch and K/V head, Nq·group rows, row r being query r // group; summed over
    batch × K/V heads (not × query heads)."""
    rows = shape.seq_q * shape.group
    total = 0
    for m in range(math.ceil(rows / block_m)):
        last_query = (min((m + 1) * block_m, rows) - 1) // shape.group
        total += math.ceil(visible_keys(shape, last_query + 1) / block_n)
    return total


def kv_tiles_read(shape: Shape, tile: tuple[int, int], packed: bool = False) -> int:
    """K/V tiles a tiled forward's programs take in all, over every batch and head: per query head
    (:func:`tiles_visited`), or per K/V head when the kernel packs a group's rows (:func:`packed_tiles_visited`)."""
    if packed:
        return shape.batch * shape.kv_heads * packed_tiles_visited(shape, *tile)
    return shape.bh * tiles_visited(shape, *tile)


def query_tiles_visited(shape: Shape, block_m: int, block_n: int) -> int:
    """Sum over key blocks of the query tiles each visits (the dK/dV kernel's loop): with causal
    attention, key block n is seen by query rows from its first key on."""
    total = 0
    for n in range(math.ceil(shape.seq_kv / block_n)):
        first_row = min(n * block_n, shape.seq_q) if shape.causal else 0
        total += math.ceil((shape.seq_q - first_row) / block_m)
    return total


def executed_flops(shape: Shape, tiles: Tiles, packed: bool = False) -> float:
    """FLOPs a tiled kernel really issues: whole (BLOCK_M × BLOCK_N) tiles, 2 matmuls per tile
    forward; 7 backward as our two backward kernels do (S and dP recomputed in both, plus dV, dK,
    dQ), 5 in a one-pass backward. ``packed``: the forward stacks a K/V head's query heads into a
    tile's rows (:func:`packed_tiles_visited`). NaN for a pass whose tiles are not known."""
    d = shape.head_dim
    fwd = math.nan if tiles.fwd is None else \
        kv_tiles_read(shape, tiles.fwd, packed) * tiles.fwd[0] * tiles.fwd[1] * 2 * (2 * d)
    if tiles.onepass is not None:  # per (key block, query tile) pair: S, dP, dV, dK, dQ
        bwd = shape.bh * query_tiles_visited(shape, *tiles.onepass) * tiles.onepass[0] * tiles.onepass[1] * 5 * (2 * d)
    elif tiles.dkdv is None or tiles.dq is None:
        bwd = math.nan
    else:  # dK/dV kernel: per (key tile, query tile) pair, S, dP, dV and dK: 4 matmuls. dQ kernel: S, dP, dQ.
        bwd = (shape.bh * query_tiles_visited(shape, *tiles.dkdv) * tiles.dkdv[0] * tiles.dkdv[1] * 4 * (2 * d)
               + shape.bh * tiles_visited(shape, *tiles.dq) * tiles.dq[0] * tiles.dq[1] * 3 * (2 * d))
    return by_mode(shape, fwd, bwd)


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


def tile_read_bytes(shape: Shape, tile: tuple[int, int], packed: bool = False) -> float:
    """Bytes a tiled forward asks the L2 to read: each program reads its query tile once and every
    K and V tile it visits (a K/V head's tiles once per packed tile when ``packed``). What the SMs
    request, before Hopper's L2 Request Coalescer merges concurrent reads of the same sectors."""
    return tensor_bytes(shape, shape.seq_q) + kv_tiles_read(shape, tile, packed) * 2 * tile[1] * shape.head_dim \
        * shape.elem_bytes


def compulsory_bytes(shape: Shape, writes_lse: bool = True) -> int:
    """Fewest HBM bytes a fused kernel can move: each input read once, each output written once.
    Forward: read Q, K, V; write O and (``writes_lse``) the fp32 logsumexp. Backward: read Q, K, V,
    O, dO and the logsumexp; write dQ, dK, dV (the fp32 delta = rowsum(O∘dO) is written and read
    once more). K, V, dK and dV have the shape's kv_heads: with grouped-query attention each K/V
    head moves once for its group."""
    q, kv = tensor_bytes(shape, shape.seq_q), kv_bytes(shape)
    row_stats = shape.bh * shape.seq_q * LSE_BYTES
    fwd = q + 2 * kv + output_bytes(shape) + (row_stats if writes_lse else 0) + descale_bytes(shape)
    bwd = (q + 2 * kv + q + q + row_stats) + (q + 2 * kv) + 2 * row_stats
    return by_mode(shape, fwd, bwd)


def output_bytes(shape: Shape) -> int:
    """Bytes of O: (B, H, Nq, D) in the output's dtype (bf16 for fp8 inputs: Shape.out_elem_bytes)."""
    return tensor_bytes(shape, shape.seq_q) // shape.elem_bytes * shape.out_elem_bytes


def descale_bytes(shape: Shape) -> int:
    """fp8 inputs' descale factors, one fp32 per (batch, head) of Q, K and V (kernels/flash_fwd_fp8.py);
    0 for other dtypes."""
    return 4 * shape.batch * (shape.heads + 2 * shape.kv_heads) if shape.dtype == "fp8" else 0


def tile_bytes(shape: Shape, tiles: Tiles) -> float:
    """Bytes moved when every query block re-reads the K and V tiles it visits (and, in the dK/dV
    kernel, every key block re-reads Q, dO and the row statistics): the traffic L2 serves, for a
    kernel with these tiles (backward: a dK/dV and a dQ kernel as our portable one, or the one-pass
    kernel of :func:`onepass_backward_bytes` when ``tiles.onepass`` is set). Forward:
    Q once + Σ_blocks visited·(K+V tile) + O + logsumexp. NaN for a pass whose tiles are unknown."""
    e, d = shape.elem_bytes, shape.head_dim
    q = tensor_bytes(shape, shape.seq_q)
    row_stats = shape.bh * shape.seq_q * LSE_BYTES
    if tiles.fwd is None:
        fwd = math.nan
    else:
        fwd = (q + shape.bh * tiles_visited(shape, *tiles.fwd) * 2 * tiles.fwd[1] * d * e + output_bytes(shape)
               + row_stats + descale_bytes(shape))
    if tiles.onepass is not None:
        return by_mode(shape, fwd, onepass_backward_bytes(shape, tiles.onepass))
    if tiles.dkdv is None or tiles.dq is None:
        return by_mode(shape, fwd, math.nan)
    dkdv_tile, dq_tile = tiles.dkdv, tiles.dq
    # dK/dV: K, V once; per visited query tile: Q and dO tiles plus lse and delta rows; write dK, dV.
    kv = kv_bytes(shape)  # each program of a K/V head walks the query tiles of every head in its group
    q_rows_tile = dkdv_tile[0] * (2 * d * e + 2 * LSE_BYTES)
    dkdv = 2 * kv + shape.bh * query_tiles_visited(shape, *dkdv_tile) * q_rows_tile + 2 * kv
    # dQ: Q, dO, lse, delta once; per visited key tile: K and V tiles; write dQ.
    dq = 2 * q + 2 * row_stats + shape.bh * tiles_visited(shape, *dq_tile) * 2 * dq_tile[1] * d * e + q
    preprocess = 2 * q + row_stats  # read O, dO; write delta
    return by_mode(shape, fwd, dkdv + dq + preprocess)


# How a row's path names a forward that cut its last wave (kernels.tile_schedule.SplitTail.label): A tiles, S chunks
SPLIT_TAIL_PATH = re.compile(r"split-tail (\d+)x(\d+)")


def split_tail_bytes(shape: Shape, forward_path: str, block_m: int) -> float:
    """Bytes a forward whose ``forward_path`` names 'split-tail AxS' moves beyond :func:`tile_bytes`: its last wave's
    A tiles of ``block_m`` rows, each cut by keys into S chunks (kernels.tile_schedule.split_tail), write every chunk's
    rows as fp32 outputs and logsumexps, which the merge reads back (kernels.tail_combine, FlashDecoding's merge, as
    split_kv.partial_bytes counts a decode's), and each chunk reads its tile's Q again (S − 1 extra reads; its K and V
    tiles are its own share of the keys, so the tile's K and V are read once as before). 0 for other paths."""
    found = SPLIT_TAIL_PATH.search(forward_path)
    if found is None:
        return 0.0
    tiles, splits = int(found[1]), int(found[2])
    rows = tiles * block_m
    partials = split_kv.partial_bytes(1, 1, rows, shape.head_dim, splits)  # written and read back
    return float(partials + (splits - 1) * rows * shape.head_dim * shape.elem_bytes)


def onepass_backward_bytes(shape: Shape, tile: tuple[int, int]) -> float:
    """Bytes of a one-pass backward (kernels.flash_bwd_hopper; FlashAttention-2's Algorithm 2 and
    FlashAttention-3's backward have the same structure) with (BLOCK_M query rows, BLOCK_N keys):
    each program reads its K and V block once, and per query tile it visits the Q and dO tiles
    and their lse and delta rows; it adds that tile's dQ share into an fp32 (B, H, Nq_pad, D)
    buffer (one reduce of BLOCK_M·D·4 bytes per visited tile, the adds done in L2), and writes dK,
    dV. Around it: the delta preprocess (read O, dO; write delta), zeroing the buffer, and a
    conversion that reads its first Nq rows of each head and writes dq."""
    block_m, block_n = tile
    e, d = shape.elem_bytes, shape.head_dim
    q = tensor_bytes(shape, shape.seq_q)
    kv = kv_bytes(shape)
    row_stats = shape.bh * shape.seq_q * LSE_BYTES
    visited = shape.bh * query_tiles_visited(shape, block_m, block_n)
    dq_buffer = shape.bh * math.ceil(shape.seq_q / block_m) * block_m * d * 4
    main = 2 * kv + visited * block_m * (2 * d * e + 2 * LSE_BYTES) + visited * block_m * d * 4 + 2 * kv
    preprocess = 2 * q + row_stats
    convert = shape.bh * shape.seq_q * d * 4 + q
    return preprocess + dq_buffer + main + convert


def per_row_bytes(shape: Shape) -> float:
    """Bytes a one-program-per-query-row kernel moves (kernels.triton_naive): each row reads its
    query and every key and value it sees (top-left causal: min(i + 1, Nk) keys for row i), and
    writes its output row; nothing is shared between rows, so K and V move once per query row.
    Forward only (that kernel has no backward): NaN for bwd."""
    visible = mask_zeroed(shape) if shape.causal else shape.seq_q * shape.seq_kv  # Σ_rows keys seen
    row = shape.head_dim * shape.elem_bytes
    fwd = shape.bh * (shape.seq_q * row + visible * 2 * row + shape.seq_q * row)
    return by_mode(shape, fwd, math.nan)


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


def repeat_kv_bytes(shape: Shape) -> int:
    """K and V expanded from kv_heads to heads with repeat_interleave: read once, written heads /
    kv_heads times over; its backward sums the expanded gradients back (read the big, write the small)."""
    small, big = kv_bytes(shape), tensor_bytes(shape, shape.seq_kv)
    return by_mode(shape, 2 * (small + big), 2 * (big + small))
