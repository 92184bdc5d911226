"""Explore attention captures: roofline, scaling, decode bandwidth, per-step breakdown, comparisons,
traces, what-if, hardware-counter validation. The Streamlit app, shipped in the package; in a checkout
dashboards/roofline.py runs it, installed from a wheel `attention-roofline dashboard` does.

    streamlit run dashboards/roofline.py                                      # newest capture under reports/
    streamlit run dashboards/roofline.py -- --reports reports --select NAME   # that capture (NAME,NAME: several)
    streamlit run dashboards/roofline.py -- --reports reports/NAME            # a capture folder: the same
    streamlit run dashboards/roofline.py -- --reports /tmp/cap1               # one elsewhere: it alone
    streamlit run dashboards/roofline.py -- --reports DIR                     # another folder of captures

``--reports`` is a folder of captures or one capture folder (meta.json + results.parquet), which is selected:
in the default folder (below) beside the others there, elsewhere alone, with any --select names beside it (the
folder it sits in, /tmp say, is not scanned). Its default is
$ATTN_REPORTS; else, in a checkout, the checkout's reports/; else reports/ under the current directory
(profiler.views.selection.default_reports). With no capture named, the newest opens: by meta.json's "time",
else the folder's modification time, so the capture just made is what you see. A name that is not there
gets an error naming the captures that are.

Needs no GPU. Loading and maths live in profiler/ (store, model, views); this file is layout and widgets only.
Every tab follows the sidebar: the selected captures and every filter; but Observed, which shows a real run
(`python -m profiler observe`) whole, follows the selected captures only. Only rows with status ok are drawn;
the others (oom, unsupported, error, and wrong: the output failed the correctness check) are listed under the
roofline. Figures keep their own colours (``theme=None``), as in the HTML report. ``?tab=Step+breakdown``
opens a tab by its name. Where the selected captures hold rows of more than one device (captures of different
GPUs, or one sweep over ranks on different GPUs: --allow-mixed), a Device filter shows, one device at first,
and everything drawn from meta.json (roofs, ceilings, the caption) is the first chosen device's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

ROOT = Path(__file__).resolve().parents[2]  # a checkout's root, or site-packages when installed
if str(ROOT) not in sys.path:  # `streamlit run` from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

from attention_core.presets import PRESETS, preset_of  # noqa: E402
from profiler.model import hardware  # noqa: E402
from profiler.model.roofs import meta_for_device  # noqa: E402
from profiler.observer.summary import rank_sites  # noqa: E402
from profiler.store import KEY, Capture, CaptureError, discover_captures  # noqa: E402
from profiler.views import observed, plots, rooflines, style  # noqa: E402
from profiler.views.selection import (  # noqa: E402
    apply_filters,
    checkout_of,
    decode_rows,
    default_reports,
    measured_at,
    naive_step_rows,
    shape_labels,
    sorted_values,
    starting_filters,
    why_empty,
    with_capture,
)

TABS = ["Roofline", "Scaling", "Bandwidth", "Step breakdown", "Compare", "Trace", "What-if", "Validation", "Observed"]
# What Compare names when A and B share no row: a column with no value in both.
COMPARE_COLUMNS = (("implementation", "impl"), ("batch", "batch"), ("N", "seq_kv"), ("query length", "seq_q"),
                   ("heads", "heads"), ("K/V heads", "kv_heads"), ("head_dim", "head_dim"), ("dtype", "dtype"),
                   ("causal", "causal"), ("mode", "mode"))
# Filters that pick one value at first (so the first view is one shape family), and which.
PREFERRED = {"dtype": "fp16", "head_dim": 64, "causal": False, "mode": "fwd"}
NOT_OK = {"wrong": "failed the correctness check", "oom": "out of memory", "unsupported": "not supported",
          "error": "failed", "interpreted": "ran in the Triton interpreter, no kernel time"}
CHECKOUT = checkout_of(__file__)
# How a person opens this app on other captures (the Bandwidth tab's hint).
LAUNCH = "streamlit run dashboards/roofline.py" if CHECKOUT else f"streamlit run {Path(__file__).resolve()}"


def parse_args(argv: list[str]) -> tuple[Path, list[str], bool]:
    """(the folder of captures, the captures to preselect, whether those are the only ones to load: a
    capture folder given as --reports) from the arguments after `--`."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--reports", default=str(default_reports(CHECKOUT, os.environ, Path.cwd())))
    parser.add_argument("--select", default="", help="NAME[,NAME]: captures of --reports to preselect")
    args, _ = parser.parse_known_args(argv)
    reports = Path(args.reports)
    named = [name.strip() for name in args.select.split(",") if name.strip()]
    if Capture(reports).has_meta_and_results:  # one capture, selected: beside the others in the default folder,
        reports = reports.resolve()          # else alone (and any named beside it), the folder around it not scanned
        home = default_reports(CHECKOUT, os.environ, Path.cwd()).resolve()
        return reports.parent, list(dict.fromkeys([reports.name, *named])), reports.parent != home
    return reports, named, False


