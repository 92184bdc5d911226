"""The Trace tab: each selected capture's GPU kernels per range (plots.trace_figure), from its torch profiler
or Nsight Systems kernel table, one implementation at a time."""

from __future__ import annotations

import streamlit as st

from profiler.store import Capture
from profiler.views import plots
from profiler.views.selection import apply_filters
from profiler.views.tabs.context import Context, chart
from profiler.views.tabs.loaders import load_kernels

# The sidebar's filters a kernel table can take (its columns; the rest are the rows' own).
TRACE_FILTERS = ("impl", "seq_q", "seq_kv", "kv_heads", "mode")


def render(ctx: Context) -> None:
    found = False
    for name in ctx.chosen:
        capture = Capture(ctx.folders[name])
        loaded = load_kernels(str(capture.path), capture.stamp_of(capture.nsys_gpu_ops_path, capture.kernels_path))
        if loaded is None or loaded[1].empty:
            continue
        source, kernels = loaded
        kernels = apply_filters(kernels, {k: v for k, v in ctx.filters.items() if k in TRACE_FILTERS})
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
        chart(st, plots.trace_figure(subset))
    if not found:
        st.info("No trace data for this selection: capture on a GPU with `--trace torch`, or run "
                "scripts/nsys_profile.sh.")
