"""The What-if tab: the selection projected onto another GPU's datasheet roofline (plots.whatif_figure), a
model, not a measurement."""

from __future__ import annotations

import streamlit as st

from profiler.model import hardware
from profiler.views import plots
from profiler.views.tabs.context import Context, chart

NEWEST_FIRST = ("B200", "H200", "H100-SXM")  # the GPU the tab opens on: the first of these that can take it


def render(ctx: Context) -> None:
    dtype = ctx.dtype
    # Only GPUs whose datasheet entry has this dtype's peak can take the projection (B200 has no fp32 one):
    # the newest of those first, so a CPU fp32 capture opens on a projection, not on an apology.
    targets = [name for name, gpu in hardware.DEVICES.items() if gpu.peak_flops_or_none(dtype) is not None]
    if not targets:
        st.info(f"No GPU in the datasheet table has a {dtype} peak to project onto.")
        return
    preferred = next((name for name in NEWEST_FIRST if name in targets), targets[0])
    target = st.selectbox("Project onto", targets, index=targets.index(preferred))
    device = hardware.DEVICES[target]
    missing = [name for name in hardware.DEVICES if name not in targets]
    st.caption("A projection from the cost model and the datasheet: each step's intensity (compulsory bytes), "
               f"and the roof of {target} at that intensity. Nothing here was measured on {target}."
               + (f" Not offered, without a peak for {dtype} in the datasheet table: {', '.join(missing)}."
                  if missing else ""))
    chart(st, plots.whatif_figure(ctx.drawn[ctx.drawn.status == "ok"], device, dtype))
