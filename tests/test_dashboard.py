"""The dashboard (Streamlit AppTest) and its pure plot builders (the HTML report: tests/test_report.py)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from attention_core.shape import NAIVE_STEPS, Shape
from profiler.cli import main
from profiler.model import hardware
from profiler.store import load_capture
from profiler.views import plots, rooflines, style

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "dashboards" / "roofline.py")  # the checkout's launcher of PACKAGED_APP, as documented
PACKAGED_APP = str(ROOT / "profiler" / "views" / "dashboard_app.py")
REFERENCE = ROOT / "reports" / "reference-h200"
MIXED = ROOT / "tests" / "data" / "mixed-cpu-h100"  # ranks on a CPU and a (fake) H100: its README.md
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module", autouse=True)
def _reference_selected():
    """The app opens on the newest capture; these tests name the reference, as `--select` does."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", [APP, "--select", "reference-h200"])
        yield


def _app(reports: Path, monkeypatch, *args: str) -> AppTest:
    """The app as `streamlit run dashboards/roofline.py -- --reports REPORTS ARGS` runs it (AppTest runs the
    script in this process: it reads this process's argv at every run)."""
    monkeypatch.setattr(sys, "argv", [APP, "--reports", str(reports), *args])
    return AppTest.from_file(APP, default_timeout=120).run()


def _small_capture(folder: Path, source: str = "gqa-prefill-h100", **meta) -> Path:
    """A copy of a shipped capture's meta.json and results (no traces), with ``meta`` fields replaced."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "reports" / source / "results.parquet", folder)
    fields = {**json.loads((ROOT / "reports" / source / "meta.json").read_text()), **meta}
    (folder / "meta.json").write_text(json.dumps({k: v for k, v in fields.items() if v is not None}))
    return folder


def _spec(chart) -> dict:
    return json.loads(chart.proto.spec)


def _point_traces(spec: dict) -> dict[str, int]:
    """Measured-point traces of a roofline figure: name -> number of points (counted by their
    hover texts: plotly sends numeric arrays base64-encoded)."""
    return {t["name"]: len(t["hovertext"]) for t in spec["data"] if t.get("hovertext")}


def _values(array) -> list[float]:
    """A plotly array as the chart's JSON holds it: a list, or numpy's base64 form (plotly sends arrays so)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def _select(at: AppTest, label: str, values) -> AppTest:
    return next(m for m in at.multiselect if m.label == label).set_value(values).run()


def _chart(at: AppTest, title_part: str) -> dict:
    """The first plotly chart whose title contains ``title_part``."""
    for chart in at.get("plotly_chart"):
        spec = _spec(chart)
        if title_part in str(spec["layout"].get("title", {}).get("text", "")):
            return spec
    raise AssertionError(f"no chart titled like {title_part!r}")


# -------------------------------------------------------------------------------------- the app


@pytest.fixture(scope="module")
def reference_app():
    return AppTest.from_file(APP, default_timeout=120).run()


def test_app_opens_on_the_reference_with_a_roofline(reference_app):
    at = reference_app
    assert not at.exception
    assert [t.label for t in at.tabs] == ["Roofline", "Scaling", "Bandwidth", "Step breakdown", "Compare", "Trace",
                                          "What-if", "Validation", "Observed"]
    roofline = _spec(at.get("plotly_chart")[0])
    assert roofline["layout"]["xaxis"]["type"] == "log" and roofline["layout"]["yaxis"]["type"] == "log"
    assert "B4 H32 D64 fp16 full fwd" in roofline["layout"]["title"]["text"]  # the title names the family
    points = _point_traces(roofline)
    # Defaults: fp16, head_dim 64, non-causal, forward: every implementation at 6 lengths; the SDPA
    # math backend ran out of memory at N=16384, so it has 5.
    assert points["triton_flash"] == 6 and points["naive: softmax"] == 5 and points["sdpa_math"] == 5
    assert {"naive: qk_matmul", "naive: scale_mask", "naive: pv_matmul", "sdpa_cudnn"} <= set(points)
    assert "roof: H200 datasheet" in {t["name"] for t in roofline["data"]}


def test_bound_at_a_glance(reference_app):
    at = reference_app
    spec = _spec(at.get("plotly_chart")[0])
    texts = {a["text"]: a for a in spec["layout"]["annotations"]}
    assert "<b>MEMORY-BOUND</b>" in texts and "<b>COMPUTE-BOUND</b>" in texts  # named inside the plot
    # Each ridge label sits at its own ridge marker (log10 coordinates on log axes).
    ridges = {t["name"].removeprefix("ridge: "): t for t in spec["data"] if t["name"].startswith("ridge: ")}
    for label, trace in ridges.items():
        note = next(a for text, a in texts.items() if text.endswith(f"({label})"))
        assert note["x"] == pytest.approx(np.log10(trace["x"][0]))
        assert note["y"] == pytest.approx(np.log10(trace["y"][0]))
    measured = next(a for text, a in texts.items() if text.startswith("ridge ") and text.endswith(" (measured)"))
    assert texts["ridge 206 FLOP/B (H200 datasheet)"]["xanchor"] != measured["xanchor"]
    # Markers: filled when compute-bound, open when memory-bound.
    by_name = {t["name"]: t for t in spec["data"]}
    assert set(by_name["triton_flash"]["marker"]["symbol"]) == {"circle"}
    assert set(by_name["naive: softmax"]["marker"]["symbol"]) == {"diamond-open"}
    # The exp ceiling of D64 forward: the capture's measured fp16 matmul with the H200's 16 exp2 per
    # clock per SM: 256 / (256 / matmul + 1 / 3.865e12) (402 TFLOP/s at a 677 TFLOP/s matmul), below
    # the datasheet's 989.5 / 2.
    exp = by_name["exp ceiling D64 fwd (no overlap)"]
    matmul = json.loads((REFERENCE / "meta.json").read_text())["measured_ceilings"]["matmul_tflops"]["fp16"]
    assert exp["y"][0] == pytest.approx(256 / (256 / (matmul * 1e12) + 1 / (16 * 132 * 1.83e9)) / 1e12, rel=1e-3)
    # The table lists every plotted point, naive steps included, with bound and % of roof.
    table = at.dataframe[0].value
    assert len(table) == sum(_point_traces(spec).values())
    assert not (set(_point_traces(spec)) - {*table.impl, *("naive: " + table.step)})
    assert {"qk_matmul", "softmax", "total"} <= set(table.step)
    softmax = table[(table.step == "softmax") & (table.seq_q == 4096)].iloc[0]
    assert softmax["bound"] == "memory" and 0 < softmax["% of roof"] <= 100
    flash = table[(table.impl == "triton_flash") & (table.seq_q == 8192)].iloc[0]
    assert flash["binding ceiling"] == "exp (SFU), no overlap" and flash["% of binding ceiling"] > 60


