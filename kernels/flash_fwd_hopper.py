"""FlashAttention forward for Hopper (sm_90) in Gluon: warp-specialized, the softmax under the matmuls.

docs/perf-notes.md shows why our portable Triton forward stops near 1/(1 + 0.68·64/D) of the
matmul roof: its warps run the exponentials and the matmuls one after the other, and an H100 SM
does 4096 dense fp16 FLOP per clock on its tensor cores but only 16 exp2 on its SFUs. Getting past
that cap takes overlap, as FlashAttention-3 does (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao,
"FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision", 2024, sections
3.1 and 3.2). This kernel has the same structure, written in Gluon (``triton.experimental.gluon``)
because Triton's own pipeliner could not be asked for it (``tl.range(warp_specialize=True)``
did not get there on triton 3.6):

- Each program runs query tiles of ``BLOCK_M`` = 64 · consumers rows (one per program, or, with
  ``persistent``, one program per SM looping over tiles), in partitions (``gl.warp_specialize``):
  a loader warp that issues TMA copies of each consumer's Q rows and of K and V tile by tile into
  a ring of ``STAGES`` shared-memory buffers (``mbarrier`` handshakes: ``k_ready``/``v_ready`` when
  a copy lands, ``k_empty``/``v_empty`` when every consumer is done with a slot's K or V, so the
  next K can land while the current V is still in use; ``q_empty`` when a consumer is done with
  its Q), and two or three consumer warpgroups of 64 query rows each, which run the wgmma
  instructions and the online softmax. Tiles go head by head; causal ones longest block first
  in small sections of heads (snaked for persistent programs: kernels.tile_schedule.plan).
- ``OVERLAP``: a consumer issues the next tile's QKᵀ and the current PV as asynchronous wgmma
  before it runs the softmax of the tile it just waited for, so its exponentials run while its own
  matmuls are in flight (FA3's intra-warpgroup pipelining, their Algorithm 2).
- ``PINGPONG``: the consumers take turns issuing their matmuls (an mbarrier per consumer passes
  the turn round robin), so one's softmax lines up with the others' matmuls (FA3's
  inter-warpgroup overlap).
- P goes from the S accumulator's registers straight into the PV wgmma as its A operand; it never
  touches shared memory.
- The epilogue: each consumer scales O by one reciprocal of its row sums; with ``o_tma`` (the 16-bit default) it
  writes O into its own shared-memory tile and sends it with one TMA store, which the next tile's epilogue waits for
  before it writes the tile again; without it (fp8), each thread stores its own fragments.
- ``split_tail`` (persistent, not causal; the default at head_dim 128 from 8192 keys, :data:`SPLIT_TAIL_FROM`): the
  launch runs only the full waves of tiles; the last, partial wave's tiles are cut by keys into chunks, a second
  launch of this kernel (``CHUNKS``, programmatically dependent on the first, so its programs take the SMs as the
  first launch's programs end) writes each chunk's rows in fp32 with their logsumexp, and kernels.tail_combine merges
  them (kernels.tile_schedule.split_tail says why: 4,096 tiles on 132 SMs otherwise end after 32 tiles' time for
  31.03 tiles of work).

Inputs: fp16 or bf16, head_dim 64 or 128, BHSD tensors in any memory layout a TMA descriptor can
read (:func:`tma_layout_reason`: contiguous BHSD, the BSHD storage transformers and flash-attn
pass as a BHSD view, slices of a packed QKV projection), any Nq, Nkv, grouped-query heads, causal
top-left aligned as SDPA's ``is_causal``. The descriptors are 4-D, on the tensors' own strides, so
a tile never reads across a sequence, head or batch: rows of a ragged last block are TMA's zero
fill, their scores masked and their outputs never stored (TMA drops a stored box's rows past the end). O is written
in q's memory order, through a descriptor on its own strides. Everything else takes
kernels.flash_fwd's portable kernel (see :func:`unsupported_reason`). The interpreter cannot run
Gluon, so the CPU tests run the portable kernel; tests/gpu runs this one against the fp64 oracle.

fp8 (``FP8``, kernels.flash_fwd_fp8.flash_attention_fp8 routes here on sm_90: :func:`fp8_reason`): e4m3 Q,
K, V with an fp32 descale per (batch, head) each, V with its keys contiguous (its descriptor is over the
(head_dim, keys) transpose: an 8-bit wgmma reads B K-major only), P rounded to e4m3 as PV's register
operand, a bf16 (or fp16) output; :data:`FP8_CONFIGS`. One kernel serves both: with ``FP8`` off the bf16
kernels compile to the same SASS as before it existed (scripts/perf_experiments/gluon_sass_dump.py).
Other fp8 inputs, and causal head_dim 64 (:data:`FP8_PORTABLE`), take kernels.flash_fwd_fp8's Triton kernel.
"""

from __future__ import annotations

import os
import types
from typing import NamedTuple

import torch
import triton

from kernels import tail_combine, tile_schedule
from kernels._autotune import LN2_C, LOG2E
from kernels._checks import cuda_properties
from kernels._launch import LaunchCache, Memo, layout_key
from kernels._layout import empty_in_layout
from kernels.hopper_common import (
    CLOCK_EVENTS,
    as_box,
    check_clock,
    clock_mark,
    clock_note,
    clock_read,
    ring_phase,
    sm90_reason,
    swizzled_tile,
    tensor_descriptor,
    tile_layout,
)

try:  # Gluon's Hopper API as triton 3.6 ships it (kernels.hopper_common says why GLUON_IMPORT_ERROR is set)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
except ImportError:  # pragma: no cover - depends on the installed triton
    # The kernels below are still defined (their bodies are only read when compiled); unsupported_reason
    # returns GLUON_IMPORT_ERROR, so nothing launches them.
    gluon = types.SimpleNamespace(jit=lambda fn=None, **options: fn if fn is not None else (lambda f: f))

HEAD_DIMS = (64, 128)
FP8 = torch.float8_e4m3fn  # kernels.flash_fwd_fp8's dtype: e4m3 with a descale per (batch, head)
SPLIT_M = 64  # query rows per consumer warpgroup: one wgmma M of 4 warps × 16 rows


class HopperConfig(NamedTuple):
    """One launch configuration of the Gluon forward."""

    block_n: int  # keys per K/V tile (BLOCK_N)
    stages: int  # K/V tiles in the shared-memory ring (STAGES)
    overlap: bool  # issue the next QKᵀ and this PV before this softmax (OVERLAP, FA3 Algorithm 2)
    pingpong: bool  # consumers take turns issuing their matmuls (PINGPONG, FA3 inter-warpgroup overlap)
    consumers: int  # consumer warpgroups of SPLIT_M query rows each (NUM_WG)
    persistent: bool  # one program per SM looping over query tiles, instead of one program per tile
    # O leaves through a shared-memory tile per consumer and one TMA store, rather than each thread's stores of its
    # fragments (O_TMA; docs/perf-notes.md, "Gluon forward, round 16"). Not measured in fp8, whose configs leave it off.
    o_tma: bool = False
    # With overlap: the unmasked and the masked key tiles in two loops, each with its softmax compiled once, and P
    # rounded at the end of its step into packed 16-bit pairs carried to the next step's PV (_pack_p). At head_dim 64 on
    # three consumers 0 B of spills without a mask, 88 B causal (docs/perf-notes.md, "Gluon forward, round 18"). 16-bit
    # inputs, and with overlap only.
    split_mask: bool = False
    # With split_mask: each thread keeps its own share of P's row sums, and the four threads of a quad add theirs once,
    # after the last key tile, instead of by two shuffles a row every tile (FlashAttention-4's sm90 softmax defers them
    # the same way; docs/perf-notes.md, "Gluon forward, round 19").
    row_partials: bool = False
    # With split_mask and a causal mask: each consumer stops at the last key tile its own rows see, and of the program's
    # later tiles (which only the consumers below it see) takes its turn and releases the ring's slots without computing
    # them. A program's key tiles run to its last row's, so with 192-row tiles and 128-key tiles the first consumer
    # would otherwise compute a tile masked for every row of it in every program (but a last one cut by the row's end),
    # and the second in every other one.
    causal_trim: bool = False
    # Persistent and not causal: the last wave's query tiles cut by keys over every program, each chunk's rows merged
    # after the launch (kernels.tile_schedule.split_tail says why, kernels.tail_combine merges). 16-bit inputs only.
    split_tail: bool = False

    @property
    def block_m(self) -> int:
        """Query rows per program: every consumer's SPLIT_M."""
        return self.consumers * SPLIT_M


