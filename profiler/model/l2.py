"""What Hopper's L2 and DRAM counters should read for a fused attention kernel, kernel by kernel: the reads
its programs request, what of them reaches the L2 slices, the traffic across the two L2 partitions, the
store and reduce-add sectors, and the DRAM bytes left once the write-back L2 keeps what it still holds
when the kernel ends. ``validate`` (profiler.nsight.validate) sets these beside Nsight Compute's
``lrc__xbar2gpc_sectors_op_read`` (requested), ``lrc__lts2lrc_sectors_op_read`` (reaching the slices),
``lts__t_sectors_srcunit_ltcfabric`` (from the other partition), ``lts__t_bytes`` and ``dram__bytes``.
Pure functions: no torch, no files.

What sets each term, and where it comes from:
- **Requested reads**: the tile schedule (profiler.model.fused.tile_read_bytes forward; per visited
  (key block, query tile) pair backward: FlashAttention-2 paper, Algorithm 2).
- **Coalescing**: Hopper's L2 Request Coalescer merges reads of the same sector by different SMs while
  one is in flight, so what reaches the slices is a fraction of what was asked. Only reads that
  programs make together can merge: streams that start at the same tile (every program of a head in a
  non-causal forward) merge; streams that start at each program's own diagonal (FlashAttention-2 and
  -4's causal forward, every causal one-pass backward but FlashAttention-2's, which walks from the last
  query tile down) barely do; a decode split reads keys no other program reads. How much the aligned
  streams merge depends on timing the tile order does not fix, so it is a measured fraction per kernel
  and pass (:data:`SLICE_READ_FRACTION`), taken from the fit captures and checked on unseen shapes.
- **Partitions**: Hopper's L2 is two partitions joined by a fabric, addresses interleaved between them;
  an SM's request goes to its own partition, and a line homed in the other one is looked up there as
  well (Nsight Compute Profiling Guide, "L2 Cache": the ``ltcfabric`` source unit). Half of all lines
  are homed far, so a store or reduce-add counts 1.5 times at the slices, and a line read once per
  partition that reads it costs half a line of fabric traffic: once for a tensor one program reads
  (one partition), twice for one read by programs spread over both.
- **Stores**: a store from a register layout that covers 16 of a sector's 32 bytes per request (the
  wgmma accumulator layout: two consecutive 2-byte elements per thread, four threads per row) writes
  each sector twice; a TMA or shared-memory-staged store once. Our Gluon kernels store from the
  accumulator layout (kernels/flash_fwd_hopper.py's epilogue, kernels/flash_bwd_hopper.py's dK/dV).
- **Write-back retention (DRAM)**: Nsight Compute flushes the caches before each kernel and counts DRAM
  traffic until it ends, so output still dirty in L2 at the end never shows. A line lives in one
  partition and a copy of it in the other where both read it, so the data a kernel keeps is at most
  half the L2; when a kernel touches more than that, the lines left at its end are its most recent
  ones, in the proportions it touches them, so the dirty share of them is its written share of
  everything it touches. (For a non-grouped forward, Q, K, V and O alike, that is an eighth of the L2:
  the constant reports/validate-h200 measured before this model derived it.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from attention_core import split_kv
from attention_core.shape import LSE_BYTES, Shape
from profiler.model.fused import kv_tiles_read, output_bytes, query_tiles_visited, tile_read_bytes
from profiler.model.naive import kv_bytes, tensor_bytes

FAR_LOOKUP = 0.5  # of lines homed in the other partition: half, with the two partitions' lines interleaved
# Of the L2, the share a kernel keeps its own lines in: half, a line read on both partitions being held in
# each (module docstring). A simplification for kernels that read each line on one side only (a decode
# split, the preprocess, the combine): their rows are within DRAM's 15% with it (docs/validation.md).
KEPT_SHARE = 0.5
ACCUMULATOR_BYTES = 4  # fp32 dQ (and FlashAttention-4's grouped dK/dV) accumulators

# Of the reads a kernel's programs request (lrc__xbar2gpc_sectors_op_read), the fraction that reaches the
# L2 slices (lrc__lts2lrc_sectors_op_read), by kernel family (:func:`kernel_family`) and pass (mode, causal),
# for kernels whose programs share the tiles they read. Measured: the mean over the rows of the fit
# captures that share tiles, reports/validate-h200-issue27/fit-{prefill,gqa,bwd,gqa-bwd,decode} (H200) and
# reports/validate-h100-issue43/fit-portable (H100), which tests/test_l2_model.py recomputes from them; the
# unseen captures check it. A decode step (Nq <= 16) is its own pass: its programs run per query head or
# split, not per query tile of one head. Where no two programs read the same tile (a decode split, a packed group),
# nothing can merge and the fraction is 1.
SLICE_READ_FRACTION = {
    "triton_flash": {("fwd", False): 0.551, ("fwd", True): 0.715, ("bwd", False): 0.526, ("bwd", True): 1.000},
    "triton_flash/portable": {("fwd", False): 0.579, ("fwd", True): 0.688},
    "sdpa_flash": {("fwd", False): 0.657, ("fwd", True): 0.995, ("bwd", False): 0.590, ("bwd", True): 0.864,
                   ("decode", False): 0.894},
    "sdpa_cudnn": {("fwd", False): 0.507, ("fwd", True): 0.791, ("bwd", False): 0.680, ("bwd", True): 0.998,
                   ("decode", False): 0.609},
    "fa4": {("fwd", False): 0.471, ("fwd", True): 0.947, ("bwd", False): 0.721, ("bwd", True): 0.992},
}


def kernel_family(impl: str, kernel: str) -> str:
    """The key of :data:`SLICE_READ_FRACTION`: the implementation, and for ours which forward ran (the
    portable ``_attn_fwd`` on a (query tiles, B·H) grid, or the persistent Gluon one on sm_90)."""
    if impl == "triton_flash" and "_attn_fwd" in kernel and "_hopper" not in kernel:
        return "triton_flash/portable"
    return impl


def slice_read_fraction(impl: str, kernel: str, shape: Shape) -> float:
    """Measured fraction of requested reads that reach the L2 slices, for the kernel family and pass
    (:meth:`Traffic.slice_bytes` uses 1 where no tile is shared); NaN for a kernel not measured."""
    return SLICE_READ_FRACTION.get(kernel_family(impl, kernel), {}).get(pass_key(shape), math.nan)


def pass_key(shape: Shape) -> tuple[str, bool]:
    """The pass a :data:`SLICE_READ_FRACTION` entry is for: (mode, causal), or ("decode", False) for Nq <= 16."""
    if shape.mode == "fwd" and shape.seq_q <= 16:
        return "decode", False
    return shape.mode, bool(shape.causal)


@dataclass(frozen=True)
class KernelTraffic:
    """One kernel's memory traffic, in bytes. ``private``: distinct bytes each read by one program (one
    partition looks them up); ``shared``: distinct bytes read by programs on both partitions;
    ``accumulated``: an fp32 buffer reduce-added into (read from DRAM once, dirty at the end);
    ``written``: distinct bytes stored; ``stored``: sector bytes of those stores (twice ``written`` for a
    half-sector store); ``reductions``: reduce-add bytes issued; ``requested``: reads the programs ask."""

    name: str
    requested: float = 0.0
    private: float = 0.0
    shared: float = 0.0
    accumulated: float = 0.0
    written: float = 0.0
    stored: float = 0.0
    reductions: float = 0.0

    def fabric(self) -> float:
        """Bytes the other partition asks for: half of each line read per partition reading it, half of
        every store and reduce-add (``l2_fabric_bytes``)."""
        return FAR_LOOKUP * (self.private + 2 * self.shared + self.stored + self.reductions)

    def slice_bytes(self, read_fraction: float) -> float:
        """``lts__t_bytes``: requested reads that reach the slices, the far lookups of the lines read,
        and each store and reduce-add at the near slice and, for far lines, again at the far one."""
        return (self.requested * read_fraction + FAR_LOOKUP * (self.private + 2 * self.shared)
                + (1 + FAR_LOOKUP) * (self.stored + self.reductions))

    def dram_bytes(self, l2_bytes: float | None) -> float:
        """DRAM bytes during the kernel: every line read once (the caches start flushed), and what it
        writes less what the L2 still holds dirty at its end (module docstring; all of it without an L2 size)."""
        reads = self.private + self.shared + self.accumulated
        dirty = self.written + self.accumulated
        if l2_bytes is None:
            return reads + dirty
        kept = KEPT_SHARE * l2_bytes
        touched = reads + self.written
        retained = dirty if touched <= kept else kept * dirty / touched
        return reads + dirty - retained


@dataclass(frozen=True)
class Traffic:
    """The kernels of one forward or backward run; sums over them."""

    kernels: tuple[KernelTraffic, ...] = field(default_factory=tuple)

    def total(self, name: str) -> float:
        return float(sum(getattr(k, name) for k in self.kernels))

    def fabric(self) -> float:
        return float(sum(k.fabric() for k in self.kernels))

    def shares_reads(self) -> bool:
        """Whether some tile is read by more than one program (what the coalescer can merge)."""
        return any(k.shared for k in self.kernels)

    def slice_bytes(self, read_fraction: float) -> float:
        """``lts__t_bytes`` of the run, ``read_fraction`` of its requested reads reaching the slices (the
        measured fraction is of the whole run's reads, as :data:`SLICE_READ_FRACTION` was taken); all of
        them where no tile is shared."""
        fraction = read_fraction if self.shares_reads() else 1.0
        return float(sum(k.slice_bytes(fraction) for k in self.kernels))

    def dram_bytes(self, l2_bytes: float | None) -> float:
        return float(sum(k.dram_bytes(l2_bytes) for k in self.kernels))


# How each implementation's kernels store and what they run around the main kernel (their sources and
# the kernel lists Nsight Compute records: reports/validate-h100-issue43/unseen4-*).
HALF_SECTOR_STORES = ("_attn_fwd_hopper", "_attn_bwd_hopper")  # our Gluon kernels (module docstring)
# PyTorch's FlashAttention-2 backward copies two query-sized tensors before it runs (two elementwise
# kernels reading and writing B·H·Nq·D each; what they copy is PyTorch's business, the counters show them).
BACKWARD_COPIES = {"sdpa_flash": 2}
# Grouped-query backward: PyTorch's FlashAttention-2 and cuDNN write dK and dV per query head and sum each
# group in two more kernels (at::reduce_kernel, cudnn::fmha_reduce_head); FlashAttention-4 reduce-adds
# every query head's fp32 dK and dV into per-K/V-head accumulators and converts them after; ours walks the
# group inside one program and writes dK and dV once.
GQA_BACKWARD = {"sdpa_flash": "expand", "sdpa_cudnn": "expand", "fa4": "accumulate"}
# Who zeroes the fp32 dQ accumulator: FlashAttention-2's dot(dO, O) kernel (Clear_dQaccum), cuDNN's and
# FlashAttention-4's preprocess do it with the delta; ours launches a fill kernel of its own.
ZEROES_IN_PREPROCESS = ("sdpa_flash", "sdpa_cudnn", "fa4")


def forward_traffic(shape: Shape, kernel: str, tile: tuple[int, int], packed: bool = False,
                    kv_splits: int = 1, tail: tuple[int, int] | None = None) -> Traffic:
    """A fused forward: its programs read their query tile once and every K/V tile they visit, store O and
    the fp32 logsumexp. Split-KV paths (ours, ``_decode_split``; FlashAttention-2's splitkv, ``kv_splits``
    > 1) store fp32 partials per split that a combine kernel reads back. ``tail``: (A, S) where our forward
    cut its last wave's A query tiles into S chunks of keys each (kernels.tile_schedule.split_tail, a path's
    'split-tail AxS'): the chunks read their tile's Q S times and its K/V once, and store fp32 partials
    that the merge (kernels.tail_combine) reads back to write those tiles' O and logsumexp rows."""
    q, kv = tensor_bytes(shape, shape.seq_q), kv_bytes(shape)
    o = output_bytes(shape)  # O in the output's dtype (bf16 for fp8 inputs)
    rows = shape.bh * shape.seq_q * LSE_BYTES
    decode = split_kv.plan(shape.batch, shape.kv_heads, shape.group, shape.seq_q, shape.seq_kv)
    ours_split = "_decode_split" in kernel and decode is not None
    splits = decode.splits if ours_split else kv_splits
    if ours_split:
        requested = q + 2 * kv
        readers = 1  # one program per (split, K/V head): every key read by one program
    else:
        requested = tile_read_bytes(shape, tile, packed)
        kv_tiles = math.ceil(shape.seq_kv / tile[1]) * shape.batch * shape.kv_heads
        readers = kv_tiles_read(shape, tile, packed) / kv_tiles  # programs reading each K/V tile, on average
    requested += (splits - 1) * q  # every split loads its query rows again (157 splits at Nkv 40000)
    shared = 2 * kv if readers > 1.5 else 0.0  # more than one program per K/V tile on average: both partitions
    private = q + (0.0 if shared else 2 * kv)
    half = 2 if any(name in kernel for name in HALF_SECTOR_STORES) else 1
    if splits > 1:
        partials = splits * shape.bh * shape.seq_q * (shape.head_dim + 1) * split_kv.PARTIAL_BYTES
        main = KernelTraffic("split", requested, private, shared, written=partials, stored=partials)
        combine = KernelTraffic("combine", partials, partials, written=o + rows, stored=o + rows)
        return Traffic((main, combine))
    if tail is not None:
        return split_tail_traffic(shape, tile, tail, requested, private, shared, half)
    return Traffic((KernelTraffic("forward", requested, private, shared, written=o + rows, stored=half * o + rows),))


