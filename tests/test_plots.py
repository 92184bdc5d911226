"""The plot builders (profiler.views.plots, rooflines, style) on the shipped captures: values of the
figure objects (trace names, annotation boxes, marker symbols, ticks, titles), no Streamlit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attention_core.shape import NAIVE_STEPS, ROW_KEY, Shape
from profiler.model import hardware
from profiler.model.memory import predicted_peak_bytes
from profiler.store import load_capture
from profiler.views import plots, rooflines, style

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reports" / "reference-h200"
DECODE = ROOT / "reports" / "decode-capture-h100"
VALIDATE = ROOT / "reports" / "validate-h200"


def _default_view(frame: pd.DataFrame) -> pd.DataFrame:
    """The dashboard's default family: fp16, head_dim 64, non-causal, forward."""
    return frame[(frame.dtype == "fp16") & (frame.head_dim == 64) & ~frame.causal & (frame["mode"] == "fwd")]


@pytest.fixture(scope="module")
def reference():
    return load_capture(REFERENCE)


@pytest.fixture(scope="module")
def decode():
    return load_capture(DECODE)


@pytest.fixture(scope="module")
def validation():
    return load_capture(VALIDATE)[0], pd.read_parquet(VALIDATE / "validation.parquet")


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory):
    """A CPU capture made the way a user makes one (no CPU capture is checked in)."""
    out = tmp_path_factory.mktemp("cpu") / "cpu"
    subprocess.run([sys.executable, "-m", "profiler", "capture", "--device", "cpu", "--seq", "64", "--batch", "1",
                    "--heads", "1", "--rep-ms", "5", "--impl", "naive,sdpa_math", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    return load_capture(out)


def _roofline(meta, rows, kind="compulsory"):
    return rooflines.roofline_figure(rows, rooflines.roofs_from_meta(meta, "fp16", kind), kind,
                                     exp2_per_s=rooflines.exp_rate(meta))


def _measured_points(fig) -> np.ndarray:
    """(log10 x, log10 y) of every measured point (the traces with hover texts per point)."""
    xy = [(x, y) for t in fig.data if t.hovertext is not None and t.mode and "markers" in t.mode
          for x, y in zip(t.x, t.y)]
    return np.log10(np.array(xy, dtype=float))


# ------------------------------------------------------------------------------ 1. ridge labels


@pytest.mark.parametrize("kind", ["compulsory", "tile"])
def test_ridge_labels_cover_no_point_and_no_roof(reference, kind):
    meta, frame = reference
    fig = _roofline(meta, _default_view(frame), kind)
    boxes = rooflines.ridge_label_boxes(fig)  # for a narrow 700 x 480 px plot: the widest boxes in decades
    roofs = rooflines.roofs_from_meta(meta, "fp16", kind)
    assert len(boxes) == len(roofs) == 2
    points = _measured_points(fig)
    assert len(points) == len(rooflines.roofline_points(_default_view(frame), roofs, kind))  # every point
    highest = np.log10(max(r.peak_flops for r in roofs) / 1e12)
    (x_lo, x_hi), y_hi = fig.layout.xaxis.range, fig.layout.yaxis.range[1]
    for text, (x0, x1, y0, y1) in boxes:
        inside = (points[:, 0] >= x0) & (points[:, 0] <= x1) & (points[:, 1] >= y0) & (points[:, 1] <= y1)
        assert not inside.any(), f"{text} covers {points[inside]}"
        assert y0 > highest  # above every roof, so it crosses no roof line
        assert x_lo <= x0 and x1 <= x_hi and y1 <= y_hi  # inside the plot
    (_, a), (_, b) = boxes
    assert a[1] <= b[0] or b[1] <= a[0] or a[3] <= b[2] or b[3] <= a[2]  # the two labels do not meet
    # Each label's arrow points at its own ridge marker (log10 coordinates on log axes).
    notes = {a.text: a for a in fig.layout.annotations if a.text.startswith("ridge ")}
    for roof in roofs:
        note = notes[f"ridge {roof.ridge:.0f} FLOP/B ({roof.label})"]
        assert note.showarrow and note.x == pytest.approx(np.log10(roof.ridge))
        assert note.y == pytest.approx(np.log10(roof.peak_flops / 1e12))


# ------------------------------------------------------------------------- 2. bandwidth labels


def test_bandwidth_roof_labels_sit_above_their_lines_past_the_data(decode):
    meta, frame = decode
    fig = plots.bandwidth_figure(frame, meta)
    labels = plots.bandwidth_roof_labels(fig)
    copy = meta["measured_ceilings"]["copy_gbps"]
    sheet = hardware.DEVICES["H100-SXM"].hbm_bytes_per_s / 1e9
    assert {round(label["line"]) for label in labels} == {round(copy), round(sheet)}
    assert {label["text"] for label in labels} == {f"measured copy {copy:,.0f} GB/s",
                                                   f"H100-SXM datasheet HBM {sheet:,.0f} GB/s"}
    lines = {label["line"] for label in labels}
    longest = np.log10(frame.seq_kv.max())
    x_hi, y_hi = fig.layout.xaxis.range[1], fig.layout.yaxis.range[1]
    for label in labels:
        x0, x1, y0, y1 = label["box"]
        assert y0 >= label["line"]  # above its own line
        assert not any(y0 <= other <= y1 for other in lines - {label["line"]})  # over no other roof line
        assert x0 > longest  # right of every data point, so no data line reaches it
        assert x1 <= x_hi and y1 <= y_hi  # at the right end, inside the plot
    (a, b) = (label["box"] for label in labels)
    assert a[3] <= b[2] or b[3] <= a[2]  # one above the other
    # Both are hlines at the values they name.
    assert sorted(s.y0 for s in fig.layout.shapes) == pytest.approx(sorted(lines))


# -------------------------------------------------------------------- 3. filled/open everywhere


def test_validation_symbols_mean_what_the_roofline_means(validation):
    meta, rows = validation
    fig = plots.hierarchical_roofline_figure(rows, meta, "fp16")
    traces = {t.name: t for t in fig.data if t.name.endswith(("(DRAM)", "(L2)"))}
    roofs = rooflines.roofs_from_meta(meta, "fp16")
    # The L2 roof: the highest L2 throughput observed stands in for a datasheet figure.
    l2_ridge = roofs[0].peak_flops / (plots.validation_rows(rows[rows.dtype == "fp16"]).l2_tbps.max() * 1e12)
    for name, trace in traces.items():
        level = "DRAM" if name.endswith("(DRAM)") else "L2"
        shape = {"DRAM": "circle", "L2": "square"}[level]
        ridge = roofs[0].ridge if level == "DRAM" else l2_ridge
        for x, symbol in zip(trace.x, trace.marker.symbol):
            # filled: compute-bound (right of its level's ridge); open: memory-bound, as on the Roofline
            assert symbol == (shape if x >= ridge else f"{shape}-open"), (name, x, symbol)
    assert set(traces["triton_flash (DRAM)"].marker.symbol) == {"circle"}
    assert set(traces["naive: softmax (DRAM)"].marker.symbol) == {"circle-open"}
    assert set(traces["naive: softmax (L2)"].marker.symbol) == {"square-open"}
    subtitle = fig.layout.title.text
    assert "circle: DRAM" in subtitle and "square: L2" in subtitle and "filled: compute-bound" in subtitle


# ------------------------------------------------------------------------------------ 4. ticks


def test_sequence_length_axes_tick_at_the_measured_lengths(reference, decode):
    _, frame = reference
    rows = _default_view(frame)
    measured = sorted(rows[(rows.step == "total") & (rows.status == "ok")].seq_kv.unique())
    assert measured == [512, 1024, 2048, 4096, 8192, 16384]
    for fig in plots.scaling_figures(rows).values():
        assert list(fig.layout.xaxis.tickvals) == measured
        assert list(fig.layout.xaxis.ticktext) == ["512", "1k", "2k", "4k", "8k", "16k"]
        assert fig.layout.yaxis.type == "log"
        mantissas = {round(v / 10 ** np.floor(np.log10(v)), 6) for v in fig.layout.yaxis.tickvals}
        assert mantissas <= {1.0, 2.0, 5.0}  # readable log ticks, written out in full
        assert all(t.replace(",", "").replace(".", "").isdigit() for t in fig.layout.yaxis.ticktext)
        # A 420-pixel figure leaves about 240 pixels of plot for the vertical axis title, about 30 characters at
        # plotly's 14-pixel font: a longer one ran past the plot (a new user saw "peak memory above inputs (MiB)"
        # cut off in the dashboard's narrower column)
        assert fig.layout.height == 420 and len(fig.layout.yaxis.title.text) <= 24, fig.layout.yaxis.title.text
    assert plots.scaling_figures(rows)["memory"].layout.yaxis.title.text == "peak over inputs (MiB)"
    fig, _ = plots.compare_figure(rows, rows, "A", "B")
    assert list(fig.layout.xaxis.tickvals) == measured
    meta, dframe = decode
    bandwidth = plots.bandwidth_figure(dframe, meta)
    assert list(bandwidth.layout.xaxis.tickvals) == [4096, 16384, 32768, 65536, 131072]
    assert list(bandwidth.layout.xaxis.ticktext) == ["4k", "16k", "32k", "64k", "128k"]
    # The step breakdown's x is categorical: one group per length its steps ran at, named as such.
    steps = plots.step_breakdown_figure(rows)
    ran = rows[(rows.impl == "naive") & (rows.step == "qk_matmul") & (rows.status == "ok")].seq_q
    assert list(steps.data[0].x) == [f"N={n}" for n in sorted(ran)]
    assert style.log_ticks(0.013, 940)[1] == ["0.001", "0.01", "0.1", "1", "10", "100", "1,000"]


# ---------------------------------------------------------------------------- 5. above the roof


def test_a_point_above_its_roof_is_ringed_and_says_why(reference):
    meta, frame = reference
    rows = _default_view(frame)
    points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, "fp16", "tile"), "tile")
    above = points[points.of_roof > 1]
    # triton_naive, costed per row (K and V once per query row), sits at about 1.5x the measured L2 roof
    # (1.44x to 1.53x in the capture of 2026-11-22).
    assert "triton_naive" in set(above.impl) and (above[above.impl == "triton_naive"].of_roof > 1.2).all()
    fig = _roofline(meta, rows, "tile")
    note = next(t for t in fig.data if t.name.replace("<br>", " ").startswith(style.ABOVE_ROOF_NOTE))
    assert "L1 and registers under L2" in note.name.replace("<br>", " ")
    assert sorted(note.y) == pytest.approx(sorted(above.tflops))  # every point above its roof is ringed
    ours = next(t for t in fig.data if t.name == "triton_naive")
    assert set(np.round(ours.y, 9)) <= set(np.round(note.y, 9))
    for text in ours.hovertext:
        assert style.ABOVE_ROOF_NOTE in text and "per-row costing" in text.replace("<br>", " ")
    assert "ringed: above the roof" in fig.layout.title.text
    # Against HBM no point is above its roof, and no note is drawn.
    compulsory = _roofline(meta, rows)
    assert not any(style.ABOVE_ROOF_NOTE in (t.hovertext or [""])[0] for t in compulsory.data if t.hovertext)
    assert not any((t.name or "").startswith("above the roof") for t in compulsory.data)