# By (head_dim, causal); chosen by the H100 variants in docs/perf-notes.md ("Gluon forward"; o_tma: round 16). Round 18
# measured overlap with split_mask at head_dim 64 (three consumers taking turns) 5.9% to 7.3% fewer cycles a key tile
# than the configs before it, and split_mask at head_dim 128 without a mask 2.3% (N 8192, bf16, the SM's clock); round
# 19 made them the defaults with row_partials, which took 3.1% to 3.6% fewer cycles a key tile at head_dim 64 without a
# mask, 0.5% causal and 1.8% at head_dim 128 (N 2048 and 8192: reports/perf-h100/gluon_fwd_round19), and measured
# them in the peers grid; then causal head_dim 128 took both (0.7% to 1.3% fewer cycles a key tile at N 2048 to 8192;
# timed 0.972x to 1.003x, twin 0.987x to 1.009x: neutral) (docs/perf-notes.md, "Gluon forward, round 19"). Round 20
# gave causal head_dim 64 causal_trim: 5.1%, 4.7% and 2.6% fewer cycles a key tile at N 4096, 8192 and 16384; timed
# 1.035x at N 4096 (faster in 5 of 5 rounds), and within the rounds' spread at 8192 and 16384 (medians 1.020x and
# 1.004x, faster in 3 and 2 of 5), where the cycles decide (reports/perf-h100/gluon_fwd_round20, a_clock_bench_long).
# The other causal configs have two consumers, whose 128-row tiles end where a key tile does: nothing to trim.
CONFIGS = {
    (64, False): HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=3, persistent=True,
                              o_tma=True, split_mask=True, row_partials=True),
    (64, True): HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=3, persistent=False,
                             o_tma=True, split_mask=True, row_partials=True, causal_trim=True),
    (128, False): HopperConfig(block_n=128, stages=2, overlap=True, pingpong=False, consumers=2, persistent=True,
                               o_tma=True, split_mask=True, row_partials=True),
    (128, True): HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=2, persistent=False,
                              o_tma=True, split_mask=True, row_partials=True),
}
# fp8 (e4m3) by (head_dim, causal): three consumers taking turns, measured on the H100 (docs/perf-notes.md,
# "FP8 forward", round 3: reports/perf-h100/fp8_probe_round3_gluon.jsonl and _round3b_gluon.jsonl). Without a
# mask it was the fastest in round 3a; in 3b two variants were 0.3-1.5% faster at D128 (three stages; no turns).
# Causal at D128, 256-key tiles with two consumers were 2.0% (3a) and 1.9% (3b) faster, 4.0% with three stages,
# kept aside so that one tile serves the cost model. The exponentials bind in fp8, so more warpgroups taking
# turns pay more than a consumer's own overlap (which needs a second S tile's registers, and with three
# consumers spills). Causal at head_dim 64 runs kernels.flash_fwd_fp8's Triton kernel (FP8_PORTABLE); its entry
# here is for callers that force this kernel.
FP8_CONFIGS = {
    (head_dim, causal): HopperConfig(block_n=128, stages=2, overlap=False, pingpong=True, consumers=3, persistent=True)
    for head_dim in HEAD_DIMS for causal in (False, True)
}
# Where the Triton fp8 kernel measured faster than every Gluon configuration (the same files): causal at head_dim
# 64, 460-471 against at most 430-443 TFLOP/s, measured at N 4096 only (the capture, reports/fp8-h100, ran it on
# the Triton kernel at every N and so does not compare the two).
FP8_PORTABLE = {(64, True)}
# Registers per thread of the worker partitions (setmaxnreg) by consumer count: a consumer keeps
# its S, P and O tiles in registers, the loader warp almost none. The largest that compile without
# spills (ptxas -v): with two consumers 240; with three, 512 threads share 64K registers.
WORKER_REGS = {2: (240, 24), 3: (160, 24)}


# Where the portable kernel measured faster on the H100, by (head_dim, causal): Nq up to this. Causal head_dim 64 up
# to Nq 1024: timed the grid's way (`python -m profiler bench`, 32768 tokens, fp16 and bf16, ATTN_GLUON=1 and 0 in
# turn, twice, on one machine; round 18, reports/perf-h100/gluon_fwd_round18_route and _short), the Gluon forward ran
# 0.72x the portable kernel at N 512, 0.96x at 1024, 1.01x (bf16) and 1.04x (fp16) at 2048 and 1.08x to 1.10x at 4096;
# at every other (head_dim, causal), N 512 to 2048, 1.02x to 1.57x. It held causal head_dim 64 up to Nq 4096 until
# round 17 (reports/bench-h100-gluon against reports/bench-h100-portable, docs/perf-notes.md "Gluon forward"), and
# nothing after round 17, whose probe (gluon_fwd_clock.py) had put the Gluon forward at 1.07x at N 1024 and never
# timed N 512: docs/perf-notes.md, "Gluon forward, round 18". Round 20 timed it the grid's way again, after rounds 19
# and 20 changed the short causal configs (ATTN_GLUON=force and 0 in turn, twice; reports/perf-h100/
# gluon_fwd_round20_route): 0.68x at N 512, 0.90x at 1024, 1.04x (bf16) and 1.06x (fp16) at 1536.
PORTABLE_UP_TO: dict[tuple[int, bool], int] = {(64, True): 1024}


# Where persistent programs (kernels.tile_schedule's snaked sections) measured faster than one program
# per tile with a causal mask, by head_dim: Nq up to this. On the H100, head_dim 128 at N2048 gained
# 5-12% over two runs; at N4096 one run gained 3% and the other lost 3-5%; longer shapes lost 3-18%
# (reports/perf-h100/gluon_schedule_*.jsonl, docs/perf-notes.md "Gluon backward", round 4). head_dim 64 (round 17,
# the same file as above): 6.3% and 3.6% faster at N 2048 and 4096, 4.6% and 3.1% slower at 8192 and 16384.
# Round 21 (docs/perf-notes.md, "Gluon forward, round 21"; reports/perf-h100/gluon_fwd_round21, a_probe*), with the
# loops of rounds 18 to 20, nine interleaved rounds: head_dim 128 at N 4096 1.029x (faster in 9 of 9 rounds; rounds 19
# and 20 had 0.994x and 1.049x), at 8192 0.912x (0 of 9); head_dim 64 at N 8192 1.021x (7 of 9; round 19 1.036x), at
# 16384 1.018x (6 of 9, the twin 5 of 9; round 19 1.011x), so 16384 is about even and keeps the one rule for head_dim
# 64's causal rows. Longer rows were not timed and keep one program a tile.
PERSISTENT_CAUSAL_UP_TO = {128: 4096, 64: 16384}

# Causal, by head_dim: (Nq up to which, the config run there instead of CONFIGS'; PORTABLE_UP_TO goes first, so at
# head_dim 64 it runs from Nq 1025). At head_dim 64 and Nq <= 1536 (2048 until round 20), two
# consumers (128-row tiles) each overlapping its next QKᵀ with its softmax, taking turns, on persistent programs:
# 365 TFLOP/s at N 2048 and 306 at 1024 against 345 and 237 for CONFIGS' three consumers on persistent programs (bf16,
# round 17, reports/perf-h100/gluon_fwd_round17_d_short_causal.txt; at N 4096 0.996x of those, _c_short_causal.txt;
# at 8192 and 16384, one program per tile both, 0.98x and 0.90x: _c_long.txt). A short row leaves more of a 192-row
# tile's work on the diagonal, where about half of it is masked. With split_mask and row_partials (round 19), timed
# 1.027x and 1.037x at N 2048 and 1.030x at 1536 (twins 0.997x to 1.007x; reports/perf-h100/gluon_fwd_round19,
# b_clock_bench_64 and d_clock_bench_64): split_mask alone had timed 0.985x. Round 20 (causal_trim) ended it at Nq
# 1536: CONFIGS' three consumers with causal_trim, on persistent programs, timed 1.027x this config at N 2048 (the
# busiest SM 9% fewer cycles) and 0.980x at 1536 (twin 0.994x and 1.012x; reports/perf-h100/gluon_fwd_round20,
# a_clock_bench_short); untrimmed they timed 0.973x and 0.952x.
SHORT_CAUSAL = {
    64: (1536, HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=2, persistent=True,
                            o_tma=True, split_mask=True, row_partials=True)),
}


# Without a mask, by head_dim: from Nkv this long, split_tail (the last wave's tiles cut by keys: kernels.tile_schedule
# .split_tail). Round 24 (docs/perf-notes.md, "Gluon forward, round 24"; reports/perf-h100/gluon_fwd_round24), head_dim
# 128, bf16, 32768 tokens (4,096 query tiles on 132 SMs), five interleaved rounds: 1.015x, 1.017x and 1.021x the default
# at N 4096, 8192 and 16384 (twin 1.004x, 1.014x, 0.996x), 0.993x at 2048 (twin 1.005x), where a tile is short
# enough that the chunks' launch and the merge cost what the tail saved. Round 25 (reports/perf-h100/gluon_fwd_round25)
# moved the start to 8192 keys: under Nsight Compute's locked clock the cut still saves cycles at 4096 (1.1%, against
# 2.0% at 8192 and 0.2% at 2048), but `profiler bench`, the grids' timing, measured it slower at 4096 in 4 of 4
# alternating runs (1.5% to 6%, B8 H16, bf16 and fp16), where a probe timing the kernels without the launch cache
# measured it 2.5% faster; why is not found yet. head_dim 64's tiles (192 rows) leave 92 of 5,504 tiles in the last
# wave there, more than split_tail cuts; not measured elsewhere. ATTN_SPLIT_TAIL=0 leaves it off, =1 turns it on at
# every length and head_dim without a mask, where split_tail finds a last wave to cut (to time the launch both ways:
# the captures' meta.json records the switch).
SPLIT_TAIL_FROM = {128: 8192}


