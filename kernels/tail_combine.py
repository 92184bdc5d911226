"""Merging the key chunks of a forward's tail tiles (kernels.tile_schedule.split_tail).

Where a persistent forward cuts its last wave's query tiles by keys, each chunk writes, for every
row of its tile, its output normalised over its own keys (fp32) and their logsumexp. This kernel
merges a row's chunks as FlashDecoding merges its splits (kernels/flash_decode.py, ``_decode_combine``):
lse = log Σ_c exp(lse_c), o = Σ_c exp(lse_c − lse) · o_c, and writes the row's output and logsumexp
where the forward would have (kernels.flash_decode.merge_splits, the decode combine's merge). One program per row of
the tail; the tile a row belongs to is looked
up in ``tiles`` ((batch, head, first row) per tail tile, in the forward's tile order). Pointer
arithmetic only (triton 3.6 and 3.9).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import tile_schedule
from kernels._launch import LaunchCache
from kernels.flash_decode import merge_splits


@triton.jit
def _tail_combine(
    O, stride_oz, stride_oh, stride_om, LSE, O_PART, LSE_PART, TILES, heads, seq_q, splits,
    BLOCK_M: tl.constexpr,  # rows of a tile
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,  # splits, padded to a power of two
):
    row = tl.program_id(0)  # of the tail: tile row // BLOCK_M, its row row % BLOCK_M
    tile = row // BLOCK_M
    off_z = tl.load(TILES + tile * 3)
    off_h = tl.load(TILES + tile * 3 + 1)
    m = tl.load(TILES + tile * 3 + 2) + row % BLOCK_M
    if m < seq_q:
        # the largest logsumexp is finite: every chunk holds at least one key, which every row sees (not causal)
        o_row = O + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh + m.to(tl.int64) * stride_om
        merge_splits(O_PART, LSE_PART, row.to(tl.int64), splits, o_row,
                     LSE + (off_z * heads + off_h).to(tl.int64) * seq_q + m, BLOCK_S, HEAD_DIM)


def partials(tail: int, block_m: int, splits: int, head_dim: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunks' outputs (tail · block_m · splits, head_dim) and logsumexps (tail · block_m · splits), fp32: row r
    of tail tile i, chunk c at (i · block_m + r) · splits + c."""
    rows = tail * block_m * splits
    return (torch.empty((rows, head_dim), dtype=torch.float32, device=device),
            torch.empty((rows,), dtype=torch.float32, device=device))


def tail_tiles(tail: tile_schedule.SplitTail, n_blocks: int, bh: int, heads: int, schedule: tile_schedule.Schedule,
               block_m: int, device, create: bool = True) -> torch.Tensor | None:
    """The (batch, head, first row) of each tail tile in ``schedule``'s order (kernels.tile_schedule.tile; not causal,
    so a tile's rank is its query block), int32 on ``device``, as :func:`combine` takes them: made once per shape
    (:data:`_TAIL_TILES`), as the copy to the device waits for the work queued before it. Without ``create``, the one
    made before, or None: a stream being captured into a CUDA graph cannot take the copy."""
    key = (tail, n_blocks, bh, heads, schedule, block_m, str(device))
    table = _TAIL_TILES.get(key)
    if table is None and create:
        tiles = [tile_schedule.tile(tail.full + i, n_blocks, bh, *schedule) for i in range(tail.tail)]
        table = torch.tensor([(b // heads, b % heads, rank * block_m) for b, rank in tiles], dtype=torch.int32,
                             device=device)
        _TAIL_TILES[key] = table
    return table


# tail_tiles' tables by shape, never dropped: a CUDA graph captured with one reads it at every replay, and the memo may
# be all that keeps it alive (a table is 12 bytes a tail tile: at most 132 on an H100)
_TAIL_TILES: dict[tuple, torch.Tensor] = {}


def combine(o: torch.Tensor, lse: torch.Tensor, o_part: torch.Tensor, lse_part: torch.Tensor, tiles: torch.Tensor,
            block_m: int, key=None) -> None:
    """Merge the chunks (:func:`partials`) of the tail tiles ``tiles`` (int32 (tail, 3): batch, head, first row) into
    o (B, H, Nq, D), head_dim unit-stride, and lse (B, H, Nq) contiguous. ``key``: the caller's launch key
    (_launch.LaunchCache), or None."""
    heads, seq_q, head_dim = o.shape[1], o.shape[2], o.shape[3]
    splits = lse_part.shape[0] // (tiles.shape[0] * block_m)
    _COMBINE(key, (tiles.shape[0] * block_m,), (o, *o.stride()[:3], lse, o_part, lse_part, tiles, heads, seq_q, splits),
             dict(BLOCK_M=block_m, HEAD_DIM=head_dim, BLOCK_S=triton.next_power_of_2(splits)), num_warps=4)


_COMBINE = LaunchCache(_tail_combine)
