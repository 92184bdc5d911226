"""The size-aware memory roof: a device copy's rate by size (profiler.model.roofs.CopyCurve), measured by
every capture (profiler.measure.ceilings.measure_copy_curve), judged against in each row
(roof_fraction_size) and drawn in the roofline and bandwidth views."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from attention_core.implementations import registered_costing
from attention_core.shape import Shape
from profiler.model import hardware
from profiler.model.roofs import Ceilings, CopyCurve, Roofs, size_roof
from profiler.model.rows import Timing, capture_row, rates
from profiler.views import plots, rooflines
from profiler.views.tables import decode_table, roofline_table

ROOT = Path(__file__).resolve().parents[1]
# A curve that follows Hockney's model exactly: r∞ 3 TB/s, n½ 12 MB (t = (n + n½) / r∞).
R_INF, N_HALF = 3.0e12, 12e6
SIZES = tuple(64 << 10 << k for k in range(17))


def hockney_curve() -> CopyCurve:
    return CopyCurve(SIZES, tuple((n + N_HALF) / R_INF for n in SIZES), timing="do_bench")


def test_the_curve_interpolates_hockneys_line_exactly_and_holds_its_ends():
    curve = hockney_curve()
    for n in (100e3, 3.3e6, 12e6, 700e6):  # between measured sizes: the model's time
        assert curve.time_for(n) == pytest.approx((n + N_HALF) / R_INF, rel=1e-12)
    assert curve.time_for(1000) == curve.seconds[0]  # below the smallest: its fixed cost holds
    big = 16 * SIZES[-1]
    assert curve.time_for(big) == pytest.approx(curve.seconds[-1] * 16)  # above the largest: its rate
    assert curve.bandwidth(N_HALF) == pytest.approx(R_INF / 2)  # n½ reaches half of r∞, by definition
    r_inf, n_half = curve.hockney()  # read off the curve: the largest copy's rate, and where half of it is reached
    assert r_inf == curve.bandwidth(SIZES[-1]) == pytest.approx(R_INF, rel=3e-3)
    assert curve.bandwidth(n_half) == pytest.approx(r_inf / 2, rel=1e-9) and n_half == pytest.approx(N_HALF, rel=6e-3)


def test_the_curve_survives_meta_json():
    curve = hockney_curve()
    back = CopyCurve.from_meta(json.loads(json.dumps(curve.as_meta())))
    assert back.nbytes == curve.nbytes and back.timing == "do_bench"
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(back.seconds, curve.seconds))
    assert CopyCurve.from_meta(None) is None and CopyCurve.from_meta({}) is None


def h200_roofs(curve: CopyCurve | None) -> Roofs:
    """The roofs of a capture on an H200 whose large copy (4 GiB moved) ran at the curve's largest rate."""
    large = hockney_curve().bandwidth(SIZES[-1]) / 1e9
    measured = Ceilings(device="NVIDIA H200", matmul_tflops={"bf16": 700.0}, copy_gbps=large, matmul_n=8192,
                        copy_bytes=2 << 30, torch_version="test", measured_at="now", copy_curve=curve)
    return Roofs(hardware.lookup("NVIDIA H200"), measured)


def test_a_rows_size_aware_fraction_is_the_copy_time_of_its_bytes_over_its_time():
    """On the memory side the roof at a step's size is its FLOPs over the time a copy of its bytes takes:
    the fraction reads as 'the copy's time over the kernel's'."""
    roofs = h200_roofs(hockney_curve())
    shape = Shape(batch=1, heads=32, seq_q=1, seq_kv=8192, head_dim=128, dtype="bf16", kv_heads=8)
    costing = registered_costing("triton_flash")
    row = capture_row("triton_flash", costing, shape, "total", roofs, timing=Timing(0.02, 0.019, 0.021), status="ok")
    copy_s = hockney_curve().time_for(row["hbm_bytes"])
    assert row["roof_fraction_size"] == pytest.approx(copy_s / 0.02e-3, rel=1e-12)
    # without a curve there is no size-aware fraction
    assert "roof_fraction_size" not in capture_row("triton_flash", costing, shape, "total", h200_roofs(None),
                                                   timing=Timing(0.02, 0.019, 0.021), status="ok")


