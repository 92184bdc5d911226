"""FlashAttention backward for Hopper (sm_90) in Gluon: FlashAttention-3's structure, in one kernel.

The portable backward (kernels.flash_bwd) runs two kernels so that nothing needs atomics: one holds
K and V and walks the query tiles for dK and dV, the other holds Q and walks the key tiles for dQ.
Each recomputes S = QKᵀ and dP = dO Vᵀ, so it issues 7 tile matmuls where the gradients need 5, and
its warps run the exponentials and the matmuls one after the other. FlashAttention-3 (Shah et al.,
"FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision", 2024, section 3
and its hopper/ sources) does the backward in one pass, which this kernel follows:

- One program per key block of ``BLOCK_N`` = 64 · consumers keys of one (batch, K/V head), its K and
  V stationary in shared memory; each consumer warpgroup owns 64 of those keys and keeps their dK and
  dV in fp32 registers for the whole run (grouped-query heads: the program walks every query head of
  its group, so dK and dV sum over the group without atomics).
- A loader warp (``gl.warp_specialize``) brings K and V once, then each query tile's Q and dO by TMA
  into a ring of ``STAGES`` shared-memory buffers (``mbarrier`` handshakes: ``q_ready``/``do_ready``
  when a copy lands, ``empty`` when every consumer is done with the slot).
- Per query tile each consumer issues Sᵀ = K Qᵀ and dPᵀ = V dOᵀ as asynchronous wgmma (keys are the
  M dimension, so P and dS come out transposed, as dV = Pᵀ dO and dK = dSᵀ Q want them), recomputes
  Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e) from the forward's logsumexp while dPᵀ is in flight, feeds Pᵀ
  from registers into dV's wgmma, forms dSᵀ = Pᵀ ∘ (dPᵀ − delta) and feeds it from registers into dK's.
  At head_dim 64 a step takes 128 query columns (``BLOCK_M``, FlashAttention-3's tile there), with
  ``BackwardConfig.late_stats``: lse and delta are read from shared memory only where they are used, so
  their 128-column vectors do not live across the wgmma waits (without it that tile spills 1.2 to 2.0 KB
  and runs at 0.46x to 0.64x the 64-query one; with it 1.01x to 1.12x: docs/perf-notes.md, round 13).
- dQ = dS K needs every key block's share: each consumer writes dSᵀ to shared memory, multiplies it by
  its K rows (dS as the transposed A operand) and adds the fp32 tile into a zeroed (B·H·Nq_pad, D)
  buffer with one TMA reduce-add (``cp.reduce.async.bulk.tensor``: the adds happen in L2, no
  per-element atomics). A last kernel scales that buffer by sm_scale into dq's dtype. With
  ``BackwardConfig.dq_frag`` (every default) a share is staged, and each query tile of the buffer
  kept, as (D/8, BLOCK_M, 8): a warp's 8-byte stores of its accumulator fragment are then contiguous,
  without the swizzled tile's bank conflicts, and the last kernel puts the rows back in order.
- A key block's dK and dV leave through the consumer's dQ staging tile by TMA stores where the block walks at most
  4096 query rows (:func:`default_config`; elsewhere each thread stores its fragments itself): there the epilogue
  weighs most (docs/perf-notes.md, round 15).
- Causal at head_dim 128, ``BackwardConfig.query_rows`` (docs/perf-notes.md, "Gluon backward", round 5)
  takes FlashAttention-3's layout there instead: S = Q Kᵀ and dP = dO Vᵀ with the queries as
  the wgmma M, so a thread holds 2 query rows (lse, delta) rather than 16 query columns, and P and
  dS reach dV's and dK's wgmma through shared memory as transposed operands. (Head_dim 128 without a
  mask took it too until round 12, when Sᵀ with ``dq_frag`` measured 0.98x to 1.06x it over three runs,
  1.02x to 1.06x in the last.)
- delta_i = Σ_d O_id dO_id is computed by a small kernel before this one (:func:`backward_stats`), which
  writes it with lse·log2e into a zero-padded buffer of rows (:func:`tile_stats`' layout). Each query
  tile's two rows reach the consumers with its Q: the loader brings them into the ring by TMA, rather
  than each consumer loading them per tile.
- Causal: a key block sees the query tiles from its own position on; the first key blocks go first
  (the longest work first), within sections of heads (kernels.tile_schedule.plan: with a program per
  block, one head at a time unless few long programs need more to fill the SMs; snaked with
  persistent programs), and only the tiles on the diagonal or past
  a ragged end are masked. With ``BackwardConfig.masked_first`` (causal D128) a key block walks those
  masked tiles first and then the clean ones, so the step is inlined twice rather than three times
  (fewer spills: docs/perf-notes.md, "Gluon backward", round 6).

Inputs: fp16 or bf16, head_dim 64 or 128, q, k, v, do in any layout a TMA descriptor reads
(kernels.hopper_common.tma_layout_reason: contiguous BHSD, BSHD views, packed-QKV slices; the
4-D descriptors are built on each tensor's strides, and a ``do`` they cannot read, such as the
expanded gradient of a sum, is copied first); any Nq, Nkv; grouped-query heads; causal top-left
aligned. Rows of a ragged tile are TMA's zero fill: their P is masked to 0, so they add nothing to
dK, dV or dQ, and the padded dQ buffer keeps every head's tiles apart. dq comes back in q's memory
order and dk, dv in k's (one set of strides for both stores), so a BSHD model's gradients need no
transpose copies. Everything else takes the
portable kernel (:func:`unsupported_reason`); the interpreter cannot run Gluon, so the CPU tests run
the portable kernel and tests/gpu runs this one against the fp64 oracle.
"""

from __future__ import annotations

import functools
import math
import types
import warnings
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels import tile_schedule
from kernels._autotune import LOG2E, LOG2E_C
from kernels._checks import cuda_properties
from kernels._launch import LaunchCache, Memo, layout_key
from kernels._layout import empty_in_layout
from kernels.hopper_common import (
    CLOCK_EVENTS,
    GLUON_IMPORT_ERROR,
    as_box,
    check_clock,
    clock_mark,
    clock_note,
    clock_read,
    ring_phase,
    shared_layout,
    sm90_reason,
    swizzled_tile,
    tensor_descriptor,
    tile_layout,
    tma_layout_reason,
)

try:  # Gluon's Hopper API as triton 3.6 ships it; other versions may lack or rename parts of it
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language._core import builtin
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - depends on the installed triton (GLUON_IMPORT_ERROR says so)
    gluon = types.SimpleNamespace(jit=lambda fn=None, **options: fn if fn is not None else (lambda f: f))
    builtin = None

HEAD_DIMS = (64, 128)
KEYS_PER_WG = 64  # keys per consumer warpgroup: one wgmma M of 4 warps × 16 rows


class BackwardConfig(NamedTuple):
    """One launch configuration of the Gluon backward."""

    block_m: int  # query rows per step (BLOCK_M): the N of Sᵀ's wgmma, the M of dQ's
    consumers: int  # consumer warpgroups of KEYS_PER_WG keys each (NUM_WG)
    stages: int  # Q/dO tiles in the shared-memory ring (STAGES)
    persistent: bool = True  # one program per SM looping over key blocks, instead of one per block
    dq_cols: bool = True  # dQ split by columns over the consumers (else alternate consumers take it whole)
    query_rows: bool = False  # S and dP with the queries as rows (FA3 at D128), P and dS through shared memory
    masked_first: bool = False  # a key block's masked query tiles (diagonal, ragged end) first, then the clean ones
    # 2: dQ multiplied and reduce-added (the only value that gives a dQ); 1: multiplied but not added; 0: neither.
    # 1 and 0 measure the dQ path's share of the time (docs/perf-notes.md, "Gluon backward", round 7).
    dq_mode: int = 2
    # dQ staged in the wgmma accumulator's fragment order, with the fp32 buffer in that order too (and the
    # conversion undoing it), so a warp's 8-byte stores are contiguous: no bank conflicts (round 11).
    dq_frag: bool = False
    # Sᵀ's step reads lse·log2e and delta from shared memory at their use (after Sᵀ's and dPᵀ's waits), not
    # right after the two issues: fewer values live across the waits (round 13).
    late_stats: bool = False
    # dK and dV of a key block leave through shared memory (the consumer's dQ staging tile, free once its last
    # reduce-add read it) by TMA stores, not by 32 (head_dim 64) or 64 scattered 4-byte stores a thread with int64
    # addresses: both at once at head_dim 64, one after the other at 128 (a 16 KB share holds one tile) (round 15).
    dkv_tma: bool = False

    def dq_tile(self, head_dim: int) -> tuple[int, int]:
        """(rows, columns) of one dQ share: what one consumer multiplies and reduce-adds per query tile."""
        return self.block_m, head_dim // self.consumers if self.dq_cols else head_dim

    def dq_box(self, head_dim: int) -> tuple[int, int]:
        """The TMA box of one dQ share in the fp32 buffer: :meth:`dq_tile`, or with ``dq_frag`` the same
        bytes as (columns, BLOCK_M) rows of the buffer seen as (B·H·Nq_pad·D / BLOCK_M, BLOCK_M): a query
        tile is D/8 groups of 8 columns, each group BLOCK_M rows of 8 (:func:`_dq_convert`)."""
        rows, cols = self.dq_tile(head_dim)
        return (cols, rows) if self.dq_frag else (rows, cols)

    @property
    def block_n(self) -> int:
        """Keys per program: every consumer's KEYS_PER_WG."""
        return self.consumers * KEYS_PER_WG


