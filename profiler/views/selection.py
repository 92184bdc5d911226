"""What the dashboard shows of its captures, as pure functions of DataFrames: the rows the sidebar's
filters keep, why a selection is empty, compact shape labels, filter values in order, the newest
capture; and where it looks for captures. profiler/views/dashboard_app.py lays them out;
tests/test_selection.py checks them without Streamlit."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from attention_core.shape import Shape

# The columns that tell rows of the dashboard apart, in the order its compact label names them: the
# capture, then the shape's key.
LABEL_COLUMNS = ["capture", *Shape.KEY]


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


def sorted_values(values) -> list:
    """Filter chips in order: numbers by value (512 before 1024 before 16384), anything else as text."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def starting_filters(data: pd.DataFrame, preferred: Mapping[str, object]) -> dict[str, list]:
    """The filters' first values, column by column in ``preferred``'s order (dtype, head_dim, causal,
    mode): the preferred value where its rows, among those the earlier columns kept, hold every
    selected capture; else the first value that does; else every value, so that no selected capture
    opens hidden (a backward-only head_dim 128 capture beside a forward one opens on head_dim 128 and
    both modes, not on the preferred D64 fwd where it has no rows)."""
    rows, starts = data, {}
    for column, prefer in preferred.items():
        options = sorted_values(rows[column].dropna().unique().tolist())
        if not options:
            continue
        wanted = set(rows.capture)
        covers = [v for v in options if set(rows.capture[rows[column] == v]) == wanted]
        starts[column] = [prefer] if prefer in covers else covers[:1] or options
        rows = rows[rows[column].isin(starts[column])]
    return starts


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