def default_config(head_dim: int, causal: bool, seq_q: int, seq_kv: int | None = None) -> HopperConfig:
    """The configuration :func:`hopper_forward` runs a shape with by default (``seq_kv``: seq_q where None)."""
    if causal and head_dim in SHORT_CAUSAL and seq_q <= SHORT_CAUSAL[head_dim][0]:
        return SHORT_CAUSAL[head_dim][1]
    config = CONFIGS[head_dim, bool(causal)]
    if causal and seq_q <= PERSISTENT_CAUSAL_UP_TO.get(head_dim, 0):
        config = config._replace(persistent=True)
    switch = os.environ.get("ATTN_SPLIT_TAIL")  # "0": never; "1": wherever there is no mask; else by SPLIT_TAIL_FROM
    if not causal and (switch == "1" or (switch != "0" and (seq_q if seq_kv is None else seq_kv)
                                         >= SPLIT_TAIL_FROM.get(head_dim, float("inf")))):
        config = config._replace(split_tail=True)
    return config


def slower_reason(q: torch.Tensor, causal: bool) -> str | None:
    """Why the portable kernel is preferred for this shape although the Gluon one could run it. None with
    ``ATTN_GLUON=force``, which runs the Gluon forward below :data:`PORTABLE_UP_TO` too, to time the route."""
    return slower_at(q.shape[-1], causal, q.shape[2])


def slower_at(head_dim: int, causal: bool, seq_q: int) -> str | None:
    """:func:`slower_reason` for a shape given by its numbers."""
    if os.environ.get("ATTN_GLUON") == "force":
        return None
    limit = PORTABLE_UP_TO.get((head_dim, bool(causal)))
    if limit is not None and seq_q <= limit:
        return (f"the portable kernel measured faster at head_dim {head_dim}, {'causal' if causal else 'no mask'}, "
                f"Nq <= {limit}")
    return None


def forward_tile(head_dim: int, dtype: str = "fp16", causal: bool = False, seq_q: int | None = None
                 ) -> tuple[int, int] | None:
    """(BLOCK_M, BLOCK_N) this kernel runs with at ``head_dim`` in ``dtype`` (None where it does not run), causal or
    not, for ``seq_q`` query rows (None: a long row, CONFIGS' tile): the cost model's tile for rows whose path is
    'gluon-ws'. Only :data:`SHORT_CAUSAL` differs from CONFIGS' tile, which causal and not share (a test checks). A row
    records the path, not the config: rows forced onto this kernel at causal head_dim 64, Nq <= 2048 before round 17
    (reports/perf-h100/gluon_fwd_short_causal_d64.parquet) ran 192 x 128 tiles, and ``remodel`` would charge them
    128 x 128; rows at Nq 1537 to 2048 from rounds 17 to 19 ran 128 x 128, and it would charge them 192 x 128."""
    if head_dim not in HEAD_DIMS or dtype not in ("fp16", "bf16", "fp8"):
        return None
    if dtype == "fp8":
        config = FP8_CONFIGS[head_dim, bool(causal)]
    elif seq_q is None:
        config = CONFIGS[head_dim, bool(causal)]
    else:
        config = default_config(head_dim, causal, seq_q)
    return config.block_m, config.block_n


def unsupported_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why this kernel cannot take these (already checked) inputs, or None when it can."""
    return sm90_reason("forward", HEAD_DIMS, q=q, k=k, v=v)


def fp8_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> str | None:
    """Why this kernel does not take these (already checked) e4m3 inputs, or None when it does: as
    :func:`unsupported_reason`, V with its keys contiguous (kernels.flash_fwd_fp8.quantize_fp8's
    ``keys_contiguous``), whose (head_dim, keys) transpose its descriptor reads, and not where the Triton
    fp8 kernel measured faster (:data:`FP8_PORTABLE`)."""
    if (q.shape[-1], bool(causal)) in FP8_PORTABLE:
        return f"the Triton fp8 kernel measured faster at head_dim {q.shape[-1]}, causal"
    if v.shape[2] > 1 and v.stride(2) != 1:
        return (f"the Gluon fp8 forward reads V with its keys contiguous (strides {tuple(v.stride())}): "
                "quantize_fp8(v, keys_contiguous=True) lays it out so")
    return sm90_reason("fp8 forward", HEAD_DIMS, (FP8,), q=q, k=k, v_keys_by_head_dim=v.transpose(2, 3))


@gluon.jit
def _tile(t, m_blocks, heads, seq_kv, bh, section, snake,
          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Query tile t as (off_m, batch, head, key tiles), in swizzled_tile's order (kernels.hopper_common): head by
    head (``section`` 1), so a head's K and V stay in L2 while its query blocks run; causal longest
    block first, for persistent programs within snaked sections of heads
    (kernels.tile_schedule.plan). ``bh`` = batch·heads."""
    off_hz, block = swizzled_tile(t, m_blocks, bh, section, snake)
    if CAUSAL:
        block = m_blocks - 1 - block  # rank 0: the last query block, which sees every key
    off_m = block * BLOCK_M
    hi = seq_kv
    if CAUSAL:
        hi = gl.minimum(seq_kv, off_m + BLOCK_M)  # top-left: the block's last row sees keys < off_m + BLOCK_M
    return off_m, off_hz // heads, off_hz % heads, gl.cdiv(hi, BLOCK_N)


@gluon.jit
def _work(w, m_blocks, heads, seq_kv, bh, section, snake, full, splits, chunk,
          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, CHUNK: gl.constexpr):
    """Work item w as (off_m, batch, head, first key, keys, key tiles, chunk): query tile w of :func:`_tile` with all
    its keys, or with ``CHUNK`` (w >= ``full``) key chunk w - full of a tail tile, ``chunk`` key tiles of tile full +
    (w - full) // splits (kernels.tile_schedule.work_item is the reference)."""
    if CHUNK:
        part = w - full
        off_m, off_z, off_h, n_tiles = _tile(full + part // splits, m_blocks, heads, seq_kv, bh, section, snake,
                                             BLOCK_M, BLOCK_N, CAUSAL)
        first = part % splits * chunk
        n_tiles = gl.minimum(chunk, n_tiles - first)
        kv0 = first * BLOCK_N
        kv_len = gl.minimum(seq_kv - kv0, n_tiles * BLOCK_N)
    else:
        off_m, off_z, off_h, n_tiles = _tile(w, m_blocks, heads, seq_kv, bh, section, snake, BLOCK_M, BLOCK_N, CAUSAL)
        kv0 = 0
        kv_len = seq_kv
        part = -1
    return off_m, off_z, off_h, kv0, kv_len, n_tiles, part


@gluon.jit
def _load_item(t, count, done, descs, bufs, bars, m_blocks, total, heads, group, seq_kv, section, snake, tail, CLOCK,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT_M: gl.constexpr, NUM_WG: gl.constexpr,
               CAUSAL: gl.constexpr, FP8: gl.constexpr, CHUNK: gl.constexpr):
    """The loader's work item t (:func:`_work`): its Q rows, then its key tiles' K and V, from ring position
    ``count``, the program's ``done``-th item. Returns (count, done) after it."""
    q_desc, k_desc, v_desc = descs
    q_smem, k_smem, v_smem, o_smem = bufs
    q_ready, q_empty, k_ready, v_ready, k_empty, v_empty = bars
    items, full, splits, chunk = tail
    off_m, off_z, off_h, kv0, kv_len, n_tiles, part = _work(t, m_blocks, heads, seq_kv, total // m_blocks, section,
                                                        snake, full, splits, chunk, NUM_WG * SPLIT_M, BLOCK_N,
                                                        CAUSAL, CHUNK)
    off_hk = off_h // group
    for wg in gl.static_range(NUM_WG):
        mbarrier.wait(q_empty.index(wg), ring_phase(done, 1) ^ 1)  # the consumer is done with its last Q
        mbarrier.expect(q_ready.index(wg), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [off_z, off_h, off_m + wg * SPLIT_M, 0], q_ready.index(wg),
                                        as_box(q_smem.index(wg), q_desc))
    clock_mark(CLOCK, t, NUM_WG, 0, NUM_WG)
    clock_note(CLOCK, t, NUM_WG, 3, clock_read("%globaltimer", CLOCK), NUM_WG)
    clock_note(CLOCK, t, NUM_WG, 4, clock_read("%smid", CLOCK), NUM_WG)
    for j in range(n_tiles):
        c = count + j
        slot = c % STAGES
        # The slot's previous K (V) must be released by every consumer first.
        mbarrier.wait(k_empty.index(slot), ring_phase(c, STAGES) ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [off_z, off_hk, kv0 + j * BLOCK_N, 0], k_ready.index(slot),
                                        as_box(k_smem.index(slot), k_desc))
        mbarrier.wait(v_empty.index(slot), ring_phase(c, STAGES) ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        if FP8:
            tma.async_copy_global_to_shared(v_desc, [off_z, off_hk, 0, kv0 + j * BLOCK_N], v_ready.index(slot),
                                            as_box(v_smem.index(slot), v_desc))
        else:
            tma.async_copy_global_to_shared(v_desc, [off_z, off_hk, kv0 + j * BLOCK_N, 0], v_ready.index(slot),
                                            as_box(v_smem.index(slot), v_desc))
    clock_mark(CLOCK, t, NUM_WG, 1, NUM_WG)
    clock_note(CLOCK, t, NUM_WG, 2, n_tiles.to(gl.int64), NUM_WG)
    return count + n_tiles, done + 1


@gluon.jit
def _load_partition(descs, bufs, bars, m_blocks, total, heads, group, seq_q, seq_kv, section, snake, tail, CLOCK,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT_M: gl.constexpr, NUM_WG: gl.constexpr,
                    CAUSAL: gl.constexpr, FP8: gl.constexpr, CHUNKS: gl.constexpr):
    """One warp: for each work item of this program (:func:`_work`), each consumer's Q rows (once the consumer
    is done with the previous ones), then K and V of each of its key tiles into the ring. With ``FP8`` V's
    descriptor is over its (head_dim, keys) transpose, so a tile is the whole head_dim by BLOCK_N keys."""
    items, full, splits, chunk = tail
    count = 0  # key tiles this program has loaded: the position in the ring
    done = 0  # work items
    lo, hi = (full, items) if CHUNKS else (0, full)  # the tail's chunks, or the whole tiles
    for t in range(lo + gl.program_id(0), hi, gl.num_programs(0)):
        count, done = _load_item(t, count, done, descs, bufs, bars, m_blocks, total, heads, group, seq_kv, section,
                                 snake, tail, CLOCK, BLOCK_N, STAGES, SPLIT_M, NUM_WG, CAUSAL, FP8, CHUNKS)


@gluon.jit
def _softmax_tile(s, m_i, l_i, cols, rows, seq_kv, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
                  ROW_PARTIALS: gl.constexpr = False):
    """Online-softmax step on one fp32 score tile: returns (p, alpha, m, l), m in log2 units; with ``ROW_PARTIALS``, l
    is each thread's [M, 4] share of the row sums (:func:`_row_partials`)."""
    if MASKED:
        visible = cols[None, :] < seq_kv
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None])
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    if ROW_PARTIALS:
        l_new = l_i * gl.convert_layout(alpha, gl.SliceLayout(1, l_i.type.layout))[:, None] + _row_partials(p)
    else:
        l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_new


