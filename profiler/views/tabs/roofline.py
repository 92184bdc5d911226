"""The Roofline tab: every filtered row on the roofline of the chosen bytes, its notes, the table of the
points (tables.roofline_table) and the cases that are not on the chart."""

from __future__ import annotations

import streamlit as st

from profiler.views import rooflines
from profiler.views.selection import not_drawn, shape_labels
from profiler.views.style import families_title
from profiler.views.tables import roofline_table
from profiler.views.tabs.context import Context, chart

# Why a case is listed under the chart instead of drawn, by status.
NOT_OK = {"wrong": "failed the correctness check", "oom": "out of memory", "unsupported": "not supported",
          "error": "failed", "interpreted": "ran in the Triton interpreter, no kernel time"}


def render(ctx: Context) -> None:
    roofs, drawn, points = ctx.roofs, ctx.drawn, ctx.points
    if not roofs:
        st.warning("This capture holds no L2 bandwidth measurement (`python -m profiler ceilings` measures one): "
                   "tile intensities are drawn without a roof, and no bound is judged." if ctx.bytes_kind == "tile"
                   else "No roof for this dtype in the capture's metadata.")
    work = st.radio("FLOPs", ["useful", "issued"], horizontal=True, key="work", help=(
        "useful: the convention, 4·B·H·Nq·Nkv·D (half of it causal, 2.5x backward), the same for every kernel; "
        "issued: the tensor FLOPs each kernel really issues (whole tiles on the causal diagonal and at ragged "
        "ends, a decode step's rows padded to a tile, unfused attention's full scores), as Nsight Compute "
        "counts them (`validate` checks the model)"))
    notes = []
    title = None
    if work == "issued":
        drawn, left_out = rooflines.issued_work(drawn, ctx.meta, compute=True)
        issued_view, _ = rooflines.issued_work(ctx.view, ctx.meta, compute=True)
        points = rooflines.roofline_points(issued_view, roofs, ctx.bytes_kind, ctx.exp2_per_s)
        title = f"{rooflines.ISSUED_TITLE}, {ctx.bytes_kind} bytes: {families_title(ctx.drawn)}"
        notes += [n for n in (left_out, "a point rises and moves right by what its kernel issues beyond the useful "
                                        "FLOPs (hover: the factor)") if n]
    chart(st, rooflines.roofline_figure(drawn, roofs, ctx.bytes_kind, title=title, exp2_per_s=ctx.exp2_per_s,
                                        device_type=ctx.device_type))
    notes = ([f"{roofs[0].label}: ridge {roofs[0].ridge:.0f} FLOP/B"] if roofs else []) + notes
    if ctx.bytes_kind == "tile" and rooflines.untiled_note(drawn):
        notes.append(rooflines.untiled_note(drawn))
    if ctx.device_type == "cpu" and ctx.bytes_kind == "compulsory":
        notes.append(f"memory roof: the {ctx.memory} copy bandwidth this capture measured (a CPU has no datasheet "
                     f"here); times by {ctx.timer}")
    if ctx.exp2_per_s is not None:
        notes.append(f"exp ceiling: softmax's exponentials at {ctx.exp2_per_s / 1e12:.2f}·10¹² exp2/s on the SFUs "
                     "(CUDA throughput table; FlashAttention-3 §3.1) cap a fused kernel that does not overlap them "
                     "with its matmuls at the measured matmul rate; a point above it overlaps them")
    size_note = rooflines.size_roof_note(ctx.meta) if ctx.bytes_kind == "compulsory" and work == "useful" else ""
    if size_note:
        notes.append(size_note)
    st.caption(" · ".join(notes))
    st.dataframe(roofline_table(points), hide_index=True, width="stretch", column_config={
        # wide enough for "gluon-ws" and "split-kv x16": sized by its first rows (peers' rows have no path), the column
        # cut them short
        "path": st.column_config.TextColumn(width="medium", help="the kernel path the implementation took"),
        "% of roof": st.column_config.NumberColumn(format="%.1f%%"),
        "% of roof at its size": st.column_config.NumberColumn(
            format="%.1f%%", help="against the measured matmul and a device copy of the step's own bytes, "
                                  "measured in the same run (a small step cannot reach a large copy's rate)"),
        "% of binding ceiling": st.column_config.NumberColumn(format="%.1f%%"),
        "rounds' spread (%)": st.column_config.NumberColumn(
            format="%.1f%%", help="timed in rounds (--rounds): the slowest round's median time over the fastest's, "
                                  "minus one; the row is the median round"),
        "time (ms)": st.column_config.NumberColumn(format="%.4g"),
        "FLOP/B": st.column_config.NumberColumn(format="%.3g"),
        "TFLOP/s": st.column_config.NumberColumn(format="%.4g")})
    not_ok = not_drawn(ctx.view)
    if not not_ok.empty:
        counts = not_ok.status.value_counts()
        st.caption(f"Not on the chart: {len(not_ok)} case(s): " + ", ".join(
            f"{n} {status} ({NOT_OK.get(status, status)})" for status, n in counts.items()))
        label, _ = shape_labels(not_ok)
        listed = not_ok.assign(shape=label)
        st.dataframe(listed[["capture", "impl", "step", "shape", "status", "max_rel_err", "time_ms", "message"]],
                     hide_index=True, width="stretch",
                     column_config={"max_rel_err": st.column_config.NumberColumn(format="%.3g")})