# By (head_dim, causal). Shared memory per program (bytes): Q and dO rings 2·STAGES·BLOCK_M·D·2, K and V
# 2·BLOCK_N·D·2, dSᵀ staging 2·consumers·64·BLOCK_M·2 (double-buffered), dQ staging consumers·BLOCK_M·D·4
# (BLOCK_M·D·4 with dq_cols), lse·log2e and delta 2·STAGES·BLOCK_M·4, and with query_rows P staging
# consumers·BLOCK_M·64·2: the compiled kernels take 231,872 B at D64 (the 128-query tile), 198,080 B at D128
# and 214,480 B at causal D128 (kernel.metadata.shared for sm_90a, scripts/perf_experiments/gluon_compile_cpu.py),
# 16 B less each with dkv_tma (default_config at short blocks), under sm_90's 227 KB. Causal runs a program per
# key block, in tile_schedule.plan's order.
# Against persistent programs in snaked sections on the H100 (gluon_schedule_round3.jsonl) that
# measured 0-11% faster at D128, and at D64 3-6% slower up to N8192 but 13% faster at N16384; the
# same kernel's per-block D64 times moved by up to 8% between runs, so one rule serves both
# (docs/perf-notes.md, "Gluon backward", round 4). D128 took query_rows, one program per key block
# causal or not: 1.00-1.13x persistent programs without a mask, 1.02-1.32x causal (round 5; without a mask
# see round 12 below). Causal D128 walks a key block's masked tiles first (masked_first): 1.08-1.09x the
# diagonal-first order in three
# interleaved rounds; causal D64 measured 6-12% slower with it, and without a mask (where the loops are
# the same) D64 and D128 moved by -6% to +5%, so they keep the diagonal-first order (round 6). The loader
# brings lse and delta with Q (tile_stats), where each consumer loaded them: D64 -1% to +9%, +5% on average
# over its eight shapes; D128 -4% to +5% in a first run of three rounds, +1.5% to +5.0% on all eight in a
# second of five (round 7). dQ staged in fragment order (dq_frag), over two interleaved runs of three rounds:
# D64 1.01-1.07x at N 2048-4096 and 0.98-1.01x beyond, D128 causal 0.98-1.11x (1.03-1.04x in the second run),
# D128 without a mask 0.94-1.00x, which kept the swizzled tile (round 11). D128 without a mask then went back to
# Sᵀ (query_rows off), now with dq_frag: over two interleaved runs of three and five rounds, 1.02x and 1.04x at
# N 2048, 0.98x and 1.03x at 4096, 1.02x and 1.01x at 8192, 1.01x and 0.99x at 16384 (a third run of five rounds,
# after the switch: 1.02-1.06x); 0.93-0.98x causal, which keeps query_rows (round 12). D64 took 128-query tiles
# with late_stats (the 64-query tile with late_stats alone moved by 0.97-1.05x): over two interleaved runs of three
# rounds on H100s, 1.01-1.10x and 1.05-1.12x without a mask, 1.03-1.12x and 1.04-1.11x causal; at D128 late_stats
# measured 0.92-1.00x, so D128 keeps the early reads (round 13).
CONFIGS = {
    (64, False): BackwardConfig(block_m=128, consumers=2, stages=2, persistent=True, dq_cols=False, dq_frag=True,
                                late_stats=True),
    (64, True): BackwardConfig(block_m=128, consumers=2, stages=2, persistent=False, dq_cols=False, dq_frag=True,
                               late_stats=True),
    (128, False): BackwardConfig(block_m=64, consumers=2, stages=2, persistent=False, dq_cols=True, dq_frag=True),
    (128, True): BackwardConfig(block_m=64, consumers=2, stages=2, persistent=False, dq_cols=True, query_rows=True,
                                masked_first=True, dq_frag=True),
}
# dK and dV by TMA stores (BackwardConfig.dkv_tma) where a key block walks at most this many query rows (Nq times
# the query heads of its K/V head), that is where its epilogue weighs most. Counted in cycles with the SM's own
# counter (scripts/perf_experiments/gluon_bwd_clock.py, two runs of one kernel within 1.3% of each other), it took 4.8%
# to 7.5% off a key block's span at N 2048 at both head dims and 3.9% to 5.5% at N 4096 (head_dim 64); beyond, 0.8%
# to 4.4% at head_dim 64 and 0.8% at head_dim 128 N 8192, where causal it added 1.8% (its step runs 4% slower). Timed
# (bf16, interleaved rounds on H100s, whose clock the 700 W power cap moves between 1.4 and 1.98 GHz), N <= 4096:
# 1.015x to 1.053x at head_dim 64 (five rounds), 1.024x to 1.039x at 128 (three); beyond, 0.95x to 1.05x over three
# runs at 64 and 0.94x to 1.01x at 128 (docs/perf-notes.md, round 15).
DKV_TMA_ROWS = 4096


def default_config(head_dim: int, causal: bool, seq_q: int, group: int) -> BackwardConfig:
    """The configuration :func:`hopper_backward` runs a shape with by default: :data:`CONFIGS`, with dkv_tma
    where a key block walks at most :data:`DKV_TMA_ROWS` query rows (``seq_q`` · ``group``)."""
    config = CONFIGS[head_dim, bool(causal)]
    if seq_q * group <= DKV_TMA_ROWS:
        config = config._replace(dkv_tma=True)
    return config


# Registers per thread of the partitions (setmaxnreg), by consumer count: FlashAttention-3's backward split
# (hopper/flash_bwd_launch_template.h: two MMA warpgroups at 240, the producer at 24). The consumers hold
# dK and dV (2·64·D fp32 per warpgroup) plus S and dP; the loader warp almost nothing. 2·128·240 + 128·24 =
# 64,512 of the SM's 65,536 (the loader's warpgroup is allocated whole). At D128 ptxas still spills 356 B
# (272 B causal) at 240; at D64, with 128-query tiles, 292 B (200 B causal); with dkv_tma 400 (268) and 340 (208)
# (docs/perf-notes.md, "Gluon backward", rounds 5-7, 11-13 and 15; reports/perf-h100/gluon_bwd_round15_ptxas.txt).
WORKER_REGS = {2: (240, 24)}


class Descriptors(NamedTuple):
    """The kernel's TMA descriptors (:func:`descriptors`)."""

    q: object  # Q in BLOCK_M-row tiles of one (batch, head)
    do: object  # dO, as Q
    k: object  # K in key blocks of BLOCK_N rows
    v: object  # V, as K
    dq: object  # the fp32 dQ buffer as (B·H·Nq_pad, D) in dQ shares, or with dq_frag as rows of BLOCK_M (dq_box)
    stats: object  # the (2·B·H·Nq_pad / BLOCK_M, BLOCK_M) rows of lse·log2e and delta (tile_stats)


class Buffers(NamedTuple):
    """The kernel's shared memory (sizes in the comment above CONFIGS)."""

    q: object  # the ring's Q tiles (STAGES)
    do: object  # the ring's dO tiles
    k: object  # this key block's K
    v: object  # and V
    ds: object  # every consumer's dS (or dSᵀ) of a query tile, double-buffered, dQ's operand
    dq: object  # each consumer's dQ share in fp32, the TMA reduce's source
    p: object  # each consumer's P (query_rows only), dV's operand
    stats: object  # the ring's lse·log2e and delta rows (two per slot)


