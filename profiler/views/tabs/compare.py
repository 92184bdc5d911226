"""The Compare tab: two captures side by side, B / A on the rows both measured (plots.compare_figure), B
defaulting to the capture that shares the most rows with A (selection.best_b); where they share none, why
and which capture would."""

from __future__ import annotations

import streamlit as st

from profiler.store import KEY
from profiler.views import plots
from profiler.views.selection import apply_filters, best_b, better_b, shape_labels, why_none_shared
from profiler.views.tabs.context import Context, chart
from profiler.views.tabs.loaders import load_one


@st.cache_data(show_spinner=False, max_entries=256)
def measured_keys(folder: str, written: tuple, chosen: tuple[tuple[str, tuple], ...]) -> frozenset[tuple]:
    """The row keys (profiler.store.KEY) of a capture's measured rows under the filters ``chosen``: what
    Compare can pair. Cached per capture and filters, so ranking every capture as B costs a set intersection."""
    frame = load_one(folder, written).frame
    rows = apply_filters(frame[frame.status == "ok"], dict(chosen))
    return frozenset(rows[KEY].itertuples(index=False, name=None))


@st.cache_data(show_spinner=False, max_entries=32)
def shared_with(a: tuple[str, tuple], others: tuple[tuple[str, str, tuple], ...],
                chosen: tuple[tuple[str, tuple], ...]) -> dict[str, int]:
    """How many measured row keys each capture of ``others`` ((name, folder, stamp)) shares with A
    ((folder, stamp)) under the filters ``chosen``: Compare's ranking of B, one cache entry per question,
    so a rerun that changes nothing reads one small dict back."""
    keys_a = measured_keys(*a, chosen)
    return {name: len(keys_a & measured_keys(folder, written, chosen)) for name, folder, written in others}


def render(ctx: Context) -> None:
    names = ctx.names
    if len(names) < 2:
        st.info("Compare needs two captures.")
        return
    drop = {k: v for k, v in ctx.filters.items() if k != "device"}  # the devices of A and B may differ
    col_a, col_b = st.columns(2)
    a = col_a.selectbox("A", names, index=names.index(ctx.chosen[0]))
    rows_a = apply_filters(ctx.captures[a].frame, drop)
    others = [n for n in names if n != a]
    frozen = tuple((k, tuple(v)) for k, v in drop.items())
    a_at = (str(ctx.folders[a]), ctx.stamps[a])
    others_at = tuple((n, str(ctx.folders[n]), ctx.stamps[n]) for n in others)
    sharing = shared_with(a_at, others_at, frozen)
    # Nothing shared under the filters: rank by what is shared without them (a capture of the same kind).
    unfiltered = shared_with(a_at, others_at, ())
    device = {n: ctx.captures[n].meta.get("device", "") for n in names}
    best = best_b(a, others, sharing, unfiltered, device)
    pick = ctx.chosen[1] if len(ctx.chosen) > 1 and ctx.chosen[1] in others else best
    b = col_b.selectbox("B", others, index=others.index(pick),
                        help="defaults to the second selected capture, else the one sharing the most "
                             "(implementation, shape) rows with A under the filters, from A's GPU first")
    if device[a] != device[b]:
        gpu_a, gpu_b = (device[n] or "an unrecorded device" for n in (a, b))
        st.warning(f"A ran on {gpu_a} and B on {gpu_b}: its ratios compare the GPUs as well as the kernels.")
    rows_b = apply_filters(ctx.captures[b].frame, drop)
    fig, joined = plots.compare_figure(rows_a, rows_b, a, b)
    if joined.empty:
        why = why_none_shared(a, b, rows_a, rows_b, ctx.captures[a].frame, ctx.captures[b].frame, drop)
        st.info(f"{a} and {b} share no implementation and shape: {why}.{better_b(a, best, sharing, unfiltered)}")
        return
    st.caption(f"{len(joined)} shared rows under the sidebar's filters.")
    chart(st, fig)
    label, varying = shape_labels(joined)
    values = [c for c in joined if c.startswith(("time_ms ", "tflops ", "speedup"))]
    st.dataframe(joined.assign(shape=label)[["impl", "step", "shape", *values, *varying]], hide_index=True,
                 width="stretch", column_config={c: st.column_config.NumberColumn(format="%.4g") for c in values})
