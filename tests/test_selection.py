"""The dashboard's selection logic without Streamlit: filters, why a selection is empty, shape
labels, filter values in order, the newest capture, the sidebar's first values and presets, the rows drawn
and listed, Compare's ranking of B (profiler.views.selection)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from profiler.store import KEY, load_capture
from profiler.views import rooflines, selection

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


def _loaded(name: str) -> selection.LoadedCapture:
    return selection.LoadedCapture(*load_capture(ROOT / "reports" / name))


def test_presets_offered_are_those_of_the_models_the_rows_hold():
    assert selection.preset_choices(_reference()) == ["any", "llama2-7b"]  # 32 heads, 32 K/V heads, D128
    assert selection.preset_choices(_shipped("decode-h100")) == ["any", "llama3-8b", "llama3-70b"]
    assert selection.preset_filters("llama3-8b") == {"heads": 32, "kv_heads": 8, "head_dim": 128}
    assert selection.preset_filters("any") == {}


def test_an_observed_run_opens_on_every_row():
    assert not selection.is_observed_run(_reference())
    assert selection.is_observed_run(_shipped("observed-nanogpt"))


def test_opening_filters_then_each_filters_first_values():
    starts = selection.opening_filters(_reference(), {}, "NVIDIA H200", PREFERRED)
    assert starts == {"dtype": ["fp16"], "head_dim": [64], "causal": [False], "mode": ["fwd"]}
    # A preset fixes heads, K/V heads and head_dim: decode-h100's llama3-70b rows open on what they hold.
    decode = _shipped("decode-h100")
    fixed = selection.preset_filters("llama3-70b")
    starts = selection.opening_filters(decode, fixed, "NVIDIA H100 80GB HBM3", PREFERRED)
    assert starts["head_dim"] == [128] and starts["dtype"] == ["bf16"]  # no fp16 D64 there
    preferred = {**PREFERRED, "device": "NVIDIA H100 80GB HBM3"}
    assert selection.first_choice("dtype", ["bf16", "fp16"], starts, preferred) == ["bf16"]  # the opening value
    assert selection.first_choice("batch", [1, 8, 64], starts, preferred) == [1, 8, 64]  # not preferred: all
    assert selection.first_choice("dtype", ["bf16", "fp16"], {}, preferred) == ["fp16"]  # the preferred value
    assert selection.first_choice("head_dim", [128], {}, preferred) == [128]  # else the first option


def test_the_bound_filter_keeps_that_bounds_points_and_every_row_not_ok():
    data = _reference()
    view = selection.apply_filters(data, selection.opening_filters(data, {}, "NVIDIA H200", PREFERRED))
    meta = load_capture(ROOT / "reports" / "reference-h200")[0]
    points = rooflines.roofline_points(view, rooflines.roofs_from_meta(meta, "fp16"), "compulsory",
                                       rooflines.exp_rate(meta))
    assert (len(view), len(points)) == (72, 67)  # the dashboard's "72 of 1,152 rows"; 5 oom rows have no point
    kept, kept_points = selection.within_bound(view, points, ["memory"])
    assert set(kept_points.view_bound) == {"memory"} and len(kept_points) == 31
    assert kept.status.value_counts().to_dict() == {"ok": 31, "oom": 5}  # the oom rows stay, listed


def test_rows_not_drawn_are_listed_and_wrong_or_interpreted_rows_never_reach_a_chart():
    data = _reference()
    view = selection.apply_filters(data, selection.opening_filters(data, {}, "NVIDIA H200", PREFERRED))
    listed = selection.not_drawn(view)  # naive's oom steps are not listed: its total is
    assert listed[["impl", "step", "status", "seq_kv"]].to_dict("records") == [
        {"impl": "sdpa_math", "step": "total", "status": "oom", "seq_kv": 16384}]
    assert len(selection.chart_rows(view)) == len(view) == 72  # only ok and oom rows here
    marked = view.copy()
    total, step = marked.index[marked.step == "total"][0], marked.index[marked.step == "softmax"][0]
    marked.loc[[total, step], "status"] = ["interpreted", "wrong"]  # a wrong step is listed, as a total is
    assert len(selection.chart_rows(marked)) == 70 and {total, step} <= set(selection.not_drawn(marked).index)


def test_what_is_drawn_from_meta_json_is_the_chosen_devices():
    meta, frame = load_capture(ROOT / "tests" / "data" / "mixed-cpu-h100")
    data = selection.with_capture("mixed", meta, frame)
    captures = {"mixed": selection.LoadedCapture(meta, frame)}
    cpu, h100 = "CPU x86_64 (2 threads)", "NVIDIA H100 80GB HBM3"
    assert selection.drawn_meta(captures, data, cpu, meta)["measured_ceilings"]["copy_gbps"] == 13.329086332154686
    drawn = selection.drawn_meta(captures, data, h100, meta)
    assert drawn["device"] == h100 and drawn["measured_ceilings"]["copy_gbps"] == 13.016888345353989
    assert selection.drawn_meta(captures, data, "no such device", meta) is meta


def test_the_newest_capture_by_meta_time(tmp_path):
    captures = {name: selection.LoadedCapture({"time": time}, pd.DataFrame()) for name, time in (
        ("a-old", "2026-01-01T00:00:00+0000"), ("b-new", "2026-06-01T00:00:00+0000"),
        ("c-older", "2025-01-01T00:00:00+0000"))}
    assert selection.newest_capture(captures, {n: tmp_path / n for n in captures}) == "b-new"


def _shared(a: str, others: list[str], chosen: dict) -> dict[str, int]:
    """What the Compare tab's shared_with counts: the measured row keys a capture shares with A."""
    def keys(name):
        frame = load_capture(ROOT / "reports" / name)[1]
        rows = selection.apply_filters(frame[frame.status == "ok"], chosen)
        return set(rows[KEY].itertuples(index=False, name=None))

    return {n: len(keys(a) & keys(n)) for n in others}