@gluon.jit
def _online_softmax(s, m_i, l_i, j, n_full, offs_n, rows, seq_kv, qk_scale,
                    BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """The softmax step of key tile j: tiles before n_full are visible to every row of the
    warpgroup and take the step compiled without a mask; the rest (the ragged last tile, the
    causal diagonal) the one with it."""
    if j < n_full:
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, j * BLOCK_N + offs_n, rows, seq_kv, qk_scale, False, CAUSAL)
    else:
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, j * BLOCK_N + offs_n, rows, seq_kv, qk_scale, True, CAUSAL)
    return p, alpha, m_i, l_i


@gluon.jit
def _scores(q, k_smem, k_ready, c, s_zero, STAGES: gl.constexpr):
    """Issue S = Q Kᵀ of the ring's key tile c as an asynchronous wgmma, once its K has landed."""
    slot = c % STAGES
    mbarrier.wait(k_ready.index(slot), ring_phase(c, STAGES))
    return warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)


@gluon.jit
def _pv_operand(v_smem, slot, FP8: gl.constexpr):
    """V's tile in ``slot`` as PV's B operand (keys, head_dim): stored so, or with ``FP8`` stored as its
    (head_dim, keys) transpose and viewed back."""
    if FP8:
        operand = v_smem.index(slot).permute((1, 0))  # (HEAD_DIM, BLOCK_N) seen as (BLOCK_N, HEAD_DIM)
    else:
        operand = v_smem.index(slot)
    return operand


@gluon.jit
def _pv_wait(acc, p_op, FP8: gl.constexpr):
    """Wait for PV's wgmma, keeping P's registers alive until then. Triton 3.6 lowers such a dependency for
    16- and 32-bit registers only ("Unexpected bitwidth in WGMMAWaitGroupOp: 8"); an fp8 P is left to
    ptxas, which keeps a wgmma's register operands intact until its wait (serializing where it cannot)."""
    if FP8:
        acc = warpgroup_mma_wait(0, deps=(acc,))
    else:
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
    return acc


@gluon.jit
def _take_turn(turns, it, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: wait until the previous warpgroup (round robin) has issued its matmuls of round
    ``it``. Warpgroup 0 waits for the last one's previous round instead, as a producer waits for a
    release: its first wait passes at once, so it goes first."""
    if PINGPONG:
        if WG == 0:
            mbarrier.wait(turns.index(WG), ring_phase(it, 1) ^ 1)
        else:
            mbarrier.wait(turns.index(WG), ring_phase(it, 1))


@gluon.jit
def _pass_turn(turns, WG: gl.constexpr, NUM_WG: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turns.index((WG + 1) % NUM_WG), count=1)


@gluon.jit
def _pack_p(p, FP16: gl.constexpr):
    """P (fp32, [M, N]) rounded to 16 bits as [M, N / 2] int32: columns 2i and 2i+1 in the low and high halves, one
    ``cvt.rn.{b}f16x2.f32`` a pair (PTX ISA, cvt: the first source goes to the high half)."""
    M: gl.constexpr = p.shape[0]
    N: gl.constexpr = p.shape[1]
    even, odd = gl.split(gl.reshape(p, [M, N // 2, 2]))
    if FP16:
        packed = gl.inline_asm_elementwise("cvt.rn.f16x2.f32 $0, $2, $1;", "=r,r,r", [even, odd], dtype=gl.int32,
                                           is_pure=True, pack=1)
    else:
        packed = gl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [even, odd], dtype=gl.int32,
                                           is_pure=True, pack=1)
    return packed


@gluon.jit
def _unpack_p(packed, FP16: gl.constexpr, p_layout: gl.constexpr):
    """:func:`_pack_p`'s pairs as PV's register operand. Carried across a loop's back edge in P's own 16-bit layout,
    the rounded P cost two byte permutes (PRMT) a register each step, 64 a thread at head_dim 64, which the packed
    int32 pairs avoid (docs/perf-notes.md, "Gluon forward, round 18")."""
    M: gl.constexpr = packed.shape[0]
    N: gl.constexpr = packed.shape[1] * 2
    if FP16:
        lo, hi = gl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [packed],
                                           dtype=(gl.float16, gl.float16), is_pure=True, pack=1)
    else:
        lo, hi = gl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [packed],
                                           dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=1)
    return gl.convert_layout(gl.reshape(gl.join(lo, hi), [M, N]), p_layout)


@gluon.jit
def _row_partials(p):
    """Each thread's share of P's row sums, [M, N] to [M, 4]: in the wgmma accumulator layout a thread holds columns
    8k + 2t and 8k + 2t + 1 of its rows (t its lane in the quad; PTX ISA, "wgmma register fragments"), so summing the
    [M, N / 8, 4, 2] view over its last axis and then over k adds within the thread only, with no shuffle."""
    M: gl.constexpr = p.shape[0]
    N: gl.constexpr = p.shape[1]
    return gl.sum(gl.sum(gl.reshape(p, [M, N // 8, 4, 2]), axis=3), axis=1)


@gluon.jit
def _overlap_steps(q, bufs, bars, turns, acc, p_op, m_i, l_i, count, lo, hi, offs_n, rows, seq_kv, scale, s_zero,
                   p_layout: gl.constexpr, o_layout: gl.constexpr, WG: gl.constexpr, BLOCK_N: gl.constexpr,
                   STAGES: gl.constexpr, PINGPONG: gl.constexpr, NUM_WG: gl.constexpr, FP8: gl.constexpr,
                   MASKED: gl.constexpr, CAUSAL: gl.constexpr, ROW_PARTIALS: gl.constexpr):
    """Key tiles lo ... hi - 1 of the overlapped loop with ``split_mask``: each round issues S(j) and PV(j - 1),
    then the softmax of S(j), compiled with the mask or without it (``MASKED``) for the whole loop, and rounds P(j)
    for the next round's PV. Returns (acc, P(hi - 1) packed by :func:`_pack_p`, m, l); with ``ROW_PARTIALS`` l is
    each thread's [M, 4] share (:func:`_row_partials`)."""
    q_smem, k_smem, v_smem, o_smem = bufs
    q_ready, q_empty, k_ready, v_ready, k_empty, v_empty = bars
    for j in range(lo, hi):
        c = count + j
        prev = (c - 1) % STAGES
        _take_turn(turns, c, WG, PINGPONG)
        s = _scores(q, k_smem, k_ready, c, s_zero, STAGES)
        mbarrier.wait(v_ready.index(prev), ring_phase(c - 1, STAGES))
        p16 = _unpack_p(p_op, v_smem.dtype == gl.float16, p_layout)
        acc = warpgroup_mma(p16, _pv_operand(v_smem, prev, FP8), acc, is_async=True)
        _pass_turn(turns, WG, NUM_WG, PINGPONG)
        s = warpgroup_mma_wait(1, deps=(s,))  # S(j) done; PV(j-1) may still run
        mbarrier.arrive(k_empty.index(c % STAGES), count=1)
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, j * BLOCK_N + offs_n, rows, seq_kv, scale, MASKED, CAUSAL,
                                           ROW_PARTIALS)
        acc = _pv_wait(acc, p16, FP8)
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p_op = _pack_p(p, v_smem.dtype == gl.float16)
    return acc, p_op, m_i, l_i


