"""The Validation tab: each selected capture's Nsight Compute counters against the cost model, as a
hierarchical roofline (plots.hierarchical_roofline_figure) and a table; where none has them, which
captures do."""

from __future__ import annotations

import streamlit as st

from profiler.store import Capture
from profiler.views import plots
from profiler.views.selection import apply_filters
from profiler.views.tabs.context import Context, chart
from profiler.views.tabs.loaders import load_validation


def render(ctx: Context) -> None:
    shown = False
    for name in ctx.chosen:
        capture = Capture(ctx.folders[name])
        validation = load_validation(str(capture.path), capture.stamp_of(capture.validation_path))
        if validation is None:
            continue
        shown = True
        kept = apply_filters(validation, {k: v for k, v in ctx.filters.items() if k != "device"})
        st.subheader(f"{name}: Nsight Compute counters vs the cost model")
        st.caption(f"{len(kept)} of {len(validation)} profiled rows under the sidebar's filters")
        if kept.empty:
            st.info("No profiled row matches the filters.")
            continue
        chart(st, plots.hierarchical_roofline_figure(kept, ctx.captures[name].meta, ctx.dtype))
        st.dataframe(plots.validation_table_view(kept), hide_index=True, width="stretch")
    if not shown:
        validated = [n for n in ctx.names if Capture(ctx.folders[n]).validation_path.exists()]
        st.info(f"No hardware-counter validation in {', '.join(ctx.chosen)}: "
                + (f"the captures under `{ctx.reports}` that have one: {', '.join(validated)}; select one in the "
                   "sidebar's Captures. " if validated else "")
                + "`python -m profiler validate` on a GPU makes one.")
