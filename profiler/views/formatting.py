"""Numbers and tables as the HTML report prints them: three significant digits with thousands separators,
percentages, MiB, errors in scientific notation; and the report's tables (the family summary, Nsight
Compute's counters against the model, an observed run's tables) as strings in human units with headers in
words. DataFrames in, DataFrames of strings out; profiler/views/report_html.py renders them."""

from __future__ import annotations

import math

import pandas as pd

from profiler.registry import baseline_impl
from profiler.views.plots import validation_table_view
from profiler.views.style import LENGTHS, impl_rank
from profiler.views.tables import bench_table


def is_missing(x) -> bool:
    """None, NaN, pd.NA or pd.NaT: printed as '-'."""
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA or x is pd.NaT


def sig3(x, unit: str = "") -> str:
    """Three significant digits in plain notation, thousands separated (1,235 not 1.23e+03): '-' when missing."""
    if is_missing(x):
        return "-"
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}{unit}"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}{unit}"


def thousands(x) -> str:
    """Whole numbers with separators (GB/s: 4,240), three significant digits below 100."""
    if is_missing(x):
        return "-"
    return sig3(x) if abs(float(x)) < 100 else f"{float(x):,.0f}"


def percent(x) -> str:
    """A fraction as a percentage with one decimal (0.874 -> 87.4%)."""
    return "-" if is_missing(x) else f"{float(x) * 100:.1f}%"


def mib(x) -> str:
    return "-" if is_missing(x) else f"{float(x) / 2**20:,.1f}"


def scientific(x) -> str:
    """An error in scientific notation (1.95e-03): it spans many decades."""
    return "-" if is_missing(x) else f"{float(x):.2e}"


# ------------------------------------------------------------------------------------------- tables

SUMMARY_NUMERIC = {"time (ms)", "SM clock (MHz)", "rounds' spread", "TFLOP/s", "GB/s", "intensity (FLOP/B)",
                   "of datasheet roof", "of measured roof",
                   "of roof at its size",
                   "of binding ceiling", "speedup over naive", "of measured copy", "peak memory (MiB)",
                   "max rel. error", "query length", "key length", "N"}
LENGTH_COLUMNS = ["N", "query length", "key length"]