def test_a_point_above_the_compute_roof_is_explained_by_the_roof_not_the_bytes(reference):
    """Right of the ridge bytes play no part: a point above the flat roof (e.g. a CPU capture judged
    against a matmul ceiling measured on a busy machine) gets the roof's reason, not a cache's."""
    meta, frame = reference
    rows = _default_view(frame).copy()
    fast = rows.index[(rows.impl == "triton_flash") & (rows.seq_q == 8192)]
    rows.loc[fast, "tflops"] = 1500.0  # above the H200's 989.5 TFLOP/s datasheet peak
    fig = _roofline(meta, rows)
    (note,) = [t for t in fig.data if (t.name or "").startswith("above the compute roof")]
    assert list(note.y) == [1500.0]
    assert not any((t.name or "").startswith("above the roof") for t in fig.data)  # no bytes note
    ours = next(t for t in fig.data if t.name == "triton_flash")
    (text,) = [h for h in ours.hovertext if style.ABOVE_COMPUTE_NOTE in h]
    assert "the roof underestimates" in text.replace("<br>", " ") and "cache below" not in text
    assert "bytes do not matter" in rooflines.above_roof_reason("sdpa_flash", "DRAM", "compute")


def test_the_generic_reason_names_the_cache_below():
    assert "L2 served" in rooflines.above_roof_reason("sdpa_flash", "HBM")
    assert "L1 and registers" in rooflines.above_roof_reason("sdpa_flash", "L2")
    assert "per-row costing" in rooflines.above_roof_reason("triton_naive", "L2")