class Barriers(NamedTuple):
    """The kernel's mbarriers: who arrives, who waits."""

    kv_ready: object  # the loader's K and V copies landed
    kv_empty: object  # every consumer is done with the block's K and V
    q_ready: object  # per slot: Q and its lse·log2e and delta landed
    do_ready: object  # per slot: dO landed
    empty: object  # per slot: every consumer is done with it
    ds_ready: object  # per dS buffer: every consumer's dS of the tile is in it


if builtin is not None and not hasattr(tma, "async_atomic_add"):
    # triton 3.6's Gluon has the TMA reduce op (ttng.async_tma_reduce) but no Python wrapper for it;
    # later versions call this tma.async_atomic_add (same arguments).
    from triton._C.libtriton import ir as _ir

    @builtin
    def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)
elif builtin is not None:
    _tma_reduce_add = tma.async_atomic_add


def backward_tile(head_dim: int, dtype: str = "fp16") -> tuple[int, int] | None:
    """(BLOCK_M, BLOCK_N) this kernel runs with at ``head_dim`` (None where it does not run)."""
    if head_dim not in HEAD_DIMS or dtype not in ("fp16", "bf16"):
        return None
    config = CONFIGS[head_dim, False]
    return config.block_m, config.block_n


def unsupported_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> str | None:
    """Why this kernel cannot take these (already checked) inputs, or None when it can. (An upstream
    gradient its TMA descriptor cannot read is made contiguous on the way in: autograd sometimes hands
    over an expanded one.)"""
    return GLUON_IMPORT_ERROR or sm90_reason("backward", HEAD_DIMS, q=q, k=k, v=v, o=o)


@gluon.jit
def _key_block(t, n_blocks, bh_kv, section, snake, BLOCK_N: gl.constexpr):
    """Key block t as (batch·K/V head, first key), in swizzled_tile's order: heads in sections
    (``section`` 1: head by head), so few heads' Q and dO are in L2 while their key blocks run;
    causal, the first key block of a section (which sees every query tile) first, snaked for
    persistent programs (kernels.tile_schedule.plan)."""
    off_bhk, block = swizzled_tile(t, n_blocks, bh_kv, section, snake)
    return off_bhk, block * BLOCK_N


