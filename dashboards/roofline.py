"""Explore attention captures: roofline, scaling, per-step breakdown, comparisons, traces, what-if.

    streamlit run dashboards/roofline.py                      # captures under reports/
    streamlit run dashboards/roofline.py -- --reports DIR     # or another folder of captures

Needs no GPU: the H200 reference capture in reports/ opens by default. Loading and maths live in
profiler/ (store, cost_model, plots); this file is layout and widgets only.
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
from profiler.store import CaptureError, discover_captures, load_capture  # noqa: E402
from profiler.views import plots  # noqa: E402

DEFAULT_CAPTURE = "reference-h200"


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
def load_kernels(path: str) -> pd.DataFrame | None:
    for name in ("nsys_gpu_ops.parquet", "kernels.parquet"):
        if (Path(path) / name).exists():
            frame = pd.read_parquet(Path(path) / name)
            return frame[frame.kind == "kernel"] if "kind" in frame else frame
    return None


def with_capture(name: str, meta: dict, frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["capture"], frame["device"] = name, meta.get("device", "?")
    return frame


st.set_page_config(page_title="Attention roofline", layout="wide")
st.title("Attention roofline")

root = reports_dir()
captures, problems = load_all(str(root))
for problem in problems:
    st.warning(problem)

with st.sidebar:
    st.header("Captures")
    extra = st.text_input("Add a capture folder (path)", help="a folder made by `python -m profiler capture`")
    if extra:
        try:
            meta, frame = load_one(extra)
            captures[Path(extra).name] = (meta, frame)
        except CaptureError as err:
            st.error(f"Not a capture: {err}")

if not captures:
    st.info(
        f"No captures found in `{root}`. Make one with `python -m profiler capture --seq 8192` "
        "(or `make demo`), then reload this page."
    )
    st.stop()

names = list(captures)
default = [DEFAULT_CAPTURE] if DEFAULT_CAPTURE in captures else names[:1]
with st.sidebar:
    chosen = st.multiselect("Captures", names, default=default)
    if not chosen:
        st.info("Pick at least one capture.")
        st.stop()
    data = pd.concat([with_capture(n, *captures[n]) for n in chosen], ignore_index=True)
    st.header("Filters")

    def choose(label: str, column: str, prefer=None):
        """A multiselect over the column's values; with ``prefer``, one value is picked at first
        (the preferred one when present) so the first view is one shape family, not all mixed."""
        options = sorted(data[column].dropna().unique().tolist(), key=str)
        if prefer is None:
            default = options
        else:
            default = [prefer] if prefer in options else options[:1]
        return data[column].isin(st.multiselect(label, options, default=default))

    mask = choose("Device", "device") & choose("dtype", "dtype", prefer="fp16")
    mask &= choose("head_dim", "head_dim", prefer=64) & choose("causal", "causal", prefer=False)
    mask &= choose("Mode", "mode", prefer="fwd") & choose("Implementation", "impl")
    seqs = sorted(data.seq_q.unique().tolist())
    lo, hi = st.select_slider("Sequence length", options=seqs, value=(seqs[0], seqs[-1])) if len(seqs) > 1 \
        else (seqs[0], seqs[0])
    mask &= data.seq_q.between(lo, hi)
    bytes_kind = st.radio("Bytes for intensity", ["compulsory", "tile"], horizontal=True,
                          help="compulsory: Q, K, V read once (DRAM); tile: K and V re-read by each query block (L2)")

view = data[mask]
meta = captures[chosen[0]][0]
dtype = view.dtype.iloc[0] if not view.empty else "fp16"
st.caption(f"{len(view):,} of {len(data):,} rows · {', '.join(chosen)} · device {meta.get('device')} · "
           f"torch {meta.get('torch')} · triton {meta.get('triton')} · measured {meta.get('time', '?')}")
if view.empty:
    st.warning("No rows match the filters.")
    st.stop()

roofline_tab, scaling_tab, steps_tab, compare_tab, trace_tab, whatif_tab, validation_tab = st.tabs(
    ["Roofline", "Scaling", "Step breakdown", "Compare", "Trace", "What-if", "Validation"])

with roofline_tab:
    st.plotly_chart(plots.roofline_figure(view, plots.roofs_from_meta(meta, dtype), bytes_kind,
                                          title=f"Roofline ({bytes_kind} bytes, {dtype})"), width="stretch")
    totals = view[view.step == "total"]
    st.dataframe(totals[["capture", "impl", "mode", "seq_q", "head_dim", "dtype", "causal", "time_ms", "tflops",
                         "arithmetic_intensity", "bound", "roof_fraction", "peak_mem_bytes", "status", "message"]],
                 hide_index=True, width="stretch")

with scaling_tab:
    figs = plots.scaling_figures(view)
    left, right = st.columns(2)
    left.plotly_chart(figs["time"], width="stretch")
    right.plotly_chart(figs["tflops"], width="stretch")
    left.plotly_chart(figs["memory"], width="stretch")
    right.plotly_chart(figs["speedup"], width="stretch")

with steps_tab:
    st.plotly_chart(plots.step_breakdown_figure(view), width="stretch")
    first = view.iloc[0]
    shape = replace(cm.Shape.from_row(first), seq_q=int(hi), seq_kv=int(hi), mode="fwd")
    st.markdown(f"**HBM trips of the N×N matrix, naive vs fused** (model, N={hi}, forward)")
    st.dataframe(plots.hbm_trips_table(shape), hide_index=True)

with compare_tab:
    if len(names) < 2:
        st.info("Compare needs two captures under the reports folder.")
    else:
        col_a, col_b = st.columns(2)
        a = col_a.selectbox("A", names, index=0)
        b = col_b.selectbox("B", names, index=1)
        fig, joined = plots.compare_figure(captures[a][1], captures[b][1], a, b)
        if joined.empty:
            st.info("These captures share no implementation and shape.")
        else:
            st.plotly_chart(fig, width="stretch")
            st.dataframe(joined, hide_index=True, width="stretch")

with trace_tab:
    found = False
    for name in chosen:
        kernels = load_kernels(str(root / name))
        if kernels is not None and not kernels.empty:
            found = True
            impls = sorted(kernels.impl.unique()) if "impl" in kernels else [None]
            impl = st.selectbox(f"{name}: implementation", impls)
            subset = kernels if impl is None else kernels[kernels.impl == impl]
            st.plotly_chart(plots.trace_figure(subset), width="stretch")
    if not found:
        st.info("No trace data in these captures: capture on a GPU with `--trace torch`, or run "
                "scripts/nsys_profile.sh.")

with whatif_tab:
    target = st.selectbox("Project onto", list(hardware.DEVICES), index=list(hardware.DEVICES).index("B200"))
    device = hardware.DEVICES[target]
    try:
        device.peak_flops(dtype)
        has_peak = True
    except (KeyError, ValueError):
        has_peak = False
    if not has_peak:
        st.info(f"{target} has no {dtype} peak in the datasheet table: pick another GPU to project onto.")
    else:
        st.caption("A projection from the cost model and the datasheet: each step's intensity, and the roof "
                   f"of {target} at that intensity. Nothing here was measured on {target}.")
        st.plotly_chart(plots.whatif_figure(view, device, dtype, bytes_kind), width="stretch")

with validation_tab:
    shown = False
    for name in chosen:
        validation = load_validation(str(root / name))
        if validation is None:
            continue
        shown = True
        st.subheader(f"{name}: Nsight Compute counters vs the cost model")
        st.plotly_chart(plots.hierarchical_roofline_figure(validation, captures[name][0], dtype), width="stretch")
        st.dataframe(plots.validation_table_view(validation), hide_index=True, width="stretch")
    if not shown:
        st.info("No hardware-counter validation in these captures: run `python -m profiler validate` on a GPU "
                "(the shipped example is reports/validate-h200).")