@gluon.jit
def _store_o(o, m_i, l_i, rows, O, o_strides, LSE, o_smem, off_z, off_h, off_m, heads, seq_q, offs_d,
             o_layout: gl.constexpr, WG: gl.constexpr, SPLIT_M: gl.constexpr, O_TMA: gl.constexpr):
    """A consumer's rows of O (fp32 ``o``, normalised) and their natural-log logsumexp (m_i in log2 units), rows past
    seq_q not stored."""
    if O_TMA:
        # Into this consumer's staging tile once its last TMA store has read it, then one TMA store; TMA drops
        # rows past seq_q.
        o_buf = o_smem.index(WG)
        tma.store_wait(0)
        gl.thread_barrier()
        o_buf.store(o.to(o_buf.dtype))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(O, [off_z, off_h, off_m + WG * SPLIT_M, 0], as_box(o_buf, O))
    else:
        o = o.to(O.dtype.element_ty)
        o_rows = off_m + WG * SPLIT_M + gl.arange(0, SPLIT_M, layout=gl.SliceLayout(1, o_layout))
        stride_oz, stride_oh, stride_om = o_strides
        o_base = O + off_z.to(gl.int64) * stride_oz + off_h.to(gl.int64) * stride_oh
        o_ptrs = o_base + o_rows.to(gl.int64)[:, None] * stride_om + offs_d[None, :]
        gl.store(o_ptrs, o, mask=(o_rows < seq_q)[:, None])
    lse = (m_i + gl.log2(l_i)) * LN2_C
    gl.store(LSE + (off_z * heads + off_h).to(gl.int64) * seq_q + rows, lse, mask=rows < seq_q)


@gluon.jit
def _consumer_item(t, count, done, q, bufs, bars, turns, O, o_strides, LSE, descales, m_blocks, total, heads, group,
                   seq_q, seq_kv, section, snake, tail, parts, qk_scale, CLOCK, offs_n, offs_d, s_zero,
                   row_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr, WG: gl.constexpr,
                   HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT_M: gl.constexpr,
                   CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, NUM_WG: gl.constexpr,
                   FP8: gl.constexpr, O_TMA: gl.constexpr, SPLIT_MASK: gl.constexpr, ROW_PARTIALS: gl.constexpr,
                   CAUSAL_TRIM: gl.constexpr, CHUNK: gl.constexpr):
    """A consumer's work item t (:func:`_work`): its rows against the item's key tiles from ring position ``count``
    (the program's ``done``-th item), then their O and logsumexp, or with ``CHUNK`` the chunk's partial output and
    logsumexp. Returns (count, done) after it."""
    q_smem, k_smem, v_smem, o_smem = bufs
    q_ready, q_empty, k_ready, v_ready, k_empty, v_empty = bars
    dtype: gl.constexpr = q_smem.dtype
    items, full, splits, chunk = tail
    # A chunk of keys (kv0 ... kv0 + kv_len - 1) is seen as the whole of a shorter key sequence: the loader offsets its
    # tiles, so the masks and loops below read kv_len where a whole tile reads seq_kv.
    off_m, off_z, off_h, kv0, kv_len, n_tiles, part = _work(t, m_blocks, heads, seq_kv, total // m_blocks, section,
                                                        snake, full, splits, chunk, NUM_WG * SPLIT_M, BLOCK_N,
                                                        CAUSAL, CHUNK)
    rows = off_m + WG * SPLIT_M + gl.arange(0, SPLIT_M, layout=row_layout)
    scale = qk_scale
    if FP8:  # s = (q8 · k8) · dq · dk · sm_scale · log2(e)
        q_descale, k_descale, v_descale = descales
        kv_head = off_z * (heads // group) + off_h // group
        scale = qk_scale * gl.load(q_descale + off_z * heads + off_h) * gl.load(k_descale + kv_head)
    # Key tiles before n_full are visible to every row of this warpgroup: no mask.
    n_full = kv_len // BLOCK_N
    if CAUSAL:
        n_full = gl.minimum(off_m + WG * SPLIT_M + 1, kv_len) // BLOCK_N
    n_own = n_tiles  # the key tiles this consumer computes; with CAUSAL_TRIM those its last row sees
    if CAUSAL_TRIM:
        n_own = gl.cdiv(gl.minimum(kv_len, off_m + (WG + 1) * SPLIT_M), BLOCK_N)
    acc = gl.zeros([SPLIT_M, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([SPLIT_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([SPLIT_M], gl.float32, row_layout)
    clock_mark(CLOCK, t, WG, 0, NUM_WG)
    mbarrier.wait(q_ready.index(WG), ring_phase(done, 1))
    clock_mark(CLOCK, t, WG, 1, NUM_WG)
    if OVERLAP:
        # Key tile 0 alone; then each round issues S(j) and PV(j-1) before the softmax of S(j).
        _take_turn(turns, count, WG, PINGPONG)
        s = _scores(q, k_smem, k_ready, count, s_zero, STAGES)
        _pass_turn(turns, WG, NUM_WG, PINGPONG)
        s = warpgroup_mma_wait(0, deps=(s,))
        mbarrier.arrive(k_empty.index(count % STAGES), count=1)
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, 0, n_full, offs_n, rows, kv_len, scale,
                                             BLOCK_N, CAUSAL)
        if SPLIT_MASK:
            # The unmasked key tiles, then the masked ones, each loop compiled with its own softmax; P is rounded
            # at the end of its step rather than at the start of the next.
            p_op = _pack_p(p, dtype == gl.float16)
            split = gl.maximum(n_full, 1)
            if ROW_PARTIALS:
                l_i = _row_partials(p)  # tile 0's; the quad adds its four after the last tile
            acc, p_op, m_i, l_i = _overlap_steps(q, bufs, bars, turns, acc, p_op, m_i, l_i, count, 1, split,
                                                 offs_n, rows, kv_len, scale, s_zero, p_layout, o_layout, WG,
                                                 BLOCK_N, STAGES, PINGPONG, NUM_WG, FP8, False, CAUSAL,
                                                 ROW_PARTIALS)
            acc, p_op, m_i, l_i = _overlap_steps(q, bufs, bars, turns, acc, p_op, m_i, l_i, count, split,
                                                 n_own, offs_n, rows, kv_len, scale, s_zero, p_layout,
                                                 o_layout, WG, BLOCK_N, STAGES, PINGPONG, NUM_WG, FP8, True,
                                                 CAUSAL, ROW_PARTIALS)
            if ROW_PARTIALS:
                l_i = gl.convert_layout(gl.sum(l_i, axis=1), row_layout)
        else:
            for j in range(1, n_tiles):
                c = count + j
                prev = (c - 1) % STAGES
                _take_turn(turns, c, WG, PINGPONG)
                s = _scores(q, k_smem, k_ready, c, s_zero, STAGES)
                mbarrier.wait(v_ready.index(prev), ring_phase(c - 1, STAGES))
                p_op = gl.convert_layout(p.to(dtype), p_layout)
                acc = warpgroup_mma(p_op, _pv_operand(v_smem, prev, FP8), acc, is_async=True)
                _pass_turn(turns, WG, NUM_WG, PINGPONG)
                s = warpgroup_mma_wait(1, deps=(s,))  # S(j) done; PV(j-1) may still run
                mbarrier.arrive(k_empty.index(c % STAGES), count=1)
                p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, j, n_full, offs_n, rows, kv_len, scale,
                                                     BLOCK_N, CAUSAL)
                acc = _pv_wait(acc, p_op, FP8)
                mbarrier.arrive(v_empty.index(prev), count=1)
                acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        mbarrier.arrive(q_empty.index(WG), count=1)  # every S of this tile is done
        c = count + n_own - 1
        mbarrier.wait(v_ready.index(c % STAGES), ring_phase(c, STAGES))
        if not SPLIT_MASK:
            p_op = gl.convert_layout(p.to(dtype), p_layout)
        else:
            p_op = _unpack_p(p_op, dtype == gl.float16, p_layout)
        acc = warpgroup_mma(p_op, _pv_operand(v_smem, c % STAGES, FP8), acc, is_async=True)
        acc = _pv_wait(acc, p_op, FP8)
        mbarrier.arrive(v_empty.index(c % STAGES), count=1)
        if CAUSAL_TRIM:
            # The tiles past this consumer's rows: its turn in each round, and each slot released once loaded (a
            # release before the load would count toward the slot's previous use, not yet released by all).
            for j in range(n_own, n_tiles):
                c = count + j
                _take_turn(turns, c, WG, PINGPONG)
                _pass_turn(turns, WG, NUM_WG, PINGPONG)
                mbarrier.wait(k_ready.index(c % STAGES), ring_phase(c, STAGES))
                mbarrier.arrive(k_empty.index(c % STAGES), count=1)
                mbarrier.wait(v_ready.index(c % STAGES), ring_phase(c, STAGES))
                mbarrier.arrive(v_empty.index(c % STAGES), count=1)
    else:
        # No overlap within the warpgroup: S, softmax, PV, one key tile at a time.
        for j in range(n_tiles):
            c = count + j
            slot = c % STAGES
            _take_turn(turns, c, WG, PINGPONG)
            s = _scores(q, k_smem, k_ready, c, s_zero, STAGES)
            _pass_turn(turns, WG, NUM_WG, PINGPONG)
            s = warpgroup_mma_wait(0, deps=(s,))
            mbarrier.arrive(k_empty.index(slot), count=1)
            p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, j, n_full, offs_n, rows, kv_len, scale,
                                                 BLOCK_N, CAUSAL)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
            mbarrier.wait(v_ready.index(slot), ring_phase(c, STAGES))
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            acc = warpgroup_mma(p_op, _pv_operand(v_smem, slot, FP8), acc, is_async=True)
            acc = _pv_wait(acc, p_op, FP8)
            mbarrier.arrive(v_empty.index(slot), count=1)
        mbarrier.arrive(q_empty.index(WG), count=1)

    clock_mark(CLOCK, t, WG, 2, NUM_WG)
    # Epilogue: O = acc · (1 / l) and the natural-log logsumexp, rows past seq_q not stored. The
    # loader is already bringing the next tile's Q and K/V meanwhile.
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    if FP8:
        o = acc * (gl.load(v_descale + kv_head) / l_o)[:, None]
    else:
        # one reciprocal a row, not a division an element (64 a thread at head_dim 128, each an SFU op)
        o = acc * (1.0 / l_o)[:, None]
    if CHUNK:
        # A chunk of a tail tile: its rows' fp32 output and logsumexp over its own keys, row r of tail tile i and chunk
        # c at (i · BLOCK_M + r) · splits + c (kernels.tail_combine.partials), every row (the merge drops those past
        # seq_q).
        o_part, lse_part = parts
        local = WG * SPLIT_M + gl.arange(0, SPLIT_M, layout=gl.SliceLayout(1, o_layout))
        at = ((part // splits) * (NUM_WG * SPLIT_M) + local).to(gl.int64) * splits + part % splits
        gl.store(o_part + at[:, None] * HEAD_DIM + offs_d[None, :], o)
        lse = (m_i + gl.log2(l_i)) * LN2_C
        gl.store(lse_part + at, gl.convert_layout(lse, gl.SliceLayout(1, o_layout)))
    else:
        _store_o(o, m_i, l_i, rows, O, o_strides, LSE, o_smem, off_z, off_h, off_m, heads, seq_q, offs_d, o_layout,
                 WG, SPLIT_M, O_TMA)
    clock_mark(CLOCK, t, WG, 3, NUM_WG)
    return count + n_tiles, done + 1


@gluon.jit
def _consumer_partition(bufs, bars, turns, O, o_strides, LSE, descales, m_blocks, total, heads, group, seq_q, seq_kv,
                        section, snake, tail, parts, qk_scale, CLOCK, WG: gl.constexpr, HEAD_DIM: gl.constexpr,
                        BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT_M: gl.constexpr, CAUSAL: gl.constexpr,
                        OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, NUM_WG: gl.constexpr, FP8: gl.constexpr,
                        O_TMA: gl.constexpr, SPLIT_MASK: gl.constexpr, ROW_PARTIALS: gl.constexpr,
                        CAUSAL_TRIM: gl.constexpr, CHUNKS: gl.constexpr):
    """One warpgroup: for each work item of this program (:func:`_consumer_item`), rows off_m + WG·64 ... + 63 against
    every key tile, then O and the logsumexp of those rows. With ``FP8`` (e4m3 Q, K, V and an fp32
    descale per (batch, head) each, ``descales``) Q's and K's descales fold into the exp2 scale and V's
    into the epilogue, P is rounded to e4m3 for PV, and V's tiles are (head_dim, keys), keys contiguous,
    the K-major B operand an 8-bit wgmma needs (PTX ISA, wgmma.mma_async: only 16-bit types may be transposed)."""
    q_smem = bufs[0]
    # A wgmma takes 32 bytes of K per instruction: 16 elements of 16 bits, 32 of 8 (PTX ISA, wgmma shapes)
    INSTR_K: gl.constexpr = 32 if FP8 else 16
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, INSTR_K])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, INSTR_K])
    # A register operand holds 32 bits of K per thread and step: 2 elements of 16 bits, 4 of 8
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4 if FP8 else 2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    s_zero = gl.zeros([SPLIT_M, BLOCK_N], gl.float32, s_layout)
    q = q_smem.index(WG)

    items, full, splits, chunk = tail
    count = 0  # key tiles this program has consumed: the position in the ring, and the turn
    done = 0  # work items
    lo, hi = (full, items) if CHUNKS else (0, full)  # the tail's chunks, or the whole tiles
    for t in range(lo + gl.program_id(0), hi, gl.num_programs(0)):
        count, done = _consumer_item(t, count, done, q, bufs, bars, turns, O, o_strides, LSE, descales, m_blocks,
                                     total, heads, group, seq_q, seq_kv, section, snake, tail, parts, qk_scale,
                                     CLOCK, offs_n, offs_d, s_zero, row_layout, o_layout, p_layout, WG, HEAD_DIM,
                                     BLOCK_N, STAGES, SPLIT_M, CAUSAL, OVERLAP, PINGPONG, NUM_WG, FP8, O_TMA,
                                     SPLIT_MASK, ROW_PARTIALS, CAUSAL_TRIM, CHUNKS)
    if O_TMA:
        tma.store_wait(0)  # the last O store has read its tile before the program's shared memory goes