def summary_table(rows: pd.DataFrame, points: pd.DataFrame, copy_gbps: float | None = None) -> pd.DataFrame:
    """The whole-attention rows of one family as a reader sees them: strings in human units, headers in
    words, one row per implementation and shape (by query and key length, then registry order).
    ``points`` is :func:`rooflines.roofline_points` of the rows (compulsory bytes), for the ceiling that
    binds (two columns, where a ceiling other than the roof binds somewhere: the exp ceiling). A row whose
    status is not ok has no rates (a ``wrong`` one keeps its time and error, as measured); its status
    says what happened and ``message`` why. ``copy_gbps`` adds GB/s against the measured copy for decode."""
    totals = rows[rows.step == "total"].copy()
    totals["rank"] = [impl_rank(i) for i in totals.impl]
    totals = totals.sort_values([*LENGTHS, "rank"])
    naive = totals[(totals.impl == baseline_impl()) & (totals.status == "ok")].set_index(LENGTHS).time_ms
    naive = naive[~naive.index.duplicated()]
    decode = bool((totals.seq_q < totals.seq_kv).any())
    square = bool((totals.seq_q == totals.seq_kv).all())
    show_path = "path" in totals and bool(totals.path.fillna("").astype(str).str.len().gt(0).any())
    show_site = "site" in totals and bool(totals.site.fillna("").astype(str).str.len().gt(0).any())  # observed
    out = []
    for index, r in totals.iterrows():
        ok = r.status == "ok"

        def rated(value, fmt, ok=ok):  # rates exist only for ok rows
            return fmt(value) if ok else "-"

        point = points.loc[index] if ok and index in points.index else None
        base = naive.get((r.seq_q, r.seq_kv))
        row = {"implementation": r.impl}
        if show_site:
            row["site"] = r.site or "-"
        if show_path:
            row["path"] = r.path or "-"
        row |= {
            **({"query length": f"{int(r.seq_q):,}", "key length": f"{int(r.seq_kv):,}"} if not square
               else {"N": f"{int(r.seq_q):,}"}),
            "time (ms)": sig3(r.time_ms),
            # what the row ran at, as the dashboard's Roofline table shows them (profiler.views.tables): NVML's SM
            # clock, and with --rounds how far the rounds spread
            "SM clock (MHz)": "-" if is_missing(r.get("sm_clock_mhz")) else f"{float(r.sm_clock_mhz):,.0f}",
            "rounds' spread": percent(r.get("round_spread")),
            "TFLOP/s": rated(r.tflops, sig3), "GB/s": rated(r.gbps, thousands),
            "intensity (FLOP/B)": rated(r.arithmetic_intensity, sig3), "bound": rated(r.bound, str),
            "of datasheet roof": rated(r.roof_fraction, percent),
            "of measured roof": rated(r.roof_fraction_measured, percent),
            "of roof at its size": rated(r.get("roof_fraction_size"), percent),
            "binding ceiling": point.binds if point is not None and point.binds else "-",
            "of binding ceiling": percent(point.of_ceiling) if point is not None else "-",
            "speedup over naive": sig3(base / r.time_ms, "x") if ok and base is not None and not is_missing(base)
            else "-",
        }
        if decode:
            row["of measured copy"] = rated(r.gbps / copy_gbps if copy_gbps else None, percent)
        row |= {"peak memory (MiB)": mib(r.peak_mem_bytes), "max rel. error": scientific(r.max_rel_err),
                "status": str(r.status), "message": "" if ok or is_missing(r.message) else str(r.message)}
        out.append(row)
    table = pd.DataFrame(out)
    differs = "ceiling_tflops" in points and (points.ceiling_tflops.notna()
                                              & (points.ceiling_tflops != points.roof_tflops)).any()
    if not differs:  # the roof binds everywhere: the two columns would repeat bound and roof
        table = table.drop(columns=["binding ceiling", "of binding ceiling"], errors="ignore")
    if "roof_fraction_size" not in totals or totals.roof_fraction_size.isna().all():  # no copy curve measured
        table = table.drop(columns=["of roof at its size"], errors="ignore")
    for column, header in (("sm_clock_mhz", "SM clock (MHz)"), ("round_spread", "rounds' spread")):
        if column not in totals or totals[column].isna().all():  # no NVML, or timed once: dashes say nothing
            table = table.drop(columns=[header])
    if naive.empty:  # no naive row ran in this family (a peers grid): a column of dashes says nothing
        table = table.drop(columns=["speedup over naive"], errors="ignore")
    return table


def _totals_and_peers(rows: pd.DataFrame, baseline: str) -> tuple[pd.DataFrame, list[str]]:
    """The total rows, and every implementation in them but ``baseline``, in the views' order."""
    totals = rows[rows.step == "total"]
    return totals, sorted(set(totals.impl) - {baseline}, key=impl_rank)


