"""The Step breakdown tab: naive attention's time per step (plots.step_breakdown_figure), and the model's
memory trips of the score matrix, naive against fused (plots.hbm_trips_table)."""

from __future__ import annotations

import streamlit as st

from profiler.views import plots
from profiler.views.selection import naive_step_rows
from profiler.views.style import family_label
from profiler.views.tabs.context import Context, chart


def render(ctx: Context) -> None:
    scale = st.radio("Show", ["share", "ms"], horizontal=True, key="step-scale",
                     help="share: each step's part of the four steps' time (every N readable); ms: milliseconds")
    if naive_step_rows(ctx.data).empty:  # not hidden by a filter: none of the selected captures timed them
        found = [n for n in ctx.names if not naive_step_rows(ctx.captures[n].frame).empty]
        where = (f"The captures under `{ctx.reports}` that have them: {', '.join(found)}. Select one in the "
                 f"sidebar's Captures, or open it with `{ctx.launch} -- --reports {ctx.reports} --select "
                 f"{found[0]}`." if found else
                 "No capture here has any: `python -m profiler capture --impl naive,...` times them.")
        st.info(f"No naive steps in {', '.join(ctx.chosen)}: this tab splits naive attention's time into QKᵀ, "
                f"scale/mask, softmax and PV, which `capture` and `bench` time when `naive` is among the "
                f"implementations (`--impl naive,...`). {where}")
    else:
        chart(st, plots.step_breakdown_figure(ctx.drawn, scale, device_type=ctx.device_type))
        st.caption(f"Times by {ctx.timer}.")
    # A shape the selection measured (naive's, where it has steps): its longest, at that length's own
    # batch (a --tokens sweep runs its longest N at its smallest batch), as the forward.
    steps = naive_step_rows(ctx.view)
    measured = ctx.view if steps.empty else steps
    shape = plots.trips_shape(measured.loc[measured.seq_kv.idxmax()])
    family = family_label(shape.to_row())
    matrix, lengths = plots.trips_heading(shape)
    st.markdown(f"**{ctx.memory} trips of the {matrix}, naive vs fused** (model, {family}, {lengths})")
    st.dataframe(plots.hbm_trips_table(shape, device_type=ctx.device_type), hide_index=True)
