"""A self-contained HTML report of one capture, to read offline or attach to an issue: every shape
family of the capture (or a chosen set) with a formatted summary table and the dashboard's charts; first,
for a capture of a real run (``python -m profiler observe``), an "Observed run" section.

A family is the rows that share batch, heads, K/V heads, head_dim, dtype, causal and mode
(:data:`profiler.views.style.FAMILY_COLUMNS`); its sequence lengths vary. In a capture measured on more than
one device (a sweep over ranks on different GPUs, --allow-mixed) a family is also one device's, its label ends
in " · DEVICE", and its section is drawn against that device's roofs. The report always says which
families it shows and which it leaves out. The charts come from the dashboard's own builders
(profiler.views.plots and rooflines), so they only ever draw rows with status ``ok``; the tables show
every row, with the status and its message where a case did not run or failed the correctness check.

plotly.js and the figures' template are embedded once and shared by every chart, and charts are drawn as
they scroll into view: a capture of 16 families stays a few MB and opens at once.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from profiler.model.roofs import Roofs, meta_for_device
from profiler.observer.summary import rank_sites
from profiler.registry import baseline_impl
from profiler.store import Capture, CaptureError, write_bytes_atomic
from profiler.views import observed, plots, rooflines, style
from profiler.views.selection import naive_step_rows
from profiler.views.style import FAMILY_COLUMNS, LENGTHS, family_label, impl_rank

DTYPE_ORDER = {"fp16": 0, "bf16": 1, "fp32": 2}
MODE_ORDER = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
FONT = '"Source Sans Pro", "Source Sans 3", -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'
TEXT_COLOR = "#31333F"  # Streamlit's light theme: text, secondary background, borders, links
SECONDARY_BG = "#f0f2f6"
BORDER = "#e6eaf1"
LINK = "#0068c9"
MAX_LISTED = 8  # an error message lists at most this many family labels, then the tokens they are made of


class FamilyNotFound(CaptureError):
    """A ``family`` selection that matches no family of the capture. A CaptureError (so a ValueError),
    so that the CLI reports it as it reports any other bad capture argument: one line, exit status 2."""


# ------------------------------------------------------------------------------------------ families


def families_of(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """label -> rows of each family in ``frame``, in reading order: batch, heads, K/V heads, head_dim,
    then fp16, bf16, fp32, full before causal, fwd, bwd, fwd+bwd; where the rows name more than one
    device (profiler.store SCHEMA "device"), one family per device, labelled 'B4 H32 D64 fp16 full fwd ·
    DEVICE', the devices of a shape side by side. A fixed-token sweep (``bench --tokens``: the batch
    shrinks as N grows) is one family across its batches, '32768 tokens H32 D64 fp16 full fwd', as the
    scaling charts draw it (plots._sweep_lines), not a family of one length per batch."""
    if frame.empty:
        return {}
    mixed = "device" in frame and frame.device.nunique() > 1
    others = [c for c in FAMILY_COLUMNS if c != "batch"] + ["device"] * mixed
    lines = plots._sweep_lines(plots._lines(frame)).reindex(frame.index)
    keys = [lines.lead, lines.line_batch, *(frame[c] for c in others)]
    groups = {tuple(key): rows for key, rows in frame.groupby(keys, sort=False, dropna=False)}

    def order(key):
        values = dict(zip(["lead", "line_batch", *others], key))
        tokens = int(values["lead"].split()[0]) if values["lead"] else 0
        return (tokens, values["line_batch"], values["heads"], -values["kv_heads"], values["head_dim"],
                DTYPE_ORDER.get(values["dtype"], 9), str(values["dtype"]), bool(values["causal"]),
                MODE_ORDER.get(values["mode"], 9), str(values["mode"]), str(values.get("device", "")))

    def label(key):
        text = family_label(groups[key].iloc[0])
        if key[0]:
            text = f"{key[0]} {text.split(' ', 1)[1]}"
        return text + (f" · {key[-1]}" if mixed else "")

    return {label(key): groups[key] for key in sorted(groups, key=order)}


def _available(labels: list[str]) -> str:
    """The families a user may choose from, in one line: every label, or when there are many the first
    few and the tokens the labels are made of."""
    if not labels:
        return "the capture has no rows"
    if len(labels) <= MAX_LISTED:
        return "available: " + ", ".join(labels)
    columns = zip(*(label.split() for label in labels)) if len({len(x.split()) for x in labels}) == 1 else []
    tokens = " · ".join(" ".join(dict.fromkeys(column)) for column in columns)
    return (f"available ({len(labels)}): {', '.join(labels[:MAX_LISTED - 2])}, ... and {len(labels) - MAX_LISTED + 2} "
            f"more" + (f"; tokens: {tokens}" if tokens else ""))


def select_families(labels: list[str], family: list[str] | str | None, capture: str = "the capture") -> list[str]:
    """The labels chosen by ``family``: every label when it is None or empty, else those that hold all
    space-separated tokens of at least one item ("fp16 causal" picks every fp16 causal family), case
    aside, in the order of ``labels``. An item that matches nothing raises :class:`FamilyNotFound`
    naming it and the available families: a typo must not quietly shrink a report."""
    if family is None:
        return list(labels)
    items = [family] if isinstance(family, str) else list(family)
    chosen: set[str] = set()
    for item in items:
        tokens = set(str(item).lower().split())
        if not tokens:
            raise FamilyNotFound(f"family {item!r} names no token; {_available(labels)}")
        hits = [label for label in labels if tokens <= set(label.lower().split())]
        if not hits:
            raise FamilyNotFound(f"family {item!r} matches none of the {len(labels)} families of {capture}; "
                                 f"{_available(labels)}")
        chosen.update(hits)
    return [label for label in labels if label in chosen]


def anchor(label: str) -> str:
    return "family-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


# ------------------------------------------------------------------------------------- number format


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA or x is pd.NaT


def sig3(x, unit: str = "") -> str:
    """Three significant digits in plain notation, thousands separated (1,235 not 1.23e+03): '-' when missing."""
    if _missing(x):
        return "-"
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}{unit}"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}{unit}"


def thousands(x) -> str:
    """Whole numbers with separators (GB/s: 4,240), three significant digits below 100."""
    if _missing(x):
        return "-"
    return sig3(x) if abs(float(x)) < 100 else f"{float(x):,.0f}"


def percent(x) -> str:
    """A fraction as a percentage with one decimal (0.874 -> 87.4%)."""
    return "-" if _missing(x) else f"{float(x) * 100:.1f}%"


def mib(x) -> str:
    return "-" if _missing(x) else f"{float(x) / 2**20:,.1f}"


def scientific(x) -> str:
    """An error in scientific notation (1.95e-03): it spans many decades."""
    return "-" if _missing(x) else f"{float(x):.2e}"


# ------------------------------------------------------------------------------------------- tables

SUMMARY_NUMERIC = {"time (ms)", "TFLOP/s", "GB/s", "intensity (FLOP/B)", "of datasheet roof", "of measured roof",
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
            "time (ms)": sig3(r.time_ms), "TFLOP/s": rated(r.tflops, sig3), "GB/s": rated(r.gbps, thousands),
            "intensity (FLOP/B)": rated(r.arithmetic_intensity, sig3), "bound": rated(r.bound, str),
            "of datasheet roof": rated(r.roof_fraction, percent),
            "of measured roof": rated(r.roof_fraction_measured, percent),
            "binding ceiling": point.binds if point is not None and point.binds else "-",
            "of binding ceiling": percent(point.of_ceiling) if point is not None else "-",
            "speedup over naive": sig3(base / r.time_ms, "x") if ok and base is not None and not _missing(base)
            else "-",
        }
        if decode:
            row["of measured copy"] = rated(r.gbps / copy_gbps if copy_gbps else None, percent)
        row |= {"peak memory (MiB)": mib(r.peak_mem_bytes), "max rel. error": scientific(r.max_rel_err),
                "status": str(r.status), "message": "" if ok or _missing(r.message) else str(r.message)}
        out.append(row)
    table = pd.DataFrame(out)
    differs = "ceiling_tflops" in points and (points.ceiling_tflops.notna()
                                              & (points.ceiling_tflops != points.roof_tflops)).any()
    if not differs:  # the roof binds everywhere: the two columns would repeat bound and roof
        table = table.drop(columns=["binding ceiling", "of binding ceiling"], errors="ignore")
    return table


def validation_table(validation: pd.DataFrame) -> pd.DataFrame:
    """:func:`plots.validation_table_view` in human units: MB with separators, ratios with two decimals."""
    view = plots.validation_table_view(validation).reset_index(drop=True)
    view["causal"] = ["causal" if c else "full" for c in view.causal]
    view["N"] = [f"{int(n):,}" for n in view.N]
    view = view.rename(columns={"impl": "implementation"})
    for column in view.columns:
        if "MB" in column:
            view[column] = [thousands(x) for x in view[column]]
        elif "GFLOP" in column:
            view[column] = [sig3(x) for x in view[column]]
        elif "ratio" in column:
            view[column] = ["-" if _missing(x) else f"{x:.2f}" for x in view[column]]
    return view


def html_table(frame: pd.DataFrame, numeric=(), row_classes: list[str] | None = None, note: str | None = None) -> str:
    """A table of strings: headers in words, numbers right-aligned, every cell escaped. The ``note``
    column, where a row has one, is drawn as a full-width line under that row (a status message is
    too long for a cell)."""
    columns = [c for c in frame.columns if c != note]
    head = "".join(f"<th class='{'num' if c in numeric else 'text'}'>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for i, row in enumerate(frame.to_dict("records")):
        classes = row_classes[i].split() if row_classes else []
        cells = "".join(f"<td class='{'num' if c in numeric else 'text'}'>{html.escape(str(row[c]))}</td>"
                        for c in columns)
        body.append(f"<tr class='{' '.join(classes)}'>{cells}</tr>")
        if note and row[note]:
            status = " ".join(c for c in classes if c.startswith("status-"))
            text = html.escape(str(row[note]))
            body.append(f"<tr class='note {status}'><td colspan='{len(columns)}'>{text}</td></tr>")
    return f"<div class='table-wrap'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"


def _summary_html(table: pd.DataFrame) -> str:
    """The summary table with a rule above each new shape, failed rows coloured by status and their
    messages on a line of their own."""
    classes, previous = [], None
    for r in table.to_dict("records"):
        shape = tuple(r[c] for c in LENGTH_COLUMNS if c in r)
        classes.append(" ".join(filter(None, ["shape-start" if previous is not None and shape != previous else "",
                                              "" if r["status"] == "ok" else f"status-{r['status']}"])))
        previous = shape
    return html_table(table, SUMMARY_NUMERIC, classes, note="message")


# ------------------------------------------------------------------------------------------- figures


def template() -> dict:
    """The plotly template every chart shares with the dashboard (profiler.views.style.PLOTLY_TEMPLATE), as
    JSON: sent once for all charts of the page."""
    return style.PLOTLY_TEMPLATE.to_plotly_json()


def _family_mask(table: pd.DataFrame, family: pd.DataFrame) -> pd.Series:
    """Rows of ``table`` (kernels, validation) in the family whose rows are ``family``: the family's
    values of each family column, and its own (batch, lengths) pairs, so a token sweep's B2 at N16384
    does not take in a fixed-batch run's B4 at N16384 of the same family."""
    mask = pd.Series(True, index=table.index)
    for column in FAMILY_COLUMNS:
        if column in table and column != "batch":
            mask &= table[column].isin(family[column].unique())
    pair = [c for c in ("batch", *LENGTHS) if c in table]
    if pair:
        shapes = pd.MultiIndex.from_frame(family[pair].drop_duplicates())
        mask &= pd.MultiIndex.from_frame(table[pair]).isin(shapes)
    return mask


