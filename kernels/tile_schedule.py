"""The order in which the Gluon kernels take their tiles: longest first, few heads at a time.

A causal tile's work depends on where it sits on the diagonal: the forward's query block m sees
m + 1 key blocks, the backward's key block n sees every query block from n on. Taking the longest
tiles first evens out the programs (longest processing time first). Taking them longest first
over *every* head, though, spreads the programs that run at once over as many heads as there are
programs, and their K and V (forward) or Q, dO and the dQ accumulator (backward) then no longer
fit in L2: docs/perf-notes.md measured that loss on the forward ("Gluon forward") and the
backward ("Gluon backward", round 4). FlashAttention-3 (hopper/tile_scheduler.hpp, its LPT
schedulers) cuts the heads into sections whose data fits in a share of L2 and goes longest first
inside each section. We measured fewer heads in flight to be faster still: a grid with a program per
tile goes head by head (the hardware hands the next tile to a free SM, which evens the tail out),
and persistent programs take sections as small as their balance allows (below), FA3's share of L2
only as the upper bound.

"The hardware evens the tail out" needs many tiles, though. With few long ones (batch 1 with grouped
heads, where a backward program walks every query head of its K/V group) head by head starts the
last heads' longest tiles after the first wave has run, and the run ends late: Llama-3-8B's backward at
N4096 ran at 302 TFLOP/s head by head and 396 in sections of 4 heads on the H100. So a grid of one
program per tile also takes sections, from a model of how the hardware fills its SMs
(:func:`grid_makespan`), and never larger than the heads one wave of programs spans anyway.

One more step matters for persistent programs that take every programs-th tile of that order (a
static round robin, not FA3's atomic counter): when a section holds a multiple of the programs'
count of tiles, each program meets the same block index in every section, and some programs get
only long blocks. ``snake`` reverses the order of every other section, so the long blocks a program
took in one section are paired with short ones in the next. On the H100 the snaked order measured
at or above the straight one at every section size, and smaller sections (fewer heads in flight)
faster than larger ones once the work is even, so :func:`plan` takes the smallest section whose
snaked order balances the programs on the launch's own shape (:func:`largest_share`).

:func:`tile` is the reference for the ``swizzled_tile`` Gluon function in kernels.hopper_common
(the kernels' mapping); tests check it visits every tile once and the plan's balance. Pure Python:
no GPU or triton needed (numpy for :func:`largest_share`).
"""

from __future__ import annotations

import functools
import heapq
from typing import NamedTuple

import numpy as np

# Shares of L2 that FlashAttention-3 budgets for one section's data on an H100's 50 MB L2
# (hopper/tile_scheduler.hpp: "32 MB for K & V" in the forward's scheduler, "40 MB for Q, dO,
# and dQaccum" in SingleTileBwdLPTScheduler). We scale them to the device's own L2.
FORWARD_L2_SHARE = 32 / 50
BACKWARD_L2_SHARE = 40 / 50


class Schedule(NamedTuple):
    """How a launch orders its tiles (the kernels' ``section`` and ``snake`` arguments)."""

    section: int  # (batch·head)s per section; tiles go longest first within one
    snake: bool  # every other section shortest first (persistent programs only)


def tiles(t: np.ndarray, n_blocks: int, bh: int, section: int, snake: bool) -> tuple[np.ndarray, np.ndarray]:
    """Tiles t (an array) of bh · n_blocks as (batch·head, rank) arrays, rank 0 the longest block.
    Section s holds heads s·section ... and its tiles go rank by rank, head by head within a rank;
    with ``snake`` every odd section goes from its shortest rank."""
    sec, r = np.divmod(t, section * n_blocks)
    rank, head = np.divmod(r, np.minimum(section, bh - sec * section))  # the last section may be short
    if snake:
        rank = np.where(sec % 2 == 1, n_blocks - 1 - rank, rank)
    return sec * section + head, rank


