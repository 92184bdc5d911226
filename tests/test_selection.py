"""The dashboard's selection logic without Streamlit: filters, why a selection is empty, shape
labels, filter values in order, the newest capture (profiler.views.selection)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from profiler.store import load_capture
from profiler.views import selection

ROOT = Path(__file__).resolve().parents[1]


def _reference():
    meta, frame = load_capture(ROOT / "reports" / "reference-h200")
    return selection.with_capture("reference-h200", meta, frame)


def test_numbers_sort_by_value_and_text_as_text():
    assert selection.sorted_values([16384, 1024, 2048, 512]) == [512, 1024, 2048, 16384]
    assert selection.sorted_values(["fp16", "bf16"]) == ["bf16", "fp16"]
    assert selection.sorted_values([True, "x"]) == [True, "x"]  # mixed: by text


def test_filters_keep_what_every_filter_keeps():
    data = _reference()
    kept = selection.apply_filters(data, {"dtype": ["fp16"], "head_dim": [64], "no_such_column": [1]})
    assert set(kept.dtype) == {"fp16"} and set(kept.head_dim) == {64}
    assert len(kept) == len(data[(data.dtype == "fp16") & (data.head_dim == 64)])


def test_why_empty_names_the_filter_and_what_the_data_has():
    data = _reference()
    assert selection.why_empty(data, {"dtype": ["fp32"]}) == "no rows with dtype fp32 (it has bf16, fp16)"
    # Each value exists alone, but not together: naive's step rows are never of triton_flash.
    why = selection.why_empty(data, {"impl": ["triton_flash"], "step": ["softmax"]})
    assert why == "its rows with impl triton_flash have step total, not softmax"


def test_shape_labels_name_only_what_varies():
    data = _reference()
    family = data[(data.dtype == "fp16") & (data.head_dim == 64) & ~data.causal & (data["mode"] == "fwd")]
    labels, varying = selection.shape_labels(family)
    assert varying == ["seq_q", "seq_kv"] and set(labels) == {f"N={n}" for n in (512, 1024, 2048, 4096, 8192, 16384)}
    two = data[(data.head_dim == 64) & ~data.causal & (data["mode"] == "fwd") & (data.seq_q == 4096)]
    labels, varying = selection.shape_labels(two)
    assert varying == ["dtype"] and set(labels) == {"fp16", "bf16"}  # N=4096 is one value: the filters say it


def test_decode_rows_are_measured_totals_with_fewer_queries_than_keys():
    _, frame = load_capture(ROOT / "reports" / "decode-capture-h100")
    rows = selection.decode_rows(frame)
    assert len(rows) > 0 and (rows.seq_q < rows.seq_kv).all() and (rows.status == "ok").all()
    assert selection.decode_rows(_reference()).empty


def test_newest_by_meta_time_else_folder_time(tmp_path):
    assert selection.measured_at({"time": "2026-11-22T23:49:10+0000"}, tmp_path) == pd.Timestamp(
        "2026-11-22T23:49:10+0000").timestamp()
    assert selection.measured_at({}, tmp_path) == tmp_path.stat().st_mtime
    assert selection.measured_at({"time": "not a time"}, tmp_path / "gone") == 0.0


def test_default_reports_env_then_checkout_then_current_directory(tmp_path):
    app = ROOT / "profiler" / "views" / "dashboard_app.py"
    assert selection.checkout_of(app) == ROOT  # this checkout: pyproject.toml and reports/ beside profiler/
    installed = tmp_path / "site-packages" / "profiler" / "views" / "dashboard_app.py"
    installed.parent.mkdir(parents=True)
    installed.write_text("")
    assert selection.checkout_of(installed) is None  # a wheel's site-packages has no reports/
    cwd = tmp_path / "work"
    assert selection.default_reports(ROOT, {}, cwd) == ROOT / "reports"
    assert selection.default_reports(None, {}, cwd) == cwd / "reports"
    for checkout in (ROOT, None):
        assert selection.default_reports(checkout, {"ATTN_REPORTS": "/data/caps"}, cwd) == Path("/data/caps")


PREFERRED = {"dtype": "fp16", "head_dim": 64, "causal": False, "mode": "fwd"}


def _shipped(name: str) -> pd.DataFrame:
    return selection.with_capture(name, *load_capture(ROOT / "reports" / name))


def test_the_first_filters_keep_every_selected_capture_in_view():
    # One capture: the preferred family (fp16 D64 full fwd), as before.
    assert selection.starting_filters(_reference(), PREFERRED) == {
        "dtype": ["fp16"], "head_dim": [64], "causal": [False], "mode": ["fwd"]}
    # A backward-only D128 capture beside it: D128, where both have rows, and both modes they hold.
    both = pd.concat([_reference(), _shipped("bench-h100-gluon-bwd-d128")], ignore_index=True)
    starts = selection.starting_filters(both, PREFERRED)
    assert starts == {"dtype": ["fp16"], "head_dim": [128], "causal": [False], "mode": ["bwd", "fwd", "fwd+bwd"]}
    kept = selection.apply_filters(both, starts)
    assert set(kept.capture) == {"reference-h200", "bench-h100-gluon-bwd-d128"}
    # A capture with only bf16 at D64 and fp16 at D128 opens on fp16 D128, not on an empty fp16 D64.
    odd = _reference()
    odd = odd[((odd.dtype == "bf16") & (odd.head_dim == 64)) | ((odd.dtype == "fp16") & (odd.head_dim == 128))]
    assert selection.starting_filters(odd, PREFERRED)["head_dim"] == [128]