def split_tail_traffic(shape: Shape, tile: tuple[int, int], tail: tuple[int, int], requested: float, private: float,
                       shared: float, half: int) -> Traffic:
    """Our forward with its last wave's A query tiles cut into S chunks of keys each (``tail`` = (A, S):
    kernels.tile_schedule.split_tail), given the uncut forward's ``requested``, ``private`` and ``shared`` reads: three
    launches, each a kernel of its own to Nsight Compute, which flushes the caches before each.

    - the whole tiles: every tile but the tail's, as the uncut forward reads and writes them;
    - the chunks (A·S programs): each reads its tile's Q and its share of the tile's keys, so the tail's Q is read S
      times and its K and V once; each writes its rows' fp32 output and logsumexp (kernels.tail_combine.partials,
      A·BLOCK_M·S rows, the ragged rows past Nq too);
    - the merge (one program a row, rows past Nq skipped): reads a row's S partials, writes its O and logsumexp.

    The tail is the last A tiles of the tile order, which goes head by head without a mask (kernels.tile_schedule.plan):
    taken here as ceil(A / query blocks) heads, each with its last, possibly ragged, query block. Its fp32 stores are
    counted whole (not half-sector: not measured yet); the merge's reads take the run's coalescing fraction
    (:meth:`Traffic.slice_bytes`), which they do not share: a few MB of a run's GB.
    profiler.model.fused.split_tail_bytes charges a row's tile bytes the same partials and Q re-reads (with whole
    tiles' rows)."""
    tiles, chunks = tail
    block_m, d, e = tile[0], shape.head_dim, shape.elem_bytes
    m_blocks = math.ceil(shape.seq_q / block_m)
    heads = min(math.ceil(tiles / m_blocks), shape.bh)  # the heads the tail's tiles belong to
    rows = tiles * block_m - heads * (m_blocks * block_m - shape.seq_q)  # the tail's rows below Nq
    q_rows = rows * d * e
    kv_tile = (requested - tensor_bytes(shape, shape.seq_q)) / (shape.bh * m_blocks)  # K and V a tile reads
    o, lse = output_bytes(shape), shape.bh * shape.seq_q * LSE_BYTES
    merged_o = rows * o / (shape.bh * shape.seq_q)  # the O rows the merge writes
    out_rows = merged_o + rows * LSE_BYTES  # and their logsumexps
    partials = tiles * block_m * chunks * (d + 1) * split_kv.PARTIAL_BYTES
    whole = KernelTraffic("forward", requested - q_rows - tiles * kv_tile, private - q_rows, shared,
                          written=o + lse - out_rows, stored=half * (o - merged_o) + lse - rows * LSE_BYTES)
    head_kv = 2 * shape.seq_kv * d * e  # a (query) head's K and V
    readers = tiles / heads  # tiles reading each of those heads' keys
    keys = heads * head_kv  # distinct: read by several programs (both partitions) where a head has several tail tiles
    chunk = KernelTraffic("chunks", chunks * q_rows + tiles * kv_tile, q_rows + (0.0 if readers > 1.5 else keys),
                          keys if readers > 1.5 else 0.0, written=partials, stored=partials)
    read = rows * chunks * (d + 1) * split_kv.PARTIAL_BYTES
    merge = KernelTraffic("tail merge", read, read, written=out_rows, stored=out_rows)
    return Traffic((whole, chunk, merge))