def test_filters_change_what_is_shown():
    at = AppTest.from_file(APP, default_timeout=120).run()
    _select(at, "Implementation", ["triton_flash", "sdpa_cudnn"])
    points = _point_traces(_spec(at.get("plotly_chart")[0]))
    assert set(points) == {"triton_flash", "sdpa_cudnn"}
    _select(at, "dtype", ["fp16", "bf16"])
    spec = _spec(at.get("plotly_chart")[0])
    assert _point_traces(spec)["triton_flash"] == 12 and "{bf16,fp16}" in spec["layout"]["title"]["text"]
    _select(at, "Bound", ["memory"])  # these fused kernels are all compute-bound here
    assert any("No rows match the filters" in w.value for w in at.warning)
    _select(at, "Bound", ["memory", "compute"])
    next(r for r in at.radio if r.label == "Bytes for intensity").set_value("tile").run()
    spec = _spec(at.get("plotly_chart")[0])
    assert "L2 tile" in spec["layout"]["xaxis"]["title"]["text"]
    assert not at.exception


def test_the_sidebar_draws_the_filters_the_charts_follow_after_the_captures_were_cleared(monkeypatch):
    """Pick head_dim 128, clear the capture selection (the run stops before the filters), pick the capture again: the
    filters a browser draws anew (each widget's proto default; a browser mounts a new widget from it) are the values
    the charts follow, and they are the user's, not the opening defaults. Before, the browser drew head_dim 64 while
    the charts kept 128."""
    at = _app(ROOT / "reports", monkeypatch, "--select", "fa4-peers-h100-fwd")
    _select(at, "head_dim", [128])
    next(r for r in at.radio if r.label == "Bytes for intensity").set_value("tile").run()
    rows = at.caption[0].value.split(" of ")[0]
    _select(at, "Captures", [])
    assert any("Pick at least one capture" in i.value for i in at.info)
    _select(at, "Captures", ["fa4-peers-h100-fwd"])
    head_dim = next(m for m in at.sidebar.multiselect if m.label == "head_dim")
    assert head_dim.value == [128] and [head_dim.options[i] for i in head_dim.proto.default] == ["128"]
    for widget in at.sidebar.multiselect:  # every filter: what the browser draws is what the charts follow
        assert [widget.options[i] for i in widget.proto.default] == [str(v) for v in widget.value], widget.label
    radio = next(r for r in at.radio if r.label == "Bytes for intensity")
    assert radio.value == "tile" and radio.proto.default == 1
    assert at.caption[0].value.split(" of ")[0] == rows and not at.exception


def test_multi_shape_selections_are_never_merged():
    at = AppTest.from_file(APP, default_timeout=120).run()
    _select(at, "head_dim", [64, 128])
    scaling = _chart(at, "Time")
    names = {t["name"] for t in scaling["data"]}
    assert {"triton_flash · B4 H32 D64 fp16 full fwd", "triton_flash · B4 H32 D128 fp16 full fwd"} <= names
    steps = _chart(at, "Naive attention: time per step")
    bars = [t for t in steps["data"] if t["name"] == "softmax (CUDA events)"][0]
    assert isinstance(bars["x"][0], list)  # one bar group per shape: (family, N) categories
    assert {"B4 H32 D64 fp16 full fwd", "B4 H32 D128 fp16 full fwd"} <= set(bars["x"][0])
    assert not at.exception


def test_step_breakdown_shows_oom_and_says_why_when_empty(reference_app):
    steps = _chart(reference_app, "Naive attention: time per step")
    oom = next(t for t in steps["data"] if t["name"] == "out of memory")
    assert oom["x"] == ["N=16384"] and oom["text"] == ["steps OOM<br>(total ran)"]  # the whole forward ran
    at = AppTest.from_file(APP, default_timeout=120).run()
    _select(at, "Implementation", ["triton_flash"])
    empty = _chart(at, "Naive attention: time per step")
    assert "select the implementation 'naive'" in empty["layout"]["annotations"][0]["text"]
    trips = next(d.value for d in at.dataframe if "N×N reads" in d.value)
    assert trips["HBM bytes (model)"].iloc[0].endswith("GB")


def test_decode_and_prefill_on_one_roofline_with_the_bandwidth_view():
    """The shipped H100 decode capture beside a GQA prefill capture: decode lands left of the
    ridge (memory-bound), prefill right of it; the Bandwidth tab draws GB/s against Nkv under the
    measured copy line; the preset picker selects Llama-3-8B's heads."""
    at = AppTest.from_file(APP, default_timeout=120).run()
    _select(at, "Captures", ["decode-capture-h100", "gqa-prefill-h100"])
    next(s for s in at.selectbox if s.label == "Model preset").set_value("llama3-8b").run()
    assert not at.exception
    assert [m.label for m in at.multiselect if m.label in ("Heads", "K/V heads")] == []  # the preset fixed them
    roofline = _chart(at, "Roofline")
    ridge = float(next(a["text"] for a in roofline["layout"]["annotations"] if "ridge" in a["text"])
                  .split("ridge ")[1].split(" ")[0])
    meta, frame = load_capture(ROOT / "reports" / "decode-capture-h100")
    decode = frame[(frame.step == "total") & (frame.status == "ok")]
    assert (decode.arithmetic_intensity < ridge).all() and set(decode.bound) == {"memory"}
    _, prefill = load_capture(ROOT / "reports" / "gqa-prefill-h100")
    assert (prefill[(prefill.kv_heads == 8) & (prefill["mode"] == "fwd")].arithmetic_intensity > ridge).all()
    bandwidth = _chart(at, "Decode: achieved bandwidth")
    ours = [t for t in bandwidth["data"] if t.get("name", "").startswith("triton_flash")]
    assert len(ours) == 2  # Nq = 1 and Nq = 4
    copy = meta["measured_ceilings"]["copy_gbps"]
    assert any(f"{copy:,.0f} GB/s" in a["text"] for a in bandwidth["layout"]["annotations"])
    table = next(d.value for d in at.dataframe if "of measured copy" in d.value.columns)
    best = table[table.impl == "triton_flash"].sort_values("seq_kv")
    assert best["of measured copy"].iloc[-1] == pytest.approx(best.gbps.iloc[-1] / copy * 100)
    assert set(best.path) == {"split-kv x8"}