def _trace_rows(kernels: pd.DataFrame, family: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The kernels of one family (its rows: ``family``) at one shape (the one most implementations were
    traced at, the longest on a tie), each trace shifted to start at 0 so the implementations line up;
    and a caption."""
    mask = _family_mask(kernels, family)
    rows = kernels[mask]
    if rows.empty or not {*LENGTHS, "impl"} <= set(rows.columns):  # not one trace per case: an observed run's
        return rows.iloc[:0], ""
    counts = rows.groupby(LENGTHS).impl.nunique().reset_index()
    seq_q, seq_kv = counts.sort_values(["impl", "seq_kv", "seq_q"]).iloc[-1][["seq_q", "seq_kv"]]
    rows = rows[(rows.seq_q == seq_q) & (rows.seq_kv == seq_kv)].copy()
    run = "trace" if "trace" in rows else "impl"
    start = "start_ns" if "start_ns" in rows else "start_us"
    rows[start] = rows[start] - rows.groupby(run)[start].transform("min")
    shape = f"N={seq_q:,}" if seq_q == seq_kv else f"Nq={seq_q:,}, Nkv={seq_kv:,}"
    return rows, (f"One profiled iteration of each implementation at {shape} ({len(rows):,} kernels, torch "
                  "profiler), each aligned at its own first kernel; traces/ holds the Chrome traces (Perfetto).")


def family_figures(meta: dict, rows: pd.DataFrame, kernels: pd.DataFrame | None = None,
                   validation: pd.DataFrame | None = None) -> list[tuple[str, str, go.Figure]]:
    """(section, caption, figure) of one family, as the dashboard's tabs draw them: the roofline for
    compulsory and for tile bytes, the four scaling charts, decode bandwidth when the family has rows with
    fewer queries than keys, naive's step breakdown when it has naive step rows, the kernel timeline
    when ``kernels`` has rows of the family, and Nsight Compute's hierarchical roofline when
    ``validation`` does. Only rows with status ok are drawn (the builders filter so)."""
    first = rows.iloc[0]
    dtype, exp2 = first["dtype"], rooflines.exp_rate(meta)
    out: list[tuple[str, str, go.Figure]] = []
    for kind in ("compulsory", "tile"):
        roofs = rooflines.roofs_from_meta(meta, dtype, kind)
        missing = ("No L2 bandwidth measurement in this capture (`python -m profiler ceilings` measures one): tile "
                   "intensities are drawn without a roof." if kind == "tile" else f"No {dtype} roof in the metadata.")
        notes = [f"{roofs[0].label}: ridge {roofs[0].ridge:.0f} FLOP/B"] if roofs else [missing]
        if kind == "tile" and rooflines.untiled_note(rows):
            notes.append(rooflines.untiled_note(rows))
        if exp2 is not None and kind == "compulsory":
            notes.append(f"exp ceiling: softmax's exponentials at {exp2 / 1e12:.2f}·10¹² exp2/s cap a fused kernel "
                         "that does not overlap them with its matmuls; a point above it overlaps them")
        out.append(("Roofline", " · ".join(notes), rooflines.roofline_figure(rows, roofs, kind, exp2_per_s=exp2,
                                                                             device_type=meta.get("device_type"))))
    for key, fig in plots.scaling_figures(rows).items():
        if key != "speedup" or fig.data:  # a family without naive has no speedup to draw
            out.append(("Scaling", "", fig))
    if (rows.seq_q < rows.seq_kv).any():
        out.append(("Bandwidth", "GB/s counts the model's compulsory bytes (Q, K, V read once, O and the logsumexp "
                                 "written once). Above the copy line is possible: a read-mostly stream outruns a copy.",
                    plots.bandwidth_figure(rows, meta)))
    if not naive_step_rows(rows).empty:
        out.append(("Step breakdown", "", plots.step_breakdown_figure(rows, device_type=meta.get("device_type"))))
    if kernels is not None and not kernels.empty:
        traced, caption = _trace_rows(kernels, rows)
        if not traced.empty:
            out.append(("Trace", caption, plots.trace_figure(traced)))
    if validation is not None and not validation.empty:
        out.append(("Validation", "Each kernel twice, at its DRAM and at its L2 intensity, both measured by Nsight "
                                  "Compute (the legend says which marker is which).",
                    plots.hierarchical_roofline_figure(validation, meta, dtype)))
    return out


def _family_validation(validation: pd.DataFrame | None, family: pd.DataFrame) -> pd.DataFrame | None:
    """Validation rows of one family (its rows: ``family``); a table without a mode column holds forward
    runs (profiler.nsight)."""
    if validation is None:
        return None
    if "mode" not in validation and (family["mode"] != "fwd").any():
        return None
    return validation[_family_mask(validation, family)]


def script_json(value) -> str:
    """JSON (numpy arrays as plotly encodes them) that is safe inside a <script> element."""
    return pio.json.to_json_plotly(value).replace("</", "<\\/")


class _Charts:
    """Figures as JSON blocks beside empty divs; one script at the end draws them with the shared template."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, fig: go.Figure, wide: bool = True) -> str:
        self.count += 1
        spec = fig.to_plotly_json()
        spec["layout"].pop("template", None)  # sent once for all charts: see template()
        height = spec["layout"].get("height") or 450
        data = script_json({"data": spec["data"], "layout": spec["layout"]})
        name = f"chart-{self.count}"
        return (f"<div class='chart{' wide' if wide else ''}' id='{name}' style='min-height:{height}px'></div>"
                f"<script type='application/json' id='{name}-data'>{data}</script>")


SCRIPT = """
const TEMPLATE = %s;
const CONFIG = {responsive: true, displaylogo: false};
function draw(el) {
  if (el.dataset.drawn) return;
  el.dataset.drawn = "1";
  const spec = JSON.parse(document.getElementById(el.id + "-data").textContent);
  spec.layout.template = TEMPLATE;
  Plotly.newPlot(el, spec.data, spec.layout, CONFIG);
}
const charts = Array.from(document.querySelectorAll("div.chart"));
if ("IntersectionObserver" in window) {
  const seen = new IntersectionObserver((entries) => entries.forEach((entry) => {
    if (entry.isIntersecting) { seen.unobserve(entry.target); draw(entry.target); }
  }), {rootMargin: "1200px 0px"});
  charts.forEach((el) => seen.observe(el));
} else {
  charts.forEach(draw);
}
window.addEventListener("beforeprint", () => charts.forEach(draw));
"""

CSS = f"""
:root {{ color-scheme: light; }}
body {{ font-family: {FONT}; color: {TEXT_COLOR}; background: #fff; margin: 0; line-height: 1.5; font-size: 15px; }}
main {{ max-width: 1560px; margin: 0 auto; padding: 2.5rem 2rem 4rem; }}
h1 {{ font-size: 2.2rem; font-weight: 700; margin: 0 0 .3rem; }}
h2 {{ font-size: 1.6rem; font-weight: 600; margin: 3rem 0 .4rem; padding-top: 1rem; border-top: 1px solid {BORDER}; }}
h3 {{ font-size: 1.15rem; font-weight: 600; margin: 1.6rem 0 .4rem; }}
a {{ color: {LINK}; text-decoration: none; }} a:hover {{ text-decoration: underline; }}
.caption, .meta {{ color: rgba(49,51,63,.6); font-size: .875rem; }}
.shows {{ background: {SECONDARY_BG}; border-radius: .5rem; padding: .75rem 1rem; margin: 1rem 0; }}
.toc {{ columns: 2; column-gap: 2.5rem; padding-left: 1.2rem; }} .toc li {{ margin: .1rem 0; }}
.table-wrap {{ overflow-x: auto; margin: .5rem 0 1rem; border: 1px solid {BORDER}; border-radius: .5rem; }}
table {{ border-collapse: collapse; font-size: .82rem; width: 100%; font-variant-numeric: tabular-nums; }}
th {{ background: {SECONDARY_BG}; color: rgba(49,51,63,.8); font-weight: 600; position: sticky; top: 0; }}
th, td {{ padding: .3rem .5rem; border-bottom: 1px solid {BORDER}; white-space: nowrap; }}
th {{ white-space: normal; vertical-align: bottom; line-height: 1.2; }}
th.num, td.num {{ text-align: right; }} th.text, td.text {{ text-align: left; }}
tbody tr:hover {{ background: #f8f9fb; }}
tr.shape-start td {{ border-top: 2px solid #d5dae5; }}
tr.note td {{ white-space: normal; overflow-wrap: anywhere; border-top: 0; padding: 0 .5rem .45rem 1.5rem;
  font-size: .78rem; }}
tr:has(+ tr.note) td {{ border-bottom: 0; }}
tr.status-wrong td, tr.status-error td {{ color: #c81e1e; }}
tr.status-oom td {{ color: #b45309; }}
tr.status-unsupported td {{ color: rgba(49,51,63,.6); }}
.grid {{ display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: .5rem 1rem; }}
.grid .wide {{ grid-column: 1 / -1; }}
.chart {{ width: 100%; }}
details {{ margin: .5rem 0; }} summary {{ cursor: pointer; color: rgba(49,51,63,.75); }}
code, pre {{ font-size: .8rem; background: {SECONDARY_BG}; border-radius: .25rem; padding: .1rem .3rem; }}
pre {{ white-space: pre-wrap; padding: .5rem .75rem; }}
.warn {{ color: #b45309; }}
"""


# -------------------------------------------------------------------------------------------- report


def _rows_note(rows: pd.DataFrame) -> str:
    totals = rows[rows.step == "total"]
    statuses = totals.status.value_counts()
    failed = ", ".join(f"{n} {s}" for s, n in statuses.items() if s != "ok")
    steps = len(rows) - len(totals)
    lengths = sorted(set(totals.seq_kv))
    span = f"{lengths[0]:,}" if len(lengths) == 1 else f"{lengths[0]:,} to {lengths[-1]:,}"
    queries = sorted(set(totals.seq_q))
    decode = (totals.seq_q < totals.seq_kv).any()
    batches = sorted(set(totals.batch), reverse=True)
    sweep = f" · batch {', '.join(map(str, batches))} as N grows" if len(batches) > 1 else ""
    return (f"{len(rows):,} rows: {len(totals):,} whole-attention" + (f" ({failed})" if failed else "")
            + (f", {steps:,} naive step rows" if steps else "") + f" · key length {span}" + sweep
            + (f" · query length {', '.join(f'{q:,}' for q in queries)}" if decode else "")
            + f" · {totals.impl.nunique()} implementations")


def _shows_sentence(shown: list[str], families: dict[str, pd.DataFrame], family) -> str:
    total_rows = sum(len(r) for r in families.values())
    shown_rows = sum(len(families[label]) for label in shown)
    left = [label for label in families if label not in shown]
    chosen = "" if family is None else " chosen by family " + ", ".join(
        repr(f) for f in ([family] if isinstance(family, str) else family))
    listed = "every family of the capture" if not left else ", ".join(shown)
    return (f"Shows {len(shown)} of {len(families)} families ({shown_rows:,} of {total_rows:,} rows){chosen}: "
            f"{listed}; left out: {', '.join(left) if left else 'none'}.")


def _family_section(label: str, rows: pd.DataFrame, meta: dict, kernels: pd.DataFrame | None,
                    validation: pd.DataFrame | None, charts: _Charts) -> list[str]:
    """The HTML of one family: its heading, what its rows hold, the summary table, then each figure of
    :func:`family_figures` under the dashboard tab's name (the scaling charts two a row), the model's HBM
    trips beside the step breakdown and the Nsight Compute table after the validation roofline."""
    e = html.escape
    first = rows.iloc[0]
    measured = Roofs.from_meta(meta).measured
    copy_gbps = None if measured is None else measured.copy_gbps
    points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, first["dtype"]), "compulsory",
                                       rooflines.exp_rate(meta))
    parts = [f"<h2 id='{anchor(label)}'>{e(label)}</h2>", f"<p class='caption'>{e(_rows_note(rows))}</p>",
             "<h3>Summary</h3>", _summary_html(summary_table(rows, points, copy_gbps))]
    checked = _family_validation(validation, rows)
    section = None
    for name, caption, fig in family_figures(meta, rows, kernels, checked):
        if name != section:
            parts += ["</div>"] if section == "Scaling" else []
            parts.append(f"<h3>{e(name)}</h3>")
            parts += ["<div class='grid'>"] if name == "Scaling" else []
            section = name
        # long legend entries (decode's per-query-length lines) leave a half-width plot no room
        wide = name != "Scaling" or max((len(t.name or "") for t in fig.data), default=0) > 28
        parts.append(charts.div(fig, wide=wide))
        if caption:
            parts.append(f"<p class='caption'>{e(caption)}</p>")
        if name == "Step breakdown":
            # The longest row, at the batch measured there (a token sweep's smallest), with its own lengths.
            shape = plots.trips_shape(rows.loc[rows.seq_kv.idxmax()])
            trips = plots.hbm_trips_table(shape, device_type=meta.get("device_type"))
            matrix, lengths = plots.trips_heading(shape, thousands=True)
            parts += [f"<p><b>{style.memory_name(meta.get('device_type'))} trips of the {matrix}, naive vs "
                      f"fused</b> <span class='caption'>(model, {lengths})</span></p>",
                      html_table(trips, set(trips.columns) - {"step"})]
        if name == "Validation":
            table = validation_table(checked)
            parts += [f"<p><b>Nsight Compute counters vs the cost model</b> <span class='caption'>({len(checked)} "
                      "profiled rows)</span></p>",
                      html_table(table, set(table.columns) - {"implementation", "step", "dtype", "causal"})]
    parts += ["</div>"] if section == "Scaling" else []
    return parts


