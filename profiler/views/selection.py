"""What the dashboard shows of its captures, as pure functions of DataFrames: the sidebar's filters (their
first values, the model presets, the rows they keep), why a selection is empty, compact shape labels, filter
values in order, the newest capture, the rows the charts draw, Compare's ranking of B and why A and B share
nothing; and where it looks for captures. profiler/views/dashboard_app.py and its tabs (profiler/views/tabs/)
lay them out; tests/test_selection.py checks them without Streamlit."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from attention_core.presets import PRESETS, preset_of
from attention_core.shape import Shape
from profiler.model.roofs import meta_for_device

# The columns that tell rows of the dashboard apart, in the order its compact label names them: the
# capture, then the shape's key.
LABEL_COLUMNS = ["capture", *Shape.KEY]
# The sidebar's filters, (label, column) in its order.
FILTERS = (("Device", "device"), ("dtype", "dtype"), ("head_dim", "head_dim"), ("causal", "causal"),
           ("Mode", "mode"), ("Batch", "batch"), ("Heads", "heads"), ("K/V heads", "kv_heads"),
           ("Query length", "seq_q"), ("Implementation", "impl"), ("Step", "step"))
# Filters that pick one value at first (so the first view is one shape family), and which; a tuple is an order
# of preference: a capture made to show fp8 (beside bf16 baselines, without fp16) opens on its fp8 rows.
PREFERRED = {"dtype": ("fp16", "fp8"), "head_dim": 64, "causal": False, "mode": "fwd"}
# What Compare names when A and B share no row: a column with no value in both.
COMPARE_COLUMNS = (("implementation", "impl"), ("batch", "batch"), ("N", "seq_kv"), ("query length", "seq_q"),
                   ("heads", "heads"), ("K/V heads", "kv_heads"), ("head_dim", "head_dim"), ("dtype", "dtype"),
                   ("causal", "causal"), ("mode", "mode"))


class LoadedCapture(NamedTuple):
    """A capture as the dashboard holds it: its meta.json and its rows (profiler.store.Capture.load, the
    ranks of an observed run told apart by profiler.observer.summary.rank_sites)."""

    meta: dict
    frame: pd.DataFrame


def checkout_of(app_file: Path | str) -> Path | None:
    """The repository root of a checkout the app runs from (``<root>/profiler/views/<app>``, with
    pyproject.toml and reports/ beside profiler/), or None when the app was installed from a wheel
    (site-packages holds neither)."""
    root = Path(app_file).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "reports").is_dir() else None


def default_reports(checkout: Path | None, environ: Mapping[str, str], cwd: Path) -> Path:
    """The folder of captures the dashboard opens without ``--reports``: $ATTN_REPORTS; else the
    checkout's reports/ (its shipped captures and every capture made there); else reports/ under the
    current directory, where ``capture`` writes by default (profiler.measure.folder.default_folder)."""
    if environ.get("ATTN_REPORTS"):
        return Path(environ["ATTN_REPORTS"])
    return checkout / "reports" if checkout is not None else cwd / "reports"


def measured_at(meta: dict, folder: Path) -> float:
    """When a capture was made, in seconds since the epoch: meta.json's "time", else the folder's mtime."""
    try:
        return pd.Timestamp(meta["time"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return folder.stat().st_mtime if folder.exists() else 0.0


def newest_capture(captures: Mapping[str, LoadedCapture], folders: Mapping[str, Path]) -> str:
    """The name of the capture made last (:func:`measured_at`), which opens when none is named; the
    first in folder order on a tie."""
    return max(captures, key=lambda n: measured_at(captures[n].meta, folders[n]))


def sorted_values(values) -> list:
    """Filter chips in order: numbers by value (512 before 1024 before 16384), anything else as text."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def starting_filters(data: pd.DataFrame, preferred: Mapping[str, object]) -> dict[str, list]:
    """The filters' first values, column by column in ``preferred``'s order (dtype, head_dim, causal,
    mode): the preferred value (the first of a tuple of them) where its rows, among those the earlier
    columns kept, hold every selected capture; else the first value that does; else every value, so
    that no selected capture opens hidden (a backward-only head_dim 128 capture beside a forward one
    opens on head_dim 128 and both modes, not on the preferred D64 fwd where it has no rows)."""
    rows, starts = data, {}
    for column, prefer in preferred.items():
        options = sorted_values(rows[column].dropna().unique().tolist())
        if not options:
            continue
        wanted = set(rows.capture)
        covers = [v for v in options if set(rows.capture[rows[column] == v]) == wanted]
        chosen = next((v for v in (prefer if isinstance(prefer, tuple) else (prefer,)) if v in covers), None)
        starts[column] = [chosen] if chosen is not None else covers[:1] or options
        rows = rows[rows[column].isin(starts[column])]
    return starts


def preset_choices(data: pd.DataFrame) -> list[str]:
    """The sidebar's model presets: "any", then those of attention_core.presets.PRESETS (in its order)
    whose heads, K/V heads and head_dim the rows hold."""
    in_data = {preset_of(*r) for r in data[["heads", "kv_heads", "head_dim"]].drop_duplicates().itertuples(index=False)}
    return ["any"] + [name for name in PRESETS if name in in_data]


