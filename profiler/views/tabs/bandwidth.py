"""The Bandwidth tab: decode's achieved GB/s against the memory roofs (plots.bandwidth_figure) and the
table of decode rows; where the selection has none, which captures do."""

from __future__ import annotations

import streamlit as st

from profiler.model.roofs import Roofs
from profiler.views import plots
from profiler.views.selection import decode_rows, why_empty
from profiler.views.tables import decode_table
from profiler.views.tabs.context import Context, chart


def render(ctx: Context) -> None:
    decode = decode_rows(ctx.drawn)
    if decode.empty:
        here = decode_rows(ctx.data)
        if not here.empty:
            st.info("The selected captures have decode rows (fewer queries than keys), but the filters leave none: "
                    + why_empty(here, ctx.filters) + ".")
        else:
            found = [n for n in ctx.names if not decode_rows(ctx.captures[n].frame).empty]
            where = (f"The captures under `{ctx.reports}` that have them: {', '.join(found)}. Select one in the "
                     f"sidebar's Captures, or open it with `{ctx.launch} -- --reports {ctx.reports} --select "
                     f"{found[0]}`." if found else
                     "No capture here has any: capture decode shapes with `python -m profiler capture --seq-q 1 "
                     "--seq-kv 4096,32768`.")
            st.info(f"No decode rows (fewer queries than keys, seq_q < seq_kv) in {', '.join(ctx.chosen)}: "
                    f"this tab draws achieved GB/s for those. {where}")
        return
    curves = {name: getattr(Roofs.from_meta(ctx.captures[name].meta).measured, "copy_curve", None)
              for name in ctx.chosen}  # each capture's own, measured in its run
    chart(st, plots.bandwidth_figure(ctx.drawn, ctx.meta, curves))
    st.caption("GB/s counts the model's compulsory bytes (Q, K, V read once, O and the logsumexp written once): "
               f"what any kernel must move through {ctx.memory}. Above the copy line is possible: a read-mostly "
               "stream outruns a copy. The grey dotted line, where the capture measured one, is what a copy of "
               "the step's own bytes reached in the same run: a small step pays a copy's fixed cost (launch, "
               "the first requests' latency, the ramp and the tail) on fewer bytes.")
    measured = Roofs.from_meta(ctx.meta).measured
    copy = None if measured is None else measured.copy_gbps
    st.dataframe(decode_table(decode, copy, plots.copy_curves(decode, ctx.meta, curves)), hide_index=True,
                 width="stretch",
                 column_config={"of measured copy": st.column_config.NumberColumn(format="%.0f%%"),
                                "of a copy its size": st.column_config.NumberColumn(
                                    format="%.0f%%", help="of the rate a device copy of the step's own bytes "
                                                          "reached in the same run"),
                                "gbps": st.column_config.NumberColumn(format="%,.0f")})
