"""Plot builders: pure functions from capture DataFrames to plotly figures.

Shared by the Streamlit dashboard (dashboards/roofline.py) and ``python -m profiler report``; no
Streamlit here, and plotly is imported only by the views (the capture path never loads it).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attention_core.shape import NAIVE_STEPS, ROW_KEY, Shape, lengths_label
from profiler.model import hardware
from profiler.model.fused import compulsory_bytes
from profiler.model.memory import predicted_peak_bytes
from profiler.model.naive import naive_step_bytes
from profiler.model.roofs import Roofs, attainable_flops
from profiler.registry import REGISTRY, baseline_impl
from profiler.views.rooflines import Roof, label_box_px, roofline_figure, roofline_points, roofs_from_meta  # noqa: F401
from profiler.views.selection import naive_step_rows
from profiler.views.style import (  # noqa: F401
    FAMILY_COLUMNS,
    LENGTHS,
    PLOTLY_TEMPLATE,
    STEP_COLOR,
    STEP_SYMBOL,
    family_label,
    impl_color,
    length_ticks,
    log_ticks,
    memory_name,
    timer_name,
)

DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
LEVEL_SYMBOL = {"DRAM": "circle", "L2": "square"}  # the hierarchical roofline's memory levels
STEP_SHORT = {"qk_matmul": "QKᵀ", "scale_mask": "mask", "softmax": "softmax", "pv_matmul": "PV"}


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a chart may plot: measured and correct (status 'ok'); 'wrong' rows keep a time but
    failed the correctness check, and oom, unsupported and error rows have no time."""
    return rows[rows.status == "ok"]


def _length_axis(fig: go.Figure, lengths, title: str) -> None:
    """A log x axis of sequence lengths, ticked at the lengths measured (style.length_ticks)."""
    values, labels = length_ticks(lengths)
    fig.update_xaxes(type="log", title=title, tickvals=values or None, ticktext=labels or None)


def _log_value_axis(fig: go.Figure, title: str, axis: str = "y") -> None:
    """A log axis (``axis`` "y" or "x") ticked 1, 2, 5 or per decade (style.log_ticks), written out
    in full, over what the figure's traces draw."""
    vs = [np.asarray(getattr(t, axis), dtype=float) for t in fig.data if getattr(t, axis) is not None]
    vs = np.concatenate(vs) if vs else np.array([])
    vs = vs[np.isfinite(vs) & (vs > 0)]
    values, labels = log_ticks(vs.min(), vs.max()) if vs.size else ([], [])
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    update(type="log", title=title, tickvals=values or None, ticktext=labels or None)


def _families(data: pd.DataFrame) -> list[tuple]:
    return list(dict.fromkeys(tuple(r) for r in data[FAMILY_COLUMNS].itertuples(index=False)))


def _lines(data: pd.DataFrame) -> pd.DataFrame:
    """Rows with the x of the scaling charts: the key length (N for square shapes), and ``queries``:
    0 for square shapes, else Nq, so decode rows (Nq fixed, Nkv growing) make lines of their own."""
    data = data.copy()
    data["queries"] = np.where(data.seq_q == data.seq_kv, 0, data.seq_q)
    return data.sort_values("seq_kv")


def _line_label(family: tuple, queries: int, lead: str = "", capture: str = "") -> str:
    """A scaling line's legend: its family (with ``lead``, e.g. '32768 tokens', in place of the batch),
    after its ``capture`` where several captures are drawn."""
    label = family_label(family)
    if lead:
        label = f"{lead} {label.split(' ', 1)[1]}"
    if capture:
        label = f"{capture} · {label}"
    return label + (f" Nq={queries}" if queries else "")


def _token_leads(data: pd.DataFrame) -> pd.Series:
    """Per row, '' or 'T tokens' where the row belongs to a fixed-token sweep (``bench --tokens``: the
    batch shrinks as N grows, so B·Nq stays T). Such rows make one line across their batches; without
    this each batch would be a line of one point. A sweep is a token count that several batches of
    one family reach, across implementations, so an implementation with one point in it lands on the
    sweep's line (several captures each draw their own lines: see scaling_figures)."""
    lead = pd.Series("", index=data.index)
    others = [c for c in FAMILY_COLUMNS if c != "batch"]
    tokens = (data.batch * data.seq_q).rename("tokens")
    # A batch of a sweep runs at one length. In a grid of batches × lengths (`--batch 1,2,4 --seq ...`)
    # every batch runs at several, and equal products there are a coincidence, not a sweep.
    lengths = data.groupby([*others, "queries", "batch"], dropna=False).seq_q.transform("nunique")
    for (*_, t), group in data.groupby([*others, "queries", tokens], sort=False, dropna=False):
        if group.batch[lengths[group.index] == 1].nunique() > 1:
            lead[group.index] = f"{int(t)} tokens"
    return lead


# A line of the scaling and compare charts: an implementation on one family, or on a fixed-token sweep
# across its batches (its lead; line_batch 0), and one query length.
LINE_KEY = ["lead", "line_batch", *[c for c in FAMILY_COLUMNS if c != "batch"], "queries"]


def _line_owner(data: pd.DataFrame) -> pd.Series:
    """What a line belongs to besides its shape: its capture where several are drawn, and its call site
    where an observed run has several (two layers' calls at one N are two points, not a vertical line)."""
    owner = pd.Series("", index=data.index)
    if "capture" in data and data.capture.nunique() > 1:
        owner = data.capture.astype(str)
    sites = data["site"].fillna("").astype(str) if "site" in data else owner.iloc[:0]
    if len(sites) and sites.nunique() > 1:
        owner = (owner + " · ").where(owner != "", "") + sites
    return owner