def folder_stamps(root: Path) -> dict[str, tuple[int, int]]:
    """Each folder's Capture.stamp (when its meta.json and results were last written), taken once per run
    and part of every cache key below, so a capture made or resumed while the dashboard runs shows on the
    next reload."""
    return {p.name: Capture(p).stamp for p in sorted(root.iterdir()) if p.is_dir()} if root.is_dir() else {}


@st.cache_data(show_spinner="Loading captures ...", max_entries=4)
def load_all(root: str, written: tuple) -> tuple[dict[str, tuple[dict, pd.DataFrame]], list[str]]:
    captures, warnings = discover_captures(root)
    return {name: (meta, rank_sites(frame)) for name, (meta, frame) in captures.items()}, warnings


@st.cache_data(max_entries=64)
def load_one(path: str, written: tuple = ()) -> tuple[dict, pd.DataFrame]:
    meta, frame = Capture(path).load()
    return meta, rank_sites(frame)  # the ranks of a torchrun observation apart in every view


@st.cache_data(max_entries=64)
def load_validation(path: str, written: tuple) -> pd.DataFrame | None:
    """Capture.validation; ``written`` is the file's stamp (a rebuilt table shows on the next reload)."""
    return Capture(path).validation()


@st.cache_data(max_entries=64)
def load_kernels(path: str, written: tuple) -> tuple[str, pd.DataFrame] | None:
    """(where the kernels come from, the kernel table) of a capture folder: Capture.gpu_kernels;
    ``written`` is the stamp of its files."""
    return Capture(path).gpu_kernels()


@st.cache_data(show_spinner=False, max_entries=256)
def measured_keys(folder: str, written: tuple, chosen: tuple[tuple[str, tuple], ...]) -> frozenset[tuple]:
    """The row keys (profiler.store.KEY) of a capture's measured rows under the filters ``chosen``: what
    Compare can pair. Cached per capture and filters, so ranking every capture as B costs a set intersection."""
    _, frame = load_one(folder, written)
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


def chart(where, fig, key: str | None = None) -> None:
    """A figure as the HTML report draws it: its own colours and template (profiler.views.style), not
    Streamlit's theme, which would recolour the traces. ``key`` tells apart charts that may come out
    alike (one per capture: two copies of a run draw the same figure)."""
    where.plotly_chart(fig, width="stretch", theme=None, key=key)


st.set_page_config(page_title="Attention roofline", layout="wide")
st.title("Attention roofline")

root, named, only_named = parse_args(sys.argv[1:])
shown_root = os.path.relpath(root) if root.resolve().is_relative_to(Path.cwd()) else str(root)
if only_named:  # a capture folder given: it (and the names beside it), not every folder around it
    stamps = {name: Capture(root / name).stamp for name in named if Capture(root / name).has_meta_and_results}
    captures, problems = {}, []
    for name in stamps:
        try:
            captures[name] = load_one(str(root / name), stamps[name])
        except CaptureError as err:
            problems.append(f"skipped {name}: {err}")
else:
    stamps = folder_stamps(root)
    captures, problems = load_all(str(root), tuple(sorted(stamps.items())))
folders = {name: root / name for name in captures}
for problem in problems:
    st.warning(problem)

with st.sidebar:
    st.header("Captures")
    extra = st.text_input("Add a capture folder (path)", help="a folder made by `python -m profiler capture`")
    added = None
    if extra:
        try:
            added = Path(extra).name
            stamps[added] = Capture(extra).stamp
            captures[added] = load_one(extra, stamps[added])
            folders[added] = Path(extra)
        except CaptureError as err:
            st.error(f"Not a capture: {err}")
            added = None