def test_the_size_roof_is_the_compute_peak_right_of_the_ridge():
    curve = hockney_curve()
    assert size_roof(1e6, 1e9, 700e12, curve) == 700e12
    assert size_roof(10.0, 1e6, 700e12, curve) == pytest.approx(10.0 * curve.bandwidth(1e6))


def test_the_ceilings_cache_never_keeps_a_curve(tmp_path, monkeypatch):
    """The curve belongs to the run that measured it: the per-device cache of the large ceilings drops it."""
    from dataclasses import replace

    from profiler.measure import ceilings as measure

    monkeypatch.setenv("ATTN_ROOFLINE_CACHE", str(tmp_path))
    entry = replace(h200_roofs(hockney_curve()).measured, device=measure.device_name("cpu"),
                    torch_version=measure.torch.__version__)
    measure._store(entry)
    stored = json.loads((tmp_path / "ceilings.json").read_text())
    assert [e["copy_curve"] for e in stored.values()] == [None]
    assert measure.load_cached("cpu") == replace(entry, copy_curve=None)


def test_a_cpu_run_measures_a_curve_at_every_size():
    from profiler.measure.ceilings import CURVE_BYTES, measure_copy_curve

    curve = measure_copy_curve("cpu")
    assert curve.nbytes == tuple(CURVE_BYTES["cpu"]) and curve.timing == "torch.utils.benchmark"
    assert all(t > 0 for t in curve.seconds) and curve.seconds[-1] > curve.seconds[0]


def decode_rows(curve: CopyCurve | None) -> pd.DataFrame:
    """Decode rows of two sizes, as a capture with ``curve`` stores them: a small step (B1, Nkv 1024) far
    below the large copy's rate, a large one (B8, Nkv 65536) near it."""
    roofs = h200_roofs(curve)
    costing = registered_costing("triton_flash")
    rows = []
    for batch, seq_kv, ms in ((1, 1024, 0.006), (8, 65536, 0.16)):
        shape = Shape(batch=batch, heads=32, seq_q=1, seq_kv=seq_kv, head_dim=128, dtype="bf16", kv_heads=8)
        rows.append(capture_row("triton_flash", costing, shape, "total", roofs, timing=Timing(ms, ms, ms),
                                status="ok"))
    from profiler.store import to_frame

    return to_frame(rows)


def test_the_roofline_draws_a_dash_at_the_small_steps_size_roof_only():
    rows = decode_rows(hockney_curve())
    meta = h200_roofs(hockney_curve()).as_meta() | {"device": "NVIDIA H200"}
    roofs = rooflines.roofs_from_meta(meta, "bf16")
    points = rooflines.roofline_points(rows, roofs)
    small, large = points.sort_values("hbm_bytes").itertuples()
    copy = hockney_curve()
    assert small.size_roof_tflops == pytest.approx(small.flops / copy.time_for(small.hbm_bytes) / 1e12)
    assert small.of_size_roof == pytest.approx(copy.time_for(small.hbm_bytes) / 0.006e-3)
    assert small.size_roof_tflops < 0.5 * small.roof_tflops  # a 4 MB step reaches well under half the roof
    fig = rooflines.roofline_figure(rows, roofs)
    dash = [t for t in fig.data if t.name == rooflines.SIZE_ROOF_NAME]
    assert len(dash) == 1 and list(dash[0].y) == pytest.approx([small.size_roof_tflops])  # not the large step
    table = roofline_table(points)
    assert sorted(table["% of roof at its size"]) == pytest.approx(sorted(points.of_size_roof * 100))
    assert "dash: the roof at the step's size" in fig.layout.title.text
    assert "stream at r∞ 2,992 GB/s and reach half of it at n½ 11.9 MB moved" in rooflines.size_roof_note(meta)


def test_without_a_curve_the_views_show_no_size_roof():
    rows = decode_rows(None)
    meta = h200_roofs(None).as_meta() | {"device": "NVIDIA H200"}
    points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, "bf16"))
    assert points.of_size_roof.isna().all()
    assert "% of roof at its size" not in roofline_table(points)
    assert rooflines.size_roof_note(meta) == ""
    assert not [t for t in plots.bandwidth_figure(rows, meta).data if t.name.startswith(plots.SIZE_COPY_NAME)]


