"""An observed run (``python -m profiler observe``) as the dashboard's Observed tab and the report's
"Observed run" section show it: attention time by call site, the rows with the most time, the
observed calls on the roofline beside their replays, and what each replayed implementation would save.

Pure functions of a capture's rows and meta.json; the sentences come from profiler.observer.summary,
the savings from profiler.observer.replay.savings, the roofline from profiler.views.rooflines.
"""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go

from profiler.observer.replay import savings
from profiler.observer.summary import TOP, observed_rows, savings_sentence, share_line, top_rows, warning_lines
from profiler.views import rooflines
from profiler.views.style import PLOTLY_TEMPLATE

MODE_COLOR = {"fwd": "#4c78a8", "bwd": "#f58518"}  # the two stacks of the by-site chart
MAX_SITES = 48  # the by-site chart keeps the sites with the most time, in model order
HOW_TO = "python -m profiler observe --out DIR -- script.py"


def has_observed(frame: pd.DataFrame) -> bool:
    return len(observed_rows(frame)) > 0


def summary_of(meta: dict) -> dict:
    """meta.json's ``observed`` dict (the run's wall time, attention's share, ...), empty when absent."""
    return meta.get("observed") or {}


def sentences(meta: dict) -> tuple[str, list[str]]:
    """(attention's share of the run, the warnings on what it leaves out), from meta.json's ``observed``."""
    summary = summary_of(meta)
    return share_line(summary), warning_lines(summary)


