"""When and how our forward splits the key/value sequence (FlashDecoding), as a pure function.

Decode attends a few query tokens to a long K/V cache. One program per (query block, batch·head),
as in the tiled forward, then gives the GPU B·H programs that each stream the whole cache: at batch
1 that is a few dozen programs for a hundred-odd SMs, and HBM sits idle. FlashDecoding (Dao, Haziza,
Massa, Sizov, "Flash-Decoding for long-context inference", PyTorch blog, 2023; flash-attention's
``flash_fwd_splitkv_kernel``) splits the keys into chunks, lets one program per (chunk, batch·K/V
head) write a partial output and logsumexp per query row, and combines the partials with their
logsumexps in a second kernel. Ours (kernels/flash_decode.py) also stacks the query rows of every
head in a K/V head's group into one block, so each K/V tile is read once for the whole group.

The kernel and the cost model both call :func:`plan`, so the split count a capture row is costed
with is the one the kernel ran with. It depends on the shape only (no device query): the constants
below were chosen on an H100 (132 SMs) by scripts/perf_experiments/decode_sweep.py over the
Llama-3-8B decode grid, where 24 variants (64 or 128 keys per tile, 4 or 8 warps, 2 or 3 stages,
256 to 2048 target programs) were all within 8% of the best of each shape (docs/perf-notes.md, "Decode").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_ROWS = 128  # group · Nq rows one block holds; above it the tiled forward runs
MIN_BLOCK_M = 16  # tl.dot needs at least 16 rows
BLOCK_N = 64  # keys per tile
TARGET_PROGRAMS = 512  # split until about this many programs run (a few per SM of a 132-SM part)
MIN_CHUNK = 256  # keys per split at least: fewer and the partials cost more than they hide
MAX_SPLITS = 256  # the combine kernel holds every split's logsumexp of a row at once
PARTIAL_BYTES = 4  # partial outputs and logsumexps are fp32
# How splits take their key tiles (SplitPlan.strided): strided (tiles s, s + splits, ...) measured
# 0.3 to 1.6% faster than contiguous chunks on every shape of scripts/perf_experiments/decode_strided.py
# (H100, three repeats each, reports/perf-h100/decode_strided.jsonl): the programs of a wave then
# read neighbouring tiles, as a streaming copy does.
STRIDED = True


@dataclass(frozen=True)
class SplitPlan:
    splits: int  # programs per (batch, K/V head) along the keys
    chunk: int  # keys per split, a multiple of BLOCK_N (the span of one split when not strided)
    block_m: int  # rows per block: group · Nq, padded to a power of two, at least MIN_BLOCK_M
    strided: bool = STRIDED  # split s takes tiles s, s + splits, ... (else one chunk of chunk keys)

    @property
    def label(self) -> str:
        return f"split-kv x{self.splits}"


def plan(batch: int, kv_heads: int, group: int, seq_q: int, seq_kv: int) -> SplitPlan | None:
    """The split-KV launch for this problem, or None when the tiled forward runs instead (more than
    MAX_ROWS query rows per K/V head: a prefill, where query blocks alone fill the GPU)."""
    rows = group * seq_q
    if rows > MAX_ROWS:
        return None
    wanted = math.ceil(TARGET_PROGRAMS / (batch * kv_heads))
    splits = max(1, min(wanted, math.ceil(seq_kv / MIN_CHUNK), MAX_SPLITS))
    chunk = math.ceil(math.ceil(seq_kv / splits) / BLOCK_N) * BLOCK_N
    splits = math.ceil(seq_kv / chunk)  # after rounding the chunk up, the last split may be empty
    return SplitPlan(splits, chunk, max(MIN_BLOCK_M, 1 << (rows - 1).bit_length()))


def partial_bytes(batch: int, heads: int, seq_q: int, head_dim: int, splits: int) -> int:
    """HBM traffic of the partials: each split writes an fp32 output row and logsumexp per query row,
    and the combine reads them back (nothing when one split writes the output directly)."""
    if splits <= 1:
        return 0
    return 2 * splits * batch * heads * seq_q * (head_dim + 1) * PARTIAL_BYTES