# ------------------------------------------------------------------------------- 6. What-if axis


def test_whatif_axis_says_projection_not_measurement(reference):
    _, frame = reference
    fig = plots.whatif_figure(_default_view(frame), hardware.DEVICES["B200"], "fp16")
    assert fig.layout.yaxis.title.text == "projected attainable TFLOP/s on B200 (model)"
    assert "achieved" not in fig.layout.yaxis.title.text


# ----------------------------------------------------------------------------------- 7. the CPU


def _strings(node):
    """Every string in a figure's dict (titles, names, hover text, annotations), not its arrays.

    Plotly keeps typed arrays as {"dtype", "bdata"} with the numbers in base64, which can spell any word.
    """
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            if key != "bdata":
                yield from _strings(value)
    elif isinstance(node, (list, tuple)) or (isinstance(node, np.ndarray) and node.dtype == object):
        for value in node:
            yield from _strings(value)


def test_cpu_capture_figures_name_its_timer_and_memory(cpu_capture):
    meta, frame = cpu_capture
    assert meta["device_type"] == "cpu"
    roofs = rooflines.roofs_from_meta(meta, "fp32")
    assert [r.memory for r in roofs] == ["DRAM"] and roofs[0].label == "measured matmul, DRAM copy"
    roofline = rooflines.roofline_figure(frame, roofs)
    assert roofline.layout.xaxis.title.text == "arithmetic intensity (FLOP per DRAM byte)"
    assert "roof: measured matmul, DRAM copy" in {t.name for t in roofline.data}
    steps = plots.step_breakdown_figure(frame, device_type=meta["device_type"])
    assert [t.name for t in steps.data] == [f"{s} (torch.utils.benchmark)" for s in NAIVE_STEPS]
    bandwidth = plots.bandwidth_figure(frame, meta)
    copy = meta["measured_ceilings"]["copy_gbps"]
    assert bandwidth.layout.title.text == "Decode: achieved bandwidth against the DRAM roof"
    assert [a.text for a in bandwidth.layout.annotations if a.name] == [f"measured DRAM copy {copy:,.0f} GB/s"]
    trips = plots.hbm_trips_table(Shape.square(1, 1, 64, 64, dtype="fp32"), device_type="cpu")
    assert "DRAM bytes (model)" in trips.columns
    for fig in (roofline, steps, bandwidth):
        # Only the words a reader sees: to_json() also holds the numbers as base64, which can spell "HBM".
        text = " ".join(_strings(fig.to_dict()))
        assert "HBM" not in text and "CUDA events" not in text
    # Without the keyword, today's GPU names stay.
    assert plots.step_breakdown_figure(frame).data[0].name == "qk_matmul (CUDA events)"


# ------------------------------------------------------------------------------ 8. one template


