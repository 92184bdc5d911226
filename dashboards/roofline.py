"""Explore attention captures: roofline, scaling, decode bandwidth, per-step breakdown, comparisons,
traces, what-if.

    streamlit run dashboards/roofline.py                      # captures under reports/
    streamlit run dashboards/roofline.py -- --reports DIR     # or another folder of captures

Needs no GPU: the H200 reference capture in reports/ opens by default. Loading and maths live in
profiler/ (store, model, views); this file is layout and widgets only. Every tab follows the
sidebar: the selected captures and every filter. ``?tab=Step+breakdown`` opens a tab by its name.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run` from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

from profiler.model import cost_model as cm  # noqa: E402
from profiler.model import hardware  # noqa: E402
from profiler.model.presets import PRESETS, preset_of  # noqa: E402
from profiler.store import CaptureError, discover_captures, load_capture  # noqa: E402
from profiler.views import plots, rooflines  # noqa: E402

DEFAULT_CAPTURE = "reference-h200"
TABS = ["Roofline", "Scaling", "Bandwidth", "Step breakdown", "Compare", "Trace", "What-if", "Validation"]
# Filters that pick one value at first (so the first view is one shape family), and which.
PREFERRED = {"dtype": "fp16", "head_dim": 64, "causal": False, "mode": "fwd"}


def reports_dir() -> Path:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--reports", default=os.environ.get("ATTN_REPORTS", str(ROOT / "reports")))
    args, _ = parser.parse_known_args(sys.argv[1:])
    return Path(args.reports)


@st.cache_data(show_spinner="Loading captures ...")
def load_all(root: str) -> tuple[dict[str, tuple[dict, pd.DataFrame]], list[str]]:
    return discover_captures(root)


@st.cache_data
def load_one(path: str) -> tuple[dict, pd.DataFrame]:
    return load_capture(path)


@st.cache_data
def load_validation(path: str) -> pd.DataFrame | None:
    file = Path(path) / "validation.parquet"
    return pd.read_parquet(file) if file.exists() else None


@st.cache_data
def load_kernels(path: str) -> tuple[str, pd.DataFrame] | None:
    """(where the kernels come from, the kernel table) of a capture folder."""
    for name, source in (("nsys_gpu_ops.parquet", "Nsight Systems export"), ("kernels.parquet", "torch profiler")):
        if (Path(path) / name).exists():
            frame = pd.read_parquet(Path(path) / name)
            return source, frame[frame.kind == "kernel"] if "kind" in frame else frame
    return None


def with_capture(name: str, meta: dict, frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["capture"], frame["device"] = name, meta.get("device", "?")
    return frame


def apply_filters(frame: pd.DataFrame, chosen: dict) -> pd.DataFrame:
    """The rows of ``frame`` (a capture's results or a validation table) that every filter keeps;
    a filter on a column the frame lacks keeps everything."""
    mask = pd.Series(True, index=frame.index)
    for column, values in chosen.items():
        if column in frame:
            mask &= frame[column].isin(values)
    return frame[mask]


st.set_page_config(page_title="Attention roofline", layout="wide")
st.title("Attention roofline")

root = reports_dir()
captures, problems = load_all(str(root))
folders = {name: root / name for name in captures}
for problem in problems:
    st.warning(problem)

with st.sidebar:
    st.header("Captures")
    extra = st.text_input("Add a capture folder (path)", help="a folder made by `python -m profiler capture`")
    added = None
    if extra:
        try:
            added = Path(extra).name
            captures[added] = load_one(extra)
            folders[added] = Path(extra)
        except CaptureError as err:
            st.error(f"Not a capture: {err}")
            added = None

if not captures:
    st.info(
        f"No captures found in `{root}`. Make one with `python -m profiler capture --seq 8192` "
        "(or `make demo`), then reload this page."
    )
    st.stop()

names = list(captures)
default = [added] if added else ([DEFAULT_CAPTURE] if DEFAULT_CAPTURE in captures else names[:1])
with st.sidebar:
    chosen_captures = st.multiselect("Captures", names, default=default, key=f"captures-{added or ''}")
    if not chosen_captures:
        st.info("Pick at least one capture.")
        st.stop()
    data = pd.concat([with_capture(n, *captures[n]) for n in chosen_captures], ignore_index=True)
    st.header("Filters")
    filters: dict[str, list] = {}
    # A model preset picks heads, K/V heads and head_dim at once (those of the models the data has).
    in_data = {preset_of(*r) for r in data[["heads", "kv_heads", "head_dim"]].drop_duplicates().itertuples(index=False)}
    presets = ["any"] + [name for name in PRESETS if name in in_data]
    preset = st.selectbox("Model preset", presets, help="; ".join(f"{n}: {p.heads} heads, {p.kv_heads} K/V heads, "
                                                                 f"D{p.head_dim}" for n, p in PRESETS.items()))
    fixed = {} if preset == "any" else dict(zip(("heads", "kv_heads", "head_dim"), PRESETS[preset][:3]))

    def choose(label: str, column: str):
        options = sorted(data[column].dropna().unique().tolist(), key=str)
        if column in fixed:
            filters[column] = [fixed[column]]
            return
        prefer = PREFERRED.get(column)
        start = options if column not in PREFERRED else ([prefer] if prefer in options else options[:1])
        filters[column] = st.multiselect(label, options, default=start)

    for label, column in (("Device", "device"), ("dtype", "dtype"), ("head_dim", "head_dim"), ("causal", "causal"),
                          ("Mode", "mode"), ("Batch", "batch"), ("Heads", "heads"), ("K/V heads", "kv_heads"),
                          ("Query length", "seq_q"), ("Implementation", "impl"), ("Step", "step")):
        choose(label, column)
    seqs = sorted(data.seq_kv.unique().tolist())
    lo, hi = st.select_slider("Key length (N for square shapes)", options=seqs, value=(seqs[0], seqs[-1])) \
        if len(seqs) > 1 else (seqs[0], seqs[0])
    filters["seq_kv"] = [n for n in seqs if lo <= n <= hi]
    bound_filter = st.multiselect("Bound", ["memory", "compute"], default=["memory", "compute"],
                                  help="as the roofline judges it for the bytes chosen below")
    bytes_kind = st.radio("Bytes for intensity", ["compulsory", "tile"], horizontal=True,
                          help="compulsory: Q, K, V read once, against the HBM roof; tile: each block's re-reads, "
                               "against the L2 bandwidth `ceilings` measured")

view = apply_filters(data, filters)
meta = captures[chosen_captures[0]][0]
dtype = view.dtype.iloc[0] if not view.empty else "fp16"
roofs = rooflines.roofs_from_meta(meta, dtype, bytes_kind)
exp2 = rooflines.exp_rate(meta)
points = rooflines.roofline_points(view, roofs, bytes_kind, exp2)
if roofs and set(bound_filter) != {"memory", "compute"}:
    keep = points[points.view_bound.isin(bound_filter)].index
    view = view[(view.status != "ok") | view.index.isin(keep)]
    points = points.loc[points.index.isin(keep)]
st.caption(f"{len(view):,} of {len(data):,} rows · {', '.join(chosen_captures)} · device {meta.get('device')} · "
           f"torch {meta.get('torch')} · triton {meta.get('triton')} · measured {meta.get('time', '?')}")
if view.empty:
    st.warning("No rows match the filters.")
    st.stop()
if view.dtype.nunique() > 1:
    st.info(f"Several dtypes are selected: the roofs drawn are those of {dtype}.")

tabs = dict(zip(TABS, st.tabs(TABS, key="tab", bind="query-params")))

with tabs["Roofline"]:
    if not roofs:
        st.warning("This capture holds no L2 bandwidth measurement (`python -m profiler ceilings` measures one): "
                   "tile intensities are drawn without a roof, and no bound is judged." if bytes_kind == "tile"
                   else "No roof for this dtype in the capture's metadata.")
    st.plotly_chart(rooflines.roofline_figure(view, roofs, bytes_kind, exp2_per_s=exp2), width="stretch")
    notes = [f"{roofs[0].label}: ridge {roofs[0].ridge:.0f} FLOP/B"] if roofs else []
    if exp2 is not None:
        notes.append(f"exp ceiling: softmax's exponentials at {exp2 / 1e12:.2f}·10¹² exp2/s on the SFUs (CUDA "
                     "throughput table; FlashAttention-3 §3.1) cap a fused kernel that does not overlap them with "
                     "its matmuls at the measured matmul rate; a point above it overlaps them")
    st.caption(" · ".join(notes))
    table = points[["capture", "impl", "step", "mode", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                    "dtype", "causal",
                    "time_ms", "tflops", "x", "view_bound", "of_roof", "binds", "of_ceiling"]].rename(columns={
                        "x": "FLOP/B", "view_bound": "bound", "of_roof": "% of roof", "binds": "binding ceiling",
                        "of_ceiling": "% of binding ceiling"})
    for column in ("% of roof", "% of binding ceiling"):
        table[column] = table[column] * 100
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "% of roof": st.column_config.NumberColumn(format="%.1f%%"),
        "% of binding ceiling": st.column_config.NumberColumn(format="%.1f%%"),
        "FLOP/B": st.column_config.NumberColumn(format="%.3g"), "tflops": st.column_config.NumberColumn(format="%.4g")})
    not_ok = view[(view.status != "ok") & (view.step == "total")]
    if not not_ok.empty:
        st.caption(f"Not on the chart: {len(not_ok)} case(s) that did not run (oom, unsupported, error):")
        st.dataframe(not_ok[["capture", "impl", "mode", "kv_heads", "seq_q", "seq_kv", "head_dim", "dtype", "causal",
                             "status", "message"]],
                     hide_index=True, width="stretch")

with tabs["Scaling"]:
    figs = plots.scaling_figures(view)
    left, right = st.columns(2)
    left.plotly_chart(figs["time"], width="stretch")
    right.plotly_chart(figs["tflops"], width="stretch")
    left.plotly_chart(figs["memory"], width="stretch")
    right.plotly_chart(figs["speedup"], width="stretch")

with tabs["Bandwidth"]:
    st.plotly_chart(plots.bandwidth_figure(view, meta), width="stretch")
    decode = view[(view.step == "total") & (view.status == "ok") & (view.seq_q < view.seq_kv)]
    copy = (meta.get("measured_ceilings") or {}).get("copy_gbps")
    if not decode.empty:
        shown = decode[["capture", "impl", "path", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                        "dtype", "time_ms", "gbps"]].copy()
        shown["of measured copy"] = shown.gbps / copy * 100 if copy else None
        st.caption("GB/s counts the model's compulsory bytes (Q, K, V read once, O and the logsumexp written once): "
                   "what any kernel must move. Above the copy line is possible: a read-mostly stream outruns a copy.")
        st.dataframe(shown.sort_values(["batch", "seq_q", "seq_kv", "impl"]), hide_index=True, width="stretch",
                     column_config={"of measured copy": st.column_config.NumberColumn(format="%.0f%%"),
                                    "gbps": st.column_config.NumberColumn(format="%,.0f")})

with tabs["Step breakdown"]:
    scale = st.radio("Show", ["share", "ms"], horizontal=True, key="step-scale",
                     help="share: each step's part of the four steps' time (every N readable); ms: milliseconds")
    st.plotly_chart(plots.step_breakdown_figure(view, scale), width="stretch")
    first = view.iloc[0]
    shape = replace(cm.Shape.from_row(first), seq_q=int(hi), seq_kv=int(hi), mode="fwd")
    family = plots.family_label(shape.batch, shape.heads, shape.kv_heads, shape.head_dim, shape.dtype, shape.causal,
                                "fwd")
    st.markdown(f"**HBM trips of the N×N matrix, naive vs fused** (model, {family}, N={hi})")
    st.dataframe(plots.hbm_trips_table(shape), hide_index=True)

with tabs["Compare"]:
    if len(names) < 2:
        st.info("Compare needs two captures.")
    else:
        col_a, col_b = st.columns(2)
        a = col_a.selectbox("A", names, index=names.index(chosen_captures[0]))
        others = [n for n in names if n != a]
        b = col_b.selectbox("B", others, index=others.index(chosen_captures[1]) if len(chosen_captures) > 1
                            and chosen_captures[1] in others else 0)
        drop = {k: v for k, v in filters.items() if k != "device"}  # the devices of A and B may differ
        fig, joined = plots.compare_figure(apply_filters(captures[a][1], drop), apply_filters(captures[b][1], drop),
                                           a, b)
        if joined.empty:
            st.info("These captures share no implementation and shape under the current filters.")
        else:
            st.caption(f"{len(joined)} shared rows under the sidebar's filters.")
            st.plotly_chart(fig, width="stretch")
            st.dataframe(joined, hide_index=True, width="stretch")

with tabs["Trace"]:
    found = False
    for name in chosen_captures:
        loaded = load_kernels(str(folders[name]))
        if loaded is None or loaded[1].empty:
            continue
        source, kernels = loaded
        kernels = apply_filters(kernels, {k: v for k, v in filters.items()
                                          if k in ("impl", "seq_q", "seq_kv", "kv_heads", "mode")})
        if kernels.empty:
            continue
        found = True
        impls = sorted(kernels.impl.unique()) if "impl" in kernels else [None]
        impl = st.selectbox(f"{name}: implementation", impls, key=f"trace-{name}")
        subset = kernels if impl is None else kernels[kernels.impl == impl]
        run = ""
        if "trace" in subset:
            run = f" · file traces/{subset.trace.iloc[0]}"
        elif {"seq_q", "head_dim"} <= set(subset.columns):
            run = f" · N={subset.seq_q.iloc[0]} D={subset.head_dim.iloc[0]}"
        st.caption(f"{name}: {source}, {len(subset):,} kernels{run}")
        st.plotly_chart(plots.trace_figure(subset), width="stretch")
    if not found:
        st.info("No trace data for this selection: capture on a GPU with `--trace torch`, or run "
                "scripts/nsys_profile.sh.")

with tabs["What-if"]:
    target = st.selectbox("Project onto", list(hardware.DEVICES), index=list(hardware.DEVICES).index("B200"))
    device = hardware.DEVICES[target]
    if device.peak_flops_or_none(dtype) is None:
        st.info(f"{target} has no {dtype} peak in the datasheet table: pick another GPU to project onto.")
    else:
        st.caption("A projection from the cost model and the datasheet: each step's intensity (compulsory bytes), "
                   f"and the roof of {target} at that intensity. Nothing here was measured on {target}.")
        st.plotly_chart(plots.whatif_figure(view, device, dtype), width="stretch")

with tabs["Validation"]:
    shown = False
    for name in chosen_captures:
        validation = load_validation(str(folders[name]))
        if validation is None:
            continue
        shown = True
        kept = apply_filters(validation, {k: v for k, v in filters.items() if k != "device"})
        st.subheader(f"{name}: Nsight Compute counters vs the cost model")
        st.caption(f"{len(kept)} of {len(validation)} profiled rows under the sidebar's filters")
        if kept.empty:
            st.info("No profiled row matches the filters.")
            continue
        st.plotly_chart(plots.hierarchical_roofline_figure(kept, captures[name][0], dtype), width="stretch")
        st.dataframe(plots.validation_table_view(kept), hide_index=True, width="stretch")
    if not shown:
        st.info("No hardware-counter validation in these captures: run `python -m profiler validate` on a GPU "
                "(the shipped example is reports/validate-h200).")
