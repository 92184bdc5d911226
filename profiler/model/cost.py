"""FLOPs and bytes of one capture row, by the costing its implementation declares.

Which formulas an implementation gets is declared by its registry entry (``Impl.costing``,
attention_core.costing); :func:`cost_of` is the one place that applies it, for every command and
view. The formulas are in profiler.model.naive (stepwise attention) and profiler.model.fused.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

from attention_core import split_kv
from attention_core.costing import Costing, pass_paths
from attention_core.shape import NAIVE_STEPS, Shape
from profiler.model.fused import (
    compulsory_bytes,
    fused_flops,
    per_row_bytes,
    repeat_kv_bytes,
    split_tail_bytes,
    tile_bytes,
)
from profiler.model.naive import naive_step_bytes, naive_step_flops


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
    costing's ``fast_path`` for a pass, that pass's tiles are the fast kernel's (the forward's tile,
    or a one-pass backward's, :class:`attention_core.costing.Tiles`)."""
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


def call_cost(shape: Shape, density: float = 1.0, mask_bytes: int = 0) -> tuple[float, float, float]:
    """(FLOPs, HBM bytes, FLOPs without the mask) of one observed attention call (profiler.observer),
    whichever backend ran it. FLOPs: 4·B·H·Nq·Nkv·D for the forward, 2.5x for the backward
    (:func:`fused_flops`: FlashAttention-2 paper §4), times the call's ``density``, the fraction of
    score pairs its mask computes (profiler.observer.calls). Bytes: the compulsory bytes of a fused
    kernel (:func:`compulsory_bytes`: inputs read once, outputs written once; the fewest any fused
    attention moves), plus an explicit mask of ``mask_bytes``, read once."""
    full = fused_flops(shape)
    return full * density, float(compulsory_bytes(shape) + mask_bytes), full


def _fused_tile_bytes(costing: Costing, shape: Shape, path: str = "") -> float:
    tiles = costing.tiles_of(shape, path)
    if tiles is None:
        return math.nan
    forward = pass_paths(path, shape.mode)[0]
    # only where the path names this implementation's own fast kernel (the Gluon forward cuts its tail)
    own = bool(costing.fast_path) and costing.fast_path in forward and tiles.fwd is not None
    cut = split_tail_bytes(shape, forward, tiles.fwd[0]) if own else 0.0
    return tile_bytes(shape, tiles) + cut  # a forward that cut its last wave by keys: its chunks' partials too


def kernel_plan(costing: Costing, shape: Shape) -> split_kv.SplitPlan | None:
    """The split-KV plan the forward of a ``split_kv`` implementation runs with (None: tiled)."""
    if not costing.split_kv or shape.mode == "bwd":
        return None
    return split_kv.plan(shape.batch, shape.kv_heads, shape.group, shape.seq_q, shape.seq_kv)


def kernel_path(costing: Costing, shape: Shape, forward: str | None = None, backward: str | None = None) -> str:
    """Which code path of a multi-path implementation runs this shape ('split-kv x16', 'tiled',
    'gluon-ws fwd, tiled bwd'), for the store's ``path`` column; '' for implementations with one
    path. ``forward`` and ``backward`` are the paths the implementation reported when the case ran
    (they can depend on the device, e.g. 'gluon-ws' on sm_90); without them, the shape decides
    (the portable backward is 'tiled')."""
    if not costing.split_kv and not costing.fast_path:
        return ""
    if forward is None:
        decode = kernel_plan(costing, shape) if costing.split_kv else None
        forward = "tiled" if decode is None else decode.label
    backward = backward or "tiled"
    return {"fwd": forward, "bwd": backward, "fwd+bwd": f"{forward} fwd, {backward} bwd"}[shape.mode]


def arithmetic_intensity(flops: float, hbm_bytes: float) -> float:
    """FLOPs per byte of HBM traffic (Williams, Waterman, Patterson, "Roofline", CACM 2009)."""
    if math.isnan(hbm_bytes):
        return math.nan  # bytes the model does not give (a kernel's undeclared tiles)
    return flops / hbm_bytes if hbm_bytes > 0 else math.inf
