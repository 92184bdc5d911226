"""The dashboard (Streamlit AppTest), its pure plot builders, and the HTML report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from profiler.cli import main
from profiler.model import cost_model as cm
from profiler.model import hardware
from profiler.store import load_capture
from profiler.views import plots

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "dashboards" / "roofline.py")
REFERENCE = ROOT / "reports" / "reference-h200"


def _app(reports: Path | None = None, monkeypatch=None) -> AppTest:
    if reports is not None:
        monkeypatch.setenv("ATTN_REPORTS", str(reports))
    return AppTest.from_file(APP, default_timeout=120).run()


def _spec(chart) -> dict:
    return json.loads(chart.proto.spec)


def _point_traces(spec: dict) -> dict[str, int]:
    """Measured-point traces of a roofline figure: name -> number of points (counted by their
    sequence-length labels: plotly sends numeric arrays base64-encoded)."""
    return {t["name"]: len(t["text"]) for t in spec["data"]
            if t.get("mode") == "markers+text" and "ridge" not in t["name"]}


# -------------------------------------------------------------------------------------- the app


@pytest.fixture(scope="module")
def reference_app():
    return AppTest.from_file(APP, default_timeout=120).run()


def test_app_opens_on_the_reference_with_a_roofline(reference_app):
    at = reference_app
    assert not at.exception
    assert [t.label for t in at.tabs] == ["Roofline", "Scaling", "Step breakdown", "Compare", "Trace", "What-if",
                                         "Validation"]
    roofline = _spec(at.get("plotly_chart")[0])
    assert roofline["layout"]["xaxis"]["type"] == "log" and roofline["layout"]["yaxis"]["type"] == "log"
    points = _point_traces(roofline)
    # Defaults: fp16, head_dim 64, non-causal, forward: every implementation at 6 lengths; the SDPA
    # math backend ran out of memory at N=16384, so it has 5.
    assert points["triton_flash"] == 6 and points["naive: softmax"] == 5 and points["sdpa_math"] == 5
    assert {"naive: qk_matmul", "naive: scale_mask", "naive: pv_matmul", "sdpa_cudnn"} <= set(points)
    assert "roof: H200 datasheet" in {t["name"] for t in roofline["data"]}


def test_filters_change_what_is_shown(reference_app):
    at = reference_app
    impl = next(m for m in at.multiselect if m.label == "Implementation")
    impl.set_value(["triton_flash", "sdpa_cudnn"]).run()
    points = _point_traces(_spec(at.get("plotly_chart")[0]))
    assert set(points) == {"triton_flash", "sdpa_cudnn"}
    dtype = next(m for m in at.multiselect if m.label == "dtype")
    dtype.set_value(["fp16", "bf16"]).run()
    assert _point_traces(_spec(at.get("plotly_chart")[0]))["triton_flash"] == 12
    at.radio[0].set_value("tile").run()
    assert "L2 tile" in _spec(at.get("plotly_chart")[0])["layout"]["xaxis"]["title"]["text"]
    assert not at.exception


def test_empty_reports_folder_says_how_to_make_a_capture(tmp_path, monkeypatch):
    at = _app(tmp_path, monkeypatch)
    assert not at.exception
    assert any("python -m profiler capture --seq 8192" in i.value for i in at.info)


def test_malformed_capture_is_skipped_with_a_warning(tmp_path, monkeypatch):
    shutil.copytree(REFERENCE, tmp_path / "good", ignore=shutil.ignore_patterns("traces"))
    broken = tmp_path / "broken-capture"
    broken.mkdir()
    (broken / "meta.json").write_text("{}")
    (broken / "results.parquet").write_text("not parquet")
    at = _app(tmp_path, monkeypatch)
    assert not at.exception
    assert any("skipped broken-capture" in w.value for w in at.warning)
    assert at.get("plotly_chart")  # the good capture still loads


def test_a_path_that_is_not_a_capture_is_refused(reference_app):
    at = reference_app
    at.text_input[0].set_value(str(ROOT / "README.md")).run()
    assert any("Not a capture" in e.value and "README.md" in e.value for e in at.error)


# ---------------------------------------------------------------------------------- plot builders


@pytest.fixture(scope="module")
def reference():
    return load_capture(REFERENCE)


def test_roofline_builder_roofs_and_ridge(reference):
    meta, frame = reference
    rows = frame[(frame.dtype == "fp16") & (frame.head_dim == 128) & frame.causal & (frame["mode"] == "fwd")]
    roofs = plots.roofs_from_meta(meta, "fp16")
    assert [r.label for r in roofs] == ["H200 datasheet", "measured"]
    assert roofs[0].ridge == pytest.approx(989.5e12 / 4.8e12)
    fig = plots.roofline_figure(rows, roofs)
    names = [t.name for t in fig.data]
    assert names[:2] == ["memory-bound", "compute-bound"]
    roof = next(t for t in fig.data if t.name == "roof: H200 datasheet")
    assert max(roof.y) == pytest.approx(989.5)  # flat compute roof
    assert roof.y[0] == pytest.approx(roof.x[0] * 4.8e12 / 1e12)  # memory roof: intensity × bandwidth
    ridge = next(t for t in fig.data if t.name == "ridge: H200 datasheet")
    assert ridge.x[0] == pytest.approx(206.1, abs=0.1)
    measured = [t for t in fig.data if t.mode == "markers+text" and "ridge" not in t.name]
    assert len(measured) == 11  # 7 implementations + 4 naive steps
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_roofline_points_sit_at_model_intensity_and_measured_rate(reference):
    meta, frame = reference
    rows = frame[(frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal & (frame["mode"] == "fwd")]
    fig = plots.roofline_figure(rows, plots.roofs_from_meta(meta, "fp16"), "tile")
    trace = next(t for t in fig.data if t.name == "triton_flash")
    ours = rows[(rows.impl == "triton_flash") & (rows.step == "total")].sort_values("seq_q")
    assert list(trace.y) == pytest.approx(list(ours.tflops))
    assert list(trace.x) == pytest.approx(list(ours.flops / ours.tile_bytes))
    assert list(trace.text) == [str(n) for n in ours.seq_q]


def test_scaling_builders_and_memory_model(reference):
    _, frame = reference
    rows = frame[(frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal & (frame["mode"] == "fwd")]
    figs = plots.scaling_figures(rows)
    assert set(figs) == {"time", "tflops", "memory", "speedup"}
    assert all(f.layout.xaxis.type == "log" and f.layout.yaxis.type == "log" for f in figs.values())
    naive_speedup = next(t for t in figs["speedup"].data if t.name == "naive")
    assert list(naive_speedup.y) == pytest.approx([1.0] * 6)
    model = {t.name: t for t in figs["memory"].data if t.name.startswith("model")}
    measured = {t.name: t for t in figs["memory"].data if not t.name.startswith("model")}
    # The model's O(N) and O(N²) lines match what the H200 measured for triton_flash and naive.
    assert list(model["model O(N): fused keeps O, lse"].y) == pytest.approx(list(measured["triton_flash"].y))
    assert list(model["model O(N²): naive keeps S and P"].y) == pytest.approx(list(measured["naive"].y))


def test_step_breakdown_trips_compare_trace_whatif(reference):
    meta, frame = reference
    rows = frame[(frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal & (frame["mode"] == "fwd")]
    steps = plots.step_breakdown_figure(rows)
    assert [t.name for t in steps.data] == [f"{s} (CUDA events)" for s in cm.NAIVE_STEPS]
    trips = plots.hbm_trips_table(cm.Shape.square(4, 32, 4096, 64))
    assert trips["N×N reads"].tolist() == [0, 1, 1, 1, 0] and trips["N×N writes"].tolist() == [1, 1, 1, 0, 0]
    fig, joined = plots.compare_figure(frame, frame, "A", "B")
    assert (joined["speedup B/A"] == 1.0).all()
    kernels = pd.read_parquet(REFERENCE / "kernels.parquet")
    timeline = plots.trace_figure(kernels[kernels.impl == "naive"])
    assert {t.name for t in timeline.data} == {"qk_matmul", "scale_mask", "softmax", "pv_matmul"}
    whatif = plots.whatif_figure(rows, hardware.DEVICES["B200"], "fp16")
    flash = next(t for t in whatif.data if t.name == "triton_flash")
    assert max(flash.y) == pytest.approx(2250)  # compute-bound: on B200's datasheet compute roof


def test_large_inputs_build_quickly_enough_to_render():
    # 10,000 rows: the builder must not do per-row work beyond the hover text (timed by hand, not here).
    base = load_capture(REFERENCE)[1]
    many = pd.concat([base] * 10, ignore_index=True).head(10_000)
    fig = plots.roofline_figure(many, [plots.Roof("x", 1e15, 4e12)])
    assert sum(len(t.x) for t in fig.data if t.mode == "markers+text" and "ridge" not in t.name) == (
        many[(many.status == "ok") & (many.hbm_bytes > 0)].shape[0])


def test_html_report_is_self_contained(tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(REFERENCE), "--out", str(out)]) == 0
    text = out.read_text()
    # plotly.js itself is inline (several MB), not fetched from a CDN: the file works offline.
    assert len(text) > 3_000_000 and "<script src=" not in text and "Plotly.newPlot" in text
    assert "Roofline, compulsory bytes (fp16)" in text and "HBM trips of the N×N matrix" in text
    assert text.count('class="plotly-graph-div"') == 8  # 2 rooflines, 4 scaling, steps, trace
    assert main(["report", str(tmp_path)]) == 2