def test_compare_and_validation_follow_the_sidebar():
    at = AppTest.from_file(APP, default_timeout=120).run()
    _select(at, "Captures", ["validate-h200", "reference-h200"])
    compare_a = next(s for s in at.selectbox if s.label == "A")
    assert compare_a.value == "validate-h200"  # Compare defaults to the selected capture
    caption = next(c.value for c in at.caption if "profiled rows under the sidebar's filters" in c.value)
    # validate-h200 at the sidebar's defaults (fp16, D64, non-causal; every step and implementation).
    assert caption.startswith("14 of 112 profiled rows")
    _select(at, "Implementation", ["triton_flash"])
    caption = next(c.value for c in at.caption if "profiled rows under the sidebar's filters" in c.value)
    assert caption.startswith("2 of 112")
    assert not at.exception


def test_a_capture_added_by_path_is_selected_and_works_everywhere(tmp_path, monkeypatch):
    at = _app(tmp_path, monkeypatch)  # an empty reports folder
    at.text_input[0].set_value(str(ROOT / "reports" / "validate-h200")).run()
    assert not at.exception
    assert next(m for m in at.multiselect if m.label == "Captures").value == ["validate-h200"]
    assert any("profiled rows under the sidebar's filters" in c.value for c in at.caption)  # Validation tab
    assert _chart(at, "Hierarchical roofline")


def test_every_tab_on_a_cpu_fp32_capture(tmp_path, monkeypatch):
    out = tmp_path / "reports" / "cpu"
    assert main(["capture", "--device", "cpu", "--seq", "32", "--heads", "1", "--batch", "1", "--dim", "16",
                 "--impl", "naive,sdpa_math", "--out", str(out), "--rep-ms", "5"]) == 0
    at = _app(out.parent, monkeypatch)
    assert not at.exception
    assert _point_traces(_spec(at.get("plotly_chart")[0]))  # judged against the measured CPU roofs
    # What-if opens on a GPU that has an fp32 peak and says which ones it leaves out.
    assert next(box for box in at.selectbox if box.label == "Project onto").value == "H200"
    assert _chart(at, "Projection onto H200")
    assert any("Not offered, without a peak for fp32 in the datasheet table: B200." in c.value for c in at.caption)
    assert _chart(at, "Naive attention: time per step")


