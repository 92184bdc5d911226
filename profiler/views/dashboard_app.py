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

Needs no GPU. Loading and maths live in profiler/ (store, model, views); this file is layout and widgets only:
the sidebar, then one tab per module of profiler/views/tabs/, each drawn by its ``render(ctx)`` from the
Context built here once per run (the captures, the selection, the hardware drawn against).
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
import hashlib
import os
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

ROOT = Path(__file__).resolve().parents[2]  # a checkout's root, or site-packages when installed
if str(ROOT) not in sys.path:  # `streamlit run` from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

from attention_core.presets import PRESETS  # noqa: E402
from profiler.store import Capture, CaptureError  # noqa: E402
from profiler.views import rooflines  # noqa: E402
from profiler.views.selection import (  # noqa: E402
    FILTERS,
    PREFERRED,
    apply_filters,
    chart_rows,
    checkout_of,
    default_reports,
    drawn_meta,
    first_choice,
    is_observed_run,
    newest_capture,
    opening_filters,
    preset_choices,
    preset_filters,
    sorted_values,
    with_capture,
    within_bound,
)
from profiler.views.style import memory_name, timer_name  # noqa: E402
from profiler.views.tabs import (  # noqa: E402
    bandwidth,
    compare,
    observed,
    roofline,
    scaling,
    step_breakdown,
    trace,
    validation,
    whatif,
)
from profiler.views.tabs.context import Context  # noqa: E402
from profiler.views.tabs.loaders import folder_stamps, load_all, load_one  # noqa: E402

TABS = {"Roofline": roofline, "Scaling": scaling, "Bandwidth": bandwidth, "Step breakdown": step_breakdown,
        "Compare": compare, "Trace": trace, "What-if": whatif, "Validation": validation, "Observed": observed}
CHECKOUT = checkout_of(__file__)
# How a person opens this app on other captures (the Bandwidth and Step breakdown tabs' hints).
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

# Streamlit keeps a widget's value in the session when a run stops before drawing it (the st.stop()s below, while no
# capture is picked), but the browser draws the widget again at its default: the sidebar then showed one head_dim and
# the charts followed another. So each sidebar widget after those stops has a key made of its name, what made its
# identity when it had none (its options and computed default: a new capture set still opens on fresh defaults), and
# a generation that a stopped run advances; the new generation's widgets open on the values the last whole run had,
# where their options are the same (:func:`kept`).
GENERATION, LAST, RESTORE = "sidebar-generation", "sidebar-last", "sidebar-restore"


def stop_sidebar() -> None:
    """st.stop() before the sidebar's widgets are drawn: their next drawing is a new generation of them."""
    st.session_state[GENERATION] = st.session_state.get(GENERATION, 0) + 1
    st.session_state[RESTORE] = dict(st.session_state.get(LAST, {}))
    st.stop()


def kept(name: str, identity: tuple, default, draw):
    """A sidebar widget drawn by ``draw(key, default)`` and its value: keyed by ``name``, its ``identity`` and the
    generation; opening on the value it had in the last whole run where it was drawn with the same identity before a
    stopped run, else on ``default``; its value kept for the next stop (:func:`stop_sidebar`)."""
    restore = st.session_state.get(RESTORE, {}).get(name)
    digest = hashlib.sha1(repr(identity).encode()).hexdigest()[:12]
    value = draw(f"{name}-{st.session_state.get(GENERATION, 0)}-{digest}",
                 restore[1] if restore is not None and restore[0] == identity else default)
    st.session_state.setdefault(LAST, {})[name] = (identity, value)
    return value