def preset_filters(preset: str) -> dict[str, int]:
    """The values a preset fixes (heads, K/V heads, head_dim); none for "any"."""
    return {} if preset == "any" else dict(zip(("heads", "kv_heads", "head_dim"), PRESETS[preset][:3]))


def is_observed_run(data: pd.DataFrame) -> bool:
    """Whether every row is an observed run's (its calls and their replays: profiler.store SCHEMA "source").
    Such a selection opens on every row: its prefill, decode and backward calls are the run, not a grid to
    slice, so PREFERRED does not apply."""
    return "source" in data and bool(data.source.isin(["observed", "replay"]).all())


def opening_filters(data: pd.DataFrame, fixed: Mapping[str, object], device: str | None,
                    preferences: Mapping[str, object]) -> dict[str, list]:
    """:func:`starting_filters` over the rows there are to draw: ok totals with the values ``fixed`` (a
    preset's), of ``device`` (the one drawn first) where it has any."""
    drawable = data[(data.status == "ok") & (data.step == "total")]
    for column, value in fixed.items():
        drawable = drawable[drawable[column] == value]
    if "device" in drawable and device in set(drawable.device):
        drawable = drawable[drawable.device == device]
    return starting_filters(drawable, preferences)


def first_choice(column: str, options: list, starts: Mapping[str, list], preferred: Mapping[str, object]) -> list:
    """A filter's first values among ``options``: its :func:`opening_filters` value (``starts``); else, for
    a column of ``preferred``, the preferred value where it is an option, or the first option; else every
    option."""
    if column in starts:
        return starts[column]
    if column not in preferred:
        return options
    prefer = preferred[column] if isinstance(preferred[column], tuple) else (preferred[column],)
    return next(([v] for v in prefer if v in options), options[:1])


def drawn_meta(captures: Mapping[str, LoadedCapture], data: pd.DataFrame, device: str | None, first: dict) -> dict:
    """The meta.json everything drawn from meta.json (roofs, ceilings, the caption) comes from: that of the
    first selected capture holding rows of ``device``, as it holds them for that device (meta_for_device:
    each row was judged against its own device's roofs); else ``first``, the first selected capture's."""
    holders = data.capture[data.device == device]
    return meta_for_device(captures[holders.iloc[0]].meta, device) if len(holders) else first


def within_bound(view: pd.DataFrame, points: pd.DataFrame, bounds: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows and roofline points (rooflines.roofline_points of ``view``) that the Bound filter keeps:
    the points judged ``bounds`` and their rows, and every row that is not ok (listed, not drawn)."""
    keep = points[points.view_bound.isin(bounds)].index
    return view[(view.status != "ok") | view.index.isin(keep)], points.loc[points.index.isin(keep)]


def chart_rows(view: pd.DataFrame) -> pd.DataFrame:
    """The rows the charts are given: all but a wrong output's and a Triton interpreter's, whose times are
    kept for the record, never drawn (the builders draw the ok rows and mark where naive ran out of memory)."""
    return view[~view.status.isin(["wrong", "interpreted"])]


def not_drawn(view: pd.DataFrame) -> pd.DataFrame:
    """The cases the roofline lists instead of drawing: whole-attention rows whose status is not ok, and
    naive steps whose output was wrong."""
    return view[(view.status != "ok") & ((view.step == "total") | (view.status == "wrong"))]


def naive_step_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Naive attention's per-step rows (QKᵀ, scale/mask, softmax, PV; any status): what the Step
    breakdown draws."""
    return frame[frame.step != "total"]  # only a stepwise implementation (naive) is timed step by step


def decode_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured decode-like totals: fewer queries than keys (what the Bandwidth tab draws)."""
    return frame[(frame.step == "total") & (frame.status == "ok") & (frame.seq_q < frame.seq_kv)]


def why_empty(frame: pd.DataFrame, chosen: dict) -> str:
    """Why no row of ``frame`` passes the filters ``chosen``: the filters that no row passes (each with what
    the frame has instead), else the first filter, in sidebar order, that empties what the earlier ones keep."""
    def have(rows: pd.DataFrame, column: str) -> str:
        values = sorted_values(rows[column].dropna().unique().tolist())
        return ", ".join(map(str, values[:8])) + (" ..." if len(values) > 8 else "")

    def wanted(column: str) -> str:
        return "/".join(map(str, chosen[column])) or "(none chosen)"

    chosen = {c: v for c, v in chosen.items() if c in frame}
    alone = [f"{c} {wanted(c)} (it has {have(frame, c)})" for c in chosen if not frame[c].isin(chosen[c]).any()]
    if alone:
        return "no rows with " + "; ".join(alone)
    rows, before = frame, []
    for column in chosen:
        kept = rows[rows[column].isin(chosen[column])]
        if kept.empty:
            kept_by = ", ".join(f"{c} {wanted(c)}" for c in before)
            return f"its rows with {kept_by} have {column} {have(rows, column)}, not {wanted(column)}"
        rows, before = kept, [*before, column]
    return "it has rows under every filter"


def shape_labels(rows: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """A compact label of each row's shape naming only what varies among ``rows`` (the rest is one value,
    shown by the filters), and the columns that vary. Square shapes read N=4096, others Nq=1 Nkv=4096."""
    varying = [c for c in LABEL_COLUMNS if c in rows and rows[c].nunique() > 1]
    square = "seq_kv" not in rows or bool((rows.seq_q == rows.seq_kv).all())
    show_n = square and ("seq_q" in varying or "seq_kv" in varying or len(varying) == 0)
    parts = []
    for column in varying:
        if column in ("seq_q", "seq_kv") and square:
            continue
        values = rows[column]
        prefix = {"batch": "B", "heads": "H", "kv_heads": "KV", "seq_q": "Nq=", "seq_kv": "Nkv=", "head_dim": "D"}
        if column == "causal":
            parts.append(values.map({True: "causal", False: "full"}))
        elif column in prefix:
            parts.append(prefix[column] + values.astype(str))
        else:
            parts.append(values.astype(str))
    if show_n:
        parts.append("N=" + rows.seq_q.astype(str))
    label = pd.Series("", index=rows.index)
    for part in parts:
        label = label.str.cat(part, sep=" ").str.strip()
    return label, varying


def with_capture(name: str, meta: dict, frame: pd.DataFrame) -> pd.DataFrame:
    """A capture's rows named by capture and device: the device a row names (a capture measured on
    several kinds of GPU: profiler.store SCHEMA "device"), else meta.json's."""
    frame = frame.copy()
    own = frame["device"].fillna("") if "device" in frame else pd.Series("", index=frame.index)
    frame["capture"], frame["device"] = name, own.where(own != "", meta.get("device", "?"))
    return frame