def test_ten_thousand_rows_render_the_default_page_in_under_two_seconds(tmp_path, monkeypatch):
    meta, frame = load_capture(REFERENCE)
    many = pd.concat([frame.assign(batch=frame.batch + k) for k in range(10)], ignore_index=True).head(10_000)
    many = many.assign(batch=4)  # one family: every row lands on the default page
    folder = tmp_path / "big"
    folder.mkdir()
    many.to_parquet(folder / "results.parquet", index=False)
    (folder / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(sys, "argv", [APP, "--reports", str(tmp_path)])
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()  # the first run loads the capture into Streamlit's cache
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    assert not at.exception
    spec = _spec(at.get("plotly_chart")[0])
    drawn = sum(_point_traces(spec).values())
    assert drawn <= 400 and "showing" in spec["layout"]["title"]["text"]
    assert elapsed < 2.0, f"default page took {elapsed:.2f} s"


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


# ------------------------------------------------------------ issue 23: what you captured is what you see


def test_opens_on_the_newest_capture_by_meta_time_else_folder_mtime(tmp_path, monkeypatch):
    _small_capture(tmp_path / "a-old", time="2026-01-01T00:00:00+0000")
    _small_capture(tmp_path / "b-new", time="2026-06-01T00:00:00+0000")
    _small_capture(tmp_path / "c-older", time="2025-01-01T00:00:00+0000")
    at = _app(tmp_path, monkeypatch)  # nothing named
    assert not at.exception and not at.error
    assert next(m for m in at.multiselect if m.label == "Captures").value == ["b-new"]
    # A capture whose meta.json has no time is dated by its folder.
    untimed = _small_capture(tmp_path / "d-untimed", time=None)
    os.utime(untimed, (time.time(), time.time()))
    at = _app(tmp_path, monkeypatch)
    assert next(m for m in at.multiselect if m.label == "Captures").value == ["d-untimed"]


def test_the_packaged_app_installed_from_a_wheel_opens_reports_under_the_current_directory(tmp_path, monkeypatch):
    """profiler/views/dashboard_app.py where a wheel puts it (site-packages, no checkout around it), run
    with no --reports and no $ATTN_REPORTS: it opens the captures in ./reports, where `capture` writes."""
    installed = tmp_path / "site-packages" / "profiler" / "views" / "dashboard_app.py"
    installed.parent.mkdir(parents=True)
    shutil.copy(PACKAGED_APP, installed)
    work = tmp_path / "work"
    _small_capture(work / "reports" / "mine")
    monkeypatch.chdir(work)
    monkeypatch.delenv("ATTN_REPORTS", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the app puts its own root first; undone after the test
    monkeypatch.setattr(sys, "argv", [str(installed)])
    at = AppTest.from_file(str(installed), default_timeout=120).run()
    assert not at.exception and not at.error
    assert next(m for m in at.multiselect if m.label == "Captures").value == ["mine"]
    assert "mine" in at.caption[0].value and at.get("plotly_chart")
    # In this checkout the same file opens the checkout's reports/ (the shipped captures), from any directory.
    monkeypatch.setattr(sys, "argv", [PACKAGED_APP])
    at = AppTest.from_file(PACKAGED_APP, default_timeout=120).run()
    assert "reference-h200" in next(m for m in at.multiselect if m.label == "Captures").options


def test_select_names_the_captures_to_open(monkeypatch):
    at = _app(ROOT / "reports", monkeypatch, "--select", "decode-h100,gqa-prefill-h100")
    assert not at.exception and not at.error
    assert next(m for m in at.multiselect if m.label == "Captures").value == ["decode-h100", "gqa-prefill-h100"]


def test_a_capture_folder_as_reports_scans_its_parent_and_selects_it(monkeypatch):
    at = _app(ROOT / "reports" / "decode-h100", monkeypatch)
    assert not at.exception and not at.error
    captures = next(m for m in at.multiselect if m.label == "Captures")
    assert captures.value == ["decode-h100"]
    assert {"reference-h200", "decode-capture-h100"} <= set(captures.options)  # its siblings are there to pick


def test_a_capture_folder_elsewhere_opens_alone(tmp_path, monkeypatch):
    """Issue 41 defect 4: `capture --out /tmp/cap1` then `--reports /tmp/cap1` scanned all of /tmp. Outside
    the default folder a capture opens alone; the folders around it are not read."""
    _small_capture(tmp_path / "mine", time="2026-01-01T00:00:00+0000")
    _small_capture(tmp_path / "theirs", time="2027-01-01T00:00:00+0000")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "meta.json").write_text("{")  # scanned, it would be a warning
    at = _app(tmp_path / "mine", monkeypatch)
    assert not at.exception and not at.error and not at.warning
    captures = next(m for m in at.multiselect if m.label == "Captures")
    assert captures.value == ["mine"] and captures.options == ["mine"]


def test_a_missing_capture_gets_one_error_naming_it_and_the_others(tmp_path, monkeypatch):
    _small_capture(tmp_path / "mine", time="2026-01-01T00:00:00+0000")
    _small_capture(tmp_path / "theirs", time="2025-01-01T00:00:00+0000")
    at = _app(tmp_path, monkeypatch, "--select", "my-capture")
    assert not at.exception
    assert len(at.error) == 1
    error = at.error[0].value
    assert "`my-capture`" in error and "mine, theirs" in error and "the newest, mine" in error
    assert next(m for m in at.multiselect if m.label == "Captures").value == ["mine"]


def test_numeric_filter_chips_are_sorted_by_value(reference_app):
    chips = {m.label: m.options for m in reference_app.multiselect}
    assert chips["Query length"] == ["512", "1024", "2048", "4096", "8192", "16384"]  # not 1024, 16384, 2048
    assert chips["head_dim"] == ["64", "128"]


def test_roofline_table_leads_with_the_binding_ceiling_and_drops_the_filters(reference_app):
    table = reference_app.dataframe[0].value
    assert list(table.columns[:11]) == ["impl", "path", "step", "shape", "time (ms)", "TFLOP/s", "FLOP/B", "bound",
                                        "% of roof", "binding ceiling", "% of binding ceiling"]
    # One family: only the sequence length varies, so the label is N=..., and the one-valued columns are gone.
    assert not {"capture", "dtype", "head_dim", "heads", "kv_heads", "batch", "causal", "mode"} & set(table.columns)
    assert list(table.columns[11:]) == ["seq_q", "seq_kv"]  # what varies, as numbers, at the end
    flash = table[table.impl == "triton_flash"]
    assert list(flash["shape"]) == ["N=512", "N=1024", "N=2048", "N=4096", "N=8192", "N=16384"]
    assert table.step.iloc[0] == "total" and table.step.iloc[-1] != "total"  # whole kernels, then naive steps


def test_wrong_rows_are_listed_with_their_error_and_never_drawn(tmp_path, monkeypatch):
    """A row whose output failed the correctness check keeps its time for the record but is on no chart."""
    meta, frame = load_capture(REFERENCE)
    wrong = ((frame.impl == "triton_flash") & (frame.seq_q == 4096) & (frame.dtype == "fp16") & (frame.head_dim == 64)
             & ~frame.causal & (frame["mode"] == "fwd"))
    assert wrong.sum() == 1
    frame.loc[wrong, ["status", "max_rel_err", "message"]] = ["wrong", 686.0, "max_rel_err 686 > 0.02 (fp16)"]
    frame.loc[wrong, ["tflops", "gbps", "roof_fraction", "roof_fraction_measured"]] = np.nan
    frame.loc[wrong, "bound"] = ""
    folder = tmp_path / "with-wrong"
    folder.mkdir()
    frame.to_parquet(folder / "results.parquet", index=False)
    (folder / "meta.json").write_text(json.dumps(meta))
    at = _app(tmp_path, monkeypatch)
    assert not at.exception
    assert _point_traces(_spec(at.get("plotly_chart")[0]))["triton_flash"] == 5
    assert 4096 not in set(at.dataframe[0].value.query("impl == 'triton_flash'").seq_q)
    for title in ("Time", "Throughput"):
        line = next(t for t in _chart(at, title)["data"] if t["name"] == "triton_flash")
        assert 4096 not in line["x"]
    caption = next(c.value for c in at.caption if c.value.startswith("Not on the chart"))
    assert "1 wrong (failed the correctness check)" in caption and "1 oom" in caption
    listed = next(d.value for d in at.dataframe if "max_rel_err" in d.value.columns)
    row = listed[listed.status == "wrong"].iloc[0]
    assert row.impl == "triton_flash" and row["shape"] == "N=4096" and row.max_rel_err == 686.0


def test_a_cpu_capture_names_its_timer_and_memory(tmp_path, monkeypatch):
    # A CPU's capture has no datasheet entry (None drops the source's H200 one)
    _small_capture(tmp_path / "cpu", source="reference-h200", device="CPU x86_64 (2 threads)", device_type="cpu",
                   datasheet_device=None, datasheet=None)
    at = _app(tmp_path, monkeypatch)
    assert not at.exception
    texts = [e.value for kind in ("caption", "markdown", "info", "warning") for e in at.get(kind)]
    texts += [r.help or "" for r in at.radio]
    assert not [t for t in texts if "CUDA events" in t or "HBM" in t]
    assert any("timed by torch.utils.benchmark" in t for t in texts)
    assert any(t.startswith("**DRAM trips of the N×N matrix") for t in texts)
    # The charts and tables too, not only the captions: every figure spec and every table's columns.
    specs = [c.proto.spec for c in at.get("plotly_chart") if "Projection onto" not in c.proto.spec]  # a GPU's HBM
    assert specs and not [s for s in specs if "CUDA events" in s or "HBM" in s]
    assert any("torch.utils.benchmark" in s for s in specs) and any("DRAM" in s for s in specs)
    columns = [str(c) for d in at.dataframe for c in d.value.columns]
    assert "DRAM bytes (model)" in columns and not [c for c in columns if "HBM" in c]
    gpu = [e.value for e in _app(ROOT / "reports", monkeypatch, "--select", "reference-h200").caption]
    assert any("timed by CUDA events" in t for t in gpu)


def test_a_capture_of_two_devices_is_drawn_one_device_at_a_time_against_its_roofs(tmp_path, monkeypatch):
    """tests/data/mixed-cpu-h100: a Device filter, rank 0's CPU at first; the H100 chosen, its rows alone
    against the H100's datasheet roof (fp32 67 TFLOP/s, 3.35 TB/s: meta.json's devices), as they were judged."""
    shutil.copytree(MIXED, tmp_path / "mixed")
    at = _app(tmp_path, monkeypatch)
    assert not at.exception
    meta, frame = load_capture(MIXED)
    device = next(m for m in at.multiselect if m.label == "Device")
    assert device.options == [meta["device"], H100] and device.value == [meta["device"]]
    assert not [t for t in _chart(at, "Roofline")["data"] if "datasheet" in t["name"]]  # a CPU: measured roofs
    _select(at, "Device", [H100])
    assert not at.exception
    roofline = _chart(at, "Roofline")
    sheet = hardware.lookup(H100)
    roof = next(t for t in roofline["data"] if t["name"] == f"roof: {sheet.name} datasheet")
    assert max(_values(roof["y"])) == pytest.approx(67.0) == sheet.fp32_tflops
    assert f"ridge {67 / 3.35:.0f} FLOP/B ({sheet.name} datasheet)" in {a["text"] for a in
                                                                        roofline["layout"]["annotations"]}
    assert any(f"device {H100} ·" in c.value for c in at.caption)
    on_h100 = frame[(frame.device == H100) & (frame.status == "ok")]
    assert sum(_point_traces(roofline).values()) == len(on_h100) == 6
    table = at.dataframe[0].value.set_index(["impl", "step", "seq_q"])
    stored = on_h100.set_index(["impl", "step", "seq_q"]).roof_fraction * 100
    assert table.loc[stored.index, "% of roof"].to_numpy() == pytest.approx(stored.to_numpy())


def test_one_device_has_no_device_filter(reference_app):
    assert "Device" not in [m.label for m in reference_app.multiselect]
    assert any("device NVIDIA H200 ·" in c.value for c in reference_app.caption)


def test_compare_defaults_b_to_the_capture_sharing_the_most_rows(reference_app):
    at = reference_app
    b = next(s for s in at.selectbox if s.label == "B")
    # What each capture shares with the reference under the sidebar's defaults (fp16, D64, full, fwd).
    def keys(name):
        _, frame = load_capture(ROOT / "reports" / name)
        rows = frame[(frame.status == "ok") & (frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal
                     & (frame["mode"] == "fwd")]
        return set(rows[["impl", "step", "batch", "heads", "kv_heads", "seq_q", "seq_kv"]].itertuples(index=False))
    ours = keys("reference-h200")
    shared = {n: len(ours & keys(n)) for n in b.options}
    assert shared[b.value] == max(shared.values()) > 0
    assert any(c.value == f"{shared[b.value]} shared rows under the sidebar's filters." for c in at.caption)


def test_compare_says_why_nothing_is_shared(monkeypatch):
    at = _app(ROOT / "reports", monkeypatch, "--select", "gqa-prefill-h100")
    next(s for s in at.selectbox if s.label == "B").set_value("decode-h100").run()
    note = next(i.value for i in at.info if "share no implementation and shape" in i.value)
    # decode-h100 holds batch 1, 8, 64 and Nq 1, 4: none of the prefill's batch 2, Nq 4096/8192.
    assert "B (decode-h100) has no rows: no rows with batch 2 (it has 1, 8, 64)" in note
    assert "seq_q 4096/8192 (it has 1, 4)" in note
    assert "No capture here shares" in note


def test_bandwidth_names_the_decode_captures_when_the_selection_has_none(reference_app):
    note = next(i.value for i in reference_app.info if "No decode rows" in i.value)
    assert "decode-b1-h100, decode-b1-h200, decode-capture-h100, decode-h100" in note
    assert "Select one in the sidebar's Captures" in note
    assert "-- --reports reports --select decode-b1-h100" in note  # the first that has them
    assert not any("Decode: achieved bandwidth" in str(_spec(c)["layout"].get("title")) for c in
                   reference_app.get("plotly_chart"))  # no empty chart beside it


def test_bandwidth_says_when_the_filters_hide_the_decode_rows(monkeypatch):
    at = _app(ROOT / "reports", monkeypatch, "--select", "decode-h100,gqa-prefill-h100")
    assert _chart(at, "Decode: achieved bandwidth")
    _select(at, "Query length", [4096, 8192])  # the prefill rows only
    note = next(i.value for i in at.info if "the filters leave none" in i.value)
    assert "no rows with seq_q 4096/8192 (it has 1, 4)" in note


def test_charts_keep_their_own_colours(reference_app):
    charts = reference_app.get("plotly_chart")
    assert len(charts) >= 7 and all(c.proto.theme == "" for c in charts)  # theme=None: no Streamlit recolouring
    flash = next(t for t in _spec(charts[0])["data"] if t["name"] == "triton_flash")
    assert flash["marker"]["color"] == style.impl_color("triton_flash")


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
    measured = [t for t in fig.data if t.hovertext]
    ok = rows[rows.status == "ok"]
    assert len(measured) == ok.impl.nunique() + 4  # each implementation + naive's 4 steps
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_roofline_points_sit_at_model_intensity_and_measured_rate(reference):
    meta, frame = reference
    rows = frame[(frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal & (frame["mode"] == "fwd")]
    points = plots.roofline_points(rows, plots.roofs_from_meta(meta, "fp16"), "tile")
    ours = rows[(rows.impl == "triton_flash") & (rows.step == "total")].sort_values("seq_q")
    mine = points[(points.impl == "triton_flash") & (points.step == "total")].sort_values("seq_q")
    assert list(mine.x) == pytest.approx(list(ours.flops / ours.tile_bytes))
    fig = plots.roofline_figure(rows, plots.roofs_from_meta(meta, "fp16"), "tile")
    trace = next(t for t in fig.data if t.name == "triton_flash")
    assert list(trace.y) == pytest.approx(list(ours.tflops))
    # Fused kernels at one intensity are spread by a few percent along x, never more than JITTER³.
    ratios = np.array(trace.x) / (ours.flops / ours.tile_bytes).to_numpy()
    assert np.allclose(ratios, ratios[0]) and 1 / rooflines.JITTER**3 <= ratios[0] <= rooflines.JITTER**3
    assert all(f"N={n} " in h for n, h in zip(ours.seq_q, trace.hovertext))


def test_tile_bytes_are_judged_against_the_measured_l2_roof(reference):
    meta, frame = reference
    rows = frame[(frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal & (frame["mode"] == "fwd")]
    ceilings = {k: v for k, v in meta["measured_ceilings"].items() if not k.startswith("l2")}
    no_l2 = {**meta, "measured_ceilings": ceilings}
    assert plots.roofs_from_meta(no_l2, "fp16", "tile") == []  # no L2 measured: no roof, rather than HBM's
    with_l2 = {**meta, "measured_ceilings": {**meta["measured_ceilings"], "l2_copy_gbps": 10_000.0}}
    roofs = plots.roofs_from_meta(with_l2, "fp16", "tile")
    assert [r.memory for r in roofs] == ["L2", "L2"] and roofs[0].bandwidth == 10e12
    points = plots.roofline_points(rows, roofs, "tile")
    flash = points[(points.impl == "triton_flash")]
    # Against 10 TB/s of L2 the ridge is at 98.95 FLOP/B: judged there, not at HBM's 206.
    assert (flash.view_bound == np.where(flash.x < 98.95, "memory", "compute")).all()
    assert set(points.binds) <= {"L2 bandwidth", "compute peak"}


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
    assert list(model["model O(N), fused"].y) == pytest.approx(list(measured["triton_flash"].y))
    assert list(model["model O(N²), naive"].y) == pytest.approx(list(measured["naive"].y))


def test_step_breakdown_trips_compare_trace_whatif(reference):
    meta, frame = reference
    rows = frame[(frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal & (frame["mode"] == "fwd")]
    steps = plots.step_breakdown_figure(rows)
    assert [t.name for t in steps.data] == [f"{s} (CUDA events)" for s in NAIVE_STEPS] + ["out of memory"]
    shares = np.array([t.y for t in steps.data[:4]], dtype=float).sum(axis=0)
    assert shares == pytest.approx(np.ones(5))  # each N's four steps make 100%
    ms = plots.step_breakdown_figure(rows, "ms")
    softmax = rows[(rows.impl == "naive") & (rows.step == "softmax") & (rows.status == "ok")].sort_values("seq_q")
    assert list(ms.data[2].y) == pytest.approx(list(softmax.time_ms))
    trips = plots.hbm_trips_table(Shape.square(4, 32, 4096, 64))
    assert trips["N×N reads"].tolist() == [0, 1, 1, 1, 0] and trips["N×N writes"].tolist() == [1, 1, 1, 0, 0]
    assert trips["HBM bytes (model)"].tolist()[0] == "4.4 GB" and plots.human_bytes(1.5e6) == "1.5 MB"
    fig, joined = plots.compare_figure(frame, frame, "A", "B")
    assert (joined["speedup B/A"] == 1.0).all()
    kernels = pd.read_parquet(REFERENCE / "kernels.parquet")
    timeline = plots.trace_figure(kernels[kernels.impl == "naive"])
    assert {t.name for t in timeline.data} == {"qk_matmul", "scale_mask", "softmax", "pv_matmul"}
    whatif = plots.whatif_figure(rows, hardware.DEVICES["B200"], "fp16")
    flash = next(t for t in whatif.data if t.name == "triton_flash")
    assert max(flash.y) == pytest.approx(2250)  # compute-bound: on B200's datasheet compute roof


def test_large_inputs_are_sampled_and_say_so():
    base = load_capture(REFERENCE)[1]
    many = pd.concat([base] * 10, ignore_index=True).head(10_000)
    fig = plots.roofline_figure(many, [plots.Roof("x", 1e15, 4e12)])
    drawn = sum(len(t.hovertext) for t in fig.data if t.hovertext)
    assert 300 <= drawn <= rooflines.MAX_MARKERS
    assert f"of {len(plots.roofline_points(many, [plots.Roof('x', 1e15, 4e12)])):,} points" in fig.layout.title.text


def test_trace_tab_names_the_run_it_shows(reference_app):
    caption = next(c.value for c in reference_app.caption if "torch profiler" in c.value)
    kernels = pd.read_parquet(REFERENCE / "kernels.parquet")
    first = sorted(kernels.impl.unique())[0]
    shown = kernels[kernels.impl == first]
    assert caption == f"reference-h200: torch profiler, {len(shown):,} kernels · file traces/{shown.trace.iloc[0]}"
    assert _chart(reference_app, "Kernels per range")


def test_compare_says_when_a_and_b_ran_on_different_gpus(monkeypatch):
    at = _app(ROOT / "reports", monkeypatch, "--select", "bench-h100-gluon-bwd")
    b = next(s for s in at.selectbox if s.label == "B")
    devices = {n: json.loads((ROOT / "reports" / n / "meta.json").read_text())["device"] for n in b.options}
    # The default B shares rows with A and, where one that shares as many ran on A's H100, is from it.
    assert devices[b.value] == "NVIDIA H100 80GB HBM3"
    assert not any("compare the GPUs as well" in w.value for w in at.warning)
    other = next(n for n, d in devices.items() if d == "NVIDIA H200")
    b.set_value(other).run()
    warning = next(w.value for w in at.warning if "compare the GPUs as well" in w.value)
    assert warning.startswith("A ran on NVIDIA H100 80GB HBM3 and B on NVIDIA H200:")


def test_step_breakdown_names_the_captures_with_naive_steps(monkeypatch):
    """A bench capture has no naive steps: the tab says so and where they are, instead of an empty chart."""
    at = _app(ROOT / "reports", monkeypatch, "--select", "bench-h100-gluon-bwd")
    assert not at.exception
    note = next(i.value for i in at.info if "No naive steps in bench-h100-gluon-bwd" in i.value)
    _, frame = load_capture(ROOT / "reports" / "reference-h200")
    assert ((frame.impl == "naive") & (frame.step == "qk_matmul")).any()
    assert "reference-h200" in note.split("that have them: ")[1]
    assert "bench-h100-gluon-bwd" not in note.split("that have them: ")[1]
    assert not any("Naive attention: time per step" in str(_spec(c)["layout"].get("title"))
                   for c in at.get("plotly_chart"))


def test_compare_prefers_rows_shared_without_the_filters_to_a_same_gpu_capture(tmp_path, monkeypatch):
    """Where no capture shares a row under the filters, B is still the one that shares rows without
    them, though it ran on another GPU, not a same-GPU capture that shares nothing at all."""
    def capture(name, source, device, drop_impl=None):
        folder = tmp_path / name
        folder.mkdir()
        frame = pd.read_parquet(ROOT / "reports" / source / "results.parquet")
        frame[frame.impl.ne(drop_impl).fillna(True)].to_parquet(folder / "results.parquet")
        meta = {**json.loads((ROOT / "reports" / source / "meta.json").read_text()), "device": device}
        (folder / "meta.json").write_text(json.dumps(meta))

    capture("a", "gqa-prefill-h100", "NVIDIA H100 80GB HBM3")
    capture("b-same-gpu-unrelated", "decode-b1-h200", "NVIDIA H100 80GB HBM3")
    capture("c-other-gpu-same-shapes", "gqa-prefill-h100", "NVIDIA H200", drop_impl="triton_flash")
    at = _app(tmp_path, monkeypatch, "--select", "a")
    _select(at, "Implementation", ["triton_flash"])  # c has no triton_flash: nothing is shared under the filter
    assert next(s for s in at.selectbox if s.label == "B").value == "c-other-gpu-same-shapes"
    note = next(i.value for i in at.info if "share no implementation and shape" in i.value)
    assert "without them c-other-gpu-same-shapes shares" in note
    assert any(w.value.startswith("A ran on NVIDIA H100 80GB HBM3 and B on NVIDIA H200") for w in at.warning)


def test_a_capture_without_rows_gets_a_sentence_not_a_traceback(tmp_path, monkeypatch):
    folder = tmp_path / "empty"
    folder.mkdir()
    frame = pd.read_parquet(ROOT / "reports" / "gqa-prefill-h100" / "results.parquet")
    frame.iloc[:0].to_parquet(folder / "results.parquet")
    shutil.copy(ROOT / "reports" / "gqa-prefill-h100" / "meta.json", folder)
    at = _app(tmp_path, monkeypatch)
    assert not at.exception
    assert [i.value for i in at.info] == ["empty holds no rows yet: pick another capture."]


def test_scaling_says_when_no_naive_was_timed_instead_of_an_empty_speedup_chart(monkeypatch):
    """fa4-peers-h100 times ours, cuDNN and FA4, not naive: Scaling draws no empty speedup chart but says
    how to get one; its --tokens sweep is one line per implementation across its batches."""
    at = _app(ROOT / "reports", monkeypatch, "--select", "fa4-peers-h100")
    assert not at.exception
    assert any(i.value.startswith("No speedup over naive here") for i in at.info)
    titles = [str(_spec(c)["layout"].get("title", {}).get("text", "")) for c in at.get("plotly_chart")]
    assert "Throughput" in titles and "Speedup over naive PyTorch" not in titles
    throughput = _spec(next(c for c, t in zip(at.get("plotly_chart"), titles) if t == "Throughput"))
    lines = [t for t in throughput["data"] if t.get("mode") == "lines+markers"]
    assert {t["name"] for t in lines} == {"triton_flash", "sdpa_cudnn", "fa4"}
    assert all(_values(t["x"]) == [2048, 4096, 8192, 16384] for t in lines)
    # in its place, the capture's peers against its baseline (meta.json "baseline"), from the same times
    against = _spec(next(c for c, t in zip(at.get("plotly_chart"), titles) if t.startswith("Against triton_flash")))
    lines = {t["name"]: t for t in against["data"] if t.get("mode") == "lines+markers"}
    assert set(lines) == {"sdpa_cudnn", "fa4"}
    frame = pd.read_parquet(ROOT / "reports" / "fa4-peers-h100" / "results.parquet")
    times = frame[frame.step == "total"].astype({"dtype": str, "mode": str}).pivot_table(
        index=["dtype", "head_dim", "causal", "mode", "seq_kv"], columns="impl", values="time_ms")
    ratios = (times.fa4 / times.triton_flash).groupby(level=[0, 1, 2, 3]).apply(list)  # per family, by N
    assert _values(lines["fa4"]["x"]) == [2048, 4096, 8192, 16384]
    drawn = _values(lines["fa4"]["y"])
    assert any(drawn == pytest.approx(family, rel=1e-6) for family in ratios)  # the family the filters opened on


def test_scaling_keeps_the_speedup_chart_where_naive_was_timed(reference_app):
    titles = [str(_spec(c)["layout"].get("title", {}).get("text", "")) for c in reference_app.get("plotly_chart")]
    assert "Speedup over naive PyTorch" in titles
    assert not any(i.value.startswith("No speedup over naive here") for i in reference_app.info)


def test_two_captures_open_where_both_have_rows(monkeypatch):
    """An H100 forward capture (D64 and D128) beside a backward-only D128 one: the filters open on D128
    and both modes, so both captures' points are on the roofline (not the forward's D64 fwd alone)."""
    at = _app(ROOT / "reports", monkeypatch, "--select", "bench-h100-gluon,bench-h100-gluon-bwd-d128")
    assert not at.exception
    assert next(m for m in at.multiselect if m.label == "Captures").value == ["bench-h100-gluon",
                                                                             "bench-h100-gluon-bwd-d128"]
    assert next(m for m in at.multiselect if m.label == "head_dim").value == [128]
    assert next(m for m in at.multiselect if m.label == "Mode").value == ["bwd", "fwd"]
    table = at.dataframe[0].value  # the Roofline tab's points
    assert set(table["mode"]) == {"bwd", "fwd"}
    assert set(table["capture"]) == {"bench-h100-gluon", "bench-h100-gluon-bwd-d128"}
    # the capture has its column: the shape label names the shape alone (a new user saw it repeat the capture)
    assert not any("bench-h100" in label for label in table["shape"]) and "bwd B4 N=8192" in set(table["shape"])


def test_the_hbm_trips_table_names_a_shape_the_selection_measured(monkeypatch):
    """A --tokens sweep runs N16384 at batch 2 only: the trips table is the model at B2 N16384, not at the
    first row's batch (B16) forced to the longest N."""
    at = _app(ROOT / "reports", monkeypatch, "--select", "fa4-peers-h100")
    assert not at.exception
    texts = [m.value for m in at.markdown]
    trips = next(t for t in texts if t.startswith("**HBM trips of the N×N matrix"))
    assert trips.endswith("(model, B2 H32 D64 fp16 full fwd, N=16384)"), trips


def test_compare_names_the_column_that_keeps_two_captures_apart(tmp_path, monkeypatch):
    """A and B selected together, with the same implementations and lengths but different batches:
    Compare says the batch is what they do not share, not only which implementations and lengths each has."""
    meta, frame = load_capture(REFERENCE)
    for name, batch in (("a-b4", 4), ("b-b8", 8)):
        folder = tmp_path / name
        folder.mkdir()
        frame.assign(batch=batch).to_parquet(folder / "results.parquet")
        (folder / "meta.json").write_text(json.dumps({**meta, "time": f"2026-01-0{batch // 4}T00:00:00+0000"}))
    at = _app(tmp_path, monkeypatch, "--select", "a-b4,b-b8")  # both selected: the filters keep both batches
    assert next(s for s in at.selectbox if s.label == "B").value == "b-b8"
    note = next(i.value for i in at.info if "share no implementation and shape" in i.value)
    assert "under the filters no batch in both (A has 4; B has 8)" in note, note
    assert "N in both" not in note and "implementation in both" not in note


def test_the_scaling_tab_gives_a_bench_captures_whole_ranges(monkeypatch):
    """A bench capture without naive: under its baseline chart the Scaling tab says each peer's lowest and highest ratio
    over every shape of the capture, whatever the filters show (the default filters draw 12 of the H200 backward
    grid's 120 rows): the README's results row for reports/fa4-peers-h200-bwd, computed from the capture."""
    from profiler.views.formatting import baseline_ranges

    at = _app(ROOT / "reports", monkeypatch, "--select", "fa4-peers-h200-bwd")
    _, rows = load_capture(ROOT / "reports" / "fa4-peers-h200-bwd")
    totals = rows[rows.step == "total"].pivot_table(index=["dtype", "head_dim", "causal", "batch", "heads", "seq_q"],
                                                    columns="impl", values="time_ms")
    fa4 = totals.fa4 / totals.triton_flash
    captions = [c.value for c in at.caption if "every shape whatever the filters" in c.value]
    assert captions == [f"fa4-peers-h200-bwd, every shape whatever the filters: "
                        f"{baseline_ranges(rows, 'triton_flash')}"]
    assert f"fa4 {fa4.min():.3f}x to {fa4.max():.3f}x over 40 shapes" in captions[0] and not at.exception


def test_the_roofline_table_shows_whole_kernel_paths(monkeypatch):
    """The Roofline tab's table gives its `path` column a width that holds 'gluon-ws': sized from its first rows (the
    peers', which have no path) it showed 'gluon-w' in a new user's trial of the forward peers capture."""
    at = _app(ROOT / "reports", monkeypatch, "--select", "fa4-peers-h100-fwd")
    table = next(frame for frame in at.dataframe if "path" in frame.value.columns)
    assert set(table.value.path.dropna()) - {""} == {"gluon-ws"}
    assert json.loads(table.proto.columns)["path"]["width"] == "medium"


def test_the_roofline_table_shows_the_sm_clock_each_row_ran_at(monkeypatch):
    """The forward peers capture records NVML's SM clock per row (sm_clock_mhz): the Roofline tab's table shows it
    beside TFLOP/s, the capture's own values; a capture from before the column shows no such column."""
    at = _app(ROOT / "reports", monkeypatch, "--select", "fa4-peers-h100-fwd")
    table = next(frame for frame in at.dataframe if "SM clock (MHz)" in frame.value.columns).value
    _, rows = load_capture(ROOT / "reports" / "fa4-peers-h100-fwd")
    assert set(table["SM clock (MHz)"].dropna()) <= set(rows.sm_clock_mhz) and table["SM clock (MHz)"].notna().all()
    columns = list(table.columns)
    assert columns.index("SM clock (MHz)") == columns.index("TFLOP/s") + 1
    older = _app(ROOT / "reports", monkeypatch, "--select", "fa4-peers-h100-bwd")
    assert not any("SM clock (MHz)" in frame.value.columns for frame in older.dataframe)
    assert not any("rounds' spread (%)" in frame.value.columns for frame in at.dataframe)  # timed once a case


def test_the_roofline_table_shows_how_far_each_rows_rounds_spread(monkeypatch):
    """A grid timed with --rounds 3 (round 22's first forward grid, opened alone by its folder): the Roofline tab's
    table shows each row's round_spread as a percentage after the clock, the capture's own values."""
    folder = ROOT / "reports" / "perf-h100" / "gluon_fwd_round22" / "peers_r3_grid1"
    at = _app(folder, monkeypatch)
    frame = next(frame for frame in at.dataframe if "rounds' spread (%)" in frame.value.columns)
    table = frame.value
    _, rows = load_capture(folder)
    shown = table["rounds' spread (%)"]
    # drawn as the other percentages are, one decimal and a % sign (what a browser shows: 4.2%, not 4.1813)
    config = json.loads(frame.proto.columns)
    assert config["rounds' spread (%)"]["type_config"]["format"] == config["% of roof"]["type_config"]["format"]
    assert shown.notna().all() and set(shown.round(9)) <= set((rows.round_spread * 100).round(9))
    columns = list(table.columns)
    assert columns.index("rounds' spread (%)") == columns.index("SM clock (MHz)") + 1 and not at.exception
