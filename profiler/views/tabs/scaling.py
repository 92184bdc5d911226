"""The Scaling tab: time, TFLOP/s, peak memory against the model, and speedup over naive, against the key
length (plots.scaling_figures), two a row; without naive, a bench capture's peers against its baseline
(plots.baseline_figure)."""

from __future__ import annotations

import streamlit as st

from profiler.views import plots
from profiler.views.formatting import baseline_ranges
from profiler.views.tabs.context import Context, chart


def render(ctx: Context) -> None:
    figs = plots.scaling_figures(ctx.drawn)
    left, right = st.columns(2)
    chart(left, figs["time"])
    chart(right, figs["tflops"])
    chart(left, figs["memory"])
    caption = plots.memory_caption(ctx.drawn[ctx.drawn.step == "total"])
    if caption:
        left.caption(caption)
    if figs["speedup"].data:
        chart(right, figs["speedup"])
        return
    # A bench capture names the implementation its ratios are taken against: those ratios stand in for naive's.
    baselines = {ctx.captures[name].meta.get("baseline") for name in ctx.chosen} - {None}
    baseline = baselines.pop() if len(baselines) == 1 else None
    against = plots.baseline_figure(ctx.drawn, baseline) if baseline else None
    if against is not None and against.data:
        chart(right, against)
        # the chart shows the filters' shapes; the README's results rows quote each capture's whole range
        for name in (n for n in ctx.chosen if ctx.captures[n].meta.get("baseline") == baseline):
            ranges = baseline_ranges(ctx.captures[name].frame, baseline)
            if ranges:
                right.caption(f"{name}, every shape whatever the filters: {ranges}")
    right.info("No speedup over naive here: no selected capture timed `naive` at these shapes "
               "(`--impl naive,...` times it).")