if not captures:
    st.info(
        f"No captures found in `{root}`. Make one with `python -m profiler capture --seq 8192` "
        "(or `make demo`), then reload this page."
    )
    st.stop()

names = list(captures)
newest = max(names, key=lambda n: measured_at(captures[n][0], folders[n]))
missing = [n for n in named if n not in captures]
present = [n for n in named if n in captures]
if missing:
    st.error(f"No capture named {', '.join(f'`{n}`' for n in missing)} in `{shown_root}`. The captures there: "
             f"{', '.join(names)}. Showing {', '.join(present) if present else f'the newest, {newest},'} instead.")
default = [added] if added else (present or [newest])
with st.sidebar:
    chosen_captures = st.multiselect("Captures", names, default=default, key=f"captures-{added or ''}",
                                     help=f"the capture folders in `{shown_root}`; with none named, the newest "
                                          "opens")
    if not chosen_captures:
        st.info("Pick at least one capture.")
        st.stop()
    data = pd.concat([with_capture(n, *captures[n]) for n in chosen_captures], ignore_index=True)
    if data.empty:  # e.g. a capture stopped before its first row was written
        st.info(f"{', '.join(chosen_captures)} holds no rows yet: pick another capture.")
        st.stop()
    first = captures[chosen_captures[0]][0]
    st.header("Filters")
    filters: dict[str, list] = {}
    # A model preset picks heads, K/V heads and head_dim at once (those of the models the data has).
    in_data = {preset_of(*r) for r in data[["heads", "kv_heads", "head_dim"]].drop_duplicates().itertuples(index=False)}
    presets = ["any"] + [name for name in PRESETS if name in in_data]
    preset = st.selectbox("Model preset", presets, help="; ".join(f"{n}: {p.heads} heads, {p.kv_heads} K/V heads, "
                                                                 f"D{p.head_dim}" for n, p in PRESETS.items()))
    fixed = {} if preset == "any" else dict(zip(("heads", "kv_heads", "head_dim"), PRESETS[preset][:3]))
    # An observed run (its calls and their replays) opens on every row: its prefill, decode and backward
    # calls are the run, not a grid to slice; a capture opens on PREFERRED's slice.
    observed_only = "source" in data and bool(data.source.isin(["observed", "replay"]).all())
    preferences = {} if observed_only else PREFERRED
    preferred = {**preferences, "device": first.get("device")}  # rank 0's of the first capture
    # Where every selected capture has rows to draw (ok totals of the preset's shape), among those of the
    # device drawn first (one at a time).
    drawable = data[(data.status == "ok") & (data.step == "total")]
    for column, value in fixed.items():
        drawable = drawable[drawable[column] == value]
    if "device" in drawable and preferred["device"] in set(drawable.device):
        drawable = drawable[drawable.device == preferred["device"]]
    starts = starting_filters(drawable, preferences)

    def choose(label: str, column: str):
        options = sorted_values(data[column].dropna().unique().tolist())
        if column in fixed:
            filters[column] = [fixed[column]]
            return
        if column == "device" and len(options) == 1:  # one device: the caption names it
            return
        prefer = preferred.get(column)
        if column in starts:
            start = starts[column]
        else:
            start = options if column not in preferred else ([prefer] if prefer in options else options[:1])
        filters[column] = st.multiselect(label, options, default=start)

    for label, column in (("Device", "device"), ("dtype", "dtype"), ("head_dim", "head_dim"), ("causal", "causal"),
                          ("Mode", "mode"), ("Batch", "batch"), ("Heads", "heads"), ("K/V heads", "kv_heads"),
                          ("Query length", "seq_q"), ("Implementation", "impl"), ("Step", "step")):
        choose(label, column)
    # Rows of several devices (captures of different GPUs, or one sweep over ranks on different GPUs with
    # --allow-mixed): the roofs and all else drawn from meta.json are the first chosen device's, as its
    # capture holds them (meta_for_device), since each row was judged against its own device's roofs.
    drawn_device = (filters.get("device") or [first.get("device")])[0]
    holders = data.capture[data.device == drawn_device]
    meta = meta_for_device(captures[holders.iloc[0]][0], drawn_device) if len(holders) else first
    device_type = meta.get("device_type")
    memory = style.memory_name(device_type)
    timer = meta.get("timer") or style.timer_name(device_type)
    seqs = sorted(data.seq_kv.unique().tolist())
    lo, hi = st.select_slider("Key length (N for square shapes)", options=seqs, value=(seqs[0], seqs[-1])) \
        if len(seqs) > 1 else (seqs[0], seqs[0])
    filters["seq_kv"] = [n for n in seqs if lo <= n <= hi]
    bound_filter = st.multiselect("Bound", ["memory", "compute"], default=["memory", "compute"],
                                  help="as the roofline judges it for the bytes chosen below")
    bytes_kind = st.radio("Bytes for intensity", ["compulsory", "tile"], horizontal=True,
                          help=f"compulsory: Q, K, V read once, against the {memory} roof; tile: each block's "
                               "re-reads, against the L2 bandwidth `ceilings` measured")