def tile(t: int, n_blocks: int, bh: int, section: int, snake: bool) -> tuple[int, int]:
    """Tile t as (batch·head, rank): :func:`tiles` for one index."""
    head, rank = tiles(np.asarray(t), n_blocks, bh, section, snake)
    return int(head), int(rank)


def section_heads(bh: int, head_bytes: int, l2_bytes: int, share: float) -> int:
    """Heads whose data fits in ``share`` of L2, rounded down to a power of two as FA3 does ("seems
    faster if swizzle is a power of 2", hopper/tile_scheduler.hpp); at least 1, at most bh."""
    fit = int(l2_bytes * share) // max(1, head_bytes)
    if fit < 1:
        return 1
    return min(bh, 1 << (fit.bit_length() - 1))


def largest_share(n_blocks: int, bh: int, programs: int, schedule: Schedule, causal: bool = True) -> float:
    """The largest program's work over the mean, for ``programs`` persistent programs each taking
    every programs-th tile, with a tile's work = the blocks it visits + 1 (its start and its
    epilogue, about one block's time: a coarse model, used only to choose between orders)."""
    t = np.arange(n_blocks * bh)
    _, rank = tiles(t, n_blocks, bh, schedule.section, schedule.snake)
    work = np.bincount(t % programs, weights=1 + (n_blocks - rank if causal else n_blocks), minlength=programs)
    return float(work.max() * programs / work.sum())


def grid_makespan(n_blocks: int, bh: int, slots: int, schedule: Schedule, repeat: float = 1.0) -> float:
    """For a causal grid of one program per tile: when the last program ends, over the mean work per
    slot. ``slots`` programs run at once (one per SM for our kernels: their shared memory and
    registers fit one program an SM), and the next program in tile order starts on the first slot to
    come free, as the hardware hands out thread blocks in index order while SMs free up. A tile's work
    is 1 + ``repeat`` · the blocks it visits (as :func:`largest_share`; the backward's program visits
    every query head of its K/V group, so its ``repeat`` counts those). 1.0 is a perfect fill; with
    few long programs a head-by-head order starts the longest ones of the last heads late."""
    t = np.arange(n_blocks * bh)
    _, rank = tiles(t, n_blocks, bh, schedule.section, schedule.snake)
    work = 1 + repeat * (n_blocks - rank)
    free = [0.0] * min(slots, len(work))
    end = 0.0
    for w in work.tolist():
        start = heapq.heappop(free)
        end = max(end, start + w)
        heapq.heappush(free, start + w)
    return float(end * len(free) / work.sum())


# A persistent launch takes the smallest section whose snaked order keeps the largest program's
# work within this factor of the mean (or, when none does, the most even one). On the H100, the
# smallest such section was the fastest measured or within 2% of it on every causal shape of
# reports/perf-h100/gluon_schedule_sections.jsonl (docs/perf-notes.md, "Gluon backward", round 4).
BALANCE = 1.04

# A grid of one program per tile takes the smallest section whose :func:`grid_makespan` is within
# this factor of the best candidate's (fewer heads in flight measured faster: round 4).
GRID_TOLERANCE = 1.01