OBSERVED_ANCHOR = "observed-run"
OBSERVED_TEXT = {"site", "api", "mode", "shape", "mask", "bound", "implementation", "calls replayed", "replayed"}


def _formatted(table: pd.DataFrame) -> pd.DataFrame:
    """An observed-run table in human units: fractions as percentages, speedups as 1.066x, calls whole,
    other numbers to three significant digits."""
    out = table.copy()
    for column in out.columns:
        if column in OBSERVED_TEXT:
            out[column] = ["-" if _missing(x) else {True: "yes", False: "no"}.get(x, str(x)) for x in out[column]]
        elif column == "of roof":
            out[column] = [percent(x) for x in out[column]]
        elif column == "run speedup":
            out[column] = ["-" if _missing(x) else f"{float(x):.3f}x" for x in out[column]]
        elif column == "calls":
            out[column] = [f"{int(x):,}" for x in out[column]]
        else:
            out[column] = [sig3(x) for x in out[column]]
    return out


def _observed_section(meta: dict, frame: pd.DataFrame, charts: _Charts) -> list[str]:
    """The "Observed run" section of a capture made by ``observe``: attention's share of the run and
    the warnings, the time by call site, the rows with the most time, the observed calls on the
    roofline beside their replays, and what each replayed implementation would save (as the
    dashboard's Observed tab; profiler.views.observed)."""
    e = html.escape
    share, warnings = observed.sentences(meta)
    command = observed.summary_of(meta).get("command") or meta.get("command")
    parts = [f"<h2 id='{OBSERVED_ANCHOR}'>Observed run</h2>",
             *([f"<p class='caption'>{e(str(command))}</p>"] if command else []),
             f"<p><b>{e(share)}</b></p>", *(f"<p class='warn'>{e(line)}</p>" for line in warnings),
             charts.div(observed.site_figure(frame)),
             f"<h3>The {observed.TOP} rows with the most time</h3>",
             html_table(_formatted(observed.top_table(frame)), set(observed.TOP_COLUMNS.values()) - OBSERVED_TEXT)]
    fig, note = observed.roofline(frame, meta)
    parts += ["<h3>Roofline</h3>", charts.div(fig), f"<p class='caption'>{e(note)}</p>"]
    whole, per_row, sentence = observed.savings_tables(frame, meta)
    parts.append("<h3>What a replayed implementation would save</h3>")
    if sentence is None:
        return parts + ["<p class='caption'>No replay in this capture: <code>python -m profiler observe --replay IMPLS"
                        "</code> re-runs the observed shapes through registered implementations.</p>"]
    return parts + [f"<p><b>{e(sentence)}</b></p>", html_table(_formatted(whole), set(whole.columns) - OBSERVED_TEXT),
                    "<details><summary>Per site, shape and mode</summary>"
                    + html_table(_formatted(per_row), set(per_row.columns) - OBSERVED_TEXT) + "</details>"]