names = list(captures)
newest = newest_capture(captures, folders)
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
        stop_sidebar()
    data = pd.concat([with_capture(n, *captures[n]) for n in chosen_captures], ignore_index=True)
    if data.empty:  # e.g. a capture stopped before its first row was written
        st.info(f"{', '.join(chosen_captures)} holds no rows yet: pick another capture.")
        stop_sidebar()
    first = captures[chosen_captures[0]].meta
    st.header("Filters")
    filters: dict[str, list] = {}
    # A model preset picks heads, K/V heads and head_dim at once (those of the models the data has).
    presets = preset_choices(data)
    preset = kept("preset", (tuple(presets),), presets[0], lambda key, chosen: st.selectbox(
        "Model preset", presets, index=presets.index(chosen), key=key, help="; ".join(
            f"{n}: {p.heads} heads, {p.kv_heads} K/V heads, D{p.head_dim}" for n, p in PRESETS.items())))
    fixed = preset_filters(preset)
    preferences = {} if is_observed_run(data) else PREFERRED  # an observed run opens on every row
    preferred = {**preferences, "device": first.get("device")}  # rank 0's of the first capture
    # Where every selected capture has rows to draw, among those of the device drawn first (one at a time).
    starts = opening_filters(data, fixed, preferred["device"], preferences)
    for label, column in FILTERS:
        options = sorted_values(data[column].dropna().unique().tolist())
        if column in fixed:
            filters[column] = [fixed[column]]
        elif column != "device" or len(options) > 1:  # one device: the caption names it
            opening = first_choice(column, options, starts, preferred)
            filters[column] = kept(column, (tuple(options), tuple(opening)), opening,
                                   lambda key, chosen, label=label, options=options: st.multiselect(
                                       label, options, default=chosen, key=key))
    # Rows of several devices (captures of different GPUs, or one sweep over ranks on different GPUs with
    # --allow-mixed): the roofs and all else drawn from meta.json are the first chosen device's.
    drawn_device = (filters.get("device") or [first.get("device")])[0]
    meta = drawn_meta(captures, data, drawn_device, first)
    memory = memory_name(meta.get("device_type"))
    timer = meta.get("timer") or timer_name(meta.get("device_type"))
    seqs = sorted(data.seq_kv.unique().tolist())
    lo, hi = kept("seq_kv", (tuple(seqs),), (seqs[0], seqs[-1]), lambda key, chosen: st.select_slider(
        "Key length (N for square shapes)", options=seqs, value=chosen, key=key)) if len(seqs) > 1 else \
        (seqs[0], seqs[0])
    filters["seq_kv"] = [n for n in seqs if lo <= n <= hi]
    bound_filter = kept("bound", (), ["memory", "compute"], lambda key, chosen: st.multiselect(
        "Bound", ["memory", "compute"], default=chosen, key=key,
        help="as the roofline judges it for the bytes chosen below"))
    bytes_kind = kept("bytes", (), "compulsory", lambda key, chosen: st.radio(
        "Bytes for intensity", ["compulsory", "tile"], index=["compulsory", "tile"].index(chosen), horizontal=True,
        key=key, help=f"compulsory: Q, K, V read once, against the {memory} roof; tile: each block's re-reads, "
                      "against the L2 bandwidth `ceilings` measured"))

view = apply_filters(data, filters)
dtype = view.dtype.iloc[0] if not view.empty else "fp16"
roofs = rooflines.roofs_from_meta(meta, dtype, bytes_kind)
exp2 = rooflines.exp_rate(meta)
points = rooflines.roofline_points(view, roofs, bytes_kind, exp2)
if roofs and set(bound_filter) != {"memory", "compute"}:
    view, points = within_bound(view, points, bound_filter)
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

ctx = Context(captures=captures, folders=folders, stamps=stamps, reports=shown_root, launch=LAUNCH,
              chosen=chosen_captures, filters=filters, data=data, view=view, drawn=chart_rows(view), points=points,
              meta=meta, dtype=dtype, bytes_kind=bytes_kind, roofs=roofs, exp2_per_s=exp2)
for tab, module in zip(st.tabs(list(TABS), key="tab", bind="query-params"), TABS.values()):
    with tab:
        module.render(ctx)