@gluon.jit
def _first_query_tile(start_n, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """Causal (top-left): queries before the block's first key see none of it."""
    if CAUSAL:
        return start_n // BLOCK_M
    return 0


@gluon.jit
def _query_tiles(start_n, seq_q, seq_kv, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """The query tiles the key block from ``start_n`` walks, as (m_lo, clean_lo, clean_hi, n_m): tiles
    [m_lo, n_m) in all, of which [clean_lo, clean_hi) need no mask (every query row of the tile is
    at or past the block's last key when causal, and the tile and the block end inside the sequences).
    Both consumers and the loader take the block's bounds, so they walk the same tiles in one order."""
    n_m = gl.cdiv(seq_q, BLOCK_M)
    m_lo = _first_query_tile(start_n, BLOCK_M, CAUSAL)
    m_whole = seq_q // BLOCK_M
    if start_n + BLOCK_N > seq_kv:
        m_whole = 0
    m_clean = 0
    if CAUSAL:
        m_clean = gl.cdiv(start_n + BLOCK_N - 1, BLOCK_M)
    clean_lo = gl.minimum(gl.maximum(m_clean, m_lo), n_m)
    clean_hi = gl.maximum(clean_lo, m_whole)
    return m_lo, clean_lo, clean_hi, n_m


@gluon.jit
def _tile_at(j, m_lo, clean_lo, clean_hi, n_m):
    """The j-th query tile in masked-first order: the diagonal's [m_lo, clean_lo), the ragged end's
    [clean_hi, n_m), then the clean [clean_lo, clean_hi)."""
    n_diag = clean_lo - m_lo
    n_masked = n_diag + n_m - clean_hi
    i = m_lo + j
    if j >= n_diag:
        i = clean_hi + (j - n_diag)
    if j >= n_masked:
        i = clean_lo + (j - n_masked)
    return i


# The events of a key block in :func:`hopper_backward`'s ``clock`` buffer (kernels.hopper_common.CLOCK_EVENTS of
# them, written by clock_mark and clock_note). Per consumer, the SM's cycle counter (%clock64) at 0 the block's start,
# 1 after its K/V wait, 2 after its last step, 3 after its dK/dV stores are issued. Per loader (the last row): 0 the
# cycle counter after its wait for the consumers to free K and V, 1 after its last Q/dO copy is issued, 2 the query
# tiles it brought for the block, 3 the global timer (%globaltimer, ns) beside event 0, 4 the SM (%smid). 5 is unused.


@gluon.jit
def _bwd_load_partition(descs, bufs, bars, heads, group, seq_q, seq_kv, q_pad, n_blocks, bh_kv, section, snake,
                        stats_rows, CLOCK, BLOCK_M: gl.constexpr, STAGES: gl.constexpr, NUM_WG: gl.constexpr,
                        KEYS_PER_WG: gl.constexpr, CAUSAL: gl.constexpr, MASKED_FIRST: gl.constexpr):
    """One warp: K and V of this key block once, then Q and dO of every query tile it sees, for each
    query head of its group, into the ring."""
    q_desc, do_desc, k_desc, v_desc, stats_desc = descs.q, descs.do, descs.k, descs.v, descs.stats
    q_smem, do_smem, k_smem, v_smem, stats_smem = bufs.q, bufs.do, bufs.k, bufs.v, bufs.stats
    kv_ready, kv_empty, q_ready, do_ready, empty = bars.kv_ready, bars.kv_empty, bars.q_ready, bars.do_ready, bars.empty

    kv_heads = heads // group
    count = 0  # query tiles loaded: the position in the ring
    done = 0  # key blocks
    for t in range(gl.program_id(0), n_blocks * bh_kv, gl.num_programs(0)):
        off_bhk, start_n = _key_block(t, n_blocks, bh_kv, section, snake, NUM_WG * KEYS_PER_WG)
        off_z = off_bhk // kv_heads
        off_hk = off_bhk % kv_heads
        # The consumers are done with the previous block's K and V (their dK/dV stores still run).
        mbarrier.wait(kv_empty, ring_phase(done, 1) ^ 1)
        clock_mark(CLOCK, t, NUM_WG, 0, NUM_WG)
        clock_note(CLOCK, t, NUM_WG, 3, clock_read("%globaltimer", CLOCK), NUM_WG)
        clock_note(CLOCK, t, NUM_WG, 4, clock_read("%smid", CLOCK), NUM_WG)
        first_count = count
        # The whole key block in one box each: at head_dim 128 a 128-byte swizzle stores a tile as two
        # column halves, so a slice of its rows is not one contiguous box (as_box needs one).
        mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [off_z, off_hk, start_n, 0], kv_ready, as_box(k_smem, k_desc))
        tma.async_copy_global_to_shared(v_desc, [off_z, off_hk, start_n, 0], kv_ready, as_box(v_smem, v_desc))
        m_lo, clean_lo, clean_hi, n_m = _query_tiles(start_n, seq_q, seq_kv, BLOCK_M, NUM_WG * KEYS_PER_WG, CAUSAL)
        for g in range(group):
            off_h = off_hk * group + g
            for j in range(m_lo, n_m):
                i = j
                if MASKED_FIRST:
                    i = _tile_at(j - m_lo, m_lo, clean_lo, clean_hi, n_m)
                slot = count % STAGES
                mbarrier.wait(empty.index(slot), ring_phase(count, STAGES) ^ 1)  # every consumer is done with it
                # With Q, the tile's lse·log2e and delta: rows of the (2·B·H·Nq_pad / BLOCK_M, BLOCK_M)
                # stats buffer (tile_stats), so no consumer waits on a load of its own for them.
                mbarrier.expect(q_ready.index(slot), q_desc.block_type.nbytes + 2 * stats_desc.block_type.nbytes)
                row = (off_z * heads + off_h) * (q_pad // BLOCK_M) + i
                tma.async_copy_global_to_shared(
                    stats_desc, [row, 0], q_ready.index(slot),
                    stats_smem.index(2 * slot)._reinterpret(gl.float32, [1, BLOCK_M], stats_desc.layout))
                tma.async_copy_global_to_shared(
                    stats_desc, [stats_rows + row, 0], q_ready.index(slot),
                    stats_smem.index(2 * slot + 1)._reinterpret(gl.float32, [1, BLOCK_M], stats_desc.layout))
                tma.async_copy_global_to_shared(q_desc, [off_z, off_h, i * BLOCK_M, 0], q_ready.index(slot),
                                                as_box(q_smem.index(slot), q_desc))
                mbarrier.expect(do_ready.index(slot), do_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(do_desc, [off_z, off_h, i * BLOCK_M, 0], do_ready.index(slot),
                                                as_box(do_smem.index(slot), do_desc))
                count += 1
        clock_mark(CLOCK, t, NUM_WG, 1, NUM_WG)
        clock_note(CLOCK, t, NUM_WG, 2, (count - first_count).to(gl.int64), NUM_WG)
        done += 1


@gluon.jit
def _probs(s_t, lse2, keys, cols, seq_q, seq_kv, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e) of a (keys, queries) score tile; 0 where a query does
    not see a key (past either end, or above the causal diagonal) when MASKED."""
    p_t = gl.exp2(s_t * qk_scale - lse2[None, :])
    if MASKED:
        visible = (keys[:, None] < seq_kv) & (cols[None, :] < seq_q)
        if CAUSAL:
            visible = visible & (keys[:, None] <= cols[None, :])
        p_t = gl.where(visible, p_t, 0.0)
    return p_t


@gluon.jit
def _probs_rows(s, lse2, rows, first_key, seq_q, seq_kv, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """P = exp2(S·scale·log2e − lse·log2e) of a (queries, keys) score tile, masked as :func:`_probs`."""
    p = gl.exp2(s * qk_scale - lse2[:, None])
    if MASKED:
        # The key indices are made here, not held: a thread's 16 of them would stay live all loop long.
        keys = first_key + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
        visible = (rows[:, None] < seq_q) & (keys[None, :] < seq_kv)
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = gl.where(visible, p, 0.0)
    return p


@gluon.jit
def _dq_share(i, count, off_hz, k_dq, dq_buf, ds_op, dq_desc, q_pad,
              WG: gl.constexpr, BLOCK_M: gl.constexpr, NUM_WG: gl.constexpr, DQ_N: gl.constexpr,
              DQ_COLS: gl.constexpr, DQ_MODE: gl.constexpr):
    """dQ = dS K over the whole key block (``ds_op``: every consumer's dS of tile i, (BLOCK_M, BLOCK_N)
    in shared memory): this warpgroup's columns of it (DQ_COLS), or all of it on every NUM_WG-th
    query tile, reduce-added into the fp32 buffer."""
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, DQ_N, 16])
    # BackwardConfig.dq_frag's buffer is the one whose descriptor is unswizzled (descriptors())
    DQ_FRAG: gl.constexpr = dq_desc.layout.swizzle_byte_width == 0
    if DQ_MODE > 0 and (DQ_COLS or (count % NUM_WG == WG)):
        dq = warpgroup_mma(ds_op, k_dq, gl.zeros([BLOCK_M, DQ_N], gl.float32, dq_layout),
                           use_acc=False, is_async=True)
        dq = warpgroup_mma_wait(0, deps=(dq,))
        if DQ_MODE > 1:
            # Into shared memory, then one TMA reduce-add into the fp32 buffer once the previous one
            # has read its source.
            tma.store_wait(0)
            gl.thread_barrier()
            dq_col = 0
            if DQ_COLS:
                dq_col = WG * DQ_N
            if DQ_FRAG:
                # (groups of 8 columns, rows, 8): a warp's 8-byte pairs for one group and 8 rows are 256
                # contiguous bytes, where the swizzled (rows, columns) tile took two wavefronts per store.
                frag = gl.permute(gl.reshape(dq, [BLOCK_M, DQ_N // 8, 8]), (1, 0, 2))
                dq_buf._reinterpret(gl.float32, [DQ_N // 8, BLOCK_M, 8],
                                    gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[2, 1, 0])
                                    ).store(frag)
                fence_async_shared()
                gl.thread_barrier()
                head_dim: gl.constexpr = DQ_N * NUM_WG if DQ_COLS else DQ_N
                _tma_reduce_add(dq_desc, [((off_hz * q_pad) // BLOCK_M + i) * head_dim + dq_col, 0], dq_buf)
            else:
                dq_buf.store(dq)
                fence_async_shared()
                gl.thread_barrier()
                _tma_reduce_add(dq_desc, [off_hz * q_pad + i * BLOCK_M, dq_col], dq_buf)


@gluon.jit
def _bwd_step_rows(dk, dv, i, count, off_hz, first_key, k, v, k_dq, dq_buf, bufs, bars, dq_desc,
                   seq_q, seq_kv, q_pad, qk_scale,
                   WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                   NUM_WG: gl.constexpr, KEYS_PER_WG: gl.constexpr, DQ_N: gl.constexpr, MASKED: gl.constexpr,
                   CAUSAL: gl.constexpr, DQ_COLS: gl.constexpr, DQ_MODE: gl.constexpr):
    """:func:`_bwd_step` with S = Q Kᵀ and dP = dO Vᵀ the right way up (queries are the wgmma M):
    FlashAttention-3's choice at head_dim 128 (hopper/flash_bwd_launch_template.h, SdP_swapAB off).
    A thread then holds 2 query rows of the tile, so lse and delta cost 2 registers each instead of
    16, at the price of P and dS reaching dV's and dK's wgmma through shared memory (transposed)."""
    q_smem, do_smem, ds_smem, p_smem, stats_smem = bufs.q, bufs.do, bufs.ds, bufs.p, bufs.stats
    q_ready, do_ready, empty, ds_ready = bars.q_ready, bars.do_ready, bars.empty, bars.ds_ready
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, KEYS_PER_WG, 16])
    dtype: gl.constexpr = q_smem.dtype

    slot = count % STAGES
    phase = ring_phase(count, STAGES)
    rows = i * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    q = q_smem.index(slot)
    do = do_smem.index(slot)
    mbarrier.wait(q_ready.index(slot), phase)
    s = warpgroup_mma(q, k.permute((1, 0)), gl.zeros([BLOCK_M, KEYS_PER_WG], gl.float32, s_layout),
                      use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(slot), phase)
    dp = warpgroup_mma(do, v.permute((1, 0)), gl.zeros([BLOCK_M, KEYS_PER_WG], gl.float32, s_layout),
                       use_acc=False, is_async=True)
    # lse·log2e and delta landed with Q (read here, after both issues, so they hold no registers before)
    lse2 = stats_smem.index(2 * slot).load(gl.SliceLayout(1, s_layout))
    delta = stats_smem.index(2 * slot + 1).load(gl.SliceLayout(1, s_layout))
    s = warpgroup_mma_wait(1, deps=(s,))  # S done; dP may still run
    p = _probs_rows(s, lse2, rows, first_key, seq_q, seq_kv, qk_scale, MASKED, CAUSAL)
    # P to this warpgroup's buffer, then dV += Pᵀ dO. The previous tile's dV wgmma, which read the
    # buffer, was waited for by every warp; the barrier makes sure all four are past that wait.
    p_buf = p_smem.index(WG)
    gl.thread_barrier()
    p_buf.store(p.to(dtype))
    fence_async_shared()
    gl.thread_barrier()
    dv = warpgroup_mma(p_buf.permute((1, 0)), do, dv, is_async=True)
    dp = warpgroup_mma_wait(1, deps=(dp,))  # dP done; dV may still run
    ds = (p * (dp - delta[:, None])).to(dtype)
    # Every consumer's dS meets in one (BLOCK_M, BLOCK_N) tile, double-buffered as in _bwd_step.
    ds_all = ds_smem.index(count % 2)
    ds_mine = ds_all.slice(WG * KEYS_PER_WG, KEYS_PER_WG, dim=1)
    ds_mine.store(ds)
    fence_async_shared()
    gl.thread_barrier()
    dk = warpgroup_mma(ds_mine.permute((1, 0)), q, dk, is_async=True)
    mbarrier.arrive(ds_ready.index(count % 2), count=1)
    dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
    mbarrier.arrive(empty.index(slot), count=1)  # done with this slot's Q and dO
    mbarrier.wait(ds_ready.index(count % 2), ring_phase(count, 2))
    _dq_share(i, count, off_hz, k_dq, dq_buf, ds_all, dq_desc, q_pad, WG, BLOCK_M, NUM_WG, DQ_N, DQ_COLS, DQ_MODE)
    return dk, dv


@gluon.jit
def _bwd_step_t(dk, dv, i, count, off_hz, keys, k, v, k_dq, dq_buf, bufs, bars, dq_desc,
                seq_q, seq_kv, q_pad, qk_scale,
                WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                NUM_WG: gl.constexpr, KEYS_PER_WG: gl.constexpr, DQ_N: gl.constexpr, MASKED: gl.constexpr,
                CAUSAL: gl.constexpr, DQ_COLS: gl.constexpr, DQ_MODE: gl.constexpr, LATE_STATS: gl.constexpr):
    """The step with Sᵀ and dPᵀ (keys as rows), Pᵀ and dSᵀ fed to dV's and dK's wgmma from registers."""
    q_smem, do_smem, ds_smem, stats_smem = bufs.q, bufs.do, bufs.ds, bufs.stats
    q_ready, do_ready, empty, ds_ready = bars.q_ready, bars.do_ready, bars.empty, bars.ds_ready
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    dtype: gl.constexpr = q_smem.dtype

    slot = count % STAGES
    phase = ring_phase(count, STAGES)
    cols = i * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    q = q_smem.index(slot)
    do = do_smem.index(slot)
    mbarrier.wait(q_ready.index(slot), phase)
    # (use_acc=False: the zero accumulators are made here, not held across the loop)
    s_t = warpgroup_mma(k, q.permute((1, 0)), gl.zeros([KEYS_PER_WG, BLOCK_M], gl.float32, s_layout),
                        use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(slot), phase)
    dp_t = warpgroup_mma(v, do.permute((1, 0)), gl.zeros([KEYS_PER_WG, BLOCK_M], gl.float32, s_layout),
                         use_acc=False, is_async=True)
    if not LATE_STATS:
        lse2 = stats_smem.index(2 * slot).load(gl.SliceLayout(0, s_layout))  # landed with Q, as in _bwd_step_rows
        delta = stats_smem.index(2 * slot + 1).load(gl.SliceLayout(0, s_layout))
    s_t = warpgroup_mma_wait(1, deps=(s_t,))  # Sᵀ done; dPᵀ may still run
    if LATE_STATS:
        lse2 = stats_smem.index(2 * slot).load(gl.SliceLayout(0, s_layout))
    p_t = _probs(s_t, lse2, keys, cols, seq_q, seq_kv, qk_scale, MASKED, CAUSAL)
    p_op = gl.convert_layout(p_t.to(dtype), a_layout)
    dv = warpgroup_mma(p_op, do, dv, is_async=True)
    dp_t = warpgroup_mma_wait(1, deps=(dp_t,))  # dPᵀ done; dV may still run
    if LATE_STATS:
        delta = stats_smem.index(2 * slot + 1).load(gl.SliceLayout(0, s_layout))
    ds_t = (p_t * (dp_t - delta[None, :])).to(dtype)
    ds_op = gl.convert_layout(ds_t, a_layout)
    dk = warpgroup_mma(ds_op, q, dk, is_async=True)
    # dSᵀ of every consumer meets in one (BLOCK_N, BLOCK_M) tile, double-buffered: a consumer
    # overwrites buffer b only after passing the next tile's ds_ready, which the other consumers
    # reach only once their dQ of this tile is done.
    ds_all = ds_smem.index(count % 2)
    ds_all.slice(WG * KEYS_PER_WG, KEYS_PER_WG).store(ds_t)
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(count % 2), count=1)
    dv, dk, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, p_op, ds_op))
    mbarrier.arrive(empty.index(slot), count=1)  # done with this slot's Q and dO
    mbarrier.wait(ds_ready.index(count % 2), ring_phase(count, 2))
    _dq_share(i, count, off_hz, k_dq, dq_buf, ds_all.permute((1, 0)), dq_desc, q_pad, WG, BLOCK_M, NUM_WG, DQ_N,
              DQ_COLS, DQ_MODE)
    return dk, dv


@gluon.jit
def _bwd_step(dk, dv, i, count, off_hz, keys, k, v, k_dq, dq_buf, bufs, bars, dq_desc,
              seq_q, seq_kv, q_pad, qk_scale,
              WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
              NUM_WG: gl.constexpr, KEYS_PER_WG: gl.constexpr, DQ_N: gl.constexpr, MASKED: gl.constexpr,
              CAUSAL: gl.constexpr, DQ_COLS: gl.constexpr, DQ_MODE: gl.constexpr, QUERY_ROWS: gl.constexpr,
              LATE_STATS: gl.constexpr):
    """Query tile i (the ring's count-th) against this warpgroup's keys: dV and dK accumulate, and
    this warpgroup's share of the tile's dQ goes to the fp32 buffer."""
    if QUERY_ROWS:
        dk, dv = _bwd_step_rows(dk, dv, i, count, off_hz, keys, k, v, k_dq, dq_buf, bufs, bars, dq_desc,
                                seq_q, seq_kv, q_pad, qk_scale, WG, HEAD_DIM, BLOCK_M, STAGES, NUM_WG,
                                KEYS_PER_WG, DQ_N, MASKED, CAUSAL, DQ_COLS, DQ_MODE)
    else:
        dk, dv = _bwd_step_t(dk, dv, i, count, off_hz, keys, k, v, k_dq, dq_buf, bufs, bars, dq_desc,
                             seq_q, seq_kv, q_pad, qk_scale, WG, HEAD_DIM, BLOCK_M, STAGES, NUM_WG,
                             KEYS_PER_WG, DQ_N, MASKED, CAUSAL, DQ_COLS, DQ_MODE, LATE_STATS)
    return dk, dv


@gluon.jit
def _bwd_consumer_partition(descs, bufs, bars, DK, DV, dkv_strides, heads, group, seq_q, seq_kv, q_pad,
                            n_blocks, bh_kv, section, snake, qk_scale, sm_scale, CLOCK,
                            WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                            STAGES: gl.constexpr, NUM_WG: gl.constexpr, KEYS_PER_WG: gl.constexpr,
                            CAUSAL: gl.constexpr, DQ_COLS: gl.constexpr, DQ_MODE: gl.constexpr,
                            QUERY_ROWS: gl.constexpr, MASKED_FIRST: gl.constexpr, LATE_STATS: gl.constexpr,
                            DKV_TMA: gl.constexpr):
    """One warpgroup: keys start_n + WG·64 ... + 63 against every query tile they see; dK and dV of
    those keys at the end, and a dQ share per query tile."""
    dq_desc = descs.dq
    q_smem, k_smem, v_smem, dq_smem = bufs.q, bufs.k, bufs.v, bufs.dq
    kv_ready, kv_empty = bars.kv_ready, bars.kv_empty

    # Sᵀ and dPᵀ: (64 keys, BLOCK_M queries) (with QUERY_ROWS, _bwd_step_rows has S and dP as
    # (BLOCK_M, 64)); dK, dV: (64 keys, D); dQ's share: (BLOCK_M, D).
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    dtype: gl.constexpr = q_smem.dtype
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, kv_layout))
    k = k_smem.slice(WG * KEYS_PER_WG, KEYS_PER_WG)
    v = v_smem.slice(WG * KEYS_PER_WG, KEYS_PER_WG)
    dq_buf = dq_smem.index(WG)
    DQ_N: gl.constexpr = HEAD_DIM // NUM_WG if DQ_COLS else HEAD_DIM  # dQ columns this warpgroup multiplies
    if DQ_COLS:
        k_dq = k_smem.slice(WG * DQ_N, DQ_N, dim=1)
    else:
        k_dq = k_smem
    kv_heads = heads // group
    n_m = gl.cdiv(seq_q, BLOCK_M)

    count = 0  # query tiles consumed: the position in the ring
    done = 0  # key blocks
    for t in range(gl.program_id(0), n_blocks * bh_kv, gl.num_programs(0)):
        clock_mark(CLOCK, t, WG, 0, NUM_WG)
        off_bhk, start_n = _key_block(t, n_blocks, bh_kv, section, snake, NUM_WG * KEYS_PER_WG)
        first_key = start_n + WG * KEYS_PER_WG
        if QUERY_ROWS:
            keys = first_key  # _probs_rows makes the key indices where it masks
        else:
            keys = first_key + gl.arange(0, KEYS_PER_WG, layout=gl.SliceLayout(1, s_layout))
        off_z = off_bhk // kv_heads
        off_hk = off_bhk % kv_heads
        m_lo = _first_query_tile(start_n, BLOCK_M, CAUSAL)
        # Tiles i in [m_clean, m_whole) need no mask: every query row is at or past every key of this
        # warpgroup (causal), and the tile and the keys end inside the sequences.
        m_whole = seq_q // BLOCK_M
        if first_key + KEYS_PER_WG > seq_kv:
            m_whole = 0
        m_clean = 0
        if CAUSAL:
            m_clean = gl.cdiv(first_key + KEYS_PER_WG - 1, BLOCK_M)
        dk = gl.zeros([KEYS_PER_WG, HEAD_DIM], gl.float32, kv_layout)
        dv = gl.zeros([KEYS_PER_WG, HEAD_DIM], gl.float32, kv_layout)

        mbarrier.wait(kv_ready, ring_phase(done, 1))
        clock_mark(CLOCK, t, WG, 1, NUM_WG)
        for g in range(group):
            off_hz = off_z * heads + off_hk * group + g
            # The tiles in the order the loader brings them, as segments of one loop each (one copy of the
            # step each): masked, clean[, masked]. With MASKED_FIRST two, not three: both ends' masked tiles
            # first (through _tile_at), then the clean ones, by the block's bounds rather than this
            # warpgroup's, as the loader has them. Otherwise the causal diagonal's, the clean ones, then a
            # ragged end's.
            if MASKED_FIRST:
                lo, clean_lo, clean_hi, hi = _query_tiles(start_n, seq_q, seq_kv, BLOCK_M, NUM_WG * KEYS_PER_WG,
                                                          CAUSAL)
                segments = ((0, clean_lo - lo + hi - clean_hi), (clean_lo, clean_hi))
            else:
                diag_hi = gl.minimum(gl.maximum(m_clean, m_lo), n_m)
                clean_hi = gl.maximum(diag_hi, m_whole)
                segments = ((m_lo, diag_hi), (diag_hi, clean_hi), (clean_hi, n_m))
            for seg in gl.static_range(len(segments)):
                first, end = segments[seg]
                for j in range(first, end):
                    i = j
                    if MASKED_FIRST and seg == 0:
                        i = _tile_at(j, lo, clean_lo, clean_hi, hi)
                    dk, dv = _bwd_step(dk, dv, i, count, off_hz, keys, k, v, k_dq, dq_buf, bufs, bars, dq_desc,
                                       seq_q, seq_kv, q_pad, qk_scale, WG, HEAD_DIM, BLOCK_M, STAGES, NUM_WG,
                                       KEYS_PER_WG, DQ_N, seg != 1, CAUSAL, DQ_COLS, DQ_MODE, QUERY_ROWS,
                                       LATE_STATS)
                    count += 1
        clock_mark(CLOCK, t, WG, 2, NUM_WG)
        mbarrier.arrive(kv_empty, count=1)  # the loader may bring the next block's K and V

        # dK = scale · Σ dSᵀ Q (dS was taken w.r.t. the scaled scores); rows past seq_kv not stored.
        if DKV_TMA:
            # Into this consumer's dQ staging tile once its last reduce-add has read it (the next block's first
            # staging waits for these stores the same way), then one TMA store each; TMA drops rows past seq_kv.
            tma.store_wait(0)
            gl.thread_barrier()
            # K's 128-byte swizzle, as DK's descriptor has it. The swizzle needs the tile on a 1024-byte boundary,
            # which the unswizzled fp32 buffer is not promised: the compiled kernels place it there (after 1 KB
            # multiples), and the GPU test of dkv_tma checks the values.
            if dq_buf.shape[0] * dq_buf.shape[1] * 4 >= 2 * KEYS_PER_WG * HEAD_DIM * dtype.primitive_bitwidth // 8:
                # both at once (head_dim 64: the 128-query tile's 32 KB hold dK and dV, 8 KB each)
                out = dq_buf._reinterpret(dtype, [2, KEYS_PER_WG, HEAD_DIM], k_smem.layout)
                out.index(0).store((dk * sm_scale).to(dtype))
                out.index(1).store(dv.to(dtype))
                fence_async_shared()
                gl.thread_barrier()
                tma.async_copy_shared_to_global(DK, [off_z, off_hk, first_key, 0], as_box(out.index(0), DK))
                tma.async_copy_shared_to_global(DV, [off_z, off_hk, first_key, 0], as_box(out.index(1), DV))
            else:
                # one after the other (head_dim 128: a 16 KB share holds one 16 KB tile): dV, then, once its TMA store
                # has read the tile, dK
                out = dq_buf._reinterpret(dtype, [KEYS_PER_WG, HEAD_DIM], k_smem.layout)
                out.store(dv.to(dtype))
                fence_async_shared()
                gl.thread_barrier()
                tma.async_copy_shared_to_global(DV, [off_z, off_hk, first_key, 0], as_box(out, DV))
                tma.store_wait(0)
                gl.thread_barrier()
                out.store((dk * sm_scale).to(dtype))
                fence_async_shared()
                gl.thread_barrier()
                tma.async_copy_shared_to_global(DK, [off_z, off_hk, first_key, 0], as_box(out, DK))
        else:
            rows = first_key + gl.arange(0, KEYS_PER_WG, layout=gl.SliceLayout(1, kv_layout))
            row_ok = (rows < seq_kv)[:, None]
            stride_z, stride_h, stride_n = dkv_strides
            offs = (off_z.to(gl.int64) * stride_z + off_hk.to(gl.int64) * stride_h
                    + rows.to(gl.int64)[:, None] * stride_n + offs_d[None, :])
            gl.store(DK + offs, (dk * sm_scale).to(dtype), mask=row_ok)
            gl.store(DV + offs, dv.to(dtype), mask=row_ok)
        clock_mark(CLOCK, t, WG, 3, NUM_WG)
        done += 1
    tma.store_wait(0)


# Triton compiles an int argument equal to 1 as a constant (a 1-row sequence, one block, one head);
# the warp-specialized kernel does not lower with those constants, so none of them is specialised.
@gluon.jit(do_not_specialize=["heads", "group", "seq_q", "seq_kv", "q_pad", "n_blocks", "bh_kv", "section", "snake",
                              "stats_rows"])
def _attn_bwd_hopper(q_desc, do_desc, k_desc, v_desc, dq_desc, stats_desc, DK, DV, stride_kvz, stride_kvh, stride_kvn,
                     qk_scale, sm_scale, CLOCK,
                     heads, group, seq_q, seq_kv, q_pad, n_blocks, bh_kv, section, snake, stats_rows,
                     HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                     NUM_WG: gl.constexpr, KEYS_PER_WG: gl.constexpr, CAUSAL: gl.constexpr,
                     DQ_COLS: gl.constexpr, DQ_MODE: gl.constexpr, QUERY_ROWS: gl.constexpr, MASKED_FIRST: gl.constexpr,
                     LATE_STATS: gl.constexpr, DKV_TMA: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                     LOADER_REGS: gl.constexpr, Q_LAYOUT: gl.constexpr, KV_LAYOUT: gl.constexpr):
    """Program p takes key blocks p, p + programs, ... of the n_blocks · bh_kv (one each when the
    grid has a program per block; persistent when it has one per SM)."""
    dtype: gl.constexpr = q_desc.dtype
    ds_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    # Tiles as the wgmma reads them: 2-D, with the swizzle of the descriptors' 4-D boxes (Q_LAYOUT, KV_LAYOUT).
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], Q_LAYOUT)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], Q_LAYOUT)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_WG * KEYS_PER_WG, HEAD_DIM], KV_LAYOUT)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_WG * KEYS_PER_WG, HEAD_DIM], KV_LAYOUT)
    if QUERY_ROWS:
        ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, NUM_WG * KEYS_PER_WG], ds_layout)
        p_smem = gl.allocate_shared_memory(dtype, [NUM_WG, BLOCK_M, KEYS_PER_WG], ds_layout)
    else:
        ds_smem = gl.allocate_shared_memory(dtype, [2, NUM_WG * KEYS_PER_WG, BLOCK_M], ds_layout)
        p_smem = ds_smem  # unused: Pᵀ stays in registers
    dq_smem = gl.allocate_shared_memory(gl.float32, [NUM_WG] + dq_desc.block_type.shape, dq_desc.layout)
    # lse·log2e and delta of each ring slot's query tile (1 KB at two stages)
    # (plain rows: the loader's TMA sees each as the descriptor's (1, BLOCK_M) box, the consumers as a vector)
    stats_smem = gl.allocate_shared_memory(gl.float32, [2 * STAGES, BLOCK_M],
                                           gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]))
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(ds_ready.index(i), count=NUM_WG)  # every consumer's dSᵀ is in the tile
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(kv_empty, count=NUM_WG)
    for i in gl.static_range(STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NUM_WG)  # every consumer warpgroup releases a slot

    descs = Descriptors(q_desc, do_desc, k_desc, v_desc, dq_desc, stats_desc)
    dkv_strides = (stride_kvz, stride_kvh, stride_kvn)
    bufs = Buffers(q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, p_smem, stats_smem)
    bars = Barriers(kv_ready, kv_empty, q_ready, do_ready, empty, ds_ready)
    gl.warp_specialize(
        [
            (_bwd_consumer_partition, (descs, bufs, bars, DK, DV, dkv_strides, heads, group, seq_q,
                                       seq_kv, q_pad,
                                       n_blocks, bh_kv, section, snake, qk_scale, sm_scale, CLOCK, 0, HEAD_DIM,
                                       BLOCK_M, STAGES, NUM_WG, KEYS_PER_WG, CAUSAL, DQ_COLS, DQ_MODE, QUERY_ROWS,
                                       MASKED_FIRST, LATE_STATS, DKV_TMA)),
            (_bwd_consumer_partition, (descs, bufs, bars, DK, DV, dkv_strides, heads, group, seq_q,
                                       seq_kv, q_pad,
                                       n_blocks, bh_kv, section, snake, qk_scale, sm_scale, CLOCK, 1, HEAD_DIM,
                                       BLOCK_M, STAGES, NUM_WG, KEYS_PER_WG, CAUSAL, DQ_COLS, DQ_MODE, QUERY_ROWS,
                                       MASKED_FIRST, LATE_STATS, DKV_TMA)),
            (_bwd_load_partition, (descs, bufs, bars, heads, group, seq_q, seq_kv, q_pad, n_blocks, bh_kv, section,
                                   snake, stats_rows, CLOCK, BLOCK_M, STAGES, NUM_WG, KEYS_PER_WG, CAUSAL,
                                   MASKED_FIRST)),
        ],
        [4, 1],
        [CONSUMER_REGS, LOADER_REGS],
    )


@triton.jit
def _dq_convert(DQ_ACC, DQ, stride_dqz, stride_dqh, stride_dqm, sm_scale, heads, seq_q, q_pad,
                HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, FRAG: tl.constexpr):
    """dq = sm_scale · the fp32 buffer, in dq's dtype and layout, dropping each head's padding rows.
    With FRAG (BackwardConfig.dq_frag) a query tile of the buffer is (HEAD_DIM / 8, BLOCK, 8)."""
    off_hz = tl.program_id(1).to(tl.int64)
    local = tl.arange(0, BLOCK)
    rows = tl.program_id(0) * BLOCK + local
    offs_d = tl.arange(0, HEAD_DIM)
    ok = (rows < seq_q)[:, None]
    if FRAG:
        # 32-byte pieces gathered in (rows, columns) order: 2-3% slower than the plain buffer's pass, and 1.5% (D64)
        # to 6% (D128) faster than reading the tile in its own order and permuting it in registers
        # (dq_convert_probe.py, docs/perf-notes.md "Gluon backward", round 11)
        tile = DQ_ACC + (off_hz * q_pad + tl.program_id(0) * BLOCK) * HEAD_DIM
        src = tile + (offs_d // 8 * (BLOCK * 8) + offs_d % 8)[None, :] + local[:, None] * 8
    else:
        src = DQ_ACC + (off_hz * q_pad + rows)[:, None] * HEAD_DIM + offs_d[None, :]
    acc = tl.load(src, mask=ok, other=0.0)
    dq_ptrs = (DQ + (off_hz // heads) * stride_dqz + (off_hz % heads) * stride_dqh
               + rows.to(tl.int64)[:, None] * stride_dqm + offs_d[None, :])
    tl.store(dq_ptrs, (acc * sm_scale).to(DQ.dtype.element_ty), mask=ok)


@triton.jit
def rows_delta(O, DO, off_z, off_h, offs_m, row_ok, stride_oz, stride_oh, stride_om, stride_od,
               stride_doz, stride_doh, stride_dom, stride_dod, HEAD_DIM: tl.constexpr):
    """delta_i = Σ_d O_id · dO_id in fp32 for the query rows offs_m of one (batch, head), 0 where not row_ok:
    what both backwards need per row (kernels.flash_bwd's preprocess and :func:`_bwd_stats`)."""
    offs_d = tl.arange(0, HEAD_DIM)
    o = tl.load(O + off_z * stride_oz + off_h * stride_oh + offs_m.to(tl.int64)[:, None] * stride_om
                + offs_d[None, :] * stride_od, mask=row_ok[:, None], other=0.0)  # (BLOCK_M, HEAD_DIM)
    do = tl.load(DO + off_z * stride_doz + off_h * stride_doh + offs_m.to(tl.int64)[:, None] * stride_dom
                 + offs_d[None, :] * stride_dod, mask=row_ok[:, None], other=0.0)
    return tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)


@triton.jit
def _bwd_stats(O, DO, LSE, STATS, stride_oz, stride_oh, stride_om, stride_doz, stride_doh, stride_dom,
               heads, seq_q, q_pad, plane, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """:func:`tile_stats` of BLOCK_M rows of one (batch, head), delta computed here (:func:`rows_delta`):
    plane 0 of STATS lse·log2e, plane 1 (``plane`` elements on) delta, both zero for rows past seq_q.
    O and dO have a unit-stride head_dim (their TMA checks say so)."""
    off_hz = tl.program_id(1)
    off_z = (off_hz // heads).to(tl.int64)
    off_h = (off_hz % heads).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < seq_q
    delta = rows_delta(O, DO, off_z, off_h, offs_m, row_ok, stride_oz, stride_oh, stride_om, 1,
                       stride_doz, stride_doh, stride_dom, 1, HEAD_DIM)
    lse = tl.load(LSE + off_hz.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=0.0)
    row = STATS + off_hz.to(tl.int64) * q_pad + offs_m
    tl.store(row, tl.where(row_ok, lse * LOG2E_C, 0.0))
    tl.store(row + plane, tl.where(row_ok, delta, 0.0))


def backward_stats(o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor, q_pad: int, block_m: int,
                   key=None) -> torch.Tensor:
    """:func:`tile_stats` with delta computed on the way: one launch where the delta preprocess and
    tile_stats took five (a Triton kernel through JITFunction.run and four torch ops), host time a model's
    backward call waits on (docs/perf-notes.md, "Host time"). ``key``: the backward's launch key, or None."""
    batch, heads, seq_q, head_dim = o.shape
    stats = torch.empty((2, batch * heads, q_pad), dtype=torch.float32, device=o.device)
    key = None if key is None else (key, layout_key(o))  # o's strides are launch arguments too
    _STATS(key, (q_pad // block_m, batch * heads), (o, do, lse, stats, *o.stride()[:3], *do.stride()[:3], heads,
                                                     seq_q, q_pad, batch * heads * q_pad),
           dict(HEAD_DIM=head_dim, BLOCK_M=block_m), num_warps=4)
    return stats


def tile_stats(lse: torch.Tensor, delta: torch.Tensor, q_pad: int) -> torch.Tensor:
    """(2, B·H, q_pad) fp32: lse·log2e and delta of each query row, zero past the sequence's end, so that
    the loader brings a query tile's two rows with its Q by TMA. (Each consumer loading them itself
    waited on that load between its S and dP wgmma: docs/perf-notes.md, "Gluon backward", round 7.)
    The kernel takes :func:`backward_stats`' one launch; this, in torch ops, is the tests' reference for it."""
    batch, heads, seq_q = lse.shape
    stats = torch.empty((2, batch * heads, q_pad), dtype=torch.float32, device=lse.device)
    torch.mul(lse.reshape(batch * heads, seq_q), LOG2E, out=stats[0, :, :seq_q])
    stats[1, :, :seq_q] = delta.reshape(batch * heads, seq_q)
    stats[:, :, seq_q:] = 0.0
    return stats



@functools.cache
def _unswizzled_fp32():
    """The fragment-ordered dQ tile's layout (BackwardConfig.dq_frag): its rows need no swizzle."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)


def descriptors(q, k, v, do, dq_acc, stats, config: BackwardConfig):
    """TMA descriptors: Q and dO in BLOCK_M-row tiles and K and V in key blocks (BLOCK_N rows), each on its
    tensor's own strides (kernels.hopper_common.tensor_descriptor), the dQ buffer as (B·H·Nq_pad, D) fp32 in
    dQ shares (:meth:`BackwardConfig.dq_tile`), or with ``dq_frag`` as (B·H·Nq_pad·D / BLOCK_M, BLOCK_M) in
    fragment-ordered shares (:meth:`BackwardConfig.dq_box`), and the stats buffer as rows of BLOCK_M
    (:func:`tile_stats`)."""
    head_dim = q.shape[-1]
    dq_block = list(config.dq_box(head_dim))
    dq_layout = _unswizzled_fp32() if config.dq_frag else shared_layout(tuple(dq_block), torch.float32)
    dq_rows = config.block_m if config.dq_frag else head_dim
    stats_block = [1, config.block_m]  # one query tile's row of lse·log2e or delta (a 256-byte row: unswizzled)
    return (tensor_descriptor(q, config.block_m), tensor_descriptor(do, config.block_m),
            tensor_descriptor(k, config.block_n), tensor_descriptor(v, config.block_n),
            TensorDescriptor.from_tensor(dq_acc.view(-1, dq_rows), dq_block, dq_layout),
            TensorDescriptor.from_tensor(stats.view(-1, config.block_m), stats_block,
                                         shared_layout(tuple(stats_block), torch.float32)))


def hopper_backward(do, q, k, v, o, lse, causal: bool, sm_scale: float, config: BackwardConfig | None = None,
                    schedule: tile_schedule.Schedule | None = None, clock: torch.Tensor | None = None):
    """The Gluon backward on inputs :func:`unsupported_reason` accepts. Returns (dq, dk, dv) as
    kernels.flash_bwd does; delta (Σ_d O·dO per row) is computed with the stats the loader brings
    (:func:`backward_stats`). ``config`` overrides :func:`default_config` and ``schedule`` the tile order of
    :func:`kernels.tile_schedule.plan` (for sweeps). ``clock``, an int64 tensor of (key blocks, consumers + 1,
    :data:`CLOCK_EVENTS`) (key blocks: cdiv(Nkv, BLOCK_N) · B · H_kv), compiles a kernel that fills it with each
    block's cycle counts (kernels.hopper_common.clock_mark; scripts/perf_experiments/gluon_bwd_clock.py reads them)."""
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    explicit = config is not None or schedule is not None or clock is not None
    config = config or default_config(head_dim, causal, seq_q, heads // kv_heads)
    if clock is not None:
        shape = (triton.cdiv(seq_kv, config.block_n) * batch * kv_heads, config.consumers + 1, CLOCK_EVENTS)
        check_clock(clock, shape, q.device)
    if config.dkv_tma:
        tile_bytes, staging_bytes = KEYS_PER_WG * head_dim * q.element_size(), 4 * math.prod(config.dq_box(head_dim))
        if tile_bytes > staging_bytes:
            raise ValueError(f"dkv_tma needs dK or dV of {KEYS_PER_WG} keys ({tile_bytes} B) in one dQ staging tile, "
                             f"and block_m={config.block_m}, dq_cols={config.dq_cols} gives {staging_bytes} B at "
                             f"head_dim {head_dim}")
    if config.dq_mode != 2:
        if config.dq_mode not in (0, 1):
            raise ValueError(f"dq_mode {config.dq_mode} is not 0, 1 or 2")
        warnings.warn(f"dq_mode {config.dq_mode} leaves dq unfinished (zero or partial): for timing only",
                      stacklevel=2)
    consumer_regs, loader_regs = WORKER_REGS[config.consumers]
    if tma_layout_reason(do) is not None:
        do = do.contiguous()  # e.g. the expanded (stride 0) gradient of a sum
    q_pad = triton.cdiv(seq_q, config.block_m) * config.block_m
    # With config.dq_frag each query tile of it holds (D/8, BLOCK_M, 8), not (BLOCK_M, D): only _dq_convert reads it.
    dq_acc = torch.zeros((batch, heads, q_pad, head_dim), dtype=torch.float32, device=q.device)
    # Each gradient in its input's memory order: a BSHD view's gradient is a BSHD view, so autograd's
    # transposes back to the model's layout copy nothing.
    dk = empty_in_layout(k)
    dv = empty_in_layout(k)
    # With the defaults, everything below follows from the inputs' layouts (the buffers are new, aligned
    # allocations): the schedule and the compiled kernels are kept by it (_launch.LaunchCache).
    key = None if explicit or not _BWD.enabled else (layout_key(q, k, v, do), bool(causal))
    key = None if key is not None and key[0] is None else key
    stats = backward_stats(o, do, lse, q_pad, config.block_m, key)
    descs = descriptors(q, k, v, do, dq_acc, stats, config)
    n_blocks = triton.cdiv(seq_kv, config.block_n)
    bh_kv = batch * kv_heads
    props = cuda_properties(q.device.index)
    programs = n_blocks * bh_kv
    if config.persistent:
        programs = min(programs, props.multi_processor_count)
    schedule = schedule or _SCHEDULES.get(key)
    if schedule is None:
        # Per K/V head, what its key blocks read and reduce into: Q and dO of its query heads, and
        # their fp32 dQ rows (FA3's SingleTileBwdLPTScheduler counts the same three).
        head_bytes = (heads // kv_heads) * seq_q * head_dim * (2 * q.element_size() + 4)
        # A key block's program walks block_n / block_m query tiles per block of queries, for each query
        # head of its group: the work of a visited block, for the grid's order (tile_schedule.grid_makespan).
        repeat = (heads // kv_heads) * config.block_n / config.block_m
        schedule = tile_schedule.plan(n_blocks, bh_kv, head_bytes, props.L2_cache_size,
                                      tile_schedule.BACKWARD_L2_SHARE, programs, bool(causal),
                                      config.persistent, props.multi_processor_count, repeat)
        if key is not None:
            _SCHEDULES.keep(key, schedule)
    dk_out, dv_out = dk, dv
    if config.dkv_tma:  # written through a view of a consumer's dQ staging tile
        dk_out, dv_out = (tensor_descriptor(t, KEYS_PER_WG) for t in (dk, dv))
    _BWD(key, (programs,), (
        # clock None: a constexpr, so the kernel's parameters are those without it (one more parameter, even unused,
        # moved ptxas's register allocation: causal, 4 to 20 B fewer spill stores)
        *descs, dk_out, dv_out, *dk.stride()[:3], sm_scale * LOG2E, sm_scale, clock,
        heads, heads // kv_heads, seq_q, seq_kv, q_pad, n_blocks, bh_kv, schedule.section, int(schedule.snake),
        stats.shape[1] * stats.shape[2] // config.block_m), dict(
        HEAD_DIM=head_dim, BLOCK_M=config.block_m, STAGES=config.stages, NUM_WG=config.consumers,
        KEYS_PER_WG=KEYS_PER_WG, CAUSAL=bool(causal), DQ_COLS=config.dq_cols, DQ_MODE=config.dq_mode,
        QUERY_ROWS=config.query_rows, MASKED_FIRST=config.masked_first, LATE_STATS=config.late_stats,
        DKV_TMA=config.dkv_tma,
        CONSUMER_REGS=consumer_regs,
        LOADER_REGS=loader_regs,
        Q_LAYOUT=tile_layout(config.block_m, head_dim, q.dtype),
        KV_LAYOUT=tile_layout(config.block_n, head_dim, q.dtype)),
        num_warps=4,
    )
    dq = empty_in_layout(q)
    # One program per query tile of the padded buffer (config.block_m rows). Not tuned: the pass moves
    # 6 bytes per dQ element (fp32 in, 16-bit out), against the kernel's 4·(Nkv / BLOCK_N) of reduce-adds.
    _DQ_CONVERT(key, (q_pad // config.block_m, batch * heads),
                (dq_acc, dq, *dq.stride()[:3], sm_scale, heads, seq_q, q_pad),
                dict(HEAD_DIM=head_dim, BLOCK=config.block_m, FRAG=config.dq_frag))
    return dq, dk, dv


# The default backward's schedule and compiled kernels by (_launch.layout_key of q, k, v, do; causal).
_SCHEDULES: Memo = Memo()
_BWD = LaunchCache(_attn_bwd_hopper)
_DQ_CONVERT = LaunchCache(_dq_convert)
_STATS = LaunchCache(_bwd_stats)