view = apply_filters(data, filters)
dtype = view.dtype.iloc[0] if not view.empty else "fp16"
roofs = rooflines.roofs_from_meta(meta, dtype, bytes_kind)
exp2 = rooflines.exp_rate(meta)
points = rooflines.roofline_points(view, roofs, bytes_kind, exp2)
if roofs and set(bound_filter) != {"memory", "compute"}:
    keep = points[points.view_bound.isin(bound_filter)].index
    view = view[(view.status != "ok") | view.index.isin(keep)]
    points = points.loc[points.index.isin(keep)]
st.caption(f"{len(view):,} of {len(data):,} rows · {', '.join(chosen_captures)} · device {meta.get('device')} · "
           f"timed by {timer} · torch {meta.get('torch')} · triton {meta.get('triton')} · "
           f"measured {meta.get('time', '?')}")
if view.empty:
    st.warning("No rows match the filters.")
    st.stop()
if view.dtype.nunique() > 1:
    st.info(f"Several dtypes are selected: the roofs drawn are those of {dtype}.")
if view.device.nunique() > 1:
    st.info(f"Several devices are selected: the roofs drawn are those of {drawn_device}.")
# a wrong output's time, and a Triton interpreter's, are kept for the record, never drawn
drawn = view[~view.status.isin(["wrong", "interpreted"])]

tabs = dict(zip(TABS, st.tabs(TABS, key="tab", bind="query-params")))

with tabs["Roofline"]:
    if not roofs:
        st.warning("This capture holds no L2 bandwidth measurement (`python -m profiler ceilings` measures one): "
                   "tile intensities are drawn without a roof, and no bound is judged." if bytes_kind == "tile"
                   else "No roof for this dtype in the capture's metadata.")
    chart(st, rooflines.roofline_figure(drawn, roofs, bytes_kind, exp2_per_s=exp2, device_type=device_type))
    notes = [f"{roofs[0].label}: ridge {roofs[0].ridge:.0f} FLOP/B"] if roofs else []
    if bytes_kind == "tile" and rooflines.untiled_note(drawn):
        notes.append(rooflines.untiled_note(drawn))
    if device_type == "cpu" and bytes_kind == "compulsory":
        notes.append(f"memory roof: the {memory} copy bandwidth this capture measured (a CPU has no datasheet here); "
                     f"times by {timer}")
    if exp2 is not None:
        notes.append(f"exp ceiling: softmax's exponentials at {exp2 / 1e12:.2f}·10¹² exp2/s on the SFUs (CUDA "
                     "throughput table; FlashAttention-3 §3.1) cap a fused kernel that does not overlap them with "
                     "its matmuls at the measured matmul rate; a point above it overlaps them")
    st.caption(" · ".join(notes))
    # What tells the points apart first (the binding ceiling within 1600 px); one-valued columns are the filters.
    shape, varying = shape_labels(points)
    extra_columns = [c for c in varying if c != "capture"]
    order = [c for c in ("seq_kv", "seq_q") if c in extra_columns] + [c for c in extra_columns if c[:3] != "seq"]
    table = points.assign(shape=shape, steps_last=points.step != "total")  # whole kernels first, then naive steps
    table = table.sort_values(["steps_last", "impl", "step", *order])
    # The kernel path (gluon-ws, tiled, split-kv xS) where an implementation has several.
    has_path = bool("path" in table and table.path.fillna("").astype(str).ne("").any())
    # The call site of observed rows (model.layers.3.self_attn), where the selection has any.
    has_site = bool("site" in table and table.site.fillna("").astype(str).ne("").any())
    columns = ["impl", *["site"] * has_site, *["path"] * has_path, "step", "shape", "time_ms", "tflops", "x",
               "view_bound", "of_roof", "binds", "of_ceiling", *extra_columns]
    table = table[["capture"] * ("capture" in varying) + columns]
    table = table.rename(columns={"time_ms": "time (ms)", "tflops": "TFLOP/s", "x": "FLOP/B", "view_bound": "bound",
                                  "of_roof": "% of roof", "binds": "binding ceiling",
                                  "of_ceiling": "% of binding ceiling"})
    for column in ("% of roof", "% of binding ceiling"):
        table[column] = table[column] * 100
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "% of roof": st.column_config.NumberColumn(format="%.1f%%"),
        "% of binding ceiling": st.column_config.NumberColumn(format="%.1f%%"),
        "time (ms)": st.column_config.NumberColumn(format="%.4g"),
        "FLOP/B": st.column_config.NumberColumn(format="%.3g"),
        "TFLOP/s": st.column_config.NumberColumn(format="%.4g")})
    not_ok = view[(view.status != "ok") & ((view.step == "total") | (view.status == "wrong"))]
    if not not_ok.empty:
        counts = not_ok.status.value_counts()
        st.caption(f"Not on the chart: {len(not_ok)} case(s): " + ", ".join(
            f"{n} {status} ({NOT_OK.get(status, status)})" for status, n in counts.items()))
        label, _ = shape_labels(not_ok)
        listed = not_ok.assign(shape=label)
        st.dataframe(listed[["capture", "impl", "step", "shape", "status", "max_rel_err", "time_ms", "message"]],
                     hide_index=True, width="stretch",
                     column_config={"max_rel_err": st.column_config.NumberColumn(format="%.3g")})