def build_report(folder: Path | str, family: list[str] | None = None) -> str:
    """The report of the capture in ``folder`` as one HTML page: every family, or those ``family``
    selects (see :func:`select_families`; FamilyNotFound, a CaptureError, when an item matches none)."""
    capture = Capture(folder)
    meta, frame = capture.load()
    frame = rank_sites(frame)  # the ranks of a torchrun observation apart in every table
    families = families_of(frame)
    shown = select_families(list(families), family, f"'{capture.name}'")
    kernels = capture.kernels()  # the torch profiler's (the dashboard's Trace tab also reads an nsys export's)
    validation = capture.validation()
    charts = _Charts()
    e = html.escape
    title = f"Attention roofline: {capture.name}"
    facts = [", ".join(meta.get("devices") or []) or meta.get("device"), meta.get("torch") and f"torch {meta['torch']}",
             meta.get("triton") and f"triton {meta['triton']}", meta.get("time") and f"measured {meta['time']}",
             meta.get("git_revision") and f"git {str(meta['git_revision'])[:12]}"]
    commands = meta.get("commands") or ([meta["command"]] if meta.get("command") else [])
    parts = [f"<h1>{e(title)}</h1>", f"<p class='meta'>{e(' · '.join(str(f) for f in facts if f))}</p>",
             f"<p class='shows'>{e(_shows_sentence(shown, families, family))}</p>"]
    if commands or meta.get("corrections"):
        parts.append("<details><summary>How this capture was made</summary>"
                     + "".join(f"<pre>{e(str(c))}</pre>" for c in commands)
                     + "".join(f"<p class='caption'>{e(str(c))}</p>" for c in meta.get("corrections") or [])
                     + "</details>")
    run = observed.has_observed(frame)
    parts.append("<h3>Contents</h3><ol class='toc'>"
                 + (f"<li><a href='#{OBSERVED_ANCHOR}'>Observed run</a></li>" if run else "") + "".join(
        f"<li><a href='#{anchor(label)}'>{e(label)}</a> <span class='caption'>{len(families[label]):,} rows</span></li>"
        for label in shown) + "</ol>")
    if run:
        parts += _observed_section(meta, frame, charts)
    for label in shown:
        rows = families[label]  # judged against its own device's roofs where the capture is mixed
        device_meta = meta_for_device(meta, rows.device.iloc[0] if "device" in rows else None)
        parts += _family_section(label, rows, device_meta, kernels, validation, charts)
    return "\n".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{e(title)}</title><style>{CSS}</style>",
        f"<script>{get_plotlyjs()}</script></head><body><main>",
        *parts,
        f"</main><script>{SCRIPT % script_json(template())}</script></body></html>",
    ])


def write_report(folder: Path | str, out: Path | str | None = None, family: list[str] | None = None) -> Path:
    """Write :func:`build_report` of ``folder`` to ``out`` (default ``<folder>/report.html``, which git
    ignores) atomically, creating its folder, and return the path."""
    out = Path(out) if out else Capture(folder).report_path
    html_text = build_report(folder, family)  # a bad capture or family fails before anything is created
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, html_text.encode("utf-8"))
    return out
