"""The report's HTML: tables of strings as HTML tables, figures as JSON beside empty divs, and the page
around them, its CSS (Streamlit's light theme, so the report looks like the dashboard) and the one script that
draws every chart with the shared plotly template as it scrolls into view. No numbers are computed here:
profiler/views/report.py lays out the sections, profiler/views/formatting.py formats the tables."""

from __future__ import annotations

import html
import re

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from profiler.views.formatting import LENGTH_COLUMNS, SUMMARY_NUMERIC
from profiler.views.style import PLOTLY_TEMPLATE

FONT = '"Source Sans Pro", "Source Sans 3", -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'
TEXT_COLOR = "#31333F"  # Streamlit's light theme: text, secondary background, borders, links
SECONDARY_BG = "#f0f2f6"
BORDER = "#e6eaf1"
LINK = "#0068c9"


def anchor(label: str) -> str:
    """The id of a family's heading, which the contents link to: 'family-b4-h32-d64-fp16-full-fwd'."""
    return "family-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def html_table(frame: pd.DataFrame, numeric=(), row_classes: list[str] | None = None, note: str | None = None,
               compact: bool = False) -> str:
    """A table of strings: headers in words, numbers right-aligned, every cell escaped. The ``note``
    column, where a row has one, is drawn as a full-width line under that row (a status message is
    too long for a cell). ``compact``: as wide as its cells, not the page (a few columns of numbers)."""
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
    wrap = "table-wrap compact" if compact else "table-wrap"
    return f"<div class='{wrap}'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"


def summary_html(table: pd.DataFrame) -> str:
    """The summary table with a rule above each new shape, failed rows coloured by status and their
    messages on a line of their own."""
    classes, previous = [], None
    for r in table.to_dict("records"):
        shape = tuple(r[c] for c in LENGTH_COLUMNS if c in r)
        classes.append(" ".join(filter(None, ["shape-start" if previous is not None and shape != previous else "",
                                              "" if r["status"] == "ok" else f"status-{r['status']}"])))
        previous = shape
    return html_table(table, SUMMARY_NUMERIC, classes, note="message")


def template() -> dict:
    """The plotly template every chart shares with the dashboard (profiler.views.style.PLOTLY_TEMPLATE), as
    JSON: sent once for all charts of the page."""
    return PLOTLY_TEMPLATE.to_plotly_json()


def script_json(value) -> str:
    """JSON (numpy arrays as plotly encodes them) that is safe inside a <script> element."""
    return pio.json.to_json_plotly(value).replace("</", "<\\/")


class Charts:
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
.table-wrap.compact {{ display: inline-block; max-width: 100%; }} .table-wrap.compact table {{ width: auto; }}
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


def page(title: str, parts: list[str]) -> str:
    """One self-contained HTML page: ``parts`` (HTML) under ``title``, with the CSS, plotly.js and the
    template embedded once, and the script that draws every :class:`Charts` div."""
    return "\n".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{CSS}</style>",
        f"<script>{get_plotlyjs()}</script></head><body><main>",
        *parts,
        f"</main><script>{SCRIPT % script_json(template())}</script></body></html>",
    ])