def backward_traffic(shape: Shape, impl: str, kernel: str, tile: tuple[int, int]) -> Traffic:
    """A one-pass fused backward with (BLOCK_M query rows, BLOCK_N keys) per step (profiler.model.counters.
    backward_tile): the delta preprocess (read O, dO; write delta), zeroing the fp32 dQ accumulator, the
    main kernel (per key block K and V once; per visited query tile Q, dO, logsumexp and delta rows, and a
    reduce-add of its dQ share; write dK, dV), the conversion of the accumulator to dQ, and around them
    what each implementation adds (:data:`BACKWARD_COPIES`, :data:`GQA_BACKWARD`)."""
    block_m, _ = tile
    e, d = shape.elem_bytes, shape.head_dim
    q, kv = tensor_bytes(shape, shape.seq_q), kv_bytes(shape)
    rows = shape.bh * shape.seq_q * LSE_BYTES
    visited = shape.bh * query_tiles_visited(shape, *tile)
    accumulator = shape.bh * math.ceil(shape.seq_q / block_m) * block_m * d * ACCUMULATOR_BYTES
    dq_rows = shape.bh * shape.seq_q * d * ACCUMULATOR_BYTES
    gqa = GQA_BACKWARD.get(impl) if shape.group > 1 else None
    half = 2 if any(name in kernel for name in HALF_SECTOR_STORES) else 1
    kernels = [KernelTraffic("copy", q, q, written=q, stored=q) for _ in range(BACKWARD_COPIES.get(impl, 0))]
    zero = accumulator if impl in ZEROES_IN_PREPROCESS else 0
    kernels.append(KernelTraffic("preprocess", 2 * q, 2 * q, written=rows + zero, stored=rows + zero))
    if not zero:
        kernels.append(KernelTraffic("zero dQ accumulator", written=accumulator, stored=accumulator))
    grads = 2 * kv * (shape.group if gqa == "expand" else 1)  # dK, dV as the main kernel writes them
    reductions = visited * block_m * d * ACCUMULATOR_BYTES
    accumulated = accumulator
    if gqa == "accumulate":  # every query head's fp32 dK and dV reduce-added into its K/V head's
        reductions += 2 * shape.bh * shape.seq_kv * d * ACCUMULATOR_BYTES
        accumulated += 2 * kv // e * ACCUMULATOR_BYTES
        grads = 0
    # a peer's programs run per query head and each loads its K/V head's block; ours walks the group in one
    kv_readers = shape.group if gqa else 1
    main = KernelTraffic("backward", requested=2 * kv * kv_readers + visited * block_m * (2 * d * e + 2 * LSE_BYTES),
                         private=0 if kv_readers > 1 else 2 * kv,
                         shared=2 * q + 2 * rows + (2 * kv if kv_readers > 1 else 0), accumulated=accumulated,
                         written=grads, stored=half * grads, reductions=reductions)
    kernels.append(main)
    kernels.append(KernelTraffic("convert dQ", dq_rows, dq_rows, written=q, stored=q))
    if gqa == "expand":  # sum each group's dK and dV
        kernels += [KernelTraffic("sum group", grads / 2, grads / 2, written=kv, stored=kv) for _ in range(2)]
    elif gqa == "accumulate":
        fp32 = kv // e * ACCUMULATOR_BYTES
        kernels += [KernelTraffic("convert group", fp32, fp32, written=kv, stored=kv) for _ in range(2)]
    return Traffic(tuple(kernels))
