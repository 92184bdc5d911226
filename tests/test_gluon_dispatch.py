"""The Gluon Hopper forward and backward as the rest of the toolkit sees them, on the CPU: when
triton_flash takes them, the path a capture row records, the tiles and bytes the cost model charges
for them, and the shipped H100 captures. The kernels themselves run only on sm_90 (tests/gpu); the
interpreter cannot run Gluon."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import torch
import triton

from attention_core.costing import Tiles, pass_paths
from attention_core.shape import Shape
from kernels import flash_bwd_hopper as bwd_hopper
from kernels import flash_fwd_hopper as hopper
from kernels import tile_schedule
from kernels.flash_bwd import backward_path, flash_attention_backward
from kernels.flash_fwd import flash_attention_forward, forward_path
from profiler.model.cost import cost_of, kernel_path
from profiler.model.fused import executed_flops, onepass_backward_bytes, tile_bytes
from profiler.model.roofs import Roofs
from profiler.registry import REGISTRY
from profiler.remodel import remodel
from profiler.store import load_capture

ROOT = Path(__file__).resolve().parents[1]
OURS = REGISTRY["triton_flash"].costing


def test_configs_cover_every_head_dim_and_share_the_tile_the_model_charges():
    for head_dim in hopper.HEAD_DIMS:
        tiles = set()
        for causal in (False, True):
            config = hopper.CONFIGS[head_dim, causal]
            assert config.consumers in hopper.WORKER_REGS and config.stages >= 2 and config.block_n in (64, 128)
            assert config.block_m == config.consumers * hopper.SPLIT_M
            tiles.add((config.block_m, config.block_n))
        assert tiles == {hopper.forward_tile(head_dim)}
    assert hopper.forward_tile(64) == (192, 128) and hopper.forward_tile(128) == (128, 128)
    assert hopper.forward_tile(32) is None and hopper.forward_tile(64, "fp32") is None


def test_causal_rows_up_to_the_measured_length_run_persistent_programs():
    """hopper.PERSISTENT_CAUSAL_UP_TO: causal D128 up to N4096 and D64 up to N16384 on persistent programs (round 21
    measured them faster or even there; D64 up to N4096 and D128 up to N2048 before), longer shapes one program per
    tile; non-causal as CONFIGS says. The tile stays the same."""
    assert hopper.default_config(128, True, 4096) == hopper.CONFIGS[128, True]._replace(persistent=True)
    assert hopper.default_config(128, True, 1).persistent
    assert hopper.default_config(128, True, 4097) == hopper.CONFIGS[128, True]
    assert not hopper.default_config(128, True, 8192).persistent
    assert hopper.default_config(64, True, 8192) == hopper.CONFIGS[64, True]._replace(persistent=True)
    assert hopper.default_config(64, True, 16384).persistent
    assert hopper.default_config(64, True, 16385) == hopper.CONFIGS[64, True]
    for head_dim in hopper.HEAD_DIMS:
        assert hopper.default_config(head_dim, False, 2048) == hopper.CONFIGS[head_dim, False]


def test_short_causal_head_dim_64_runs_two_overlapping_consumers_and_the_model_charges_their_tile():
    """hopper.SHORT_CAUSAL: causal D64 up to N1536 (2048 until round 20) on two consumers (128-row tiles), each
    overlapping its next QKᵀ with its softmax, taking turns, on persistent programs; from 1537 CONFIGS' three consumers
    with causal_trim; forward_tile, and so the cost model, follow it."""
    limit, config = hopper.SHORT_CAUSAL[64]
    assert limit == 1536 and config.block_m == 128 and config.overlap and config.pingpong and config.persistent
    assert config.o_tma and config.consumers in hopper.WORKER_REGS and not config.causal_trim
    assert hopper.default_config(64, True, 1) == hopper.default_config(64, True, 1536) == config
    assert hopper.default_config(64, True, 1537) == hopper.CONFIGS[64, True]._replace(persistent=True)
    assert hopper.default_config(64, True, 1537).block_m == 192
    assert hopper.forward_tile(64, "bf16", causal=True, seq_q=1536) == (128, 128)
    assert hopper.forward_tile(64, "bf16", causal=True, seq_q=1537) == (192, 128)
    assert hopper.forward_tile(64, "bf16", causal=True) == hopper.forward_tile(64) == (192, 128)
    assert hopper.forward_tile(64, "fp8", causal=True, seq_q=1000) == (192, 128)  # fp8 keeps FP8_CONFIGS
    for seq, tile in ((1536, (128, 128)), (2048, (192, 128))):
        shape = Shape.square(16, 32, seq, 64, dtype="bf16", causal=True)
        assert cost_of(OURS, shape, path="gluon-ws").tile_bytes == pytest.approx(tile_bytes(shape, Tiles(tile)))


def test_off_sm90_everything_takes_the_portable_kernel():
    q = torch.randn(1, 2, 300, 64)
    reason = hopper.unsupported_reason(q, q, q)
    assert reason is not None
    assert forward_path(q, q, q) == "tiled"
    with pytest.raises(ValueError, match=reason.split(" (")[0][:20]):
        flash_attention_forward(q, q, q, gluon=True)


def _gluon_over_portable(folder: str):
    """{(head_dim, causal, dtype, seq_q): the Gluon forward's time-weighted speed over the portable kernel's}, from a
    capture folder holding the same ``bench`` run twice each way (the Gluon forward: gluon1, gluon2, with ATTN_GLUON
    unset in round 18 and =force in round 20; ATTN_GLUON=0: portable1, portable2), one after the other on one H100."""
    import pandas as pd

    frames = []
    for run in ("gluon1", "gluon2", "portable1", "portable2"):
        meta, frame = load_capture(ROOT / "reports" / "perf-h100" / folder / run)
        assert meta["device"].startswith("NVIDIA H100") and meta["finished"]
        ours = frame[frame.impl == "triton_flash"].assign(way=run[:-1])
        assert set(ours.path) == ({"gluon-ws"} if run.startswith("gluon") else {"tiled"})
        frames.append(ours)
    ms = pd.concat(frames).groupby(["head_dim", "causal", "dtype", "seq_q", "way"]).time_ms.sum().unstack("way")
    return (ms.portable / ms.gluon).to_dict()


def test_portable_up_to_is_where_the_portable_kernel_measured_faster():
    """hopper.PORTABLE_UP_TO: causal head_dim 64 up to Nq 1024 (round 18). Timed the grid's way on one H100, the Gluon
    forward lost there (0.72x at N 512, 0.96x at 1024) and won at every longer causal head_dim-64 row and at every
    other (head_dim, causal), N 512 to 2048."""
    speed = _gluon_over_portable("gluon_fwd_round18_route") | _gluon_over_portable("gluon_fwd_round18_short")
    assert len(speed) == 8 + 18
    assert hopper.PORTABLE_UP_TO == {(64, True): 1024}
    for (head_dim, causal, dtype, seq_q), ratio in speed.items():
        limit = hopper.PORTABLE_UP_TO.get((head_dim, bool(causal)), 0)
        assert (ratio < 1) == (seq_q <= limit), (head_dim, causal, dtype, seq_q, ratio)
    assert 0.70 < speed[64, True, "bf16", 512] < 0.75 and 0.95 < speed[64, True, "fp16", 1024] < 0.97
    # The README's figures, one a length where both dtypes round to it
    at = {n: {f"{speed[64, True, dtype, n]:.2f}" for dtype in ("fp16", "bf16")} for n in (512, 1024)}
    assert len(at[512]) == len(at[1024]) == 1
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"before rounds 19 and 20, had {at[512].pop()}x and {at[1024].pop()}x" in readme


def test_portable_up_to_held_when_round_20_timed_it_the_grids_way():
    """After rounds 19 and 20 changed the short causal configs, the route timed again the grid's way (round 20:
    ATTN_GLUON=force, which runs the Gluon forward below PORTABLE_UP_TO, and ATTN_GLUON=0, twice each on one H100): the
    Gluon forward still loses at N 512 and 1024 and wins at 1536, as PORTABLE_UP_TO says; the README quotes it."""
    for run, switch in (("gluon1", "force"), ("gluon2", "force"), ("portable1", "0"), ("portable2", "0")):
        meta, _ = load_capture(ROOT / "reports" / "perf-h100" / "gluon_fwd_round20_route" / run)
        assert meta["env"] == {"ATTN_GLUON": switch}
    speed = _gluon_over_portable("gluon_fwd_round20_route")
    assert len(speed) == 6 and {seq for *_, seq in speed} == {512, 1024, 1536}
    for (head_dim, causal, dtype, seq_q), ratio in speed.items():
        assert (ratio < 1) == (seq_q <= hopper.PORTABLE_UP_TO[head_dim, causal]), (dtype, seq_q, ratio)
    # The README's sentence: one figure a length where both dtypes round to it, and each dtype's at 1536
    at = {n: {f"{speed[64, True, dtype, n]:.2f}" for dtype in ("fp16", "bf16")} for n in (512, 1024)}
    assert len(at[512]) == len(at[1024]) == 1
    readme = " ".join((ROOT / "README.md").read_text().split())
    at1536 = {dtype: f"{speed[64, True, dtype, 1536]:.2f}" for dtype in ("bf16", "fp16")}
    assert (f"the Gluon forward ran at {at[512].pop()}x the portable kernel's speed at N 512 and {at[1024].pop()}x at "
            f"1024, against {at1536['bf16']}x (bf16) and {at1536['fp16']}x (fp16) at 1536") in readme


def test_portable_up_to_routes_short_rows_to_the_portable_kernel_with_a_reason(monkeypatch):
    """An entry of hopper.PORTABLE_UP_TO routes a shape's short rows to the portable kernel, with a reason naming
    it; the rest take the Gluon forward."""
    def q(seq, dim):
        return torch.empty(1, 1, seq, dim)

    assert hopper.slower_reason(q(1024, 64), causal=True) == (
        "the portable kernel measured faster at head_dim 64, causal, Nq <= 1024")
    assert hopper.slower_reason(q(1, 64), causal=True) is not None
    assert all(hopper.slower_reason(q(n, d), causal=c) is None for n in (1, 1025, 2048, 4096) for d in (64, 128)
               for c in (False, True) if (d, c) != (64, True) or n > 1024)
    monkeypatch.setenv("ATTN_GLUON", "force")  # the Gluon forward below the route too, to time the route
    assert hopper.slower_reason(q(1024, 64), causal=True) is None and hopper.slower_reason(q(1, 64), True) is None
    monkeypatch.setenv("ATTN_GLUON", "1")
    assert hopper.slower_reason(q(1024, 64), causal=True) is not None
    monkeypatch.setitem(hopper.PORTABLE_UP_TO, (128, False), 512)
    assert hopper.slower_reason(q(512, 128), causal=False) == (
        "the portable kernel measured faster at head_dim 128, no mask, Nq <= 512")
    assert hopper.slower_reason(q(513, 128), causal=False) is None


def test_kernel_path_names_the_forward_the_run_reported():
    shape = Shape.square(4, 32, 8192, 64, dtype="bf16")
    assert kernel_path(OURS, shape) == "tiled"
    assert kernel_path(OURS, shape, forward="gluon-ws") == "gluon-ws"
    assert kernel_path(OURS, shape.with_mode("fwd+bwd"), forward="gluon-ws") == "gluon-ws fwd, tiled bwd"
    assert kernel_path(OURS, shape.with_mode("bwd"), forward="gluon-ws") == "tiled"
    assert kernel_path(REGISTRY["sdpa_cudnn"].costing, shape, forward="gluon-ws") == ""


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_gluon_rows_are_charged_the_gluon_tile_forward_only(mode):
    shape = Shape.square(4, 32, 8192, 64, dtype="bf16", mode=mode)
    portable = OURS.tiles_for(64, "bf16")
    gluon = cost_of(OURS, shape, path=kernel_path(OURS, shape, forward="gluon-ws"))
    tiled = cost_of(OURS, shape)
    assert (gluon.flops, gluon.hbm_bytes) == (tiled.flops, tiled.hbm_bytes)  # only the L2 traffic differs
    want = tile_bytes(shape, Tiles((192, 128), portable.dkdv, portable.dq))
    assert gluon.tile_bytes == pytest.approx(want)
    # A 192-row query tile re-reads K and V 8192 / 192 times instead of 8192 / 128.
    assert gluon.tile_bytes < tiled.tile_bytes


def test_remodel_keeps_a_recorded_gluon_path_and_its_tile():
    meta, frame = load_capture(ROOT / "reports" / "bench-h100-gluon")
    ours = frame[frame.impl == "triton_flash"]
    assert set(ours.path) == {"gluon-ws", "tiled"}
    # The portable kernel kept the short causal head_dim-64 shapes then (PORTABLE_UP_TO, until round 17).
    tiled = ours[ours.path == "tiled"]
    assert set(zip(tiled.head_dim, tiled.causal)) == {(64, True)} and tiled.seq_q.max() <= 4096
    stale = frame.copy()
    gluon_row = stale.index[(stale.impl == "triton_flash") & (stale.path == "gluon-ws")][0]
    stale.loc[gluon_row, "tile_bytes"] = 1.0
    new, changed = remodel(stale, Roofs.from_meta(meta), meta)
    assert list(changed[changed].index) == [gluon_row]
    assert new.loc[gluon_row, "path"] == "gluon-ws"
    assert new.loc[gluon_row, "tile_bytes"] == frame.loc[gluon_row, "tile_bytes"]


def test_shipped_h100_forward_grid_against_cudnn_and_the_portable_kernel():
    """The numbers docs/perf-notes.md ("Gluon forward") quotes, from the committed captures."""
    _, gluon = load_capture(ROOT / "reports" / "bench-h100-gluon")
    _, portable = load_capture(ROOT / "reports" / "bench-h100-portable")
    key = ["head_dim", "dtype", "causal", "seq_q"]
    assert (gluon.status == "ok").all() and len(gluon) == 96  # 32 shapes × 3 implementations
    ours = gluon[gluon.impl == "triton_flash"].set_index(key).tflops
    cudnn = gluon[gluon.impl == "sdpa_cudnn"].set_index(key).tflops
    before = portable[portable.impl == "triton_flash"].set_index(key).tflops
    assert set(portable[portable.impl == "triton_flash"].path) == {"tiled"}
    vs_cudnn, vs_before = (ours / cudnn).dropna(), (ours / before).dropna()
    assert len(vs_cudnn) == len(vs_before) == 32
    assert vs_cudnn[vs_cudnn >= 1.0].size == 18  # of 32: 12 of the 14 misses at N <= 4096
    assert vs_cudnn.min() == pytest.approx(0.90, abs=0.01)
    long = vs_cudnn[vs_cudnn.index.get_level_values("seq_q") >= 8192]
    assert long.min() == pytest.approx(0.97, abs=0.01) and (long >= 1.0).sum() == 14  # of 16
    # Gluon rows against the portable kernel measured in its own run: never slower.
    gluon_rows = gluon[(gluon.impl == "triton_flash") & (gluon.path == "gluon-ws")].set_index(key).tflops
    assert (gluon_rows / before).dropna().min() >= 1.0


# The Gluon backward (kernels/flash_bwd_hopper.py): its configs and where it runs. The kernel itself runs
# only on sm_90 (tests/gpu/test_gpu_kernels.py::test_gluon_backward_*); the CPU runs the portable one.

SM90_SHARED_BYTES = 227 * 1024  # largest dynamic shared memory per block on sm_90 (CUDA C++ Programming
# Guide, "Technical Specifications per Compute Capability": 227 KB for 9.0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", bwd_hopper.HEAD_DIMS)
def test_backward_configs_fit_shared_memory_and_split_dq_exactly(head_dim, causal):
    config = bwd_hopper.CONFIGS[head_dim, causal]
    assert config.consumers in bwd_hopper.WORKER_REGS and config.stages >= 2
    assert config.block_n == config.consumers * bwd_hopper.KEYS_PER_WG
    rows, cols = config.dq_tile(head_dim)
    assert rows == config.block_m and cols * (config.consumers if config.dq_cols else 1) == head_dim
    elem = 2  # fp16/bf16
    shared = (2 * config.stages * config.block_m * head_dim * elem  # Q and dO rings
              + 2 * config.block_n * head_dim * elem  # K and V
              + 2 * config.block_n * config.block_m * elem  # dSᵀ, double-buffered
              + config.consumers * rows * cols * 4)  # each consumer's fp32 dQ staging tile
    assert shared <= SM90_SHARED_BYTES
    assert bwd_hopper.backward_tile(head_dim) == (config.block_m, config.block_n)  # causal or not
    assert bwd_hopper.backward_tile(head_dim, "fp32") is None and bwd_hopper.backward_tile(32) is None


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", bwd_hopper.HEAD_DIMS)
def test_dq_shares_in_fragment_order_land_where_the_last_pass_reads_them(head_dim, causal):
    """BackwardConfig.dq_frag, as the kernel places it: each consumer's dQ share of query tile i, stored as
    (columns/8, BLOCK_M, 8), is reduce-added as one dq_box box of the buffer seen as rows of BLOCK_M floats, at row
    ((off_hz·q_pad) // BLOCK_M + i)·D + its first column (_dq_share). _dq_convert (run here by the interpreter)
    must give back every row, scaled, without the padding rows, into a BSHD view, as the plain buffer does."""
    config = bwd_hopper.CONFIGS[head_dim, causal]._replace(dq_frag=True)
    block = config.block_m
    rows, cols = config.dq_tile(head_dim)
    box = config.dq_box(head_dim)
    assert box == (cols, rows) and config._replace(dq_frag=False).dq_box(head_dim) == (rows, cols)
    batch, heads, seq = 2, 3, 150
    q_pad = triton.cdiv(seq, block) * block
    acc = torch.randn(batch * heads, q_pad, head_dim)  # what the shares sum to, in (rows, columns)
    buffer = torch.zeros(batch * heads * q_pad * head_dim // block, block)  # dq_acc.view(-1, BLOCK_M)
    for off_hz in range(batch * heads):
        for i in range(q_pad // block):
            for first_col in range(0, head_dim, cols):  # one share per consumer (dq_cols), or the whole width
                share = acc[off_hz, i * block:(i + 1) * block, first_col:first_col + cols]
                staged = share.reshape(block, cols // 8, 8).permute(1, 0, 2).reshape(box)  # the staging tile
                row = ((off_hz * q_pad) // block + i) * head_dim + first_col
                buffer[row:row + box[0]] += staged
    for stored, order in ((acc, False), (buffer, True)):
        dq = torch.empty(batch, seq, heads, head_dim, dtype=torch.float16).transpose(1, 2)
        bwd_hopper._dq_convert[(q_pad // block, batch * heads)](
            stored, dq, *dq.stride()[:3], 0.5, heads, seq, q_pad, HEAD_DIM=head_dim, BLOCK=block, FRAG=order)
        want = (0.5 * acc.reshape(batch, heads, q_pad, head_dim)[:, :, :seq]).half()
        torch.testing.assert_close(dq, want, rtol=0, atol=0)


def test_backward_off_sm90_takes_the_portable_kernel_and_refuses_gluon_true():
    """Off sm_90 gluon=True is refused with the reason, and the default is the portable kernel."""
    q = torch.randn(1, 2, 300, 64)
    o = torch.randn_like(q)
    lse = torch.zeros(1, 2, 300)
    reason = bwd_hopper.unsupported_reason(q, q, q, o)
    assert reason is not None
    assert backward_path(q, q, q) == backward_path(q, q, q, gluon=True) == "tiled"
    with pytest.raises(ValueError, match=reason.split(" (")[0][:20]):
        flash_attention_backward(torch.randn_like(q), q, q, q, o, lse, False, 0.125, gluon=True)
    assert all(g.shape == q.shape for g in flash_attention_backward(torch.randn_like(q), q, q, q, o, lse, False, 0.125))


def test_pass_paths_split_a_row_path_by_pass():
    assert pass_paths("gluon-ws fwd, tiled bwd", "fwd+bwd") == ("gluon-ws", "tiled")
    assert pass_paths("split-kv x16 fwd, gluon-ws bwd", "fwd+bwd") == ("split-kv x16", "gluon-ws")
    assert pass_paths("gluon-ws", "fwd") == ("gluon-ws", "")
    assert pass_paths("gluon-ws", "bwd") == ("", "gluon-ws")
    assert kernel_path(OURS, Shape.square(1, 2, 256, 64, mode="bwd"), forward="gluon-ws", backward="gluon-ws") == \
        "gluon-ws"
    assert kernel_path(OURS, Shape.square(1, 2, 256, 64, mode="fwd+bwd"), forward="tiled", backward="gluon-ws") == \
        "tiled fwd, gluon-ws bwd"


@pytest.mark.parametrize("tile, query_tiles, padded", [((64, 128), 5, 320), ((128, 128), 3, 384)])
def test_onepass_backward_bytes_by_hand(tile, query_tiles, padded):
    """B1 H2 N300 D64 fp16, not causal: 3 key blocks of 128 x 5 query tiles of 64 (the D64 tile until round 13),
    or x 3 of 128 (since), per head."""
    shape = Shape.square(1, 2, 300, 64, dtype="fp16", mode="bwd")
    e, d, n = 2, 64, 300
    q = kv = 2 * n * d * e  # both heads
    visited = 2 * 3 * query_tiles  # (head, key block, query tile) triples
    want = (2 * q + 2 * n * 4  # preprocess: read O, dO; write delta
            + 2 * padded * d * 4  # zero the fp32 dQ buffer (300 rows padded to whole query tiles)
            + 2 * kv  # K, V once
            + visited * tile[0] * (2 * d * e + 2 * 4)  # Q, dO tiles and their lse, delta rows
            + visited * tile[0] * d * 4  # dQ shares reduce-added in fp32
            + 2 * kv  # dK, dV
            + 2 * n * d * 4 + q)  # _dq_convert reads each head's 300 rows of the buffer, writes dq
    assert onepass_backward_bytes(shape, tile) == want
    if tile != bwd_hopper.backward_tile(64):
        return
    # The row of a backward that ran the Gluon kernel is charged it, with the kernel's tile; the portable one
    # its two kernels.
    gluon = cost_of(OURS, shape, path="gluon-ws")
    assert gluon.tile_bytes == want
    assert cost_of(OURS, shape, path="tiled").tile_bytes == tile_bytes(shape, OURS.tiles_for(64, "fp16"))
    assert gluon.flops == cost_of(OURS, shape, path="tiled").flops  # the FLOP convention does not change
    # The fwd+bwd row: the Gluon forward's tile and the one-pass backward.
    both = shape.with_mode("fwd+bwd")
    tiles = OURS.tiles_for(64, "fp16", "gluon-ws fwd, gluon-ws bwd", "fwd+bwd")
    assert tiles.fwd == (192, 128) and tiles.onepass == tile
    assert cost_of(OURS, both, path="gluon-ws fwd, gluon-ws bwd").tile_bytes == pytest.approx(
        tile_bytes(shape.with_mode("fwd"), Tiles((192, 128))) + want)


def test_onepass_backward_issues_five_matmuls_per_tile_pair():
    shape = Shape.square(1, 2, 300, 64, mode="bwd", causal=True)
    # Causal, key block n sees query tiles from row 128·n on: 5 + 3 + 1 tiles a head.
    assert executed_flops(shape, Tiles(None, onepass=(64, 128))) == 2 * 9 * 64 * 128 * 5 * 2 * 64


def test_shipped_h100_backward_grid_and_the_results_page_quotes_it():
    """reports/bench-h100-gluon-bwd: ours and cuDNN, fwd and bwd, 32 shapes each, every row ok; the
    backward took the Gluon kernel at head_dim 64 only; reports/bench-h100-portable-bwd holds the
    portable backward at 64, and reports/bench-h100-gluon-bwd-d128 the Gluon backward at 128 (the
    default since). docs/results.md's ratio ranges are these captures'."""
    meta, frame = load_capture(ROOT / "reports" / "bench-h100-gluon-bwd")
    _, portable = load_capture(ROOT / "reports" / "bench-h100-portable-bwd")
    assert meta["device"] == "NVIDIA H100 80GB HBM3"
    assert (frame.status == "ok").all() and len(frame) == 2 * 2 * 32 and (portable.status == "ok").all()
    ours = frame[frame.impl == "triton_flash"]
    backward = ours[ours["mode"] == "bwd"]
    assert set(backward[backward.head_dim == 64].path) == {"gluon-ws"}
    assert set(backward[backward.head_dim == 128].path) == {"tiled"} and set(portable.path) == {"tiled"}
    key = ["mode", "dtype", "head_dim", "causal", "seq_q"]
    times = frame.pivot_table(index=key, columns="impl", values="time_ms")
    fwd, bwd = times.xs("fwd"), times.xs("bwd")
    d64 = bwd.xs(64, level="head_dim")
    vs_portable = portable.set_index(["dtype", "causal", "seq_q"]).time_ms / d64.triton_flash

    def span(ratio):
        return f"{ratio.min():.2f}x to {ratio.max():.2f}x"

    readme = (ROOT / "docs" / "results.md").read_text().replace("\n", " ")
    assert f"runs at {span(vs_portable.xs(False, level='causal'))} our portable one without a mask and " \
           f"{span(vs_portable.xs(True, level='causal'))} causal" in readme
    assert f"and at {span(d64.sdpa_cudnn / d64.triton_flash)} cuDNN" in readme
    d128 = bwd.xs(128, level="head_dim")  # the portable backward, before the Gluon one took head_dim 128
    assert f"where the portable backward had {span(d128.sdpa_cudnn / d128.triton_flash)}" in readme
    meta128, gluon128 = load_capture(ROOT / "reports" / "bench-h100-gluon-bwd-d128")
    assert meta128["device"] == meta["device"] and (gluon128.status == "ok").all() and len(gluon128) == 2 * 16
    assert set(gluon128[gluon128.impl == "triton_flash"].path) == {"gluon-ws"}
    ratio = gluon128.pivot_table(index=["dtype", "causal", "seq_q"], columns="impl", values="time_ms")
    ratio = ratio.sdpa_cudnn / ratio.triton_flash
    assert f"it runs at {span(ratio.xs(False, level='causal'))} cuDNN without a mask and " \
           f"{span(ratio.xs(True, level='causal'))} causal" in readme
    assert f"In `reports/bench-h100-gluon-bwd` the forward runs at {span(fwd.sdpa_cudnn / fwd.triton_flash)} " \
           f"cuDNN, at or above it on " \
           f"{(fwd.sdpa_cudnn >= fwd.triton_flash).sum()} of 32 shapes" in readme
    # Below the portable backward only at causal N 2048, as docs/results.md says.
    assert set(vs_portable[vs_portable < 1].index) == {("bf16", True, 2048), ("fp16", True, 2048)}


def test_backward_dispatch_follows_backward_path(monkeypatch):
    """flash_attention_backward and backward_path decide alike: with the Gluon kernel available, the
    default calls it, gluon=False does not, and deterministic algorithms keep the
    portable kernels (dQ's fp32 adds run in a varying order)."""
    from kernels import flash_bwd

    calls = []
    monkeypatch.setattr(bwd_hopper, "unsupported_reason", lambda *tensors: None)
    monkeypatch.setattr(bwd_hopper, "hopper_backward", lambda *args: calls.append(args) or (None, None, None))
    q = torch.randn(1, 2, 40, 64)
    o, lse, do = torch.randn_like(q), torch.zeros(1, 2, 40), torch.randn_like(q)
    assert backward_path(q, q, q) == "gluon-ws"
    flash_attention_backward(do, q, q, q, o, lse, True, 0.125)
    assert len(calls) == 1
    assert backward_path(q, q, q, gluon=False) == "tiled"
    flash_attention_backward(do, q, q, q, o, lse, True, 0.125, gluon=False)
    assert len(calls) == 1
    torch.use_deterministic_algorithms(True)
    try:
        assert "deterministic" in flash_bwd._not_gluon(q, q, q, o)
        assert backward_path(q, q, q) == "tiled"
        flash_attention_backward(do, q, q, q, o, lse, True, 0.125)
        assert len(calls) == 1
    finally:
        torch.use_deterministic_algorithms(False)


def test_gluon_tile_order_is_the_reference_order(monkeypatch):
    """swizzled_tile (Gluon, run here as plain Python) maps every t as kernels.tile_schedule.tile."""
    import itertools

    from kernels import hopper_common
    from kernels.tile_schedule import tile

    monkeypatch.setattr(hopper_common.gl, "minimum", min)
    swizzled = hopper_common.swizzled_tile.fn
    for bh, n_blocks, section, snake in itertools.product((1, 5, 13), (1, 3, 8), (1, 2, 4, 6, 15), (0, 1)):
        for t in range(bh * n_blocks):
            assert swizzled(t, n_blocks, bh, section, snake) == tile(t, n_blocks, bh, section, bool(snake))


def test_a_triton_whose_gluon_api_differs_takes_the_portable_kernels():
    """The Gluon kernels are written for triton 3.6's Gluon (gl.thread_barrier; later versions call it
    gl.barrier): on another API every Gluon path reports why it is off, so nothing tries to compile them."""
    from kernels import flash_bwd_hopper, flash_fwd_hopper, hopper_common

    gl = hopper_common.gl
    if hasattr(gl, "thread_barrier"):
        assert hopper_common.GLUON_IMPORT_ERROR is None
    else:
        reason = hopper_common.GLUON_IMPORT_ERROR
        assert reason == (f"triton {triton.__version__}'s Gluon API differs from triton 3.6's, which the Gluon "
                          "kernels are written and checked for (it has no gl.thread_barrier)")
        q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
        assert flash_fwd_hopper.unsupported_reason(q, q, q) == reason
        assert flash_bwd_hopper.unsupported_reason(q, q, q, q) == reason


def test_masked_first_walks_every_tile_once_and_masks_all_that_need_it(monkeypatch):
    """BackwardConfig.masked_first (causal D128's default): _query_tiles and _tile_at (Gluon, run here as
    plain Python) order a key block's query tiles so that the loader and both consumers walk the same
    permutation of [m_lo, n_m), the masked tiles first; every tile that needs a mask for either
    consumer's 64 keys (past seq_q or seq_kv, or across the causal diagonal) is among them."""
    import itertools
    import math

    assert bwd_hopper.CONFIGS[128, True].masked_first and not bwd_hopper.CONFIGS[128, False].masked_first
    monkeypatch.setattr(bwd_hopper.gl, "minimum", min)
    monkeypatch.setattr(bwd_hopper.gl, "maximum", max)
    monkeypatch.setattr(bwd_hopper.gl, "cdiv", lambda a, b: -(-a // b))
    monkeypatch.setattr(bwd_hopper, "_first_query_tile", bwd_hopper._first_query_tile.fn)
    query_tiles, tile_at = bwd_hopper._query_tiles.fn, bwd_hopper._tile_at.fn
    block_m, keys, consumers = 64, bwd_hopper.KEYS_PER_WG, 2
    block_n = keys * consumers
    for seq_q, seq_kv, causal in itertools.product((1, 63, 64, 100, 300, 1000, 1024), (1, 64, 130, 333, 1024),
                                                   (False, True)):
        for start_n in range(0, seq_kv, block_n):
            m_lo, clean_lo, clean_hi, n_m = query_tiles(start_n, seq_q, seq_kv, block_m, block_n, causal)
            order = [tile_at(j, m_lo, clean_lo, clean_hi, n_m) for j in range(n_m - m_lo)]
            assert sorted(order) == list(range(m_lo, n_m)), (seq_q, seq_kv, causal, start_n)
            n_masked = clean_lo - m_lo + n_m - clean_hi
            assert order[n_masked:] == list(range(clean_lo, clean_hi))  # the consumers' clean loop
            for i in order[n_masked:]:  # clean for both consumers' keys
                rows_end, first_row = (i + 1) * block_m, i * block_m
                for w in range(consumers):
                    first_key = start_n + w * keys
                    assert rows_end <= seq_q and first_key + keys <= seq_kv
                    assert not causal or first_key + keys - 1 <= first_row
            # Causal: a query tile before m_lo sees none of the block's keys.
            assert not causal or m_lo == 0 or (m_lo * block_m - 1) < start_n
            assert m_lo == (start_n // block_m if causal else 0) and n_m == math.ceil(seq_q / block_m)


def test_tile_stats_rows_are_lse_in_base_2_and_delta_zero_padded():
    """The rows the Gluon backward's loader brings with each query tile's Q: lse·log2e
    and delta of every (batch, head) in a row of q_pad entries, zero past the sequence's end, so a
    ragged tile's extra rows read zeros, not the next head's values."""
    lse = torch.randn(2, 3, 70, dtype=torch.float32)
    delta = torch.randn(2, 3, 70, dtype=torch.float32)
    stats = bwd_hopper.tile_stats(lse, delta, q_pad=128)
    assert stats.shape == (2, 6, 128) and stats.dtype == torch.float32
    torch.testing.assert_close(stats[0, :, :70], lse.reshape(6, 70) * 1.4426950408889634, rtol=0, atol=0)
    torch.testing.assert_close(stats[1, :, :70], delta.reshape(6, 70), rtol=0, atol=0)
    assert stats[:, :, 70:].abs().max().item() == 0.0
    # The (2·B·H·q_pad / BLOCK_M, BLOCK_M) rows the TMA descriptor reads: tile i of (batch, head) z is row
    # z·(q_pad / BLOCK_M) + i of the lse half, and that plus the half's rows in the delta half.
    rows = stats.view(-1, 64)
    z, i = 4, 1
    assert torch.equal(rows[z * 2 + i], stats[0, z, 64:128])
    assert torch.equal(rows[6 * 128 // 64 + z * 2 + i], stats[1, z, 64:128])


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_backward_stats_is_tile_stats_of_the_preprocess_delta(layout):
    """The one-launch stats of the Gluon backward (lse·log2e and delta = Σ_d O·dO, zero past the sequence's
    end) are what tile_stats makes from kernels.flash_bwd's preprocess, for O and dO as BHSD or BSHD views,
    with a ragged last tile (the interpreter runs the Triton kernel here)."""
    from kernels.flash_bwd import backward_delta

    def make(seed):
        g = torch.Generator().manual_seed(seed)
        if layout == "bshd":
            return torch.randn(2, 70, 3, 64, generator=g).half().transpose(1, 2)
        return torch.randn(2, 3, 70, 64, generator=g).half()

    o, do = make(0), make(1)
    lse = torch.randn(2, 3, 70, dtype=torch.float32)
    stats = bwd_hopper.backward_stats(o, do, lse, q_pad=128, block_m=64)
    expected = bwd_hopper.tile_stats(lse, backward_delta(o, do), q_pad=128)
    torch.testing.assert_close(stats, expected, rtol=1e-6, atol=1e-6)
    assert stats[:, :, 70:].abs().max().item() == 0.0


@pytest.mark.parametrize("causal", [False, True])
def test_tma_dkv_stores_need_a_staging_tile_that_holds_one_gradient_tile(causal):
    """BackwardConfig.dkv_tma writes dK and dV (64 keys, 16-bit) through one consumer's fp32 dQ staging tile: at
    head_dim 64 the default tile (128 x 64 x 4 = 32,768 B) holds both (2 x 64 x 64 x 2 = 16,384 B), at head_dim 128
    the default share (64 x 64 x 4 = 16,384 B) one of them (64 x 128 x 2 = 16,384 B), stored one after the other.
    A share smaller than one tile (32 query rows at head_dim 128: 8,192 B) is refused before any launch."""
    assert bwd_hopper.CONFIGS[64, causal].dq_box(64) == (64, 128)  # (columns, rows) in fragment order
    assert bwd_hopper.CONFIGS[128, causal].dq_box(128) == (64, 64)
    q = torch.zeros(1, 2, 16, 128, dtype=torch.bfloat16)
    small = bwd_hopper.CONFIGS[128, causal]._replace(dkv_tma=True, block_m=32)
    with pytest.raises(ValueError, match="16384 B. in one dQ staging tile, and block_m=32, dq_cols=True gives 8192 B "
                                         "at head_dim 128"):
        bwd_hopper.hopper_backward(q, q, q, q, q, q[..., 0].float(), causal, 128 ** -0.5, small)


def test_clock_buffers_are_checked_before_a_launch():
    """A clock buffer of the wrong shape or dtype is refused with the shape these inputs need: cdiv(16, 128) key
    blocks x 1 batch x 2 K/V heads, 2 consumers + the loader, CLOCK_EVENTS."""
    q = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16)
    lse = q[..., 0].float()
    assert bwd_hopper.CLOCK_EVENTS == 6
    for clock in (torch.zeros(2, 3, 5, dtype=torch.int64), torch.zeros(2, 3, 6, dtype=torch.int32)):
        with pytest.raises(ValueError, match=r"these inputs need a contiguous torch.int64 one of \(2, 3, 6\) on cpu"):
            bwd_hopper.hopper_backward(q, q, q, q, q, lse, False, 64 ** -0.5, clock=clock)


def test_o_by_tma_is_the_16_bit_default_and_refused_in_fp8():
    """Round 16's epilogue (O through a staging tile and a TMA store) in every 16-bit default and none of fp8's, where
    it never ran: an fp8 call that asks for it is refused before a launch."""
    assert all(config.o_tma for config in hopper.CONFIGS.values())
    assert all(hopper.default_config(d, c, n).o_tma for d in (64, 128) for c in (False, True) for n in (1, 2048, 16384))
    assert not any(config.o_tma for config in hopper.FP8_CONFIGS.values())
    q = torch.zeros(1, 2, 16, 128).to(hopper.FP8)
    descales = (torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="o_tma has not run with e4m3 inputs"):
        hopper.hopper_forward(q, q, q, False, 128 ** -0.5, hopper.FP8_CONFIGS[128, False]._replace(o_tma=True),
                              descales=descales)
    with pytest.raises(ValueError, match="split_mask packs P in 16-bit pairs"):
        hopper.hopper_forward(q, q, q, False, 128 ** -0.5, hopper.FP8_CONFIGS[128, False]._replace(split_mask=True),
                              descales=descales)
    bf16 = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="split_mask splits the overlapped key loop"):
        hopper.hopper_forward(bf16, bf16, bf16, True, 0.125, hopper.CONFIGS[64, True]._replace(overlap=False))
    with pytest.raises(ValueError, match="row_partials defers the row sums of split_mask's loops"):
        hopper.hopper_forward(bf16, bf16, bf16, True, 0.125, hopper.CONFIGS[64, True]._replace(split_mask=False,
                                                                                               row_partials=True))
    with pytest.raises(ValueError, match="causal_trim shortens split_mask's masked loop"):
        hopper.hopper_forward(bf16, bf16, bf16, True, 0.125, hopper.CONFIGS[64, True]._replace(split_mask=False,
                                                                                               row_partials=False))


def test_split_mask_and_row_partials_are_in_every_16_bit_default():
    """Round 18's packed-P loops (split_mask) and round 19's deferred row sums (row_partials) in every 16-bit default
    and the short causal config, where rounds 18 and 19 measured them fewer cycles a key tile (the short causal config:
    timed 1.03x to 1.04x); not in fp8's, where P is 8-bit and the configs have no overlap."""
    sixteen = [*hopper.CONFIGS.values(), *(config for _, config in hopper.SHORT_CAUSAL.values())]
    assert all(config.overlap and config.split_mask and config.row_partials for config in sixteen)
    assert not any(config.split_mask or config.row_partials for config in hopper.FP8_CONFIGS.values())
    assert hopper.default_config(64, True, 4096) == hopper.CONFIGS[64, True]._replace(persistent=True)
    assert hopper.default_config(64, True, 1536) == hopper.SHORT_CAUSAL[64][1]


def test_causal_trim_is_on_where_a_consumer_can_pass_its_last_key_tile():
    """Round 20's causal_trim: on in the one 16-bit causal default with three consumers (192-row tiles over 128-key
    tiles, where the first consumer's rows end a key tile before the program's last row's in every program but a last
    one cut by the row's end, and the second's in every other one); off in the two-consumer causal configs, whose
    128-row tiles end where a key tile ends, and in the configs without a mask, which it would not change."""
    trimmed = [key for key, config in hopper.CONFIGS.items() if config.causal_trim]
    assert trimmed == [(64, True)] and hopper.CONFIGS[64, True].consumers == 3
    assert not hopper.SHORT_CAUSAL[64][1].causal_trim
    assert not any(config.causal_trim for config in hopper.FP8_CONFIGS.values())

    def trimmed_steps(config, seq):
        """Per consumer, the programs in which it skips a key tile, and the share of all consumer-steps (one consumer
        on one key tile) skipped, at Nq = Nkv = seq: the kernel's n_own against its n_tiles (_consumer_partition,
        _tile)."""
        skips, skipped, steps = [0] * config.consumers, 0, 0
        for off_m in range(0, seq, config.block_m):
            n_tiles = -(-min(seq, off_m + config.block_m) // config.block_n)
            for wg in range(config.consumers):
                n_own = -(-min(seq, off_m + (wg + 1) * hopper.SPLIT_M) // config.block_n)
                skips[wg] += n_own < n_tiles
                skipped, steps = skipped + n_tiles - n_own, steps + n_tiles
        return skips, skipped / steps

    # At N 8192 (43 programs; the last is cut by the row's end, which leaves it nothing to skip): the first consumer
    # skips a tile in each of the other 42, the second in the even-numbered ones among them (whose tile starts where a
    # key tile does), the third in none
    programs = -(-8192 // hopper.CONFIGS[64, True].block_m)
    assert trimmed_steps(hopper.CONFIGS[64, True], 8192)[0] == [programs - 1, len(range(0, programs - 1, 2)), 0]
    for two in (hopper.SHORT_CAUSAL[64][1], hopper.CONFIGS[128, True]):  # nothing to trim at any length
        assert two.consumers == 2 and all(trimmed_steps(two, seq)[1] == 0 for seq in (1000, 2048, 3000, 16384))
    shares = [f"{trimmed_steps(hopper.CONFIGS[64, True], seq)[1]:.1%}" for seq in (4096, 8192, 16384, 2048)]
    notes = " ".join((ROOT / "docs" / "perf-notes.md").read_text().split())
    assert (f"{shares[0]}, {shares[1]} and {shares[2]} of the consumer-steps at N 4096, 8192 and 16384 are such tiles, "
            f"and {shares[3]} at N 2048") in notes


def test_forward_clock_buffers_are_checked_before_a_launch():
    """The forward's clock buffer: cdiv(16, 192) query tiles x 1 batch x 2 heads at head_dim 64 (three consumers and
    the loader), CLOCK_EVENTS; cdiv(16, 128) x 2 at head_dim 128 (two consumers)."""
    for head_dim, shape in ((64, (2, 4, 6)), (128, (2, 3, 6))):
        q = torch.zeros(1, 2, 16, head_dim, dtype=torch.bfloat16)
        wrong = torch.zeros(shape[0], shape[1], 5, dtype=torch.int64)
        with pytest.raises(ValueError, match=re.escape(f"these inputs need a contiguous torch.int64 one of {shape}")):
            hopper.hopper_forward(q, q, q, False, head_dim ** -0.5, clock=wrong)


def test_clock_summary_splits_each_sm_s_time_into_its_parts(monkeypatch):
    """scripts/perf_experiments/gluon_bwd_clock.py's summary of a clock buffer, on two SMs of two key blocks each
    (cycles at 2 per ns): every part is the sum of its spans over blocks, and the parts add up to the SMs' time;
    parts_text prints them, and run_marked says how many marks a kernel left unwritten."""
    from script_module import script_module

    probe = script_module("scripts/perf_experiments/gluon_bwd_clock.py")
    clock = torch.zeros(4, 3, bwd_hopper.CLOCK_EVENTS, dtype=torch.int64)
    # block: (SM, start cycle); both consumers: K/V wait 100, steps 1000 (10 tiles), epilogue 50; the second consumer
    # starts 10 cycles later. The loader's marks: let to bring the block's K/V at start + 1200 (for this count: the
    # successor's lag is what is checked), the global timer at half that count (2 cycles a ns), 10 tiles, the SM.
    for block, (sm, start) in enumerate([(0, 200), (0, 1400), (1, 300), (1, 1600)]):
        for wg, late in ((0, 0), (1, 10)):
            t0 = start + late
            clock[block, wg, :4] = torch.tensor([t0, t0 + 100, t0 + 1100, t0 + 1150])
        clock[block, 2, :5] = torch.tensor([start + 1200, start + 900, 10, (start + 1200) // 2, sm])
    summary = probe.summarize(clock, kernel_ns=1500.0, sms=2)
    assert summary["clock_ghz"] == pytest.approx(2.0, rel=1e-3)
    total = 2 * 1500.0 * summary["clock_ghz"]
    assert summary["cycles_per_block"] == pytest.approx({"kv_wait": 100, "steps": 1000, "epilogue": 50,
                                                         "between": (1400 - 1360 + 1600 - 1460) / 2,
                                                         "span": 1160})
    assert summary["cycles_per_step"] == pytest.approx(100.0)
    assert (summary["blocks"], summary["sms_used"], summary["tiles_per_block"]) == (4, 2, 10)
    # four blocks' spans of 1160 cycles, the gaps 40 and 140 between each SM's two, and the SMs' time left over
    assert summary["share"] == pytest.approx({"kv_wait": 4 * 100 / total, "steps": 4 * 1000 / total,
                                              "epilogue": 4 * 50 / total, "skew": 4 * 10 / total,
                                              "between": 180 / total, "edges": (total - 4 * 1160 - 180) / total})
    # the loader's mark of a block's successor on its SM, after this block's later consumer's last step
    assert summary["sm_span_max"] == 1600 + 1160 - 300  # SM 1: its second block ends 1160 cycles after 1600
    assert summary["loader_lag"] == pytest.approx((1400 + 1200 - 200 - 1110 + 1600 + 1200 - 300 - 1110) / 2)
    share, per = probe.parts_text(summary)
    assert per.startswith("kv_wait 100 steps 1000 epilogue 50 between 90 span 1160")
    assert share.startswith(f"kv_wait {100 * 400 / total:.1f}% steps {100 * 4000 / total:.1f}%")
    # run_marked: the two timings and the kernel's time, or the count of marks left unwritten (consumers, loader)
    monkeypatch.setattr(probe.triton.testing, "do_bench", lambda fn, **kw: 1.5 if fn() == "marked" else 1.0)
    monkeypatch.setattr(probe, "kernel_ns", lambda fn, kernel: 1500.0)
    monkeypatch.setattr(probe, "clean_l2_flush", contextlib.nullcontext)  # no GPU driver here to flush through
    assert probe.run_marked(lambda: "plain", lambda: "marked", clock, "k") == {"ms_plain": 1.0, "ms_marked": 1.5,
                                                                               "kernel_ns": 1500.0}
    # clock_row, which both probes' clock parts call: the shape, the two timings and the summary, in one row

    def call(clock=None):
        return "plain" if clock is None else "marked"

    base = {"D": 64, "N": 2048, "causal": False, "config": "default"}
    row = probe.clock_row(call, clock, "k", base, sms=2)
    assert row == {**base, "ms_plain": 1.0, "ms_marked": 1.5, **summary}
    clock[1, 0, 2] = clock[3, 2, 4] = clock[3, 2, 0] = -1
    assert probe.run_marked(lambda: "plain", lambda: "marked", clock, "k") == [1, 2]
    assert probe.clock_row(call, clock, "k", base, sms=2) is None  # and says which marks are missing


def test_forward_probe_builds_its_variants_from_the_default():
    """scripts/perf_experiments/gluon_fwd_clock.py: each ``name,D,field=value`` variant is the shape's default config
    with those fields changed (as the config's own types), at its head_dim only; the default is always there."""
    from script_module import script_module

    probe = script_module("scripts/perf_experiments/gluon_fwd_clock.py")
    variants = probe.parse_variants("ov,64,overlap=1,pingpong=1;st3,128,stages=3,o_tma=0")
    at64 = probe.configs(variants, 64, True, 2048)
    assert list(at64) == ["default", "ov"] and at64["default"] == hopper.default_config(64, True, 2048)
    assert at64["ov"] == at64["default"]._replace(overlap=True, pingpong=True) and at64["ov"].overlap is True
    at128 = probe.configs(variants, 128, False, 8192)
    assert list(at128) == ["default", "st3"]
    assert at128["st3"] == hopper.default_config(128, False, 8192)._replace(stages=3, o_tma=False)
    with pytest.raises(SystemExit, match="names 'ov' twice"):
        probe.parse_variants("ov,64,overlap=1;ov,128,overlap=0")


def test_default_backward_config_takes_tma_dkv_stores_where_a_key_block_walks_few_query_rows():
    """dkv_tma by default where Nq times the query heads of a K/V head is at most DKV_TMA_ROWS (4096): N 4096 with
    one query head per K/V head, N 1024 with four; not N 8192, nor Llama-3-8B's N 16384 with four."""
    assert bwd_hopper.DKV_TMA_ROWS == 4096
    for head_dim in (64, 128):
        for causal in (False, True):
            base = bwd_hopper.CONFIGS[head_dim, causal]
            assert not base.dkv_tma
            assert bwd_hopper.default_config(head_dim, causal, 4096, 1) == base._replace(dkv_tma=True)
            assert bwd_hopper.default_config(head_dim, causal, 1024, 4) == base._replace(dkv_tma=True)
            assert bwd_hopper.default_config(head_dim, causal, 1025, 4) == base
            assert bwd_hopper.default_config(head_dim, causal, 8192, 1) == base
            assert bwd_hopper.default_config(head_dim, causal, 16384, 4) == base


def test_split_tail_is_the_default_without_a_mask_at_head_dim_128_from_8192_keys(monkeypatch):
    """Round 25's default: split_tail without a mask at head_dim 128 where Nkv >= 8192 (round 24 started it at 4096,
    which `profiler bench` then timed slower in 4 of 4 runs); not at 4096 or 2048 keys, not causal, not at head_dim
    64, not in fp8, not with ATTN_SPLIT_TAIL=0; with =1, at every length and head_dim without a mask. A short query
    against a long cache takes it by its keys, and a launch with no partial wave is left whole by the plan."""
    assert hopper.SPLIT_TAIL_FROM == {128: 8192}
    assert hopper.default_config(128, False, 8192).split_tail and hopper.default_config(128, False, 16384).split_tail
    assert not any(hopper.default_config(128, False, n).split_tail for n in (2048, 4096))
    assert hopper.default_config(128, False, 1000, 8192).split_tail
    assert not any(hopper.default_config(d, c, n).split_tail for d, c in ((128, True), (64, False), (64, True))
                   for n in (2048, 8192))
    assert not any(config.split_tail for config in hopper.FP8_CONFIGS.values())
    monkeypatch.setenv("ATTN_SPLIT_TAIL", "0")  # the switch, to time the launch without it
    assert not hopper.default_config(128, False, 8192).split_tail
    monkeypatch.setenv("ATTN_SPLIT_TAIL", "1")  # and with it where it is not the default: no mask, any length
    assert all(hopper.default_config(d, False, n).split_tail for d in (64, 128) for n in (1, 2048, 4096))
    assert not any(hopper.default_config(d, True, n).split_tail for d in (64, 128) for n in (2048, 8192))
    assert tile_schedule.split_tail(4096, 132, 64) is not None and tile_schedule.split_tail(2 * 132, 132, 64) is None


def test_split_tail_plans_cut_the_last_wave_and_under_a_cuda_graph_capture_only_with_a_table_made_before(
        monkeypatch):
    """The launch plan of the grid's head_dim 128 shape at N 8192 (4,096 tiles on 132 SMs) takes split_tail's cut, with
    the tail tiles' (batch, head, first row) in the tile order. While the stream is being captured into a CUDA graph,
    where the table's copy to the device cannot run, the plan cuts only with the table a call before made (as a
    graph's warm-up calls do: profiler.measure.timing.graphed), and leaves every tile whole without one."""
    import types

    from kernels import tail_combine

    monkeypatch.setattr(hopper, "cuda_properties", lambda index: types.SimpleNamespace(
        multi_processor_count=132, L2_cache_size=50 * 2**20))
    monkeypatch.setattr(tail_combine, "_TAIL_TILES", {})
    q = torch.zeros(1, 1, 1, 1, dtype=torch.bfloat16).expand(4, 16, 8192, 128)  # the plan reads shapes only
    with monkeypatch.context() as capture:
        capture.setattr(torch.cuda, "is_available", lambda: True)
        capture.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
        plan = hopper._launch_plan(q, q, q, False, None, None, None)
        assert plan.tail is None and plan.ints[8:] == (4096, 4096, 1, 1) and not plan.constexprs["PDL"]
        assert plan.cut_dropped  # so hopper_forward keeps it under no key: later calls cut
        assert not tail_combine._TAIL_TILES  # nothing copied under the capture
    plan = hopper._launch_plan(q, q, q, False, None, None, None)
    assert plan.tail == tile_schedule.SplitTail(full=4092, tail=4, splits=32, chunk=2)
    assert plan.ints[8:] == (4092, 4220, 32, 2) and plan.constexprs["PDL"] and not plan.constexprs["CHUNKS"]
    assert plan.tail_tiles.tolist() == [[3, 15, 8192 - 128 * (4 - i)] for i in range(4)]  # the last head's last tiles
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    captured = hopper._launch_plan(q, q, q, False, None, None, None)
    assert captured.tail == plan.tail and captured.tail_tiles is plan.tail_tiles and captured.ints == plan.ints
    assert not plan.cut_dropped and not captured.cut_dropped
    assert hopper.tail_cut(q, q, False) == plan.tail  # what a row's path names (kernels.flash_fwd.forward_path)


def test_forward_path_names_the_split_tail_cut_and_the_model_charges_its_partials(monkeypatch):
    """A row's path says where the Gluon forward cut its last wave (4 tiles in 32 chunks at the grid's head_dim 128
    shape, N 8192, on 132 SMs; 36 in 3 at batch 3), and not where it did not (causal, 4096 keys, ATTN_SPLIT_TAIL=0);
    the cost model's tile bytes of such a row add what the kernel allocates for the chunks
    (kernels.tail_combine.partials), written and read back, and the 31 extra reads of each tail tile's Q."""
    import types

    from kernels import flash_fwd, tail_combine

    monkeypatch.setattr(hopper, "cuda_properties", lambda index: types.SimpleNamespace(
        multi_processor_count=132, L2_cache_size=50 * 2**20))
    monkeypatch.setattr(flash_fwd, "_not_gluon", lambda *args: None)  # routed as on an H100
    monkeypatch.setattr(flash_fwd, "_ROUTES", type(flash_fwd._ROUTES)())
    q = torch.zeros(1, 1, 1, 1, dtype=torch.bfloat16).expand(4, 16, 8192, 128)  # the path reads shapes only
    assert forward_path(q, q, q) == "gluon-ws split-tail 4x32"
    assert forward_path(q, q, q, causal=True) == "gluon-ws"
    assert forward_path(q[:3], q[:3], q[:3]) == "gluon-ws split-tail 36x3"  # 3,072 tiles: 36 cut in 3 of 22 key tiles
    short = torch.zeros(1, 1, 1, 1, dtype=torch.bfloat16).expand(8, 16, 4096, 128)
    assert forward_path(short, short, short) == "gluon-ws"  # 4096 keys: no cut (SPLIT_TAIL_FROM)
    monkeypatch.setenv("ATTN_SPLIT_TAIL", "0")
    assert forward_path(q, q, q) == "gluon-ws"

    shape = Shape.square(4, 16, 8192, 128, dtype="bf16")
    o_part, lse_part = tail_combine.partials(4, 128, 32, 128, "cpu")
    extra = 2 * (o_part.nbytes + lse_part.nbytes) + 31 * 4 * 128 * 128 * 2
    assert extra == 2 * 8_454_144 + 4_063_232  # 8.4 MB of partials each way, 4.1 MB of Q
    whole = cost_of(OURS, shape, path="gluon-ws")
    cut = cost_of(OURS, shape, path="gluon-ws split-tail 4x32")
    assert cut.tile_bytes - whole.tile_bytes == extra and cut.hbm_bytes == whole.hbm_bytes
    both = shape.with_mode("fwd+bwd")
    assert (cost_of(OURS, both, path="gluon-ws split-tail 4x32 fwd, gluon-ws bwd").tile_bytes
            - cost_of(OURS, both, path="gluon-ws fwd, gluon-ws bwd").tile_bytes) == extra
    backward = shape.with_mode("bwd")  # a backward row's path is its backward's: the forward's cut is never charged
    assert cost_of(OURS, backward, path="gluon-ws split-tail 4x32").tile_bytes == \
        cost_of(OURS, backward, path="gluon-ws").tile_bytes == onepass_backward_bytes(backward, OURS.tiles_of(
            backward, "gluon-ws").onepass)
    assert tile_schedule.SplitTail(4092, 4, 32, 2).label == "split-tail 4x32"


def test_tail_cut_reads_a_kept_plan_and_under_capture_cuts_only_with_a_table(monkeypatch):
    """kernels.flash_fwd_hopper.tail_cut, which a row's path reads: the plan a call kept for the layout where there is
    one (what later calls launch), else the cut computed as that plan would be; while a CUDA graph is being captured,
    as the plan there: no cut until a call outside the capture made the tail's table."""
    import types

    from kernels._launch import Memo

    monkeypatch.setattr(hopper, "cuda_properties", lambda index: types.SimpleNamespace(
        multi_processor_count=132, L2_cache_size=50 * 2**20))
    q = torch.zeros(1, 1, 1, 1, dtype=torch.bfloat16).expand(4, 16, 8192, 128)
    cut = tile_schedule.SplitTail(full=4092, tail=4, splits=32, chunk=2)
    assert hopper.tail_cut(q, q, False) == cut and hopper.tail_cut(q, q, True) is None
    layout = ("a layout key",)
    monkeypatch.setattr(hopper, "_PLANS", Memo())
    hopper._PLANS.keep((layout, False, None), hopper._launch_plan(q, q, q, False, None, None, None)._replace(tail=None))
    assert hopper.tail_cut(q, q, False, layout) is None  # what the kept plan launches
    assert hopper.tail_cut(q, q, False, ("another layout",)) == cut
    from kernels import tail_combine

    monkeypatch.setattr(tail_combine, "_TAIL_TILES", {})
    with monkeypatch.context() as capture:
        capture.setattr(torch.cuda, "is_available", lambda: True)
        capture.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
        assert hopper.tail_cut(q, q, False) is None
    hopper._launch_plan(q, q, q, False, None, None, None)  # a call outside the capture: the table is made
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert hopper.tail_cut(q, q, False) == cut


def test_planned_paths_are_what_the_kernels_name_on_such_a_gpu(monkeypatch):
    """kernels.flash_fwd.planned_forward_path, from a shape's numbers (``model --path auto``), is what forward_path
    names for contiguous BHSD tensors of that shape on an sm_90 GPU of 132 SMs (here faked: the device's SM count, and
    the Gluon kernel's conditions on head_dim and dtype, which a real sm_90 checks with the tensors' layout), over
    decode, short and long, causal and not, grouped and ragged shapes; on another GPU every path is the portable one.
    The backward's plan is the Gluon backward on sm_90 at its head_dims."""
    import types

    from kernels import flash_fwd
    from kernels.flash_bwd import planned_backward_path
    from kernels.flash_fwd import planned_forward_path

    monkeypatch.setattr(hopper, "cuda_properties", lambda index: types.SimpleNamespace(
        multi_processor_count=132, L2_cache_size=50 * 2**20))
    monkeypatch.setattr(flash_fwd, "_not_gluon", lambda q, k, v, causal: (
        None if q.shape[-1] in hopper.HEAD_DIMS and q.dtype in (torch.float16, torch.bfloat16) else "not sm_90's")
        or hopper.slower_reason(q, causal))
    monkeypatch.setattr(flash_fwd, "_ROUTES", type(flash_fwd._ROUTES)())
    monkeypatch.setattr(flash_fwd._launch, "ENABLED", False)  # every path computed, none read from a kept plan
    seen = set()
    for head_dim in (64, 128, 32):
        for causal in (False, True):
            for batch, heads, kv_heads, seq_q, seq_kv in [(4, 16, 16, 8192, 8192), (1, 5, 5, 8195, 8195),
                                                          (8, 16, 16, 4096, 4096), (16, 32, 32, 2048, 2048),
                                                          (1, 32, 8, 16384, 16384), (2, 8, 8, 1000, 1000),
                                                          (4, 8, 8, 1536, 1536), (1, 64, 8, 1, 32768),
                                                          (1, 32, 8, 4, 4096), (3, 16, 16, 8192, 8192)]:
                for dtype in ("fp16", "bf16"):
                    shape = Shape(batch, heads, seq_q, seq_kv, head_dim, dtype=dtype, causal=causal,
                                  kv_heads=kv_heads)
                    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
                    q = torch.zeros(1, 1, 1, 1, dtype=torch_dtype).expand(batch, heads, seq_q, head_dim)
                    k = torch.zeros(1, 1, 1, 1, dtype=torch_dtype).expand(batch, kv_heads, seq_kv, head_dim)
                    if causal and seq_q != seq_kv:
                        continue
                    named = forward_path(q, k, k, causal=causal)
                    assert planned_forward_path(shape, (9, 0), 132) == named, shape
                    assert planned_forward_path(shape, (8, 0), 108) == (named if named.startswith("split-kv")
                                                                         else "tiled")
                    seen.add(named.split(" ")[0] if not named.startswith("gluon-ws split") else "split-tail")
                    gluon = head_dim in bwd_hopper.HEAD_DIMS
                    assert planned_backward_path(shape, (9, 0)) == ("gluon-ws" if gluon else "tiled")
                    assert planned_backward_path(shape, (8, 9)) == "tiled"
    assert seen == {"gluon-ws", "split-tail", "split-kv", "tiled"}


class _Recorded:
    """Stands in for a LaunchCache: records each launch (key, grid, args, constexprs, options) instead of compiling."""

    def __init__(self, enabled: bool):
        self.enabled, self.launches = enabled, []

    def __call__(self, key, grid, args, constexprs, **options):
        self.launches.append((key, grid, args, constexprs, options))


def _bound(kernel, args: tuple, constexprs: dict) -> dict:
    """A recorded launch's arguments by the kernel's parameter names, after checking it names each parameter once:
    positionally, then as constexprs."""
    names = kernel.arg_names
    assert len(args) + len(constexprs) == len(names) and set(constexprs) == set(names[len(args):])
    return {**dict(zip(names, args)), **constexprs}


# An H100's (and an H200's) SMs and L2 as torch.cuda.get_device_properties gives them, for host code on the CPU
_FAKE_SM90 = type("Props", (), {"multi_processor_count": 132, "L2_cache_size": 50 * 2 ** 20})()


@pytest.mark.parametrize("cached", [True, False], ids=["launch-cache", "no-launch-cache"])
@pytest.mark.parametrize("shape, kv_heads, seq_kv, causal, dtype, cuts", [
    ((1, 2, 300, 128), 2, 520, False, torch.bfloat16, False),  # one short wave, Nq and Nkv not multiples of the tiles
    ((1, 2, 300, 64), 2, 300, True, torch.float16, False),
    ((1, 4, 1, 128), 2, 77, False, torch.bfloat16, False),  # Nq = 1, grouped
    ((1, 2, 320, 128), 2, 320, False, hopper.FP8, False),  # e4m3, with its descales and V keys-contiguous
    # 4 · 16 · 64 = 4096 tiles on 132 SMs, 31 whole waves and 4 tiles: the default cuts those 4 by keys (split_tail)
    ((4, 16, 8192, 128), 16, 8192, False, torch.bfloat16, True),
])
def test_the_forwards_host_side_binds_every_kernel_parameter_on_a_faked_h100(monkeypatch, shape, kv_heads, seq_kv,
                                                                              causal, dtype, cuts, cached):
    """hopper_forward up to its launches, on the CPU (an H100's 132 SMs and 50 MiB of L2 faked, the launches
    recorded): each launch names every parameter of the Gluon kernel once, positionally or as a constexpr, with the
    shape's heads, lengths, tiles and cut; a cut launches the whole tiles (programmatically dependent), the tail's
    chunks and the merge, as tail_cut says. Round 27's first GPU grid found this path raising in every call (an
    unpacking one field short), which no CPU test reached before."""
    monkeypatch.setattr(hopper, "cuda_properties", lambda index: _FAKE_SM90)
    monkeypatch.setattr(hopper, "_LAUNCHES", _Recorded(cached))
    monkeypatch.setattr(hopper, "_PLANS", hopper.Memo())
    merges = []
    monkeypatch.setattr(hopper.tail_combine, "combine", lambda *args: merges.append(args))
    batch, heads, seq, head_dim = shape
    q = torch.zeros(shape).to(dtype)
    k = torch.zeros(batch, kv_heads, seq_kv, head_dim).to(dtype)
    fp8 = dtype == hopper.FP8
    # fp8's V with its keys contiguous (kernels.flash_fwd_fp8.quantize_fp8's keys_contiguous)
    v = torch.zeros(batch, kv_heads, head_dim, seq_kv).to(dtype).transpose(2, 3) if fp8 else k
    descales = (torch.ones(batch, heads), torch.ones(batch, kv_heads), torch.ones(batch, kv_heads)) if fp8 else None
    config = hopper.FP8_CONFIGS[head_dim, causal] if fp8 else hopper.default_config(head_dim, causal, seq, seq_kv)
    m_blocks = -(-seq // config.block_m)
    total = batch * heads * m_blocks
    for _ in range(2):  # the second call: the kept plan where the launch cache is on
        hopper._LAUNCHES.launches.clear()
        merges.clear()
        o, lse = hopper.hopper_forward(q, k, v, causal, head_dim ** -0.5, descales=descales)
        assert (o.shape, lse.shape, lse.dtype) == (q.shape, q.shape[:3], torch.float32)
        assert o.dtype == (torch.bfloat16 if fp8 else dtype)
        tail = hopper.tail_cut(q, k, causal, hopper.layout_key(q, k, v) if cached else None)
        assert (tail is not None) == cuts and len(hopper._PLANS) == (1 if cached else 0)
        (key, grid, args, constexprs, options), *chunks = hopper._LAUNCHES.launches
        bound = _bound(hopper._attn_fwd_hopper, args, constexprs)
        assert (key is not None) == cached and options == {"num_warps": 4}
        assert grid == ((min(total, 132),) if config.persistent else (total,))
        assert (bound["heads"], bound["group"], bound["seq_q"], bound["seq_kv"]) == (heads, heads // kv_heads, seq,
                                                                                     seq_kv)
        assert (bound["m_blocks"], bound["total"], bound["HEAD_DIM"], bound["FP8"]) == (m_blocks, total, head_dim, fp8)
        assert bound["CAUSAL"] == causal and bound["LSE"] is lse and not bound["CHUNKS"] and bound["PDL"] == cuts
        if not cuts:
            assert (bound["full"], bound["items"], bound["splits"], bound["chunk"]) == (total, total, 1, 1)
            assert bound["O_PART"] is None and not chunks and not merges
            continue
        assert (bound["full"], bound["items"], bound["splits"], bound["chunk"]) == (
            tail.full, tail.items, tail.splits, tail.chunk) == (4092, 4092 + 4 * 32, 32, 2)
        assert bound["O_PART"].shape == (tail.tail * config.block_m * tail.splits, head_dim)
        ((_, chunk_grid, chunk_args, chunk_constexprs, chunk_options),) = chunks
        assert chunk_args is args and _bound(hopper._attn_fwd_hopper, chunk_args, chunk_constexprs)["CHUNKS"]
        assert chunk_grid == (tail.tail * tail.splits,) and chunk_options == {"num_warps": 4, "launch_pdl": True}
        (merge,) = merges
        assert merge[0] is o and merge[1] is lse and merge[2] is bound["O_PART"]
        assert merge[4].shape == (tail.tail, 3)  # the tail tiles' (batch, head, first row)


@pytest.mark.parametrize("cached", [True, False], ids=["launch-cache", "no-launch-cache"])
@pytest.mark.parametrize("shape, kv_heads, seq_kv, causal", [
    ((1, 2, 300, 128), 2, 520, False),  # Nq and Nkv not multiples of the tiles
    ((1, 4, 1, 64), 2, 1, True),  # N = 1, grouped
    ((2, 8, 1000, 64), 2, 1000, False),  # grouped, more key blocks than SMs
])
def test_the_backwards_host_side_binds_every_kernel_parameter_on_a_faked_h100(monkeypatch, shape, kv_heads, seq_kv,
                                                                               causal, cached):
    """hopper_backward up to its launches, on the CPU as the forward's test above: the logsumexp/delta pass, the
    Gluon backward and the dQ conversion each name every parameter once, with the shape's heads, lengths, key
    blocks and padded queries, and the gradients come back in their inputs' shapes."""
    monkeypatch.setattr(bwd_hopper, "cuda_properties", lambda index: _FAKE_SM90)
    recorders = {name: _Recorded(cached) for name in ("_BWD", "_DQ_CONVERT", "_STATS")}
    for name, recorder in recorders.items():
        monkeypatch.setattr(bwd_hopper, name, recorder)
    monkeypatch.setattr(bwd_hopper, "_SCHEDULES", bwd_hopper.Memo())
    batch, heads, seq, head_dim = shape
    q = torch.zeros(shape, dtype=torch.bfloat16)
    k = torch.zeros(batch, kv_heads, seq_kv, head_dim, dtype=torch.bfloat16)
    lse = torch.zeros(shape[:3])
    config = bwd_hopper.default_config(head_dim, causal, seq, heads // kv_heads)
    q_pad = -(-seq // config.block_m) * config.block_m
    n_blocks = -(-seq_kv // config.block_n)
    dq, dk, dv = bwd_hopper.hopper_backward(q, q, k, k, q, lse, causal, head_dim ** -0.5)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, k.shape)
    ((key, grid, args, constexprs, options),) = recorders["_BWD"].launches
    bound = _bound(bwd_hopper._attn_bwd_hopper, args, constexprs)
    programs = n_blocks * batch * kv_heads
    assert grid == ((min(programs, 132),) if config.persistent else (programs,)) and options == {"num_warps": 4}
    assert (key is not None) == cached and bound["HEAD_DIM"] == head_dim and bound["CAUSAL"] == causal
    assert (bound["heads"], bound["group"], bound["seq_q"], bound["seq_kv"], bound["q_pad"], bound["n_blocks"],
            bound["bh_kv"]) == (heads, heads // kv_heads, seq, seq_kv, q_pad, n_blocks, batch * kv_heads)
    ((_, grid, args, constexprs, _),) = recorders["_DQ_CONVERT"].launches
    bound = _bound(bwd_hopper._dq_convert, args, constexprs)
    assert grid == (q_pad // config.block_m, batch * heads) and bound["DQ"] is dq
    assert (bound["heads"], bound["seq_q"], bound["q_pad"], bound["BLOCK"]) == (heads, seq, q_pad, config.block_m)
    ((_, grid, args, constexprs, _),) = recorders["_STATS"].launches
    bound = _bound(bwd_hopper._bwd_stats, args, constexprs)
    assert grid == (q_pad // config.block_m, batch * heads) and bound["LSE"] is lse
