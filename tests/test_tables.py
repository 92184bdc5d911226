"""The dashboard's tables (profiler.views.tables: roofline_table, decode_table) on the shipped captures,
without Streamlit."""

from __future__ import annotations

from pathlib import Path

from profiler.store import load_capture
from profiler.views import rooflines, selection, tables

ROOT = Path(__file__).resolve().parents[1]
PREFERRED = {"dtype": "fp16", "head_dim": 64, "causal": False, "mode": "fwd"}


def test_the_roofline_table_reads_whole_kernels_first_by_length_in_percent():
    meta, frame = load_capture(ROOT / "reports" / "reference-h200")
    view = selection.apply_filters(selection.with_capture("reference-h200", meta, frame),
                                   {k: [v] for k, v in PREFERRED.items()})
    points = rooflines.roofline_points(view, rooflines.roofs_from_meta(meta, "fp16"), "compulsory",
                                       rooflines.exp_rate(meta))
    table = tables.roofline_table(points)
    assert list(table.columns) == ["impl", "path", "step", "shape", "time (ms)", "TFLOP/s", "FLOP/B", "bound",
                                   "% of roof", "binding ceiling", "% of binding ceiling", "seq_q", "seq_kv"]
    assert len(table) == len(points) == 67
    first = table.iloc[0]
    assert (first.impl, first.step, first["shape"], first.bound) == ("naive", "total", "N=512", "memory")
    assert abs(first["% of roof"] - points.loc[table.index[0], "of_roof"] * 100) < 1e-9
    assert abs(first["% of roof"] - 62.03) < 0.01 and abs(first["FLOP/B"] - 19.69) < 0.01
    steps = table.step != "total"
    assert steps.any() and not steps[: (~steps).sum()].any()  # naive's steps after every whole kernel


def test_the_decode_table_puts_gb_s_against_the_measured_copy():
    meta, frame = load_capture(ROOT / "reports" / "decode-capture-h100")
    decode = selection.decode_rows(selection.with_capture("decode-capture-h100", meta, frame))
    copy = meta["measured_ceilings"]["copy_gbps"]
    table = tables.decode_table(decode, copy)
    assert len(table) == 60 and list(table.columns)[-3:] == ["time_ms", "gbps", "of measured copy"]
    first = table.iloc[0]
    assert (first.impl, first.batch, first.seq_q, first.seq_kv) == ("naive", 8, 1, 4096)
    assert abs(first["of measured copy"] - first.gbps / copy * 100) < 1e-9
    assert abs(first["of measured copy"] - 75.93) < 0.01
    assert list(table[["batch", "seq_q", "seq_kv"]].itertuples(index=False)) == sorted(
        table[["batch", "seq_q", "seq_kv"]].itertuples(index=False))
    assert tables.decode_table(decode, None)["of measured copy"].isna().all()  # no copy measured: no percentage