def _every_figure(reference, decode, validation):
    meta, frame = reference
    rows = _default_view(frame)
    kernels = pd.read_parquet(REFERENCE / "kernels.parquet")
    figs = {"roofline": _roofline(meta, rows), "roofline tile": _roofline(meta, rows, "tile"),
            **{f"scaling {k}": f for k, f in plots.scaling_figures(rows).items()},
            "bandwidth": plots.bandwidth_figure(decode[1], decode[0]),
            "steps": plots.step_breakdown_figure(rows), "steps ms": plots.step_breakdown_figure(rows, "ms"),
            "compare": plots.compare_figure(rows, rows, "A", "B")[0],
            "trace": plots.trace_figure(kernels[kernels.impl == "naive"]),
            "whatif": plots.whatif_figure(rows, hardware.DEVICES["B200"], "fp16"),
            "validation": plots.hierarchical_roofline_figure(validation[1], validation[0], "fp16")}
    return figs


def test_every_builder_uses_the_shared_template_and_colours(reference, decode, validation):
    for name, fig in _every_figure(reference, decode, validation).items():
        layout = fig.layout.template.layout
        assert layout.font.family == style.FONT_FAMILY == "Source Sans Pro, sans-serif", name
        assert layout.plot_bgcolor == "white" and layout.paper_bgcolor == "white", name
        assert layout.xaxis.gridcolor == style.PLOTLY_TEMPLATE.layout.xaxis.gridcolor, name
    steps = plots.step_breakdown_figure(_default_view(reference[1]))
    for trace in steps.data:
        step = trace.name.split(" ")[0]
        if step in style.STEP_COLOR:
            assert trace.marker.color == style.STEP_COLOR[step]
    time = plots.scaling_figures(_default_view(reference[1]))["time"]
    assert {t.name: t.line.color for t in time.data} == {t.name: style.impl_color(t.name) for t in time.data}


# ------------------------------------------------------------------------------ 9. status wrong


UNMEASURED = 3000  # a length no shipped capture has