with tabs["Scaling"]:
    figs = plots.scaling_figures(drawn)
    left, right = st.columns(2)
    chart(left, figs["time"])
    chart(right, figs["tflops"])
    chart(left, figs["memory"])
    if figs["speedup"].data:
        chart(right, figs["speedup"])
    else:
        right.info("No speedup over naive here: no selected capture timed `naive` at these shapes "
                   "(`--impl naive,...` times it).")

with tabs["Bandwidth"]:
    decode = decode_rows(drawn)
    copy = (meta.get("measured_ceilings") or {}).get("copy_gbps")
    if decode.empty:
        here = decode_rows(data)
        if not here.empty:
            st.info("The selected captures have decode rows (fewer queries than keys), but the filters leave none: "
                    + why_empty(here, filters) + ".")
        else:
            found = [n for n in names if not decode_rows(captures[n][1]).empty]
            where = (f"The captures under `{shown_root}` that have them: {', '.join(found)}. Select one in the "
                     f"sidebar's Captures, or open it with `{LAUNCH} -- --reports {shown_root} --select "
                     f"{found[0]}`." if found else
                     "No capture here has any: capture decode shapes with `python -m profiler capture --seq-q 1 "
                     "--seq-kv 4096,32768`.")
            st.info(f"No decode rows (fewer queries than keys, seq_q < seq_kv) in {', '.join(chosen_captures)}: "
                    f"this tab draws achieved GB/s for those. {where}")
    else:
        chart(st, plots.bandwidth_figure(drawn, meta))
        site = ["site"] * bool("site" in decode and decode.site.fillna("").astype(str).ne("").any())  # observed
        shown = decode[["capture", "impl", *site, "path", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                        "dtype", "time_ms", "gbps"]].copy()
        shown["of measured copy"] = shown.gbps / copy * 100 if copy else None
        st.caption("GB/s counts the model's compulsory bytes (Q, K, V read once, O and the logsumexp written once): "
                   f"what any kernel must move through {memory}. Above the copy line is possible: a read-mostly "
                   "stream outruns a copy.")
        st.dataframe(shown.sort_values(["batch", "seq_q", "seq_kv", "impl"]), hide_index=True, width="stretch",
                     column_config={"of measured copy": st.column_config.NumberColumn(format="%.0f%%"),
                                    "gbps": st.column_config.NumberColumn(format="%,.0f")})