@functools.lru_cache(maxsize=256)
def plan(n_blocks: int, bh: int, head_bytes: int, l2_bytes: int, share: float, programs: int,
         causal: bool, persistent: bool, slots: int = 0, repeat: float = 1.0) -> Schedule:
    """The order for one launch. Head by head when not causal (every tile is as long, and a head's
    data stays in L2 while its tiles run). Persistent causal: snaked sections, the smallest that
    balance the programs' work (:data:`BALANCE`), no larger than :func:`section_heads` lets fit in
    L2. Causal with one program per tile (``slots`` programs at once, 0: unknown, head by head):
    sections no larger than the heads one wave of ``slots`` programs spans anyway (so no more heads
    are in flight than head by head has), the smallest whose :func:`grid_makespan` is within
    :data:`GRID_TOLERANCE` of the best; head by head when the tiles are many, sections where few long
    programs would otherwise start the last heads' longest tiles late (batch 1 with grouped heads)."""
    if not causal:
        return Schedule(1, False)
    if not persistent or programs >= n_blocks * bh:
        if slots <= 0:
            return Schedule(1, False)
        wave_heads = min(bh, -(-slots // n_blocks))
        candidates = [Schedule(1 << i, False) for i in range(wave_heads.bit_length())]
        spans = [grid_makespan(n_blocks, bh, slots, schedule, repeat) for schedule in candidates]
        best = min(spans)
        return next(s for s, span in zip(candidates, spans) if span <= best * GRID_TOLERANCE)
    largest = section_heads(bh, head_bytes, l2_bytes, share)
    sizes = sorted({*(1 << i for i in range(largest.bit_length())), largest})
    candidates = [Schedule(size, True) for size in sizes]
    shares = [largest_share(n_blocks, bh, programs, schedule) for schedule in candidates]
    for schedule, work in zip(candidates, shares):
        if work <= BALANCE:
            return schedule
    return candidates[shares.index(min(shares))]


class SplitTail(NamedTuple):
    """A persistent launch's work items when its last wave is cut by keys (:func:`split_tail`): items
    0 ... ``full`` - 1 are the tiles of that number, item ``full`` + c is key chunk c % ``splits`` (key
    tiles from (c % splits) · ``chunk``) of tile ``full`` + c // splits."""

    full: int  # whole tiles: the full waves
    tail: int  # tiles after them, each cut into chunks
    splits: int  # chunks a tail tile is cut into
    chunk: int  # key tiles a chunk takes (the last one of a tile may take fewer)

    @property
    def items(self) -> int:
        return self.full + self.tail * self.splits

    @property
    def label(self) -> str:
        """'split-tail 4x32': the tail's tiles, each cut into that many chunks (a row's ``path`` names it after the
        kernel's, kernels.flash_fwd.forward_path; profiler.model.cost reads it back)."""
        return f"split-tail {self.tail}x{self.splits}"


def split_tail(total: int, programs: int, key_tiles: int) -> SplitTail | None:
    """Where ``total`` tiles of ``key_tiles`` key tiles each, all as long (not causal), run on ``programs``
    persistent programs: cut the last, partial wave's tiles by keys over every program. None where
    there is nothing to gain.

    Programs that take every programs-th tile end after ceil(total / programs) tiles, the last wave's
    total % programs tiles on as many programs while the rest wait (wave quantization): 4,096 tiles on
    132 SMs end after 32 tiles' time for 31.03 tiles of work each, 3% of the launch with most SMs idle.
    The data-parallel waves with a Stream-K tail (Osama et al., "Stream-K: Work-centric Parallel
    Decomposition for Dense Matrix Multiplication on the GPU", PPoPP 2023, its "data-parallel +
    one-tile Stream-K" hybrid) instead give each of the tail's r tiles to programs // r programs, each a
    contiguous chunk of its keys; a chunk writes its rows' fp32 output and logsumexp, and
    kernels.tail_combine merges the chunks of a tile as FlashDecoding merges its splits. The launch
    then ends after about total // programs tiles and one chunk, plus the merge."""
    if total <= programs or key_tiles < 2:
        return None
    full = total // programs * programs
    tail = total - full
    if tail == 0:
        return None
    chunk = -(-key_tiles // min(programs // tail, key_tiles))
    splits = -(-key_tiles // chunk)
    if splits < 2:
        return None
    return SplitTail(full, tail, splits, chunk)


def work_item(w: int, split: SplitTail | None, key_tiles: int) -> tuple[int, int, int, int]:
    """Item w of a launch as (tile, first key tile, key tiles, chunk index or -1 for a whole tile): the
    reference of the Gluon forward's ``_work`` (kernels.flash_fwd_hopper)."""
    if split is None or w < split.full:
        return w, 0, key_tiles, -1
    c = w - split.full
    first = c % split.splits * split.chunk
    return split.full + c // split.splits, first, min(split.chunk, key_tiles - first), c