def test_compares_b_shares_the_most_rows_with_a_then_is_from_as_gpu():
    a = "bench-h100-gluon"
    others = ["bench-h100-gluon-bwd-d128", "bench-h200-grid", "decode-h100", "bench-h100-portable"]
    sharing, unfiltered = _shared(a, others, {k: [v] for k, v in PREFERRED.items()}), _shared(a, others, {})
    assert sharing == {"bench-h100-gluon-bwd-d128": 0, "bench-h200-grid": 12, "decode-h100": 0,
                       "bench-h100-portable": 8}
    devices = {n: _loaded(n).meta["device"] for n in [a, *others]}
    assert selection.best_b(a, others, sharing, unfiltered, devices) == "bench-h200-grid"  # most rows, another GPU
    assert selection.better_b(a, "bench-h200-grid", sharing, unfiltered) == (
        " bench-h200-grid shares 12 rows with A under these filters: pick it as B.")
    # On a tie A's GPU wins; without rows shared under the filters, rows shared without them outrank a GPU.
    tie = {"bench-h200-grid": 8, "bench-h100-portable": 8}
    assert selection.best_b(a, list(tie), tie, tie, devices) == "bench-h100-portable"
    none = dict.fromkeys(others, 0)
    assert selection.best_b(a, others, none, unfiltered, devices) == "bench-h200-grid"
    assert selection.better_b(a, "bench-h200-grid", none, unfiltered) == (
        " No capture here shares a row with A under these filters; without them bench-h200-grid shares 96 (select "
        "it beside bench-h100-gluon in the sidebar to filter both).")
    assert selection.better_b(a, "decode-h100", none, none).startswith(" No capture here shares an implementation")


def test_why_a_and_b_share_nothing():
    a, b = "bench-h100-gluon", "bench-h100-gluon-bwd-d128"
    frame_a, frame_b = _loaded(a).frame, _loaded(b).frame
    chosen = {"dtype": ["fp16"], "causal": [False]}
    rows_a, rows_b = selection.apply_filters(frame_a, chosen), selection.apply_filters(frame_b, chosen)
    assert selection.why_none_shared(a, b, rows_a, rows_b, frame_a, frame_b, chosen) == (
        "under the filters no mode in both (A has fwd; B has bwd)")
    chosen = {k: [v] for k, v in PREFERRED.items()}
    rows_a, rows_b = selection.apply_filters(frame_a, chosen), selection.apply_filters(frame_b, chosen)
    assert selection.why_none_shared(a, b, rows_a, rows_b, frame_a, frame_b, chosen) == (
        "under the filters B (bench-h100-gluon-bwd-d128) has no rows: no rows with head_dim 64 (it has 128); "
        "mode fwd (it has bwd)")


def test_a_preferred_tuple_opens_on_its_first_value_every_capture_has():
    """PREFERRED's dtype is an order: fp16 where every capture has it, else fp8 (an fp8 capture beside bf16
    baselines opens on what it was made to show), else the first value that covers every capture."""
    def data(dtypes):
        return pd.DataFrame({"capture": "c", "dtype": dtypes, "head_dim": 64, "causal": False, "mode": "fwd"})

    assert selection.starting_filters(data(["bf16", "fp8"]), selection.PREFERRED)["dtype"] == ["fp8"]
    assert selection.starting_filters(data(["fp16", "fp8"]), selection.PREFERRED)["dtype"] == ["fp16"]
    assert selection.starting_filters(data(["bf16", "fp32"]), selection.PREFERRED)["dtype"] == ["bf16"]
    assert selection.first_choice("dtype", ["bf16", "fp8"], {}, selection.PREFERRED) == ["fp8"]