with tabs["Step breakdown"]:
    scale = st.radio("Show", ["share", "ms"], horizontal=True, key="step-scale",
                     help="share: each step's part of the four steps' time (every N readable); ms: milliseconds")
    if naive_step_rows(data).empty:  # not hidden by a filter: none of the selected captures timed them
        found = [n for n in names if not naive_step_rows(captures[n][1]).empty]
        where = (f"The captures under `{shown_root}` that have them: {', '.join(found)}. Select one in the sidebar's "
                 f"Captures, or open it with `{LAUNCH} -- --reports {shown_root} --select {found[0]}`." if found else
                 "No capture here has any: `python -m profiler capture --impl naive,...` times them.")
        st.info(f"No naive steps in {', '.join(chosen_captures)}: this tab splits naive attention's time into QKᵀ, "
                f"scale/mask, softmax and PV, which `capture` and `bench` time when `naive` is among the "
                f"implementations (`--impl naive,...`). {where}")
    else:
        chart(st, plots.step_breakdown_figure(drawn, scale, device_type=device_type))
        st.caption(f"Times by {timer}.")
    # A shape the selection measured (naive's, where it has steps): its longest, at that length's own
    # batch (a --tokens sweep runs its longest N at its smallest batch), as the forward.
    steps = naive_step_rows(view)
    measured = view if steps.empty else steps
    longest = measured.loc[measured.seq_kv.idxmax()]
    shape = plots.trips_shape(longest)
    family = plots.family_label(shape.to_row())
    matrix, lengths = plots.trips_heading(shape)
    st.markdown(f"**{memory} trips of the {matrix}, naive vs fused** (model, {family}, {lengths})")
    st.dataframe(plots.hbm_trips_table(shape, device_type=device_type), hide_index=True)

with tabs["Compare"]:
    if len(names) < 2:
        st.info("Compare needs two captures.")
    else:
        drop = {k: v for k, v in filters.items() if k != "device"}  # the devices of A and B may differ
        col_a, col_b = st.columns(2)
        a = col_a.selectbox("A", names, index=names.index(chosen_captures[0]))
        rows_a = apply_filters(captures[a][1], drop)
        others = [n for n in names if n != a]
        frozen = tuple((k, tuple(v)) for k, v in drop.items())
        a_at = (str(folders[a]), stamps[a])
        others_at = tuple((n, str(folders[n]), stamps[n]) for n in others)
        sharing = shared_with(a_at, others_at, frozen)
        # Nothing shared under the filters: rank by what is shared without them (a capture of the same kind).
        unfiltered = shared_with(a_at, others_at, ())
        device = {n: captures[n][0].get("device", "") for n in names}
        # The first of the most sharing (in folder order), and among those one from A's GPU, so that
        # the default compares kernels, not GPUs; a GPU never outranks rows shared without the filters.
        same_gpu = {n: device[n] == device[a] for n in others}
        best = max(others, key=lambda n: (sharing[n], sharing[n] > 0 and same_gpu[n], unfiltered[n], same_gpu[n]))
        pick = chosen_captures[1] if len(chosen_captures) > 1 and chosen_captures[1] in others else best
        b = col_b.selectbox("B", others, index=others.index(pick),
                            help="defaults to the second selected capture, else the one sharing the most "
                                 "(implementation, shape) rows with A under the filters, from A's GPU first")
        if device[a] != device[b]:
            gpu_a, gpu_b = (device[n] or "an unrecorded device" for n in (a, b))
            st.warning(f"A ran on {gpu_a} and B on {gpu_b}: its ratios compare the GPUs as well as the kernels.")
        rows_b = apply_filters(captures[b][1], drop)
        fig, joined = plots.compare_figure(rows_a, rows_b, a, b)
        if joined.empty:
            if rows_a.empty:
                why = f"under the filters A ({a}) has no rows: {why_empty(captures[a][1], drop)}"
            elif rows_b.empty:
                why = f"under the filters B ({b}) has no rows: {why_empty(captures[b][1], drop)}"
            else:
                def listed(rows, column):
                    return ", ".join(map(str, sorted_values(rows[column].dropna().unique().tolist())))

                # The columns with no value in both (often the batch of a --tokens sweep against a
                # fixed-batch capture), else what A and B hold.
                apart = [f"no {label} in both (A has {listed(rows_a, column)}; B has {listed(rows_b, column)})"
                         for label, column in COMPARE_COLUMNS
                         if column in rows_a and column in rows_b
                         and not set(rows_a[column].dropna()) & set(rows_b[column].dropna())]
                why = "under the filters " + ("; ".join(apart) if apart else (
                    f"A has {listed(rows_a, 'impl')} at N {listed(rows_a, 'seq_kv')}; B has {listed(rows_b, 'impl')} "
                    f"at N {listed(rows_b, 'seq_kv')}, but no implementation at one shape in both"))
            if sharing[best]:
                instead = f" {best} shares {sharing[best]} rows with A under these filters: pick it as B."
            elif unfiltered[best]:
                instead = (f" No capture here shares a row with A under these filters; without them {best} shares "
                           f"{unfiltered[best]} (select it beside {a} in the sidebar to filter both).")
            else:
                instead = " No capture here shares an implementation and shape with A, filtered or not."
            st.info(f"{a} and {b} share no implementation and shape: {why}.{instead}")
        else:
            st.caption(f"{len(joined)} shared rows under the sidebar's filters.")
            chart(st, fig)
            label, varying = shape_labels(joined)
            values = [c for c in joined if c.startswith(("time_ms ", "tflops ", "speedup"))]
            st.dataframe(joined.assign(shape=label)[["impl", "step", "shape", *values, *varying]], hide_index=True,
                         width="stretch", column_config={c: st.column_config.NumberColumn(format="%.4g")
                                                         for c in values})