# section and snake are not specialised (Triton would make a 1 a constant), so every schedule
# runs the same compiled kernel.
@gluon.jit(do_not_specialize=["section", "snake", "items", "splits", "chunk"])
def _attn_fwd_hopper(q_desc, k_desc, v_desc, O, stride_oz, stride_oh, stride_om, LSE,
                     Q_DESCALE, K_DESCALE, V_DESCALE, qk_scale, CLOCK, heads, group,
                     seq_q, seq_kv, m_blocks, total, section, snake, full, items, splits, chunk, O_PART, LSE_PART,
                     HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
                     SPLIT_M: gl.constexpr, NUM_WG: gl.constexpr,
                     CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
                     Q_LAYOUT: gl.constexpr, KV_LAYOUT: gl.constexpr, V_LAYOUT: gl.constexpr, FP8: gl.constexpr,
                     O_TMA: gl.constexpr, O_LAYOUT: gl.constexpr, SPLIT_MASK: gl.constexpr,
                     ROW_PARTIALS: gl.constexpr, CAUSAL_TRIM: gl.constexpr, CHUNKS: gl.constexpr,
                     PDL: gl.constexpr):
    """Program p takes query tiles p, p + programs, ... below ``full`` of the ``total`` = m_blocks · batch·heads in
    :func:`_tile`'s order (one each when the grid has a program per tile; persistent when it has one per SM): every
    tile, unless a ``split_tail`` launch leaves the last wave's to a second launch with ``CHUNKS``, whose program p
    takes work items full + p, full + p + programs, ... below ``items``, the other tiles' key chunks (``splits`` a tile,
    ``chunk`` key tiles each: :func:`_work`), and writes their rows to O_PART and LSE_PART (kernels.tail_combine merges
    them). With ``PDL`` that second launch may start its programs as soon as this one's programs end (programmatic
    dependent launch: it reads none of this launch's output). The descales are None unless ``FP8``."""
    if PDL:
        # PTX ISA, griddepcontrol: the dependent grid may be scheduled once every program of this one has run this
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)
    dtype: gl.constexpr = q_desc.dtype
    # Tiles as the wgmma reads them: 2-D, with the swizzle of the descriptors' 4-D boxes (Q_LAYOUT, KV_LAYOUT,
    # V_LAYOUT); fp8's V tiles are (head_dim, keys) (_consumer_partition says why).
    q_smem = gl.allocate_shared_memory(dtype, [NUM_WG, SPLIT_M, HEAD_DIM], Q_LAYOUT)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], KV_LAYOUT)
    if FP8:  # each stage (HEAD_DIM, BLOCK_N), keys contiguous
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, HEAD_DIM, BLOCK_N], V_LAYOUT)
    else:
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], V_LAYOUT)
    if O_TMA:  # O is a descriptor of (1, 1, SPLIT_M, HEAD_DIM) boxes; O_LAYOUT their swizzle, 2-D
        o_smem = gl.allocate_shared_memory(O.dtype, [NUM_WG, SPLIT_M, HEAD_DIM], O_LAYOUT)
    else:  # not used
        o_smem = q_smem
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_WG):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
        mbarrier.init(turns.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_WG)  # every consumer warpgroup releases a slot
        mbarrier.init(v_empty.index(i), count=NUM_WG)

    # The shared memory and the barriers go to the partitions as tuples. The sizes stay separate
    # arguments: Triton specialises an int argument equal to 1 into a constexpr, which inside a tuple
    # would reach the partitions as a runtime value again (triton 3.6), and so would compile differently.
    # The partition lists below repeat each consumer's arguments: triton 3.6's Gluon frontend cannot add
    # tuples (`shared + (wg,) + consts` fails to compile) nor hold a JIT function in a tuple variable.
    descs = (q_desc, k_desc, v_desc)
    o_strides = (stride_oz, stride_oh, stride_om)
    bufs = (q_smem, k_smem, v_smem, o_smem)
    bars = (q_ready, q_empty, k_ready, v_ready, k_empty, v_empty)
    descales = (Q_DESCALE, K_DESCALE, V_DESCALE)
    parts = (O_PART, LSE_PART)
    tail = (items, full, splits, chunk)
    if NUM_WG == 2:
        gl.warp_specialize(
            [
                (_consumer_partition, (bufs, bars, turns, O, o_strides, LSE, descales, m_blocks, total, heads,
                                       group, seq_q, seq_kv, section, snake, tail, parts, qk_scale, CLOCK, 0,
                                       HEAD_DIM, BLOCK_N, STAGES, SPLIT_M, CAUSAL, OVERLAP, PINGPONG, NUM_WG, FP8,
                                       O_TMA, SPLIT_MASK, ROW_PARTIALS, CAUSAL_TRIM, CHUNKS)),
                (_consumer_partition, (bufs, bars, turns, O, o_strides, LSE, descales, m_blocks, total, heads,
                                       group, seq_q, seq_kv, section, snake, tail, parts, qk_scale, CLOCK, 1,
                                       HEAD_DIM, BLOCK_N, STAGES, SPLIT_M, CAUSAL, OVERLAP, PINGPONG, NUM_WG, FP8,
                                       O_TMA, SPLIT_MASK, ROW_PARTIALS, CAUSAL_TRIM, CHUNKS)),
                (_load_partition, (descs, bufs, bars, m_blocks, total, heads, group, seq_q, seq_kv, section, snake,
                                   tail, CLOCK, BLOCK_N, STAGES, SPLIT_M, NUM_WG, CAUSAL, FP8, CHUNKS)),
            ],
            [4, 1],
            [CONSUMER_REGS, LOADER_REGS],
        )
    else:
        gl.warp_specialize(
            [
                (_consumer_partition, (bufs, bars, turns, O, o_strides, LSE, descales, m_blocks, total, heads,
                                       group, seq_q, seq_kv, section, snake, tail, parts, qk_scale, CLOCK, 0,
                                       HEAD_DIM, BLOCK_N, STAGES, SPLIT_M, CAUSAL, OVERLAP, PINGPONG, NUM_WG, FP8,
                                       O_TMA, SPLIT_MASK, ROW_PARTIALS, CAUSAL_TRIM, CHUNKS)),
                (_consumer_partition, (bufs, bars, turns, O, o_strides, LSE, descales, m_blocks, total, heads,
                                       group, seq_q, seq_kv, section, snake, tail, parts, qk_scale, CLOCK, 1,
                                       HEAD_DIM, BLOCK_N, STAGES, SPLIT_M, CAUSAL, OVERLAP, PINGPONG, NUM_WG, FP8,
                                       O_TMA, SPLIT_MASK, ROW_PARTIALS, CAUSAL_TRIM, CHUNKS)),
                (_consumer_partition, (bufs, bars, turns, O, o_strides, LSE, descales, m_blocks, total, heads,
                                       group, seq_q, seq_kv, section, snake, tail, parts, qk_scale, CLOCK, 2,
                                       HEAD_DIM, BLOCK_N, STAGES, SPLIT_M, CAUSAL, OVERLAP, PINGPONG, NUM_WG, FP8,
                                       O_TMA, SPLIT_MASK, ROW_PARTIALS, CAUSAL_TRIM, CHUNKS)),
                (_load_partition, (descs, bufs, bars, m_blocks, total, heads, group, seq_q, seq_kv, section, snake,
                                   tail, CLOCK, BLOCK_N, STAGES, SPLIT_M, NUM_WG, CAUSAL, FP8, CHUNKS)),
            ],
            [4, 4, 1],
            [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS],
        )


def descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_n: int):
    """TMA descriptors of Q in 64-row tiles and of K, V in block_n rows, each on its tensor's own
    strides (:func:`tensor_descriptor`). An fp8 V (keys contiguous: :func:`fp8_reason`) is described as
    its (head_dim, keys) transpose, in tiles of the whole head_dim by block_n keys."""
    if v.dtype == FP8:
        v_desc = tensor_descriptor(v.transpose(2, 3), v.shape[-1], block_n)
    else:
        v_desc = tensor_descriptor(v, block_n)
    return tensor_descriptor(q, SPLIT_M), tensor_descriptor(k, block_n), v_desc


# The events of a query tile in :func:`hopper_forward`'s ``clock`` buffer (kernels.hopper_common.CLOCK_EVENTS of them).
# Per consumer, the SM's cycle counter (%clock64) at 0 the tile's start, 1 after its Q wait, 2 after its last PV, 3
# after its O and logsumexp stores are issued. Per loader (the last row): 0 the cycle counter after its Q copies are
# issued (once every consumer was done with its last Q), 1 after its last K/V copy is issued, 2 the key tiles, 3 the
# global timer (%globaltimer, ns) beside event 0, 4 the SM (%smid). 5 is unused. The same rows as the backward's.


def hopper_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                   config: HopperConfig | None = None,
                   schedule: tile_schedule.Schedule | None = None,
                   layout: tuple | None = None,
                   descales: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                   out_dtype: torch.dtype | None = None,
                   clock: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The Gluon forward on inputs :func:`unsupported_reason` (or, in fp8, :func:`fp8_reason`) accepts.
    Returns o (B, H, Nq, D) in q's dtype (for fp8 ``out_dtype``, bf16 by default) and lse (B, H, Nq)
    fp32, natural log, as kernels.flash_fwd.flash_attention_forward. ``config`` overrides :data:`CONFIGS`
    (:data:`FP8_CONFIGS`) and ``schedule`` the tile order of :func:`kernels.tile_schedule.plan` (for
    sweeps). ``layout``: q, k, v's _launch.layout_key, where the caller has it; with the defaults, a call
    of a layout seen before reuses its launch plan and compiled kernel (:data:`_LAUNCHES`), leaving out
    most of the host time of a launch. ``descales``: fp8's (q_descale (B, H), k_descale (B, H_kv),
    v_descale (B, H_kv)), fp32 and contiguous, as kernels.flash_fwd_fp8.flash_attention_fp8 takes them.
    ``clock``, an int64 tensor of (work items, consumers + 1, CLOCK_EVENTS) (:func:`work_items`: the query tiles,
    cdiv(Nq, BLOCK_M) · B · H, unless ``split_tail`` cuts some), compiles a kernel that fills it with each item's cycle
    counts (the events in the comment above;
    scripts/perf_experiments/gluon_fwd_clock.py reads them)."""
    fp8 = q.dtype == FP8
    if fp8 != (descales is not None):
        raise ValueError("hopper_forward takes descales with e4m3 inputs, and only with them")
    if fp8 and config is not None and config.o_tma:
        raise ValueError("o_tma has not run with e4m3 inputs (FP8_CONFIGS leave it off): give a config without it")
    if fp8 and config is not None and config.split_mask:
        raise ValueError("split_mask packs P in 16-bit pairs: give e4m3 inputs a config without it")
    if config is not None and config.split_mask and not config.overlap:
        raise ValueError("split_mask splits the overlapped key loop: give it overlap=True, or leave it off")
    if config is not None and config.row_partials and not config.split_mask:
        raise ValueError("row_partials defers the row sums of split_mask's loops: give it split_mask=True, or leave "
                         "it off")
    if config is not None and config.causal_trim and not config.split_mask:
        raise ValueError("causal_trim shortens split_mask's masked loop: give it split_mask=True, or leave it off")
    if fp8 and config is not None and config.split_tail:
        raise ValueError("split_tail has not run with e4m3 inputs (FP8_CONFIGS leave it off): give a config without it")
    if clock is not None:  # an explicit config from here on: a marked kernel is neither kept nor reused
        batch, heads, seq_q, _ = q.shape
        config = _config_of(q, k, causal, config)
        if not config.split_tail:  # with it, the rows follow the device's SMs: checked with the launch plan below
            check_clock(clock, (triton.cdiv(seq_q, config.block_m) * batch * heads, config.consumers + 1,
                                CLOCK_EVENTS), q.device)
    layout = None if config is not None or schedule is not None or not _LAUNCHES.enabled else (
        layout_key(q, k, v, *descales) if fp8 else layout or layout_key(q, k, v))  # fp8: the descales' too
    out_dtype = (out_dtype or torch.bfloat16) if fp8 else None
    # None: nothing kept, nothing reused; O's dtype is fp8's only free choice the layout does not fix
    key = None if layout is None else (layout, bool(causal), out_dtype)
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        plan = _launch_plan(q, k, v, causal, config, schedule, out_dtype)
        if plan.cut_dropped:
            key = None  # whole tiles under a capture that could not cut: kept under no key, so later calls cut
        if key is not None:
            _PLANS.keep(key, plan)
    grid, ints, constexprs, block_n, tail, tail_tiles, _ = plan  # the last, cut_dropped, was read above
    if clock is not None and config.split_tail:
        check_clock(clock, (plan.items, constexprs["NUM_WG"] + 1, CLOCK_EVENTS), q.device)
    o = empty_in_layout(q, out_dtype)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    q_desc, k_desc, v_desc = descriptors(q, k, v, block_n)
    o_arg = tensor_descriptor(o, SPLIT_M) if constexprs["O_TMA"] else o  # O_TMA: its (1, 1, SPLIT_M, D) boxes
    block_m = constexprs["NUM_WG"] * SPLIT_M
    parts = tail_combine.partials(tail.tail, block_m, tail.splits, q.shape[-1], q.device) if tail else (None, None)
    args = (q_desc, k_desc, v_desc, o_arg, *o.stride()[:3], lse, *(descales or (None, None, None)), scale * LOG2E,
            clock, *ints, *parts)
    _LAUNCHES(key, grid, args, constexprs, num_warps=4)
    if tail:
        # The tail's chunks, a program each, launched as programmatically dependent on the whole tiles' launch (which
        # lets them start at once: PDL), so each takes an SM as soon as that launch's program there ends. They need not
        # wait for it (griddepcontrol.wait): they read only q, k and v, done before it started, and write only their
        # partials. The merge is an ordinary launch, so it, and whatever the caller launches next, runs after both in
        # stream order: O and the logsumexp are whole when the call's work is.
        _LAUNCHES(None if key is None else (key, "chunks"), (tail.tail * tail.splits,), args,
                  {**constexprs, "CHUNKS": True, "PDL": False}, num_warps=4, launch_pdl=True)
        tail_combine.combine(o, lse, *parts, tail_tiles, block_m, key)
    return o, lse


def work_items(q: torch.Tensor, k: torch.Tensor, causal: bool, config: HopperConfig | None = None) -> int:
    """The rows a ``clock`` buffer of :func:`hopper_forward` takes: its launch's work items, query tiles
    (cdiv(Nq, BLOCK_M) · B · H) or with ``split_tail`` those and the tail's chunks."""
    plan = _launch_plan(q, k, k, causal, config, None, None)
    return plan.items