def apply_filters(frame: pd.DataFrame, chosen: dict) -> pd.DataFrame:
    """The rows of ``frame`` (a capture's results or a validation table) that every filter keeps;
    a filter on a column the frame lacks keeps everything."""
    mask = pd.Series(True, index=frame.index)
    for column, values in chosen.items():
        if column in frame:
            mask &= frame[column].isin(values)
    return frame[mask]


def best_b(a: str, others: list[str], sharing: Mapping[str, int], unfiltered: Mapping[str, int],
           devices: Mapping[str, str]) -> str:
    """Compare's B when none is chosen: the capture of ``others`` sharing the most measured row keys with
    A under the filters (``sharing``), and among those one from A's GPU (``devices``), so that the default
    compares kernels, not GPUs; a GPU never outranks rows shared without the filters (``unfiltered``).
    The first in folder order on a tie."""
    same_gpu = {n: devices[n] == devices[a] for n in others}
    return max(others, key=lambda n: (sharing[n], sharing[n] > 0 and same_gpu[n], unfiltered[n], same_gpu[n]))


def why_none_shared(a: str, b: str, rows_a: pd.DataFrame, rows_b: pd.DataFrame, frame_a: pd.DataFrame,
                    frame_b: pd.DataFrame, chosen: dict) -> str:
    """Why A and B share no row under the filters ``chosen`` (``rows_a``/``rows_b``: what the filters keep of
    their rows ``frame_a``/``frame_b``): a side with no rows (:func:`why_empty`), else the COMPARE_COLUMNS
    with no value in both (often the batch of a --tokens sweep against a fixed-batch capture), else what
    A and B hold."""
    if rows_a.empty:
        return f"under the filters A ({a}) has no rows: {why_empty(frame_a, chosen)}"
    if rows_b.empty:
        return f"under the filters B ({b}) has no rows: {why_empty(frame_b, chosen)}"

    def listed(rows, column):
        return ", ".join(map(str, sorted_values(rows[column].dropna().unique().tolist())))

    apart = [f"no {label} in both (A has {listed(rows_a, column)}; B has {listed(rows_b, column)})"
             for label, column in COMPARE_COLUMNS
             if column in rows_a and column in rows_b
             and not set(rows_a[column].dropna()) & set(rows_b[column].dropna())]
    return "under the filters " + ("; ".join(apart) if apart else (
        f"A has {listed(rows_a, 'impl')} at N {listed(rows_a, 'seq_kv')}; B has {listed(rows_b, 'impl')} "
        f"at N {listed(rows_b, 'seq_kv')}, but no implementation at one shape in both"))


def better_b(a: str, best: str, sharing: Mapping[str, int], unfiltered: Mapping[str, int]) -> str:
    """What to pick instead when A and B share nothing: ``best`` (:func:`best_b`) where it shares rows under
    the filters, else where it shares rows without them, else a sentence that nothing here does."""
    if sharing[best]:
        return f" {best} shares {sharing[best]} rows with A under these filters: pick it as B."
    if unfiltered[best]:
        return (f" No capture here shares a row with A under these filters; without them {best} shares "
                f"{unfiltered[best]} (select it beside {a} in the sidebar to filter both).")
    return " No capture here shares an implementation and shape with A, filtered or not."