with tabs["Trace"]:
    found = False
    for name in chosen_captures:
        capture = Capture(folders[name])
        loaded = load_kernels(str(capture.path), capture.stamp_of(capture.nsys_gpu_ops_path, capture.kernels_path))
        if loaded is None or loaded[1].empty:
            continue
        source, kernels = loaded
        kernels = apply_filters(kernels, {k: v for k, v in filters.items()
                                          if k in ("impl", "seq_q", "seq_kv", "kv_heads", "mode")})
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

with tabs["What-if"]:
    # Only GPUs whose datasheet entry has this dtype's peak can take the projection (B200 has no fp32 one):
    # the newest of those first, so a CPU fp32 capture opens on a projection, not on an apology.
    targets = [name for name, gpu in hardware.DEVICES.items() if gpu.peak_flops_or_none(dtype) is not None]
    if not targets:
        st.info(f"No GPU in the datasheet table has a {dtype} peak to project onto.")
    else:
        preferred = next((name for name in ("B200", "H200", "H100-SXM") if name in targets), targets[0])
        target = st.selectbox("Project onto", targets, index=targets.index(preferred))
        device = hardware.DEVICES[target]
        missing = [name for name in hardware.DEVICES if name not in targets]
        st.caption("A projection from the cost model and the datasheet: each step's intensity (compulsory bytes), "
                   f"and the roof of {target} at that intensity. Nothing here was measured on {target}."
                   + (f" Not offered, without a peak for {dtype} in the datasheet table: {', '.join(missing)}."
                      if missing else ""))
        chart(st, plots.whatif_figure(drawn[drawn.status == "ok"], device, dtype))

with tabs["Validation"]:
    shown = False
    for name in chosen_captures:
        capture = Capture(folders[name])
        validation = load_validation(str(capture.path), capture.stamp_of(capture.validation_path))
        if validation is None:
            continue
        shown = True
        kept = apply_filters(validation, {k: v for k, v in filters.items() if k != "device"})
        st.subheader(f"{name}: Nsight Compute counters vs the cost model")
        st.caption(f"{len(kept)} of {len(validation)} profiled rows under the sidebar's filters")
        if kept.empty:
            st.info("No profiled row matches the filters.")
            continue
        chart(st, plots.hierarchical_roofline_figure(kept, captures[name][0], dtype))
        st.dataframe(plots.validation_table_view(kept), hide_index=True, width="stretch")
    if not shown:
        validated = [n for n in names if Capture(folders[n]).validation_path.exists()]
        st.info(f"No hardware-counter validation in {', '.join(chosen_captures)}: "
                + (f"the captures under `{shown_root}` that have one: {', '.join(validated)}; select one in the "
                   "sidebar's Captures. " if validated else "")
                + "`python -m profiler validate` on a GPU makes one.")

with tabs["Observed"]:
    runs = [n for n in chosen_captures if observed.has_observed(captures[n][1])]
    if not runs:
        found = [n for n in names if observed.has_observed(captures[n][1])]
        st.info(f"{', '.join(chosen_captures)} {'holds' if len(chosen_captures) == 1 else 'hold'} no observed run: "
                f"`{observed.HOW_TO}` records the attention calls of a real run"
                + (f" (observed here: {', '.join(found)})." if found else "."))
    for name in runs:
        run_meta, frame = captures[name]
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