def _model_order(site: str) -> list:
    """'model.layers.10.self_attn' after 'model.layers.9.self_attn': numbers compared as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", site)]


def site_totals(frame: pd.DataFrame) -> pd.DataFrame:
    """Per site and mode: total ms and calls of the observed rows with status ok, the sites in model
    order (at most MAX_SITES: those with the most time)."""
    rows = observed_rows(frame)
    rows = rows[rows["status"] == "ok"]
    totals = rows.groupby(["site", "mode"], sort=False).agg(total_ms=("total_ms", "sum"), calls=("calls", "sum"))
    totals = totals.reset_index()
    per_site = totals.groupby("site").total_ms.sum().sort_values(ascending=False, kind="stable")
    kept = sorted(per_site.index[:MAX_SITES], key=_model_order)
    totals = totals[totals.site.isin(kept)]
    totals["order"] = [kept.index(s) for s in totals.site]
    return totals.sort_values(["order", "mode"]).drop(columns="order").reset_index(drop=True)


def site_figure(frame: pd.DataFrame) -> go.Figure:
    """Attention time by call site, one horizontal bar per site (model order, top to bottom), stacked by
    mode: forward, and backward where the run trained."""
    totals = site_totals(frame)
    sites = list(dict.fromkeys(totals.site))
    every = observed_rows(frame)["site"].nunique()
    fig = go.Figure()
    for mode in [m for m in ("fwd", "bwd") if m in set(totals["mode"])] + sorted(set(totals["mode"]) - {"fwd", "bwd"}):
        part = totals[totals["mode"] == mode]
        fig.add_trace(go.Bar(
            y=part.site, x=part.total_ms, orientation="h", name={"fwd": "forward", "bwd": "backward"}.get(mode, mode),
            marker={"color": MODE_COLOR.get(mode)}, customdata=part.calls,
            hovertemplate=f"%{{y}} ({mode})<br>%{{x:.4g}} ms in %{{customdata:,.0f}} calls<extra></extra>"))
    shown = "" if every <= len(sites) else f" (the {len(sites)} of {every} sites with the most time)"
    fig.update_layout(template=PLOTLY_TEMPLATE, barmode="stack", height=max(260, 24 * len(sites) + 140),
                      title=f"Attention time by call site{shown}", xaxis_title="ms (all calls)",
                      legend={"orientation": "h", "traceorder": "normal", "x": 1, "xanchor": "right", "y": 1.0,
                              "yanchor": "bottom"})
    fig.update_yaxes(categoryorder="array", categoryarray=sites, autorange="reversed", title=None, ticksuffix=" ")
    return fig


TOP_COLUMNS = {"site": "site", "impl": "api", "mode": "mode", "label": "shape", "mask": "mask", "calls": "calls",
               "total_ms": "total ms", "median_ms": "median ms", "tflops": "TFLOP/s", "gbps": "GB/s",
               "bound": "bound", "of_roof": "of roof"}


def top_table(frame: pd.DataFrame, n: int = TOP) -> pd.DataFrame:
    """The ``n`` observed rows with the most total time (profiler.observer.summary.top_rows), numbers as
    numbers, headers in words; ``of roof`` is a fraction (datasheet roof, else measured)."""
    rows = top_rows(frame, n)
    table = rows[list(TOP_COLUMNS)].rename(columns=TOP_COLUMNS).reset_index(drop=True)
    table["calls"] = table["calls"].astype("int64")
    return table


def roofline(frame: pd.DataFrame, meta: dict) -> tuple[go.Figure, str]:
    """The observed rows (stars) beside their replays on the roofline of compulsory bytes, and a
    caption. Rows of one dtype are drawn, against its roofs: the dtype with the most observed time."""
    rows = frame[frame["source"].isin(["observed", "replay"]) & (frame["status"] == "ok")]
    observed = observed_rows(rows)
    by_dtype = observed.groupby("dtype").total_ms.sum().sort_values(ascending=False, kind="stable")
    dtype = by_dtype.index[0] if len(by_dtype) else (rows.dtype.iloc[0] if len(rows) else "fp16")
    rows = rows[rows.dtype == dtype]
    roofs = rooflines.roofs_from_meta(meta, dtype)
    fig = rooflines.roofline_figure(rows, roofs, "compulsory", title=f"Observed calls and replays ({dtype})",
                                    exp2_per_s=rooflines.exp_rate(meta), device_type=meta.get("device_type"))
    notes = ["stars: the run's own calls (one per site, shape, mask and mode; hover for the site and the calls); "
             "circles: implementations replayed at those shapes"]
    if len(by_dtype) > 1:
        notes.append(f"drawn: the {dtype} rows, which took the most time; the run also called attention in "
                     + ", ".join(d for d in by_dtype.index[1:]))
    return fig, " · ".join(notes)


SAVINGS_COLUMNS = {"impl": "implementation", "replayed": "calls replayed", "attention_ms": "attention ms",
                   "new_attention_ms": "would take ms", "saved_ms": "saved ms", "speedup": "run speedup"}
ROW_SAVINGS_COLUMNS = {"impl": "implementation", "site": "site", "api": "api", "mode": "mode", "label": "shape",
                       "mask": "mask", "calls": "calls", "observed_ms": "observed ms", "replayed_ms": "replayed ms",
                       "saved_ms": "saved ms", "replayed": "replayed"}


def savings_tables(frame: pd.DataFrame, meta: dict) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """(per implementation for the whole run, per observed row and implementation, the sentence) of
    what each replayed implementation would save (profiler.observer.replay.savings); empty frames and
    None without replay rows. ``run speedup`` is a factor (1.12 = 1.12x faster)."""
    per_row, whole = savings(frame, summary_of(meta))
    if not len(whole):
        return pd.DataFrame(), pd.DataFrame(), None
    whole = whole.sort_values("saved_ms", ascending=False, kind="stable")
    table = whole.assign(replayed=[f"{r}/{c}" for r, c in zip(whole.calls_replayed, whole.calls)])
    table = table[list(SAVINGS_COLUMNS)].rename(columns=SAVINGS_COLUMNS).reset_index(drop=True)
    rows = per_row.sort_values(["impl", "saved_ms"], ascending=[True, False], kind="stable")
    rows = rows[list(ROW_SAVINGS_COLUMNS)].rename(columns=ROW_SAVINGS_COLUMNS).reset_index(drop=True)
    return table, rows, savings_sentence(whole)