def baseline_table(rows: pd.DataFrame, baseline: str) -> pd.DataFrame | None:
    """``baseline`` (a bench capture's, meta.json ``baseline``) against each other implementation of one
    family (one device: the report splits a mixed capture's families per device), one row per shape it holds:
    the baseline's time and each peer's time over it, the ratios of ``python -m profiler bench``'s table
    (:func:`profiler.views.tables.bench_table`; above 1.00x the baseline is the faster). A ratio needs both rows
    ok: elsewhere the cell is '-', and a peer that never ran ok keeps its column of them. None when the baseline
    ran ok nowhere in the family or there is no other implementation."""
    totals, peers = _totals_and_peers(rows, baseline)
    if baseline not in set(totals[totals.status == "ok"].impl) or not peers:
        return None
    bench = bench_table(totals, [baseline, *peers], baseline).sort_values([*LENGTHS, "batch"])
    square = bool((bench.seq_q == bench.seq_kv).all())
    out = []
    for r in bench.to_dict("records"):
        row = {"batch": f"{int(r['batch']):,}"}
        row |= ({"N": f"{int(r['seq_q']):,}"} if square
                else {"query length": f"{int(r['seq_q']):,}", "key length": f"{int(r['seq_kv']):,}"})
        base = r[f"{baseline}_time_ms"]
        row[f"{baseline} time (ms)"] = "-" if is_missing(base) else sig3(base)
        row |= {f"vs {peer}": "-" if is_missing(r[f"{baseline}/{peer}"]) else f"{r[f'{baseline}/{peer}']:.3f}x"
                for peer in peers}
        out.append(row)
    table = pd.DataFrame(out)
    if table["batch"].nunique() == 1:  # a family holds one batch unless a token sweep varies it
        table = table.drop(columns=["batch"])
    return table


def baseline_ranges(frame: pd.DataFrame, baseline: str) -> str | None:
    """One sentence over a whole bench capture: for each peer, the lowest and highest of its time over
    ``baseline``'s (:func:`profiler.views.tables.bench_table`'s ratios) across every shape both ran ok, each
    device's shapes apart where the capture holds several, as the README's results rows quote them; None without
    an ok baseline row or a peer beside it."""
    totals, peers = _totals_and_peers(frame, baseline)
    devices = totals.groupby("device") if "device" in totals and totals.device.nunique() > 1 else [(None, totals)]
    bench = pd.concat([bench_table(rows, [baseline, *peers], baseline) for _, rows in devices])
    parts = []
    for peer in peers:
        ratio = bench[f"{baseline}/{peer}"].dropna() if f"{baseline}/{peer}" in bench else pd.Series(dtype=float)
        if len(ratio):
            parts.append(f"{peer} {ratio.min():.3f}x to {ratio.max():.3f}x over {len(ratio)} shapes")
    if not parts:
        return None
    return (f"Each peer's time over {baseline}'s, lowest to highest over the shapes both ran (above 1.00x "
            f"{baseline} is the faster): " + "; ".join(parts) + ".")


def validation_table(validation: pd.DataFrame) -> pd.DataFrame:
    """:func:`plots.validation_table_view` in human units: MB with separators, ratios with two decimals."""
    view = validation_table_view(validation).reset_index(drop=True)
    view["causal"] = ["causal" if c else "full" for c in view.causal]
    view["N"] = [f"{int(n):,}" for n in view.N]
    view = view.rename(columns={"impl": "implementation"})
    for column in view.columns:
        if "MB" in column:
            view[column] = [thousands(x) for x in view[column]]
        elif "GFLOP" in column:
            view[column] = [sig3(x) for x in view[column]]
        elif "ratio" in column:
            view[column] = ["-" if is_missing(x) else f"{x:.2f}" for x in view[column]]
    return view


OBSERVED_TEXT = {"site", "api", "mode", "shape", "mask", "bound", "implementation", "calls replayed", "replayed"}


def observed_table(table: pd.DataFrame) -> pd.DataFrame:
    """An observed-run table (profiler.views.observed) in human units: fractions as percentages, speedups
    as 1.066x, calls whole, other numbers to three significant digits; the OBSERVED_TEXT columns as text."""
    out = table.copy()
    for column in out.columns:
        if column in OBSERVED_TEXT:
            out[column] = ["-" if is_missing(x) else {True: "yes", False: "no"}.get(x, str(x)) for x in out[column]]
        elif column == "of roof":
            out[column] = [percent(x) for x in out[column]]
        elif column == "run speedup":
            out[column] = ["-" if is_missing(x) else f"{float(x):.3f}x" for x in out[column]]
        elif column == "calls":
            out[column] = [f"{int(x):,}" for x in out[column]]
        else:
            out[column] = [sig3(x) for x in out[column]]
    return out