def _inject_wrong(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame plus rows that failed the correctness check (status 'wrong': time kept, no rates):
    naive at a length never measured (every step), and a made-up implementation at every shape of
    triton_flash; the latter keep their TFLOP/s, so only the status can keep them off."""
    naive = frame[(frame.impl == "naive") & (frame.status == "ok")]
    steps = naive[naive.step != "total"]
    longest = naive[naive.seq_kv == (steps if len(steps) else naive).seq_kv.max()].copy()  # total and steps
    longest["seq_q"] = np.where(longest.seq_q == longest.seq_kv, UNMEASURED, longest.seq_q)
    longest["seq_kv"] = UNMEASURED
    for column in ("tflops", "gbps", "roof_fraction", "roof_fraction_measured"):
        longest[column] = np.nan
    clone = frame[(frame.impl == "triton_flash") & (frame.status == "ok")].copy()
    clone["impl"] = "miscomputed"
    wrong = pd.concat([longest, clone]).assign(status="wrong", message="max_rel_err 686 > 2e-2")
    return pd.concat([frame, wrong], ignore_index=True)


def _shows_wrong(fig) -> bool:
    """Whether a figure draws any injected row: by name, hover text, or the unmeasured length."""
    texts = " ".join(_strings(fig.to_dict()))
    xs = [v for t in fig.data if t.x is not None for v in np.ravel(np.asarray(t.x, dtype=object))]
    return "miscomputed" in texts or f"N={UNMEASURED}" in texts or UNMEASURED in xs or f"N={UNMEASURED} " in str(xs)


def test_wrong_rows_are_in_no_figure(reference, decode):
    meta, frame = reference
    rows = _inject_wrong(_default_view(frame))
    assert (rows.status == "wrong").sum() > 10
    for kind in ("compulsory", "tile"):
        points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, "fp16", kind), kind)
        assert set(points.status) == {"ok"} and UNMEASURED not in set(points.seq_kv)
        assert not _shows_wrong(_roofline(meta, rows, kind))
    for fig in plots.scaling_figures(rows).values():
        assert not _shows_wrong(fig) and UNMEASURED not in fig.layout.xaxis.tickvals
    assert not _shows_wrong(plots.step_breakdown_figure(rows))
    fig, joined = plots.compare_figure(rows, rows, "A", "B")
    assert not _shows_wrong(fig) and "miscomputed" not in set(joined.impl) and UNMEASURED not in set(joined.seq_kv)
    assert not _shows_wrong(plots.whatif_figure(rows, hardware.DEVICES["B200"], "fp16"))
    dmeta, dframe = decode
    drows = _inject_wrong(dframe)
    assert (drows.status == "wrong").sum() > 10
    assert not _shows_wrong(plots.bandwidth_figure(drows, dmeta))
    assert not _shows_wrong(plots.scaling_figures(drows)["time"])
    # The check itself sees such rows where a builder draws them.
    assert _shows_wrong(plots.scaling_figures(rows.assign(status="ok"))["time"])


# ----------------------------------------------------------------- 10. the full key for decode


def test_compare_and_whatif_key_decode_rows_on_the_full_shape(decode):
    meta, frame = decode
    ok = frame[frame.status == "ok"]
    fig, joined = plots.compare_figure(frame, frame, "A", "B")
    key = list(ROW_KEY)
    assert not joined.duplicated(key).any() and len(joined) == len(ok)  # no cross join over Nkv
    assert (joined["speedup B/A"] == 1.0).all()
    ours = [t for t in fig.data if t.name.startswith("triton_flash")]
    assert len(ours) == 2 and all(list(t.x) == [4096, 16384, 32768, 65536, 131072] for t in ours)  # Nq 1 and 4
    whatif = plots.whatif_figure(frame, hardware.DEVICES["H200"], "bf16")
    drawn = sum(len(t.hovertext) for t in whatif.data if t.hovertext is not None and t.name[:5] != "above")
    assert drawn == len(ok[ok.hbm_bytes > 0])  # one projected point per row key, decode rows kept apart


def test_decode_speedup_divides_by_naive_at_the_same_key_length(decode):
    """Each decode point's speedup is naive's time at its own Nq and Nkv over its time (it was
    divided by naive at the first Nkv of the line)."""
    _, frame = decode
    totals = frame[(frame.step == "total") & (frame.status == "ok") & (frame.seq_q < frame.seq_kv)]
    first = totals[totals.impl == "triton_flash"].iloc[0]
    line = totals[(totals[style.FAMILY_COLUMNS + ["seq_q"]] == first[style.FAMILY_COLUMNS + ["seq_q"]]).all(axis=1)]
    naive = line[line.impl == "naive"].set_index("seq_kv").time_ms
    ours = line[line.impl == "triton_flash"].set_index("seq_kv").time_ms
    expected = (naive / ours).dropna()
    assert len(expected) >= 3
    (trace,) = [t for t in plots.scaling_figures(line)["speedup"].data if t.name.startswith("triton_flash")]
    assert dict(zip(trace.x, trace.y)) == pytest.approx(expected.to_dict(), rel=1e-12)


def test_family_spellings_agree():
    rows = pd.DataFrame({"batch": [8, 8], "heads": [32, 32], "kv_heads": [8, 8], "head_dim": [128, 128],
                         "dtype": ["bf16", "bf16"], "causal": [False, False], "mode": ["fwd", "fwd"]})
    assert style.families_title(rows) == style.family_label(rows.iloc[0]) == style.family_label(
        tuple(rows.iloc[0][style.FAMILY_COLUMNS])) == \
        "B8 H32/8 D128 bf16 full fwd"
    mixed = pd.concat([rows, rows.assign(heads=64)])
    assert style.families_title(mixed).startswith("B8 {H32/8,H64/8} D128")


def test_step_breakdown_says_when_only_the_steps_ran_out_of_memory(reference):
    """At N=16384 naive attention's forward ran on the H200 but timing its steps one by one (S, the
    scaled S and P held at once) did not: the bar says so, and a shape where nothing ran says OOM."""
    _, frame = reference
    family = _default_view(frame)
    (oom,) = [t for t in plots.step_breakdown_figure(family).data if t.name == "out of memory"]
    assert list(oom.x) == ["N=16384"] and list(oom.text) == ["steps OOM<br>(total ran)"]
    both = family[~((family.impl == "naive") & (family.step == "total") & (family.seq_q == 16384))]
    (oom,) = [t for t in plots.step_breakdown_figure(both).data if t.name == "out of memory"]
    assert list(oom.text) == ["OOM"]


def test_compare_names_the_captures_in_its_title_and_keeps_the_axis_short(reference):
    _, frame = reference
    fig, joined = plots.compare_figure(frame, frame, "reference-h200", "a-very-long-capture-name-of-a-user-20261122")
    assert fig.layout.title.text == "B = a-very-long-capture-name-of-a-user-20261122 against A = reference-h200"
    assert fig.layout.yaxis.title.text == "speedup B / A (x, above 1: B faster)"
    assert len(joined) == len(frame[frame.status == "ok"]) and (joined["speedup B/A"] == 1.0).all()


def test_trace_bars_take_the_step_and_implementation_colours():
    kernels = pd.read_parquet(REFERENCE / "kernels.parquet")
    naive = kernels[kernels.impl == "naive"]
    fig = plots.trace_figure(naive)
    colours = {t.name: t.marker.color for t in fig.data}
    for step in ("qk_matmul", "scale_mask", "softmax", "pv_matmul"):
        (name,) = [n for n in colours if n.split("/")[-1] == step]
        assert colours[name] == style.STEP_COLOR[step]
    ours = plots.trace_figure(kernels[kernels.impl == "triton_flash"])
    assert {t.marker.color for t in ours.data} == {style.impl_color("triton_flash")}


def test_hover_and_dashboard_table_name_the_kernel_path(monkeypatch):
    """A point of an implementation with several kernels says which ran (reports/bench-h100-gluon-bwd:
    the Gluon backward at head_dim 64, the portable one at 128); one with a single kernel says nothing."""
    meta, frame = load_capture(ROOT / "reports" / "bench-h100-gluon-bwd")
    backward = frame[(frame.dtype == "fp16") & ~frame.causal & (frame["mode"] == "bwd")]
    for head_dim, path in ((64, "gluon-ws"), (128, "tiled")):
        rows = backward[backward.head_dim == head_dim]
        fig = _roofline(meta, rows)
        ours = next(t for t in fig.data if t.name == "triton_flash")
        cudnn = next(t for t in fig.data if t.name == "sdpa_cudnn")
        assert all(f"triton_flash</b> total (bwd) · path {path}<br>" in text for text in ours.hovertext)
        assert not any("path" in text for text in cudnn.hovertext)
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(sys, "argv", [str(ROOT / "dashboards" / "roofline.py"), "--select", "bench-h100-gluon-bwd"])
    at = AppTest.from_file(str(ROOT / "dashboards" / "roofline.py"), default_timeout=120).run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "% of roof" in d.value.columns)
    assert list(table.columns[:2]) == ["impl", "path"]
    ours = table[table.impl == "triton_flash"]
    assert len(ours) and set(ours.path) <= {"gluon-ws", "tiled"} and set(table[table.impl == "sdpa_cudnn"].path) == {""}


def test_lines_named_by_their_family_put_the_legend_under_the_plot(reference):
    """Two shape families (round 24's grid: 32768 tokens H16, and the grouped-query rows): each scaling chart's and the
    baseline chart's legend goes under the plot, a row a name, and the chart grows by those rows; one family keeps
    plotly's legend at the right and the charts' 420 px."""
    _, frame = load_capture(ROOT / "reports" / "perf-h100" / "gluon_fwd_round24" / "peers_r3_split")
    rows = frame[(frame.status == "ok") & (frame.step == "total") & (frame.dtype == "fp16") & ~frame.causal]
    assert rows.kv_heads.nunique() == 2
    figs = {**plots.scaling_figures(rows), "baseline": plots.baseline_figure(rows, "triton_flash")}
    assert not figs.pop("speedup").data  # no naive rows: nothing to name
    for name, fig in figs.items():
        names = sum(1 for trace in fig.data if trace.showlegend is not False)
        assert names >= 4, name
        assert (fig.layout.legend.orientation, fig.layout.legend.yref, fig.layout.legend.y) == ("h", "container", 0)
        assert fig.layout.height == 420 + 22 * names and fig.layout.margin.b == 40 + 22 * names, name
    for fig in plots.scaling_figures(_default_view(reference[1])).values():
        assert fig.layout.legend.orientation is None and fig.layout.height == 420


def test_scaling_draws_a_fixed_token_sweep_as_one_line():
    """``bench --tokens 32768`` halves the batch as N doubles: the scaling charts draw each
    implementation as one line across those batches, named by its token count, and the memory
    model follows the same (batch, N) pairs; a family of one batch stays a line of its own."""
    _, frame = load_capture(ROOT / "reports" / "bench-h100-gluon-bwd")
    rows = frame[(frame.status == "ok") & (frame.step == "total") & (frame.dtype == "bf16") & ~frame.causal
                 & (frame["mode"] == "fwd")]
    assert rows.batch.nunique() == 4 and set(rows.batch * rows.seq_q) == {32768}
    figs = plots.scaling_figures(rows)
    lines = {t.name: t for t in figs["tflops"].data}
    assert set(lines) == {f"{impl} · 32768 tokens {heads} bf16 full fwd" for impl in ("triton_flash", "sdpa_cudnn")
                          for heads in ("H32 D64", "H16 D128")}
    flash = lines["triton_flash · 32768 tokens H32 D64 bf16 full fwd"]
    want = rows[(rows.impl == "triton_flash") & (rows.head_dim == 64)].set_index("seq_kv").tflops
    assert dict(zip(flash.x, flash.y)) == pytest.approx(want.to_dict(), rel=1e-12) and len(flash.x) == 4
    (model,) = [t for t in figs["memory"].data
                if t.name == "model O(N), fused · 32768 tokens H32 D64 bf16 full fwd"]
    ours = rows[(rows.impl == "triton_flash") & (rows.head_dim == 64)].sort_values("seq_q")
    assert list(model.x) == ours.seq_q.tolist()
    assert list(model.y) == pytest.approx([predicted_peak_bytes(Shape.from_row(r), True) / 2**20
                                           for r in ours.to_dict("records")])
    # One batch per family: lines by batch, as before.
    one = rows[rows.batch == 4]
    assert {t.name for t in plots.scaling_figures(one)["time"].data} == {"triton_flash · B4 H16 D128 bf16 full fwd",
                                                                        "sdpa_cudnn · B4 H16 D128 bf16 full fwd",
                                                                        "triton_flash · B4 H32 D64 bf16 full fwd",
                                                                        "sdpa_cudnn · B4 H32 D64 bf16 full fwd"}


def test_token_sweeps_hold_across_captures_and_short_implementations():
    """The same sweep in two captures, and an implementation with one point in it, stay on the sweep's
    line (named by its token count); decode rows, whose batch is fixed per Nq, keep their batch lines."""
    frames = [load_capture(ROOT / "reports" / name)[1].assign(capture_copy=i)
              for i, name in enumerate(("bench-h100-gluon", "bench-h100-portable"))]
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[(rows.status == "ok") & (rows.step == "total") & (rows.dtype == "bf16") & ~rows.causal
                & (rows["mode"] == "fwd")]
    tokens = (rows.batch * rows.seq_q).groupby([rows.heads, rows.head_dim]).unique()
    assert all(len(t) == 1 for t in tokens) and rows.batch.nunique() > 1  # one token count per family
    short = rows[(rows.impl == "sdpa_cudnn")].iloc[:1]  # an implementation measured at one length only
    lines = plots.scaling_figures(pd.concat([rows[rows.impl != "sdpa_cudnn"], short]))["time"].data
    families = {f"{t[0]} tokens H{h} D{d} bf16 full fwd" for (h, d), t in tokens.items()}
    assert len(families) == 2 and {t.name.split(" · ")[1] for t in lines} == families
    assert [len(t.x) for t in lines if t.name.startswith("sdpa_cudnn")] == [1]
    flash = [t for t in lines if t.name == "triton_flash · 32768 tokens H32 D64 bf16 full fwd"]
    assert len(flash) == 1 and len(flash[0].x) == 2 * rows[(rows.impl == "triton_flash") & (rows.head_dim == 64)
                                                            & (rows.capture_copy == 0)].seq_kv.nunique()
    _, decode = load_capture(DECODE)
    decode = decode[(decode.status == "ok") & (decode.step == "total") & (decode.seq_q < decode.seq_kv)]
    names = {t.name for t in plots.scaling_figures(decode)["time"].data}
    assert names and not any("tokens" in n for n in names)


def test_two_captures_of_the_same_shapes_draw_a_line_each():
    """The Gluon backward (bench-h100-gluon-bwd-d128) beside the portable one (bench-h100-gluon-bwd's
    D128 bwd rows): same token sweep, one line per capture, each through its own times."""
    rows = []
    for name in ("bench-h100-gluon-bwd-d128", "bench-h100-gluon-bwd"):
        _, frame = load_capture(ROOT / "reports" / name)
        rows.append(frame.assign(capture=name))
    rows = pd.concat(rows, ignore_index=True)
    rows = rows[(rows.status == "ok") & (rows.step == "total") & (rows.head_dim == 128) & (rows["mode"] == "bwd")
                & (rows.dtype == "bf16") & ~rows.causal & (rows.impl == "triton_flash")]
    lines = {t.name: t for t in plots.scaling_figures(rows)["tflops"].data}
    assert set(lines) == {f"triton_flash · {name} · 32768 tokens H16 D128 bf16 full bwd"
                          for name in ("bench-h100-gluon-bwd-d128", "bench-h100-gluon-bwd")}
    for name, line in lines.items():
        want = rows[rows.capture == name.split(" · ")[1]].set_index("seq_kv").tflops
        assert dict(zip(line.x, line.y)) == pytest.approx(want.to_dict(), rel=1e-12) and len(line.x) == 4
    models = [t.name for t in plots.scaling_figures(rows)["memory"].data if t.name.startswith("model")]
    assert len(models) == 2  # O(N²) and O(N), once for the shared shapes


def test_compare_draws_a_token_sweep_as_one_line_across_its_batches():
    """fa4-peers-h100 against fa4-peers-h200: both `bench --tokens 32768` grids, each shape family's four
    batches (16 at N2048 ... 2 at N16384) one B/A line per implementation, not four one-point lines."""
    _, h100 = load_capture(ROOT / "reports" / "fa4-peers-h100")
    _, h200 = load_capture(ROOT / "reports" / "fa4-peers-h200")
    fig, joined = plots.compare_figure(h100, h200, "h100", "h200")
    assert len(joined) == 192  # every row of the grid is in both
    assert len(fig.data) == 3 * 16  # three implementations × 16 families
    lines = {t.name: list(t.x) for t in fig.data if t.mode == "lines+markers"}
    assert "fa4 · 32768 tokens H32 D64 bf16 causal bwd" in lines
    assert all(x == [2048, 4096, 8192, 16384] for x in lines.values())


def test_the_memory_model_lines_say_what_the_mode_keeps():
    """A backward family's model lines are the backward's (predicted_peak_bytes with mode bwd: four N×N matrices
    unfused; fused adds dQ, dK, dV and delta to O and lse). Their legend names are short, so that a half-width chart
    keeps its plot; their hover and the caption's note (memory_model_note) say what each keeps, a clause a mode."""
    _, frame = load_capture(ROOT / "reports" / "fa4-peers-h100")
    rows = frame[(frame["mode"] == "bwd") & (frame.head_dim == 64) & (frame.dtype == "fp16") & ~frame.causal]
    memory = plots.scaling_figures(rows)["memory"]
    model = {t.name: t for t in memory.data if t.name.startswith("model")}
    assert set(model) == {"model O(N²), naive", "model O(N), fused"}
    fused = model["model O(N), fused"]
    shapes = [Shape.square(b, 32, n, 64, dtype="fp16", mode="bwd")
              for b, n in zip((16, 8, 4, 2), (2048, 4096, 8192, 16384))]
    assert list(fused.y) == pytest.approx([predicted_peak_bytes(s, True) / 2**20 for s in shapes])
    assert "keeps O, the logsumexp, dQ, dK, dV and delta<extra>" in fused.hovertemplate
    assert "keeps S, P, dP and dS<extra>" in model["model O(N²), naive"].hovertemplate
    assert plots.memory_model_note(rows) == (
        '"model O(N²), naive" is what unfused attention keeps (S, P, dP and dS) and "model O(N), fused" what a fused '
        'kernel keeps (O, the logsumexp, dQ, dK, dV and delta), above the inputs (profiler.model.memory)')
    forward = frame[(frame["mode"] == "fwd") & (frame.head_dim == 64)]
    assert any(t.name.startswith("model O(N), fused ·") and "keeps O and the logsumexp<extra>" in t.hovertemplate
               for t in plots.scaling_figures(forward)["memory"].data)
    both = plots.memory_model_note(frame[frame.head_dim == 64])
    assert both.startswith('forward, "model O(N²), naive" is what unfused attention keeps (S and P)')
    assert '; with the backward, "model O(N²), naive" is what unfused attention keeps (S, P, dP and dS)' in both
    decode = load_capture(ROOT / "reports" / "decode-b1-h100")[1]
    assert (decode.seq_q < decode.seq_kv).all() and plots.memory_model_note(decode) is None  # no model line drawn
    assert all(f.layout.xaxis.title.text == "key length N (= Nq if square)"
               for f in plots.scaling_figures(rows).values())


def _label_boxes(fig) -> list[tuple[float, float, float, float]]:
    """The kept point labels' boxes in pixels, as rooflines.declutter_labels places them."""
    (x_lo, x_hi), (y_lo, y_hi) = fig.layout.xaxis.range, fig.layout.yaxis.range
    width, height = rooflines.PLOT_PX
    boxes = []
    for trace in fig.data:
        if trace.text is None or "text" not in (trace.mode or "") or isinstance(trace.text, str):
            continue
        for x, y, text in zip(trace.x, trace.y, trace.text):
            if text:
                w, h = rooflines.label_box_px(str(text), trace.textfont.size or 9)
                boxes.append(((np.log10(x) - x_lo) / (x_hi - x_lo) * width,
                              (np.log10(y) - y_lo) / (y_hi - y_lo) * height + h / 2 + 5, w / 2, h / 2))
    return boxes


@pytest.mark.parametrize("capture,dtype,query", [
    ("observed-llama3-32k-train", "bf16", "mode == 'fwd'"),  # two layers' stars and three replays at one shape
    ("reference-h200", "fp16", "mode == 'fwd' and not causal and head_dim == 64 and seq_q <= 4096"),
])
def test_point_labels_do_not_pile_up(capture, dtype, query):
    """Issue 41 defect 7: labels piled up on coincident markers (an observed call and its replays at one shape,
    What-if points on one roof). No two kept labels overlap, and every point keeps its hover."""
    meta, frame = load_capture(ROOT / "reports" / capture)
    rows = frame[(frame.dtype == dtype) & (frame.step == "total") & (frame.status == "ok")].query(query)
    assert 0 < len(rows) <= rooflines.MAX_LABELS  # few enough to be labelled
    figures = [rooflines.roofline_figure(rows, rooflines.roofs_from_meta(meta, dtype))]
    figures.append(plots.whatif_figure(rows, hardware.get_device("B200"), dtype))
    for fig in figures:
        boxes = _label_boxes(fig)
        assert boxes
        for i, (x, y, w, h) in enumerate(boxes):
            assert not any(abs(x - x2) < w + w2 and abs(y - y2) < h + h2 for x2, y2, w2, h2 in boxes[i + 1:])
        hovers = [t for t in fig.data if t.hovertext is not None and t.text is not None]
        assert all(len(t.hovertext) == len(t.x) for t in hovers)
    assert rooflines.declutter_labels(figures[0]) == 0  # already decluttered: nothing left to drop


def test_the_memory_chart_names_each_peaks_path_and_what_the_model_leaves_out():
    """Round 25's N 4096 runs (reports/perf-h100/gluon_fwd_round25/f_ab: our forward with split_tail and without):
    the memory chart's hover gives each point's kernel path, and the note under it says what a split-tail row holds
    beyond the model: the row that cut peaks above the one that did not by exactly the chunks' partials
    (kernels.tail_combine.partials), and the one that did not peaks at the model's fused line. The decode capture's
    split-KV rows peak above the model by their splits' partials, which the note names too."""
    from attention_core import split_kv
    from kernels import tail_combine

    folder = ROOT / "reports" / "perf-h100" / "gluon_fwd_round25" / "f_ab"
    rows = pd.concat([load_capture(folder / run)[1].assign(capture=run) for run in ("1_default", "1_0")])
    rows = rows[(rows.impl == "triton_flash") & (rows.dtype == "bf16") & (rows.step == "total")]
    assert sorted(rows.path) == ["gluon-ws", "gluon-ws split-tail 4x32"]
    peaks = rows.set_index("path").peak_mem_bytes
    o_part, lse_part = tail_combine.partials(4, 128, 32, 128, "cpu")
    assert peaks["gluon-ws split-tail 4x32"] - peaks["gluon-ws"] == o_part.nbytes + lse_part.nbytes
    assert peaks["gluon-ws"] == predicted_peak_bytes(Shape.from_row(rows.iloc[0].to_dict()), True)
    memory = plots.scaling_figures(rows)["memory"]
    hovered = {path for trace in memory.data if trace.customdata is not None for path in trace.customdata}
    assert hovered == {"gluon-ws", "gluon-ws split-tail 4x32"}
    assert [note.split(" (")[0] for note in plots.memory_notes(rows)] == [
        "rows whose path names split-tail AxS"]

    _, decode = load_capture(ROOT / "reports" / "decode-b1-h100")
    ours = decode[(decode.impl == "triton_flash") & (decode.step == "total") & (decode.status == "ok")]
    for r in ours.to_dict("records"):
        shape = Shape.from_row(r)
        plan = split_kv.plan(shape.batch, shape.kv_heads, shape.group, shape.seq_q, shape.seq_kv)
        held = split_kv.partial_bytes(shape.batch, shape.heads, shape.seq_q, shape.head_dim, plan.splits) // 2
        assert r["peak_mem_bytes"] - predicted_peak_bytes(shape, True) == pytest.approx(held, abs=512)
    assert any(note.startswith("rows whose path names split-kv") for note in plots.memory_notes(ours))
