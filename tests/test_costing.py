"""One cost model per implementation: every command gives the same FLOPs and bytes for every
implementation and step, from the registry entry's costing (profiler.model.cost.cost_of)."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from attention_core.costing import Costing, Tiles
from attention_core.shape import MODES, NAIVE_STEPS, Shape
from profiler.measure import ranges
from profiler.model import hardware
from profiler.model.cost import arithmetic_intensity, cost_of
from profiler.model.fused import tile_bytes
from profiler.model.roofs import Roofs
from profiler.model.rows import capture_row
from profiler.nsight import validate
from profiler.registry import BUILTIN, REGISTRY
from profiler.remodel import remodel
from profiler.store import to_frame
from profiler.views.tables import model_table

H200 = hardware.get_device("H200")
ROOFS = Roofs(H200, None)
SHAPES = [Shape(b, h, nq, nk, d, dt, c, m) for (b, h, nq, nk, d), dt, c, m in itertools.product(
    [(4, 32, 8192, 8192, 64), (1, 3, 100, 77, 128), (2, 2, 1, 300, 32)], ["fp16", "fp32"], [False, True], MODES)]


def _same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_capture_model_remodel_and_validate_agree_for_every_implementation_and_step(shape):
    if shape.dtype == "fp32":
        device = hardware.Device("fp32 roof", "", {}, 50.0, 3.0, None, None, None)
        roofs = Roofs(device, None)
    else:
        device, roofs = H200, ROOFS
    impls = [REGISTRY[n] for n in BUILTIN]
    from_model = {(r["impl"], r["step"]): r for r in model_table(shape, device, impls)}
    captured = []
    for impl in impls:
        if shape.mode != "fwd" and not impl.supports_backward:
            assert all(key[0] != impl.name for key in from_model)  # no backward: the model leaves it out
            continue
        for step in impl.row_steps:
            row = capture_row(impl.name, impl.costing, shape, step, roofs, timing=None, status="ok")
            model = from_model.pop((impl.name, step))
            for column in ("flops", "hbm_bytes", "tile_bytes", "arithmetic_intensity"):
                assert _same(row[column], model[column]), (impl.name, step, column)
            captured.append(row)
    assert not from_model  # the model lists nothing a capture would not record
    _, changed = remodel(to_frame(captured), roofs)
    assert not changed.any()


def test_validate_compares_counters_with_the_same_costs():
    shape = Shape.square(1, 16, 1024, 64, causal=True)
    kernels = pd.DataFrame([
        {"impl": impl, "step": step, "kernel": "k", "grid": "(8, 16, 1)", "dram_read_bytes": 1.0,
         "dram_write_bytes": 1.0, "l2_bytes": 1.0, "gpu_time_ns": 1.0, "tensor_ops_fp16": 0.0, "tensor_ops_bf16": 0.0}
        for impl, step in [("naive", s) for s in NAIVE_STEPS] + [("triton_flash", "total"), ("sdpa_cudnn", "total")]
    ])
    table = validate.validation_table(validate.with_shape(kernels, shape), l2_bytes=None)
    for r in table.itertuples():
        cost = cost_of(REGISTRY[r.impl].costing, shape, r.step)
        assert r.flops == cost.flops
        if r.impl == "naive":  # an unfused step's lines at the near slice, and again at the far one for half
            assert _same(r.model_l2_bytes, 1.5 * cost.tile_bytes)
        else:  # fused: profiler.model.l2's kernels; with no L2 size nothing is retained, so DRAM sees the
            # compulsory bytes of the cost model exactly (each input read once, each output written once)
            assert _same(r.model_dram_bytes, cost.hbm_bytes)


def test_triton_naive_rereads_k_and_v_once_per_query_row():
    # B4 H32 N8192 D64 fp16: 2 · 8192 rows · 8192 keys · 64 · 2 bytes per head = 17.2 GB, ×128 heads.
    s = Shape.square(4, 32, 8192, 64)
    row_bytes = 64 * 2
    per_head = 8192 * row_bytes + 8192 * 8192 * 2 * row_bytes + 8192 * row_bytes  # Q, K and V per row, O
    cost = cost_of(REGISTRY["triton_naive"].costing, s)
    assert cost.tile_bytes == 128 * per_head and cost.tile_bytes / 1e9 == pytest.approx(2199.3, abs=0.05)
    assert cost.hbm_bytes == 4 * 128 * 8192 * row_bytes  # Q, K, V, O once: this kernel writes no logsumexp
    causal = cost_of(REGISTRY["triton_naive"].costing, s.__class__.square(4, 32, 8192, 64, causal=True))
    assert causal.tile_bytes == 128 * (2 * 8192 * row_bytes + 8192 * 8193 // 2 * 2 * row_bytes)


def test_our_flash_kernels_are_costed_with_their_default_tiles():
    from kernels import flash_bwd, flash_fwd

    for head_dim, cls in ((64, "d64"), (128, "d128")):
        tiles = REGISTRY["triton_flash"].costing.tiles_for(head_dim, "fp16")
        assert tiles.fwd == flash_fwd.FWD_CANDIDATES[cls][0][:2]
        assert tiles.dkdv == flash_bwd.DKDV_CANDIDATES[cls][0][:2] and tiles.dq == flash_bwd.DQ_CANDIDATES[cls][0][:2]
    assert REGISTRY["triton_flash"].costing.tiles_for(256, "fp16").dkdv is None  # no backward at 256
    # D128 backward: dK/dV (64, 64) re-reads Q and dO per 64 keys, where (32, 128) would per 128.
    s = Shape.square(2, 16, 8192, 128, mode="bwd")
    old = tile_bytes(s, Tiles((128, 64), (32, 128), (128, 32)))
    assert cost_of(REGISTRY["triton_flash"].costing, s).tile_bytes / old == pytest.approx(1.49, abs=0.01)


def test_undeclared_tiles_give_no_tile_bytes_rather_than_a_guess():
    s = Shape.square(1, 2, 512, 64, mode="bwd")
    assert math.isnan(cost_of(REGISTRY["sdpa_cudnn"].costing, s).tile_bytes)
    assert math.isnan(cost_of(Costing("fused"), s.with_mode("fwd")).tile_bytes)
    assert math.isnan(arithmetic_intensity(1.0, math.nan))


def test_costing_survives_meta_json():
    from attention_core.implementations import _flash_tiles

    fixed = Costing("fused", Tiles((64, 32), (32, 64), (64, 32)), writes_lse=False, source="x")
    assert Costing.from_meta(fixed.as_meta()) == fixed
    by_shape = Costing.from_meta(Costing("fused", _flash_tiles).as_meta())
    assert by_shape.tiles_for(128, "bf16") == _flash_tiles(128, "bf16")
    assert by_shape.tiles_for(100, "fp16") is None  # outside the stored table: not known
    with pytest.raises(ValueError, match="costing kind 'tiled'"):
        Costing("tiled")


def test_shape_from_a_row_in_every_form():
    shape = Shape(2, 3, 5, 7, 16, "bf16", True, "bwd")
    record = capture_row("naive", REGISTRY["naive"].costing, shape, "softmax", ROOFS, timing=None, status="ok")
    frame = to_frame([record])
    assert Shape.from_row(record) == shape
    assert Shape.from_row(frame.iloc[0]) == shape
    assert Shape.from_row(next(frame.itertuples())) == shape
    assert Shape.from_row({k: v for k, v in record.items() if k != "mode"}).mode == "fwd"


GQA_DECODE = Shape(2, 32, 1, 32768, 128, "bf16", kv_heads=8)
RAGGED_BWD = Shape(1, 4, 3, 77, 64, mode="bwd")


@pytest.mark.parametrize("name,parsed", [
    # A capture's ranges before their names held the whole key (tests/data/nsys-h200-n2048): still read.
    (ranges.legacy_case_range("triton_flash", "fwd+bwd", 8192),
     ranges.RangeName("triton_flash", "total", "fwd+bwd", 8192)),
    (ranges.call_range(ranges.legacy_case_range("naive", "fwd", 1)),
     ranges.RangeName("naive", "total", "fwd", 1, call=True)),
    (ranges.step_range(ranges.legacy_case_range("naive", "bwd", 7), "softmax"),
     ranges.RangeName("naive", "softmax", "bwd", 7)),
    (ranges.call_range(ranges.step_range(ranges.legacy_case_range("naive", "fwd", 7), "qk_matmul")),
     ranges.RangeName("naive", "qk_matmul", "fwd", 7, call=True)),
    (ranges.legacy_shape_range("triton_flash", GQA_DECODE),
     ranges.RangeName("triton_flash", "total", "fwd", 1, 32768, 8)),
    ("attn:triton_flash/fwd/seq=1x32768,kvh=8/call", ranges.RangeName("triton_flash", "total", "fwd", 1, 32768, 8,
                                                                      call=True)),
    (ranges.qualified(ranges.validate_range("my_attn2", "total")),
     ranges.RangeName("my_attn2", "total", validate=True)),
    # Today's: the whole key.
    (ranges.shape_range("triton_flash", GQA_DECODE),
     ranges.RangeName("triton_flash", "total", "fwd", 1, 32768, 8, shape=GQA_DECODE)),
    (ranges.call_range(ranges.step_range(ranges.shape_range("naive", RAGGED_BWD), "softmax")),
     ranges.RangeName("naive", "softmax", "bwd", 3, 77, call=True, shape=RAGGED_BWD)),
    (ranges.shape_range("naive", Shape(1, 4, 5, 5, 64, kv_heads=4)),
     ranges.RangeName("naive", "total", "fwd", 5, shape=Shape(1, 4, 5, 5, 64))),
    ("attn:qk_matmul", None), ("other:thing", None), ("naive/train/seq=1", None),
    ("naive/train/B1H1N1D1-fp16", None), ("naive/fwd/B1H1N1D1-int8", None), ("naive/fwd/B0H1N1D1-fp16", None),
    ("naive/fwd/B1H4KV3N1D1-fp16", None), ("naive/fwd/B1H1N1D1-fp16/call/x", None),
    ("naive/fwd/B1H1N1D1-fp16-causal-x", None), ("naive/fwd/xB1H1N1D1-fp16", None),
])
def test_range_names_parse_back(name, parsed):
    assert ranges.parse_range(name) == parsed


ODD_SHAPES = [
    Shape(1, 32, 1, 32768, 128, "bf16", kv_heads=8),  # decode: Nq 1, GQA
    Shape(2, 3, 100, 77, 128, "fp32", True, "fwd+bwd"),  # Nq != Nkv, fp32, causal, fwd+bwd
    Shape(1, 8, 4, 4096, 64, "fp16", True, "bwd", kv_heads=1),  # MQA, speculative decode, backward
    Shape(16, 64, 8192, 8192, 256, "bf16", kv_heads=64),  # kv_heads = heads: multi-head, no KV part
    Shape(3, 6, 4096, 1, 32, "fp16", False, "fwd", kv_heads=2),  # Nkv 1
]


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: s.range_name("x"))
def test_range_name_round_trips_the_whole_key(shape):
    from attention_core.shape import ROW_KEY, parse_range_name

    name = shape.range_name("triton_flash")
    assert name == f"triton_flash/{shape.mode}/{shape.tag}"
    assert parse_range_name(name) == ("triton_flash", shape)
    # every ROW_KEY column but the step, through the profiler's reader too, below the case as well
    parsed = ranges.parse_range(ranges.qualified(ranges.call_range(ranges.step_range(name, "softmax"))))
    assert parsed.shape == shape and parsed.step == "softmax" and parsed.call
    assert dict(zip(ROW_KEY, parsed.shape.row_key(parsed.impl, parsed.step))) == dict(
        zip(ROW_KEY, shape.row_key("triton_flash", "softmax")))


def test_range_names_spell_the_key_readably_and_tell_every_key_apart():
    from attention_core.shape import parse_range_name

    assert ODD_SHAPES[0].range_name("sdpa_flash") == "sdpa_flash/fwd/B1H32KV8N1x32768D128-bf16"
    assert ODD_SHAPES[1].range_name("naive") == "naive/fwd+bwd/B2H3N100x77D128-fp32-causal"
    assert ODD_SHAPES[2].range_name("fa4") == "fa4/bwd/B1H8KV1N4x4096D64-fp16-causal"
    grid = [Shape(b, h, nq, nk, d, dt, c, m, kv_heads=kv) for b, h, kv, nq, nk, d, dt, c, m in itertools.product(
        [1, 12], [12, 4], [4, 1], [1, 12, 121], [12, 121], [64], ["fp16", "fp32"], [False, True], MODES)]
    names = {s.range_name("my_attn2"): s for s in grid}
    assert len(names) == len(set(grid)) == 2 * 2 * 2 * 3 * 2 * 2 * 2 * 3
    assert all(parse_range_name(n) == ("my_attn2", s) for n, s in names.items())