def test_the_bandwidth_view_draws_what_a_copy_of_each_steps_bytes_reached():
    curve = hockney_curve()
    rows = decode_rows(curve).assign(capture="c")
    meta = h200_roofs(curve).as_meta() | {"device": "NVIDIA H200"}
    lines = [t for t in plots.bandwidth_figure(rows, meta).data if t.name.startswith(plots.SIZE_COPY_NAME)]
    expected = [curve.bandwidth(b) / 1e9 for b in rows.sort_values("seq_kv").hbm_bytes]
    assert sum(len(t.y) for t in lines) == 2
    assert sorted(y for t in lines for y in t.y) == pytest.approx(sorted(expected))
    table = decode_table(rows, 3000.0, {"c": curve})
    assert list(table["of a copy its size"]) == pytest.approx(
        [g / (curve.bandwidth(b) / 1e9) * 100 for g, b in zip(table.gbps, rows.loc[table.index].hbm_bytes)])


def test_the_shipped_h100_decode_capture_is_judged_against_its_own_curve():
    """reports/decode-sizeroof-h100 (an H100, `bench --cuda-graph`: B1 Llama-3-8B decode at Nkv 1024 to 131072,
    then B16 with --resume): every row's size-aware fraction is the curve of the run that measured it (the
    B16 run's in meta.json, the B1 run's in its earlier_runs), and the curve separates small steps from large
    ones: the 4 MB step has over 3x its single-figure share of the roof at its size, the 4 GB one the same."""
    from profiler.model.rows import rates
    from profiler.store import load_capture

    meta, rows = load_capture(ROOT / "reports" / "decode-sizeroof-h100")
    runs = {"b16": Roofs.from_meta(meta), "b1": Roofs.from_meta(meta | meta["earlier_runs"][0])}
    assert runs["b1"].measured.copy_curve.seconds != runs["b16"].measured.copy_curve.seconds  # measured twice
    curve = runs["b16"].measured.copy_curve
    assert curve.timing == "do_bench of CUDA-graph replays" and len(curve.nbytes) == 17
    for r in rows.itertuples():
        again = rates(r.flops, r.hbm_bytes, r.time_ms * 1e-3, r.dtype, runs["b1" if r.batch == 1 else "b16"])
        assert again["roof_fraction_size"] == pytest.approx(r.roof_fraction_size, rel=1e-12)
    smallest, largest = rows.hbm_bytes.min(), rows.hbm_bytes.max()
    small = rows[rows.hbm_bytes == smallest]
    assert (small.roof_fraction_size > 3 * small.roof_fraction_measured).all()
    large = rows[rows.hbm_bytes == largest]
    assert (abs(large.roof_fraction_size / large.roof_fraction_measured - 1) < 0.01).all()
    r_inf, n_half = curve.hockney()
    assert r_inf / 1e9 == pytest.approx(meta["measured_ceilings"]["copy_gbps"], rel=0.02)  # the large copy's rate
    assert smallest < n_half < largest


def test_an_observed_rows_size_roof_is_of_one_call_not_of_all():
    """observe's rows rate many calls at once (FLOPs and bytes summed over the timed calls): the size-aware roof
    is looked up at one call's bytes, so 500 small decode calls are not judged as one 2 GB step."""
    from profiler.observer.run import with_times

    roofs = h200_roofs(hockney_curve())
    row = decode_rows(hockney_curve()).iloc[0].to_dict()  # B1, Nkv 1024: 4.2 MB a call
    observed = with_times(row, [0.006] * 500, roofs)
    one_call = rates(row["flops"], row["hbm_bytes"], 0.006e-3, "bf16", roofs)
    assert observed["roof_fraction_size"] == pytest.approx(one_call["roof_fraction_size"], rel=1e-9)
    assert rates(0.0, row["hbm_bytes"], 1e-3, "bf16", roofs).get("roof_fraction_size", 0.0) == 0.0  # no 1/0