def trips_shape(row) -> Shape:
    """The forward shape whose score matrix the HBM-trips table counts: a row's own lengths (a decode
    row's Nq and its bucket's Nkv), never a square N made of its key length."""
    return Shape.from_row(row).with_mode("fwd")


def trips_heading(shape: Shape, thousands: bool = False) -> tuple[str, str]:
    """(the matrix the trips count, its lengths): ('N×N matrix', 'N=8192') for a square shape,
    ('Nq×Nkv matrix', 'Nq=1 Nkv=17'-style, attention_core.shape.lengths_label) otherwise."""
    if shape.seq_q == shape.seq_kv:
        return "N×N matrix", f"N={shape.seq_q:,}" if thousands else f"N={shape.seq_q}"
    return "Nq×Nkv matrix", lengths_label(shape.seq_q, shape.seq_kv)


def _sweep_lines(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` (rows with :func:`_lines`' queries) with LINE_KEY's own columns: ``lead`` ('' or 'T
    tokens', :func:`_token_leads`) and ``line_batch`` (the batch, or 0 on a sweep)."""
    data = data.assign(lead=_token_leads(data))
    data["line_batch"] = data.batch.where(data.lead == "", 0)
    return data


def scaling_lines(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` sorted by key length with every LINE_KEY column (``queries``, ``lead``, ``line_batch``):
    the lines the scaling and compare charts draw, and the report's families (profiler.views.families)."""
    return _sweep_lines(_lines(data))


# What a row's kernel path allocates beyond the model's fused line (predicted_peak_bytes counts O, the logsumexp and
# the gradients only), by a word its ``path`` holds: the Scaling tab says it under the memory chart where one is drawn.
MEMORY_NOTES = {
    "split-tail": "rows whose path names split-tail AxS (our forward's last wave cut by keys) also hold the chunks' "
                  "fp32 outputs and logsumexps, A tiles × the tile's query rows (128 at head_dim 128) × S chunks × "
                  "(head_dim + 1) × 4 B (kernels.tail_combine.partials; 8.06 MiB for 4x32), which the model lines "
                  "leave out",
    "split-kv": "rows whose path names split-kv xS (our decode forward) also hold the S splits' fp32 outputs and "
                "logsumexps, query rows × S × (head_dim + 1) × 4 B (half of attention_core.split_kv.partial_bytes, "
                "which counts them written and read), which the model lines leave out",
}


def memory_notes(totals: pd.DataFrame) -> list[str]:
    """The :data:`MEMORY_NOTES` of the kernel paths ``totals`` (drawn rows) hold."""
    if "path" not in totals:
        return []
    paths = totals["path"].fillna("").astype(str)
    return [note for word, note in MEMORY_NOTES.items() if paths.str.contains(word, regex=False).any()]


# The scaling charts' x axis; short, as a half-width chart's plot is narrower than a longer title was
LENGTH_TITLE = "key length N (= Nq if square)"

# The peak-memory model lines (predicted_peak_bytes): unfused and fused. Their names stay short, so that the legend
# leaves a half-width chart its plot; what each keeps, forward and with the backward, is in their hover and in
# memory_model_note, which the chart's caption gives.
MEMORY_MODEL_LABELS = ("model O(N²), naive", "model O(N), fused")
MEMORY_MODEL_KEEPS = {
    "fwd": ("S and P", "O and the logsumexp"),
    "bwd": ("S, P, dP and dS", "O, the logsumexp, dQ, dK, dV and delta"),
}


def memory_model_note(totals: pd.DataFrame) -> str | None:
    """What the memory chart's model lines count for the modes of ``totals``' square rows (those the lines are drawn
    for), or None where none is drawn: one clause a mode."""
    ok = _ok(totals)
    drawn = {"fwd" if mode == "fwd" else "bwd" for mode in ok[ok.seq_q == ok.seq_kv]["mode"]}
    modes = [mode for mode in ("fwd", "bwd") if mode in drawn]
    if not modes:
        return None
    words = {"fwd": "forward", "bwd": "with the backward"}
    clauses = [f"{words[mode] + ', ' if len(modes) > 1 else ''}\"{MEMORY_MODEL_LABELS[0]}\" is what unfused attention "
               f"keeps ({MEMORY_MODEL_KEEPS[mode][0]}) and \"{MEMORY_MODEL_LABELS[1]}\" what a fused kernel keeps "
               f"({MEMORY_MODEL_KEEPS[mode][1]}), above the inputs (profiler.model.memory)" for mode in modes]
    return "; ".join(clauses)


def memory_caption(totals: pd.DataFrame) -> str:
    """The caption under the memory chart of ``totals`` (whole-attention rows): what its model lines count
    (:func:`memory_model_note`) and what some rows' paths hold beyond them (:func:`memory_notes`); empty where neither
    applies."""
    notes = [note for note in (memory_model_note(totals), *memory_notes(totals)) if note]
    return "Peak memory: " + "; ".join(notes) + "." if notes else ""


def _with_time_of(data: pd.DataFrame, impl: str, key: list[str], column: str, how: str) -> pd.DataFrame:
    """``data`` with ``column``: ``impl``'s time at each row's ``key`` (its first row there, also in merged
    captures); ``how`` as pandas' merge ("left" keeps rows where it did not run, "inner" drops them)."""
    ref = data[data.impl == impl].drop_duplicates(key).set_index(key)["time_ms"]
    return data.merge(ref.rename(column).reset_index(), on=key, how=how)


def _line_groups(data: pd.DataFrame) -> tuple[list[tuple[str, dict, pd.DataFrame]], list[tuple]]:
    """The scaling lines of ``data`` (rows with ``line_capture`` and the LINE_KEY columns) as (legend name,
    line style, its rows), one per implementation and line key: each implementation in its colour, each line
    key in a dash of its own; and the line keys (a legend names a line by its family only where there are
    several)."""
    line_key = ["line_capture", *LINE_KEY]
    families = list(dict.fromkeys(tuple(r) for r in data[line_key].itertuples(index=False)))
    groups = []
    for (impl, *line), group in data.groupby(["impl", *line_key], sort=False):
        k = families.index(tuple(line))
        capture, lead, queries, family = line[0], line[1], line[-1], tuple(group[FAMILY_COLUMNS].iloc[0])
        name = impl if len(families) == 1 else f"{impl} · {_line_label(family, queries, lead, capture)}"
        groups.append((name, {"color": impl_color(impl), "dash": DASHES[k % len(DASHES)]}, group))
    return groups, families


def _legend_below(fig: go.Figure, height: int = 420) -> None:
    """Where lines are named by their shape family too, their legend under the plot, a name a row: at the right, as
    wide as its longest name, it left a half-width chart's plot a few dozen pixels. The figure grows by a row a name."""
    names = sum(1 for trace in fig.data if trace.showlegend is not False)
    fig.update_layout(height=height + 22 * names, legend={"orientation": "h", "x": 0, "xanchor": "left",
                                                          "yref": "container", "y": 0, "yanchor": "bottom"},
                      margin={"b": 40 + 22 * names})


def scaling_figures(totals: pd.DataFrame) -> dict[str, go.Figure]:
    """Time, TFLOP/s, peak memory (measured against the model's O(N²) and O(N) predictions) and
    speedup over naive against the key length N (log axes; N = Nq = Nkv for square shapes, Nkv for
    decode): one line per implementation, shape family and query length, so different shapes are
    never merged into one line (families differ by dash). Only rows with status 'ok'; x ticks at
    the lengths measured. The speedup figure has a line only where naive was timed at some of its
    shapes, so it is empty (no traces) for a selection without naive."""
    ok = _ok(totals)
    data = _lines(ok[ok.step == "total"])
    figs = {key: go.Figure() for key in ("time", "tflops", "memory", "speedup")}
    # Both lengths: a decode point is compared with naive at its own Nkv.
    data = _with_time_of(data, baseline_impl(), list(Shape.KEY), "naive_ms", how="left")
    # A line (LINE_KEY) in one capture: two captures of the same shapes (say one kernel before and after
    # a change) would otherwise zig-zag between their times on one line.
    data = _sweep_lines(data)
    data["line_capture"] = _line_owner(data)
    line_key = ["line_capture", *LINE_KEY]
    groups, families = _line_groups(data)
    for name, style, group in groups:
        for key, col in (("time", "time_ms"), ("tflops", "tflops")):
            figs[key].add_trace(go.Scatter(x=group.seq_kv, y=group[col], mode="lines+markers", name=name, line=style))
        # The kernel path beside each measured peak: what a row ran says what it allocated (MEMORY_NOTES)
        paths = group["path"].fillna("").astype(str) if "path" in group else pd.Series("", index=group.index)
        figs["memory"].add_trace(go.Scatter(
            x=group.seq_kv, y=group.peak_mem_bytes / 2**20, mode="lines+markers", name=name, line=style,
            customdata=paths, hovertemplate="N %{x}: %{y:.2f} MiB %{customdata}<extra>%{fullData.name}</extra>"))
        if group.naive_ms.notna().any():  # only lines with naive timed at some of their shapes
            figs["speedup"].add_trace(go.Scatter(x=group.seq_kv, y=group.naive_ms / group.time_ms,
                                                 mode="lines+markers", name=name, line=style))
    seqs = sorted(data[data.queries == 0].seq_q.unique())  # the O(N²) model lines are for square shapes
    square = data[data.queries == 0]
    for line, group in square.groupby(line_key[1:], sort=False):  # the model is one per shape, not per capture
        points = group.drop_duplicates("seq_q")  # the line's shapes: its lengths, each with its own batch
        shapes = [Shape.from_row(dict(zip(FAMILY_COLUMNS, r)) | dict.fromkeys(LENGTHS, int(n)))
                  for r, n in zip(points[FAMILY_COLUMNS].itertuples(index=False), points.seq_q)]
        if line[0] == "":  # one family: its model line spans every length drawn
            shapes = [replace(shapes[0], seq_q=int(n), seq_kv=int(n)) for n in seqs]
        suffix = "" if len(families) == 1 else f" · {_line_label(tuple(points[FAMILY_COLUMNS].iloc[0]), 0, line[0])}"
        # What each model keeps (profiler.model.memory.predicted_peak_bytes), named for the mode drawn.
        keeps = MEMORY_MODEL_KEEPS["fwd" if shapes[0].mode == "fwd" else "bwd"]
        for fused, label, kept in zip((False, True), MEMORY_MODEL_LABELS, keeps):
            y = [predicted_peak_bytes(shape, fused) / 2**20 for shape in shapes]
            # one length only: a line of one point draws nothing, so a marker stands for it
            figs["memory"].add_trace(go.Scatter(
                x=[shape.seq_q for shape in shapes], y=y, mode="lines" if len(shapes) > 1 else "markers",
                name=label + suffix, line={"dash": "dot", "color": "grey" if fused else "black"},
                hovertemplate=f"N %{{x}}: %{{y:.2f}} MiB, keeps {kept}<extra>%{{fullData.name}}</extra>"))
    titles = {"time": ("median time (ms)", "Time"), "tflops": ("TFLOP/s", "Throughput"),
              "memory": ("peak over inputs (MiB)", "Peak memory: measured vs model"),
              "speedup": ("speedup over naive (x)", "Speedup over naive PyTorch")}
    for key, fig in figs.items():
        _length_axis(fig, data.seq_kv, LENGTH_TITLE)
        _log_value_axis(fig, titles[key][0])
        fig.update_layout(template=PLOTLY_TEMPLATE, title=titles[key][1], height=420)
        if len(families) > 1:
            _legend_below(fig)
    return figs


def baseline_figure(totals: pd.DataFrame, baseline: str) -> go.Figure:
    """Each peer's time over ``baseline``'s (a bench capture's, meta.json ``baseline``) against the key length:
    one line per peer and scaling line (as :func:`scaling_figures` draws them), a point where both ran ok at one
    shape of one capture, and a dotted line at 1.00x (above it the baseline is the faster). No traces where the
    baseline ran nowhere beside a peer."""
    ok = _ok(totals)
    data = scaling_lines(ok[ok.step == "total"])
    data["line_capture"] = _line_owner(data)
    shape_key = [*(["capture"] if "capture" in data else []), *Shape.KEY]
    data = _with_time_of(data, baseline, shape_key, "base_ms", how="inner")
    data = data[data.impl != baseline]
    fig = go.Figure()
    groups, families = _line_groups(data)
    for name, style, group in groups:
        fig.add_trace(go.Scatter(x=group.seq_kv, y=group.time_ms / group.base_ms, mode="lines+markers", name=name,
                                 line=style))
    if fig.data:
        fig.add_hline(y=1.0, line={"dash": "dot", "color": "grey"})
        _length_axis(fig, data.seq_kv, LENGTH_TITLE)
    fig.update_yaxes(title=f"time over {baseline}'s (x)")
    fig.update_layout(template=PLOTLY_TEMPLATE, title=f"Against {baseline}: each peer's time over {baseline}'s",
                      height=420)
    if len(families) > 1:
        _legend_below(fig)
    return fig


def step_breakdown_figure(rows: pd.DataFrame, scale: str = "share", device_type: str | None = None) -> go.Figure:
    """Naive attention's time per step: one bar group per shape (its lengths, N or Nq and Nkv, and
    the shape family when several are shown), stacked by step in STEP_COLOR; the capture's timer (CUDA
    events on a GPU, torch.utils.benchmark when ``device_type`` is meta.json's "cpu") and, beside
    it, Nsight Systems where the capture has it. ``scale`` "share" stacks each group to 100% (every
    N readable), "ms" shows milliseconds. Only rows with status 'ok' are drawn; shapes where naive
    ran out of memory are shown as OOM, and an empty chart says why it is empty."""
    naive = naive_step_rows(rows)
    steps = _ok(naive).copy()
    timer = timer_name(device_type)
    fig = go.Figure()
    families = _families(naive)
    many = len(families) > 1
    square = bool((naive.seq_q == naive.seq_kv).all())

    def category(frame):
        n = [lengths_label(q, k) for q, k in zip(frame.seq_q, frame.seq_kv)]
        if not many:
            return n
        return [[family_label(f) for f in frame[FAMILY_COLUMNS].itertuples(index=False)], n]

    shape = [*FAMILY_COLUMNS, *LENGTHS]  # the shape's key, families first: bars of one family side by side
    if scale == "share" and not steps.empty:
        per_shape = steps.groupby(shape)
        steps["shown"] = steps.time_ms / per_shape.time_ms.transform("sum")
        if "nsys_gpu_ms" in steps:
            steps["shown_nsys"] = steps.nsys_gpu_ms / per_shape.nsys_gpu_ms.transform("sum")
    else:
        steps["shown"] = steps.time_ms
        steps["shown_nsys"] = steps.get("nsys_gpu_ms")
    has_nsys = "nsys_gpu_ms" in steps and steps.nsys_gpu_ms.notna().any()
    for step in NAIVE_STEPS:
        group = steps[steps.step == step].sort_values(shape)
        fig.add_trace(go.Bar(x=category(group), y=group.shown, name=f"{step} ({timer})", offsetgroup="events",
                             legendgroup=step, customdata=group.time_ms, marker={"color": STEP_COLOR[step]},
                             hovertemplate=f"{step}: %{{customdata:.4g}} ms<extra></extra>"))
        if has_nsys:
            fig.add_trace(go.Bar(x=category(group), y=group.shown_nsys, name=f"{step} (nsys)", offsetgroup="nsys",
                                 legendgroup=step, customdata=group.nsys_gpu_ms,
                                 marker={"color": STEP_COLOR[step], "pattern": {"shape": "/"}},
                                 hovertemplate=f"{step} (nsys): %{{customdata:.4g}} ms<extra></extra>"))
    oom = naive[naive.status == "oom"].drop_duplicates(shape).sort_values(shape)
    if not oom.empty:
        # Where the whole naive forward ran but its steps did not: timing the steps one by one holds S,
        # the scaled S and P (three N×N matrices, profiler.measure.naive_steps) at once; the forward two.
        totals = _ok(rows[rows.impl.isin(naive.impl) & (rows.step == "total")]).set_index(shape)
        ran = [tuple(r) in totals.index for r in oom[shape].itertuples(index=False)]
        text = ["steps OOM<br>(total ran)" if r else "OOM" for r in ran]
        hover = ["the whole of naive attention ran (see Roofline); timing its steps one by one holds S, the scaled S "
                 "and P at once, and ran out of memory" if r else "naive ran out of memory here" for r in ran]
        fig.add_trace(go.Bar(x=category(oom), y=[1.0 if scale == "share" else 0.0] * len(oom), name="out of memory",
                             marker={"color": "rgba(0,0,0,0.08)"}, text=text, textposition="inside",
                             offsetgroup="events", hovertext=hover, hovertemplate="%{hovertext}<extra></extra>"))
    if steps.empty and oom.empty:
        fig.add_annotation(text="No naive steps in this selection: select the implementation 'naive' "
                                "(only it is timed step by step)", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper", font={"size": 14})
    share = scale == "share"
    fig.update_layout(template=PLOTLY_TEMPLATE, barmode="stack", height=460,
                      xaxis_title="shape" if many else "sequence length N" if square else "sequence lengths",
                      yaxis_title="share of naive attention's time" if share else "ms",
                      title="Naive attention: time per step" + (" (share of the four steps)" if share else ""))
    if share:
        fig.update_yaxes(tickformat=".0%")
    return fig


def human_bytes(n: float) -> str:
    """Bytes as a reader wants them: kB, MB or GB (powers of 1000, as bandwidths are quoted)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def hbm_trips_table(shape: Shape, device_type: str | None = None) -> pd.DataFrame:
    """How often each naive step moves the N×N matrix through HBM (DRAM when ``device_type`` is
    meta.json's "cpu"; reads and writes, in units of one N×N matrix of the input dtype), from the
    cost model, against a fused kernel's zero."""
    memory = memory_name(device_type)
    s_bytes = shape.score_elems * shape.elem_bytes
    fwd = shape.with_mode("fwd")
    rows = []
    trips = {"qk_matmul": (0, 1), "scale_mask": (2, 2) if shape.causal else (1, 1), "softmax": (1, 1),
             "pv_matmul": (1, 0)}
    for step, (reads, writes) in trips.items():
        rows.append({"step": step, "N×N reads": reads, "N×N writes": writes,
                     f"{memory} bytes (model)": human_bytes(naive_step_bytes(fwd, step)),
                     "of which N×N": human_bytes((reads + writes) * s_bytes)})
    rows.append({"step": "fused (FlashAttention)", "N×N reads": 0, "N×N writes": 0,
                 f"{memory} bytes (model)": human_bytes(compulsory_bytes(fwd)), "of which N×N": human_bytes(0)})
    return pd.DataFrame(rows)


def compare_figure(a: pd.DataFrame, b: pd.DataFrame, label_a: str, label_b: str) -> tuple[go.Figure, pd.DataFrame]:
    """Two captures side by side: the rows with status 'ok' in both, joined on the full row key
    (implementation, step and every shape column, so decode rows of one Nq but several Nkv stay
    apart), their times and TFLOP/s, and B / A ratios against the key length, one line per
    implementation, shape family (or fixed-token sweep) and query length."""
    key = list(ROW_KEY)
    ok_a, ok_b = _ok(a), _ok(b)
    joined = pd.DataFrame()
    if "site" in ok_a and "site" in ok_b and (ok_a.duplicated(key).any() or ok_b.duplicated(key).any()):
        # Observed runs whose layers (or ranks: summary.rank_sites) make calls of one shape: each site's row
        # with its own, where the two runs share sites; else by shape, as any two captures. Not on the whole
        # store.OBSERVED_KEY: a run that changed its mask tensor or memory layout pairs with the one before.
        sited = [*key, "site"]
        joined = ok_a[[*sited, "time_ms", "tflops"]].drop_duplicates(sited).merge(
            ok_b[[*sited, "time_ms", "tflops"]].drop_duplicates(sited), on=sited,
            suffixes=(f" {label_a}", f" {label_b}"))
    if joined.empty:
        joined = ok_a[[*key, "time_ms", "tflops"]].drop_duplicates(key).merge(
            ok_b[[*key, "time_ms", "tflops"]].drop_duplicates(key), on=key, suffixes=(f" {label_a}", f" {label_b}"))
    joined["speedup B/A"] = joined[f"time_ms {label_a}"] / joined[f"time_ms {label_b}"]
    totals = scaling_lines(joined[joined.step == "total"])  # a token sweep: one line, as in Scaling
    families = list(dict.fromkeys(tuple(r) for r in totals[LINE_KEY].itertuples(index=False)))
    fig = go.Figure()
    totals = totals.assign(owner=_line_owner(totals))
    for (impl, owner, *line), group in totals.groupby(["impl", "owner", *LINE_KEY], sort=False):
        k = families.index(tuple(line))
        lead, queries, family = line[0], line[-1], tuple(group[FAMILY_COLUMNS].iloc[0])
        name = impl if len(families) == 1 else f"{impl} · {_line_label(family, queries, lead)}"
        name = f"{name} · {owner}" if owner else name
        fig.add_trace(go.Scatter(x=group.seq_kv, y=group["speedup B/A"], mode="lines+markers", name=name,
                                 line={"color": impl_color(impl), "dash": DASHES[k % len(DASHES)]}))
    fig.add_hline(y=1.0, line_dash="dot")
    _length_axis(fig, totals.seq_kv, LENGTH_TITLE)
    # Capture names can be long: they go in the title, the axis keeps a short label.
    fig.update_yaxes(title="speedup B / A (x, above 1: B faster)")
    fig.update_layout(template=PLOTLY_TEMPLATE, title=f"B = {label_b} against A = {label_a}", height=420)
    return fig, joined


def _range_color(rng) -> str | None:
    """A range's colour as the other charts give it: a naive step's STEP_COLOR (the range is the step,
    or ends in /<step>), else its implementation's colour (ranges start <impl>/), else the template's."""
    parts = str(rng or "").removeprefix("attn:").split("/")
    if parts[-1] in STEP_COLOR:
        return STEP_COLOR[parts[-1]]
    return impl_color(parts[0]) if parts[0] in REGISTRY else None


def trace_figure(kernels: pd.DataFrame) -> go.Figure:
    """Per-range timeline of kernels (from a torch-profiler or Nsight Systems kernel table with
    columns kernel or name, start_us or start_ns, gpu_us or gpu_ns, range)."""
    data = kernels.copy()
    if "start_ns" in data:
        data["start_us"], data["gpu_us"] = data.start_ns / 1e3, data.gpu_ns / 1e3
    if "kernel" not in data:
        data["kernel"] = data["name"]
    # An observed run names each call's range uniquely (observe/<api>/<mode>/<site>#<n>, profiler.observer.hooks):
    # one row per site and mode, not one per call.
    data["range"] = [re.sub(r"#\d+$", "", r) if isinstance(r, str) else r for r in data["range"]]
    data = data.sort_values("start_us")
    data["t0"] = data.start_us - data.start_us.min() if not data.empty else 0
    fig = go.Figure()
    for rng, group in data.groupby("range", sort=False):
        fig.add_trace(go.Bar(
            x=group.gpu_us, base=group.t0, y=[rng or "(no range)"] * len(group), orientation="h", name=rng or "-",
            hovertext=[f"{k[:90]}<br>{d:.1f} µs" for k, d in zip(group.kernel, group.gpu_us)], hoverinfo="text",
            marker={"color": _range_color(rng)},
        ))
    fig.update_layout(template=PLOTLY_TEMPLATE, title="Kernels per range (GPU timeline)", barmode="overlay",
                      showlegend=False,
                      height=max(300, 40 * data["range"].nunique() + 120), xaxis_title="µs from first kernel")
    return fig


def whatif_figure(rows: pd.DataFrame, device: hardware.Device, dtype: str) -> go.Figure:
    """Where each step would land on another GPU's roofline: the model's intensity (compulsory
    bytes: no GPU's datasheet gives an L2 bandwidth) and that GPU's attainable FLOP/s, with its
    exp ceiling for fused kernels (a projection from the cost model and datasheet, not a
    measurement, and the y axis says so). One point per row key (implementation, step and the full
    shape), from rows with status 'ok' only."""
    roof = Roof(f"{device.name} datasheet", device.peak_flops(dtype), device.hbm_bytes_per_s)
    ok = _ok(rows)
    data = ok[ok.hbm_bytes > 0].drop_duplicates(subset=list(ROW_KEY)).copy()
    x = data.flops / data.hbm_bytes
    # Attainable = min(peak, intensity × bandwidth) (Williams, Waterman, Patterson, CACM 2009).
    data["tflops"] = np.minimum(roof.peak_flops, x * roof.bandwidth) / 1e12
    data["status"], data["time_ms"] = "ok", data.flops / (data.tflops * 1e12) * 1e3
    fig = roofline_figure(data, [roof], "compulsory", exp2_per_s=device.exp2_per_s,
                          title=f"Projection onto {device.name} (model only: points sit on the roof by construction)")
    fig.update_yaxes(title=f"projected attainable TFLOP/s on {device.name} (model)")
    return fig


def validation_rows(validation: pd.DataFrame) -> pd.DataFrame:
    """Validation rows (their ``flops`` are the cost model's, stored by profiler.nsight.validate) with
    achieved FLOP/s over ncu's kernel time and both intensities."""
    rows = validation.copy()
    rows["tflops"] = rows.flops / (rows.gpu_time_ns * 1e-9) / 1e12
    rows["dram_intensity"] = rows.flops / rows.dram_bytes
    rows["l2_intensity"] = rows.flops / rows.l2_bytes
    rows["l2_tbps"] = rows.l2_bytes / (rows.gpu_time_ns * 1e-9) / 1e12
    return rows


def hierarchical_roofline_figure(validation: pd.DataFrame, meta: dict, dtype: str) -> go.Figure:
    """Each kernel (or naive step) twice, at the FLOP/s it achieved: at its DRAM intensity (a
    circle) and at its L2 intensity (a square), both measured by Nsight Compute, the level told by
    the symbol as in hierarchical rooflines (Yang et al., "Hierarchical Roofline Analysis", 2020).
    Filled and open mean what they mean on the Roofline: filled when compute-bound, open when
    memory-bound, each point judged against its own level's roof. Naive steps are named beside
    their DRAM points. Roofs: DRAM (datasheet and measured copy) and L2, for which no datasheet figure
    exists: the highest L2 throughput observed in this capture stands in, a lower bound on the real
    L2 roof."""
    rows = validation_rows(validation[validation.dtype == dtype])
    roofs = roofs_from_meta(meta, dtype)
    l2_roof = None
    if not rows.empty and roofs:
        l2_bw = rows.l2_tbps.max() * 1e12
        l2_roof = Roof(f"L2 (highest observed, {l2_bw / 1e12:.1f} TB/s)", roofs[0].peak_flops, l2_bw, "dot",
                       memory="L2")
        roofs.append(l2_roof)
    judged_by = {"DRAM": roofs[0] if roofs else None, "L2": l2_roof}
    fig = go.Figure()
    xs = np.concatenate([rows.dram_intensity.to_numpy(), rows.l2_intensity.to_numpy()]) if not rows.empty \
        else np.array([1.0])
    grid = np.logspace(np.log10(max(xs.min() / 3, 1e-3)), np.log10(xs.max() * 3), 200)
    for roof in roofs:
        fig.add_trace(go.Scatter(
            x=grid, y=[attainable_flops(x, roof.peak_flops, roof.bandwidth) / 1e12 for x in grid],
            mode="lines", name=f"roof: {roof.label}", line={"color": "black", "dash": roof.dash, "width": 2}))
    for (impl, step), group in rows.groupby(["impl", "step"], sort=False):
        name = impl if step == "total" else f"{impl}: {step}"
        for level, column in (("DRAM", "dram_intensity"), ("L2", "l2_intensity")):
            roof = judged_by[level]
            # Memory-bound left of the level's ridge (Williams et al. 2009), as rooflines.roofline_points.
            memory_bound = group[column] < roof.ridge if roof is not None else pd.Series(False, index=group.index)
            symbol = LEVEL_SYMBOL[level]
            named = step != "total" and level == "DRAM"  # a naive step is named once, beside its DRAM point
            fig.add_trace(go.Scatter(
                x=group[column], y=group.tflops, mode="markers+text" if named else "markers",
                name=f"{name} ({level})", legendgroup=name,
                marker={"color": impl_color(impl), "size": 9, "line": {"width": 1.5, "color": impl_color(impl)},
                        "symbol": [f"{symbol}-open" if m else symbol for m in memory_bound]},
                text=[STEP_SHORT.get(step, step)] * len(group) if named else None,
                textposition="middle right", textfont={"size": 9, "color": impl_color(impl)},
                hovertext=[f"{name}, {level} ({'memory' if m else 'compute'}-bound at {level})<br>N={r.seq_q} "
                           f"D={r.head_dim} {r.dtype}{' causal' if r.causal else ''}<br>{getattr(r, column):.3g} "
                           f"FLOP/B · {r.tflops:.3g} TFLOP/s" for r, m in zip(group.itertuples(), memory_bound)],
                hoverinfo="text"))
    _log_value_axis(fig, "arithmetic intensity (FLOP per byte measured at DRAM or L2)", "x")
    _log_value_axis(fig, "achieved TFLOP/s (ncu kernel time)")
    fig.update_layout(template=PLOTLY_TEMPLATE, height=620, title={
        "text": f"Hierarchical roofline from Nsight Compute counters ({dtype})<br><sup>circle: DRAM intensity · "
                "square: L2 intensity · filled: compute-bound · open: memory-bound (at that level's roof)</sup>"})
    return fig


def validation_table_view(validation: pd.DataFrame) -> pd.DataFrame:
    """The model-vs-measured table as shown to a reader (MB and GFLOP, ratios measured / model)."""
    return pd.DataFrame({
        "impl": validation.impl, "step": validation.step, "N": validation.seq_q, "D": validation.head_dim,
        "dtype": validation.dtype, "causal": validation.causal,
        "DRAM MB (ncu)": validation.dram_bytes / 1e6, "DRAM MB (model)": validation.model_dram_bytes / 1e6,
        "DRAM ratio": validation.dram_ratio,
        "L2 MB (ncu)": validation.l2_bytes / 1e6, "L2 MB (model)": validation.model_l2_bytes / 1e6,
        "L2 ratio": validation.l2_ratio,
        "tensor GFLOP (ncu)": validation.tensor_flops / 1e9,
        "tensor GFLOP (model)": validation.model_tensor_flops / 1e9,
        "tensor ratio": validation.tensor_flops_ratio,
    })


# The Bandwidth figure's roof labels sit at the right end of their lines, in a strip of the x axis
# beyond the longest Nkv measured (no data line reaches it), each above its line. Placed for a plot
# area this small (px); a wider one only has more room.
BANDWIDTH_PLOT_PX = (700, 330)
BANDWIDTH_LABEL_FONT = 11
SIZE_COPY_NAME = "a copy of the step's bytes (same run)"


def bandwidth_roof_labels(fig: go.Figure, plot_px: tuple[float, float] = BANDWIDTH_PLOT_PX) -> list[dict]:
    """Each roof label of a Bandwidth figure: its text, the value of its line, and its box in data
    coordinates (x0, x1 in log10 of Nkv; y0, y1 in GB/s) for a plot area of ``plot_px``."""
    (x_lo, x_hi), (y_lo, y_hi) = fig.layout.xaxis.range, fig.layout.yaxis.range
    labels = []
    for note in fig.layout.annotations:
        if note.name is None or not note.name.startswith("roof label"):
            continue
        w, h = label_box_px(note.text, note.font.size)
        w, h = w * (x_hi - x_lo) / plot_px[0], h * (y_hi - y_lo) / plot_px[1]
        shift = (note.yshift or 0) * (y_hi - y_lo) / plot_px[1]
        y0 = note.y + shift if note.yanchor == "bottom" else note.y + shift - h
        x1 = note.x + (note.xshift or 0) * (x_hi - x_lo) / plot_px[0]
        labels.append({"text": note.text, "line": note.y, "box": (x1 - w, x1, y0, y0 + h)})
    return labels


def copy_curves(rows: pd.DataFrame, meta: dict, curves: dict | None = None) -> dict:
    """Each capture's copy curve by capture name (``curves``, as the dashboard passes them), else ``meta``'s
    for every row (key ''); empty where none was measured."""
    if curves is not None:
        return {name: curve for name, curve in curves.items() if curve is not None}
    measured = Roofs.from_meta(meta).measured
    return {} if measured is None or measured.copy_curve is None else {"": measured.copy_curve}


def bandwidth_figure(totals: pd.DataFrame, meta: dict, curves: dict | None = None) -> go.Figure:
    """Decode's question: achieved GB/s (the model's compulsory bytes over the median time) against
    the key length, one line per implementation, shape family and query length, under the memory
    roofs: the copy bandwidth the capture measured and the datasheet's HBM (on a CPU capture,
    meta.json's ``device_type`` "cpu", the measured DRAM copy alone). Each roof is labelled at the
    right end, above its line, in a strip past the longest Nkv (below it only where the line above
    leaves no room). Where the capture measured a copy curve (``curves``: each capture's by name, where
    rows of several are drawn; else ``meta``'s), a grey dotted line per capture and shape family: the rate
    a copy of the step's own bytes reached (small steps cannot reach the large copy's). Rows with
    status 'ok' and Nq < Nkv only (square prefill is compute-bound: its
    GB/s says little); an empty chart says so. x ticks at the lengths measured."""
    ok = _ok(totals)
    data = _lines(ok[(ok.step == "total") & (ok.seq_q < ok.seq_kv)])
    memory = memory_name(meta.get("device_type"))
    fig = go.Figure()
    data["owner"] = _line_owner(data)
    families = list(dict.fromkeys(tuple(r) for r in data[[*FAMILY_COLUMNS, "queries", "owner"]].itertuples(
        index=False)))
    for (impl, *family, queries, owner), group in data.groupby(["impl", *FAMILY_COLUMNS, "queries", "owner"],
                                                               sort=False):
        k = families.index((*family, queries, owner))
        name = impl if len(families) == 1 else f"{impl} · {_line_label(tuple(family), queries, capture=owner)}"
        fig.add_trace(go.Scatter(x=group.seq_kv, y=group.gbps, mode="lines+markers", name=name,
                                 line={"color": impl_color(impl), "dash": DASHES[k % len(DASHES)]},
                                 customdata=group.time_ms * 1e3,
                                 hovertemplate="Nkv %{x}: %{y:,.0f} GB/s in %{customdata:.1f} µs<br>(the model's "
                                               "compulsory bytes: Q, K, V read once, O written once)"))
    roofs = Roofs.from_meta(meta)
    curves = copy_curves(data, meta, curves)
    if curves and not data.empty:
        # What a device copy of each step's bytes reached in its capture's run (profiler.model.roofs.CopyCurve):
        # the roof a step of that size can reach, one grey line per capture and shape family, at the family's
        # compulsory bytes (the least any of its kernels moves).
        owners = data.owner if "capture" not in data else data.capture.astype(str)
        keys = [owners.rename("line_owner"), *[data[c] for c in (*FAMILY_COLUMNS, "queries")]]
        by_family = data.groupby([*keys, data.seq_kv], sort=False).hbm_bytes.min().reset_index()
        several = by_family.drop(columns=["seq_kv", "hbm_bytes"]).drop_duplicates().shape[0] > 1
        for key, group in by_family.groupby(["line_owner", *FAMILY_COLUMNS, "queries"], sort=False):
            owner, *family, queries = key
            curve = curves.get(owner) or curves.get("")
            if curve is None:
                continue
            fig.add_trace(go.Scatter(
                x=group.seq_kv, y=[curve.bandwidth(b) / 1e9 for b in group.hbm_bytes], mode="lines",
                line={"color": "#888", "dash": "dot", "width": 1.5},
                name=SIZE_COPY_NAME + (f" · {_line_label(tuple(family), queries, capture=owner)}" if several else ""),
                customdata=group.hbm_bytes / 1e6,
                hovertemplate="Nkv %{x}: a device copy of the step's %{customdata:.4g} MB reached %{y:,.0f} GB/s "
                              "in its capture's run<extra></extra>"))
    measured = None if roofs.measured is None else roofs.measured.copy_gbps
    sheet = roofs.datasheet if memory == "HBM" else None
    lines = [(v, text, dash) for v, text, dash in (
        (measured, "measured copy" if memory == "HBM" else f"measured {memory} copy", "dash"),
        (None if sheet is None else sheet.hbm_bytes_per_s / 1e9, f"{getattr(sheet, 'name', '')} datasheet HBM", "dot"),
    ) if v]
    texts = [f"{text} {v:,.0f} GB/s" for v, text, _ in lines]
    # x: the data's lengths, then a strip wide enough for the longest label (on the narrow plot).
    lengths = data.seq_kv if not data.empty else pd.Series([1024, 131072])
    lo, hi = np.log10(lengths.min()) - 0.05, np.log10(lengths.max()) + 0.05
    widest = max([label_box_px(t, BANDWIDTH_LABEL_FONT)[0] for t in texts], default=0) + 12
    share = min(widest / BANDWIDTH_PLOT_PX[0], 0.6)
    x_hi = hi + (hi - lo) * share / (1 - share)
    # y: from zero to room above the highest line for its label, and above the data.
    label_h = label_box_px("x", BANDWIDTH_LABEL_FONT)[1] + 3
    highest = max([v for v, _, _ in lines], default=0)
    y_top = max(highest / (1 - 1.3 * label_h / BANDWIDTH_PLOT_PX[1]), (data.gbps.max() if not data.empty else 0) * 1.08,
                1.0)
    px_per_unit = BANDWIDTH_PLOT_PX[1] / y_top
    order = sorted(range(len(lines)), key=lambda i: lines[i][0])
    for rank, i in enumerate(order):
        value, _, dash = lines[i]
        above = [lines[j][0] for j in order[rank + 1:]]
        # Above its line, unless the next line up leaves less than a label's height between them.
        room = (min(above) - value) * px_per_unit if above else np.inf
        fits = room >= label_h + 2
        fig.add_hline(y=value, line={"color": "black", "dash": dash, "width": 1.5})
        fig.add_annotation(name=f"roof label {rank}", text=texts[i], x=x_hi, xref="x", y=value, yref="y",
                           xanchor="right", yanchor="bottom" if fits else "top", xshift=-4,
                           yshift=1 if fits else -1, showarrow=False, font={"size": BANDWIDTH_LABEL_FONT},
                           bgcolor="rgba(255,255,255,0.85)")
    if data.empty:
        fig.add_annotation(text="No rows with fewer queries than keys in this selection: capture decode shapes with "
                                "--seq-q 1 --seq-kv 4096,32768 (or pick such a capture)", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 14})
    _length_axis(fig, data.seq_kv, "key/value length Nkv")
    fig.update_xaxes(range=[lo, x_hi])
    fig.update_yaxes(title="GB/s (compulsory bytes / time)", range=[0, y_top])
    fig.update_layout(template=PLOTLY_TEMPLATE, title=f"Decode: achieved bandwidth against the {memory} roof",
                      height=460, margin={"t": 70, "b": 60})
    return fig