def _config_of(q: torch.Tensor, k: torch.Tensor, causal: bool, config: HopperConfig | None) -> HopperConfig:
    """``config``, or where None the one this shape runs with by default (fp8's from :data:`FP8_CONFIGS`)."""
    if config is not None:
        return config
    head_dim = q.shape[-1]
    if q.dtype == FP8:
        return FP8_CONFIGS[head_dim, bool(causal)]
    return default_config(head_dim, causal, q.shape[2], k.shape[2])


class _Plan(NamedTuple):
    grid: tuple[int]
    ints: tuple[int, ...]  # heads, group, seq_q, seq_kv, m_blocks, total, section, snake, full, items, splits, chunk
    constexprs: dict
    block_n: int
    tail: tile_schedule.SplitTail | None  # with split_tail, where it cuts the last wave
    tail_tiles: torch.Tensor | None  # and its tiles' (batch, head, first row), int32 on the device
    cut_dropped: bool = False  # a cut left out under CUDA-graph capture, for want of its table: not to be kept

    @property
    def items(self) -> int:
        """The launch's work items: its query tiles, or with a cut tail those and the tail's chunks."""
        return self.tail.items if self.tail else self.ints[5]


def _tiles(q: torch.Tensor, config: HopperConfig) -> tuple[int, int, int]:
    """(query blocks a head, query tiles in all, programs) of a launch of ``config`` on q: a program an SM where
    persistent, else a program a tile."""
    batch, heads, seq_q, _ = q.shape
    sms = cuda_properties(q.device.index).multi_processor_count if config.persistent else None
    return tiles_of(batch * heads, seq_q, config, sms)


def tiles_of(batch_heads: int, seq_q: int, config: HopperConfig, sm_count: int | None) -> tuple[int, int, int]:
    """:func:`_tiles` for ``batch_heads`` heads of ``seq_q`` rows on a GPU of ``sm_count`` SMs (which a persistent
    ``config`` needs)."""
    m_blocks = triton.cdiv(seq_q, config.block_m)
    total = m_blocks * batch_heads
    return m_blocks, total, min(total, sm_count) if config.persistent else total


def planned_cut(head_dim: int, causal: bool, batch_heads: int, seq_q: int, seq_kv: int, sm_count: int
                ) -> tile_schedule.SplitTail | None:
    """Where the default launch cuts its last wave (:func:`_cut`) for a shape given by its numbers, on a GPU of
    ``sm_count`` SMs: what :func:`tail_cut` computes from tensors (kernels.flash_fwd.planned_forward_path)."""
    config = default_config(head_dim, causal, seq_q, seq_kv)
    _, total, programs = tiles_of(batch_heads, seq_q, config, sm_count)
    return _cut(config, causal, False, total, programs, seq_kv)


def _cut(config: HopperConfig, causal: bool, fp8: bool, total: int, programs: int, seq_kv: int
         ) -> tile_schedule.SplitTail | None:
    """Where a launch of ``total`` tiles on ``programs`` programs cuts its last wave by keys (``split_tail``), or None
    where every tile runs whole."""
    if config.split_tail and config.persistent and not causal and not fp8:
        return tile_schedule.split_tail(total, programs, triton.cdiv(seq_kv, config.block_n))
    return None


def tail_cut(q: torch.Tensor, k: torch.Tensor, causal: bool, layout: tuple | None = None
             ) -> tile_schedule.SplitTail | None:
    """Where the default forward's launch at these inputs cuts its last wave by keys (kernels.tile_schedule.split_tail:
    the tail's tiles and chunks), or None where every tile runs whole: the launch plan kept for ``layout`` (q, k, v's
    layout_key) where a call made one, else computed as that plan would be, without its table of tiles."""
    plan = _PLANS.get((layout, bool(causal), None)) if layout is not None else None
    if plan is not None:
        return plan.tail
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return _launch_plan(q, k, k, causal, None, None, None).tail  # it cuts only with a table made before
    if q.dtype == FP8:
        return None  # FP8_CONFIGS leave split_tail off
    batch, heads, seq_q, head_dim = q.shape
    return planned_cut(head_dim, causal, batch * heads, seq_q, k.shape[2],
                       cuda_properties(q.device.index).multi_processor_count)


def _launch_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, config: HopperConfig | None,
                 schedule: tile_schedule.Schedule | None, out_dtype: torch.dtype | None) -> _Plan:
    """What a launch at this layout takes besides the data (O's dtype ``out_dtype``, or q's where None): the grid,
    the int arguments and the constexprs."""
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    fp8 = q.dtype == FP8
    config = _config_of(q, k, causal, config)
    consumer_regs, loader_regs = WORKER_REGS[config.consumers]
    m_blocks, total, programs = _tiles(q, config)
    props = cuda_properties(q.device.index)
    # Per query head, the K and V its tiles read (a K/V head's, shared by its group of query heads).
    head_bytes = 2 * seq_kv * head_dim * q.element_size() * kv_heads // heads
    schedule = schedule or tile_schedule.plan(m_blocks, batch * heads, head_bytes, props.L2_cache_size,
                                              tile_schedule.FORWARD_L2_SHARE, programs, bool(causal),
                                              config.persistent, props.multi_processor_count)
    constexprs = dict(
        HEAD_DIM=head_dim, BLOCK_N=config.block_n, STAGES=config.stages, CAUSAL=bool(causal),
        OVERLAP=config.overlap, PINGPONG=config.pingpong, SPLIT_M=SPLIT_M, NUM_WG=config.consumers,
        CONSUMER_REGS=consumer_regs, LOADER_REGS=loader_regs,
        Q_LAYOUT=tile_layout(SPLIT_M, head_dim, q.dtype), KV_LAYOUT=tile_layout(config.block_n, head_dim, q.dtype),
        V_LAYOUT=(tile_layout(head_dim, config.block_n, q.dtype) if fp8
                  else tile_layout(config.block_n, head_dim, q.dtype)), FP8=fp8, O_TMA=config.o_tma,
        O_LAYOUT=tile_layout(SPLIT_M, head_dim, out_dtype or q.dtype) if config.o_tma else None,
        SPLIT_MASK=config.split_mask, ROW_PARTIALS=config.row_partials,
        CAUSAL_TRIM=config.causal_trim and bool(causal))
    cut = tail = _cut(config, causal, fp8, total, programs, seq_kv)
    tail_tiles = None
    if tail:
        # The tail tiles' table reaches the device by a copy, which a stream being captured into a CUDA graph cannot
        # take: under capture the launch cuts only where a call before made the table (a graph's warm-up calls,
        # profiler.measure.timing.graphed), else every tile runs whole (and hopper_forward keeps no such plan).
        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        tail_tiles = tail_combine.tail_tiles(tail, m_blocks, batch * heads, heads, schedule, config.block_m, q.device,
                                             create=not capturing)
        tail = tail if tail_tiles is not None else None
    constexprs.update(CHUNKS=False, PDL=tail is not None)
    full, items, splits, chunk = (tail.full, tail.items, tail.splits, tail.chunk) if tail else (total, total, 1, 1)
    ints = (heads, heads // kv_heads, seq_q, seq_kv, m_blocks, total, schedule.section, int(schedule.snake),
            full, items, splits, chunk)
    return _Plan((programs,), ints, constexprs, config.block_n, tail, tail_tiles, cut is not None and tail is None)



# Launch plans by (layout_key, causal) for the default configuration, and the compiled kernel of each.
_PLANS: Memo = Memo()
_LAUNCHES = LaunchCache(_attn_fwd_hopper)
