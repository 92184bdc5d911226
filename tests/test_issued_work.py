"""The issued-work roofline: the tensor FLOPs each kernel really issues (profiler.model.counters.issued_flops)
against the same compulsory bytes, in the dashboard's Roofline tab and the report, beside the useful-work one."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attention_core.shape import Shape
from profiler.model.counters import issued_flops
from profiler.store import load_capture
from profiler.views import report, rooflines
from profiler.views.tables import roofline_table

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "dashboards" / "roofline.py")
DECODE = ROOT / "reports" / "decode-capture-h100"  # B1 H32/8 Nq=1 decode on an H100, with sdpa_flash and ours


def test_a_causal_kernel_issues_whole_tiles_on_the_diagonal():
    """The Gluon forward at D64 fp16, causal, runs a 128 × 128 tile up to N 2048 (kernels.flash_fwd_hopper.SHORT_CAUSAL)
    and 192 × 128 beyond; at N = 400 each query tile visits the key tiles up to its last row's key, whole, 2 matmuls of
    2·128·128·64 FLOPs each; the convention counts half the square."""
    from attention_core.implementations import registered_costing

    costing = registered_costing("triton_flash")
    n, d = 400, 64
    shape = Shape(batch=1, heads=1, seq_q=n, seq_kv=n, head_dim=d, dtype="fp16", causal=True)
    rows, keys = costing.tiles_for(d, "fp16", "gluon-ws", "fwd", causal=True, seq_q=n).fwd
    assert (rows, keys) == (128, 128)
    assert costing.tiles_for(d, "fp16", "gluon-ws", "fwd", causal=True, seq_q=2049).fwd == (192, 128)
    assert costing.tiles_for(d, "fp16", "gluon-ws", "fwd", causal=False, seq_q=n).fwd == (192, 128)
    visited = sum(math.ceil(min((i + 1) * rows, n) / keys) for i in range(math.ceil(n / rows)))
    assert visited == 1 + 2 + 3 + 4  # query tiles end at rows 127, 255, 383 and 399
    assert issued_flops("triton_flash", shape, "total", "gluon-ws") == visited * 2 * (2 * rows * keys * d)


def test_unfused_attention_issues_the_whole_score_matrix_under_a_causal_mask():
    shape = Shape(batch=2, heads=3, seq_q=100, seq_kv=100, head_dim=16, dtype="fp32", causal=True)
    assert issued_flops("naive", shape, "total") == 2 * (2 * 6 * 100 * 100 * 16)  # QKᵀ and PV, all of both
    assert issued_flops("naive", shape, "softmax") == 0.0  # no tensor work: left out of the view


def test_a_decode_step_pads_its_rows_to_a_tile_and_packs_where_the_kernel_does():
    """One query per head against 4096 keys, 32 heads on 8 K/V heads: PyTorch's FlashAttention-2 stacks a
    group's 4 query rows in a 128-row tile (32x the useful work); cuDNN's choice is not known without a trace."""
    shape = Shape(batch=1, heads=32, seq_q=1, seq_kv=4096, head_dim=128, dtype="bf16", kv_heads=8)
    useful = 4 * 32 * 1 * 4096 * 128
    fa2 = issued_flops("sdpa_flash", shape, "total")
    assert fa2 / useful == pytest.approx(32.0)  # FA2's 128 × 64 tile at D128, 4 rows of 128 used
    assert math.isnan(issued_flops("sdpa_cudnn", shape, "total"))


def test_the_view_moves_each_point_by_its_issued_factor():
    """A capture from before the issued_flops column: the model is asked now (compute, as the dashboard does)."""
    meta, rows = load_capture(DECODE)
    assert "issued_flops" not in rows or rows.issued_flops.isna().all()
    issued, note = rooflines.issued_work(rows, meta, compute=True)
    ok = rows[(rows.status == "ok") & rows.tflops.notna()]
    assert set(issued.impl) == {"naive", "sdpa_flash", "sdpa_math", "triton_flash"}
    assert note == "not drawn, issued work not modelled: sdpa_cudnn fwd, sdpa_repeat_kv fwd"
    assert not (issued.step.isin(["scale_mask", "softmax"])).any()  # no tensor work
    for r in issued.itertuples():
        before = ok.loc[r.Index]
        expected = issued_flops(r.impl, Shape.from_row(before), r.step, before.path or "")
        assert r.flops == expected and r.useful_flops == before.flops
        assert r.tflops == pytest.approx(before.tflops * expected / before.flops)
    flash = issued[issued.impl == "sdpa_flash"]
    assert (flash.issued_ratio == 32.0).all()
    points = rooflines.roofline_points(issued, rooflines.roofs_from_meta(meta, issued.dtype.iloc[0]))
    assert (points.x == issued.flops / issued.hbm_bytes).all()
    assert "issued ÷ useful FLOPs" in roofline_table(points)


def test_a_capture_row_stores_what_its_kernels_issue():
    from attention_core.implementations import registered_costing
    from profiler.model.roofs import Roofs
    from profiler.model.rows import Timing, capture_row

    shape = Shape(batch=1, heads=32, seq_q=1, seq_kv=4096, head_dim=128, dtype="bf16", kv_heads=8)
    row = capture_row("sdpa_flash", registered_costing("sdpa_flash"), shape, "total", Roofs(None, None),
                      timing=Timing(0.02, 0.02, 0.02), status="ok")
    assert row["issued_flops"] == issued_flops("sdpa_flash", shape, "total") == 32 * row["flops"]


def _with_stored_issued_work(tmp_path):
    """decode-capture-h100 as a capture made now would store it: its rows with their issued_flops."""
    import shutil

    from profiler.store import Capture, to_frame

    folder = tmp_path / "decode"
    shutil.copytree(DECODE, folder, ignore=shutil.ignore_patterns("traces"))
    meta, rows = load_capture(folder)
    rows["issued_flops"] = [issued_flops(r.impl, Shape.from_row(r), r.step, r.path or "") for r in rows.itertuples()]
    Capture(folder).write_results(to_frame(rows.to_dict("records")))
    return load_capture(folder)


def test_the_report_draws_the_stored_issued_work_beside_the_useful_one(tmp_path):
    meta, rows = _with_stored_issued_work(tmp_path)
    family = rows[(rows.seq_q == 1)]
    figures = report.family_figures(meta, family)
    titles = [f.layout.title.text for _, _, f in figures]
    issued = [i for i, t in enumerate(titles) if t.startswith(rooflines.ISSUED_TITLE)]
    assert len(issued) == 1 and titles[issued[0] - 1].startswith("Roofline, tile bytes")
    caption = figures[issued[0]][1]
    assert "sdpa_cudnn fwd" in caption and "rises and moves right" in caption


def test_the_report_of_a_capture_without_stored_issued_work_has_no_issued_roofline():
    """The report loads no torch (tests/test_registry.py): it draws what rows store, and asks the model nothing."""
    meta, rows = load_capture(DECODE)
    titles = [f.layout.title.text for _, _, f in report.family_figures(meta, rows[rows.seq_q == 1])]
    assert not any(t.startswith(rooflines.ISSUED_TITLE) for t in titles)
    assert rooflines.issued_work(rows, meta)[1].startswith("no issued work stored in this capture")


def test_the_dashboard_switches_the_roofline_to_issued_work(monkeypatch):
    monkeypatch.setattr(sys, "argv", [APP, "--reports", str(DECODE.parent), "--select", DECODE.name])
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    next(r for r in at.radio if r.label == "FLOPs").set_value("issued").run()
    assert not at.exception
    import json

    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["title"]["text"].startswith(rooflines.ISSUED_TITLE)
    hovers = [h for t in spec["data"] if t.get("hovertext") for h in t["hovertext"]]
    assert any("issued tensor FLOPs: 32× the useful" in h for h in hovers)
    table = at.dataframe[0].value
    assert "issued ÷ useful FLOPs" in table.columns
    assert any("not drawn, issued work not modelled" in c.value for c in at.caption)


def test_a_training_decode_row_adds_its_backward_to_the_split_forward():
    """A fwd+bwd row whose forward ran split-KV ('split-kv x32 fwd, tiled bwd'): the split forward's tiles plus
    the backward's, not the forward alone."""
    from dataclasses import replace

    from attention_core import split_kv
    from attention_core.implementations import registered_costing
    from profiler.model.fused import executed_flops, split_kv_executed_flops

    shape = Shape(batch=1, heads=32, seq_q=1, seq_kv=8192, head_dim=128, dtype="fp16", kv_heads=8, mode="fwd+bwd")
    plan = split_kv.plan(1, 8, 4, 1, 8192)
    path = f"{plan.label} fwd, tiled bwd"
    backward = replace(shape, mode="bwd")
    tiles = registered_costing("triton_flash").tiles_for(128, "fp16", path, "bwd")
    expected = split_kv_executed_flops(shape, plan) + executed_flops(backward, tiles)
    assert issued_flops("triton_flash", shape, "total", path) == expected
    assert expected > 50 * split_kv_executed_flops(shape, plan)  # the backward's padded rows dominate
