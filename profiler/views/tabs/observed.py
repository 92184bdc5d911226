"""The Observed tab: each selected capture of a real run (``python -m profiler observe``) whole, the
sidebar's filters aside: attention's share of the run, time by call site, the rows with the most time, the
calls on the roofline beside their replays, and what each replayed implementation would save
(profiler.views.observed)."""

from __future__ import annotations

import streamlit as st

from profiler.views import observed
from profiler.views.tabs.context import Context, chart


def render(ctx: Context) -> None:
    runs = [n for n in ctx.chosen if observed.has_observed(ctx.captures[n].frame)]
    if not runs:
        found = [n for n in ctx.names if observed.has_observed(ctx.captures[n].frame)]
        st.info(f"{', '.join(ctx.chosen)} {'holds' if len(ctx.chosen) == 1 else 'hold'} no observed run: "
                f"`{observed.HOW_TO}` records the attention calls of a real run"
                + (f" (observed here: {', '.join(found)})." if found else "."))
    for name in runs:
        run_meta, frame = ctx.captures[name]
        summary = observed.summary_of(run_meta)
        st.subheader(f"{name}: {summary.get('command') or run_meta.get('command') or 'observed run'}")
        share, warnings = observed.sentences(run_meta)
        st.markdown(f"**{share}**")
        for line in warnings:
            st.warning(line)
        st.caption(f"{summary.get('calls', '?')} calls in {len(observed.observed_rows(frame))} rows (one per site, "
                   f"shape, mask and mode) · clock: {summary.get('clock', '?')} · the whole run: the sidebar's "
                   "filters do not apply here")
        chart(st, observed.site_figure(frame), key=f"observed-sites-{name}")
        st.markdown(f"**The {observed.TOP} rows with the most time**")
        top = observed.top_table(frame)
        st.dataframe(top.assign(**{"of roof": top["of roof"] * 100}), hide_index=True, width="stretch",
                     column_config={"of roof": st.column_config.NumberColumn(format="%.1f%%"),
                                    **{c: st.column_config.NumberColumn(format="%.4g")
                                       for c in ("total ms", "median ms", "TFLOP/s", "GB/s")}})
        fig, note = observed.roofline(frame, run_meta)
        chart(st, fig, key=f"observed-roofline-{name}")
        st.caption(note)
        whole, per_row, sentence = observed.savings_tables(frame, run_meta)
        if sentence is None:
            st.caption("No replay yet: `python -m profiler observe --replay IMPLS ...` re-runs the observed shapes "
                       "through registered implementations and says what each would save.")
            continue
        st.markdown(f"**{sentence}**")
        st.dataframe(whole, hide_index=True, width="stretch", column_config={
            "run speedup": st.column_config.NumberColumn(format="%.3fx"),
            **{c: st.column_config.NumberColumn(format="%.4g") for c in ("attention ms", "would take ms", "saved ms")}})
        with st.expander("Per site, shape and mode"):
            st.dataframe(per_row, hide_index=True, width="stretch")
