"""A self-contained HTML report of one capture: the dashboard's charts and the summary table in a
single file that opens offline (plotly.js is embedded once)."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import pandas as pd

from profiler.model import cost_model as cm
from profiler.store import load_capture, write_bytes_atomic
from profiler.views import plots, rooflines


def _first_family(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of one dtype, head_dim, causal setting and mode (fp16, 64, full, fwd when present)."""
    for column, prefer in (("dtype", "fp16"), ("head_dim", 64), ("causal", False), ("mode", "fwd")):
        values = frame[column].unique().tolist()
        frame = frame[frame[column] == (prefer if prefer in values else values[0])]
    return frame


def build_report(folder: Path | str) -> str:
    folder = Path(folder)
    meta, frame = load_capture(folder)
    family = _first_family(frame)
    first = family.iloc[0]
    dtype = first["dtype"]
    exp2 = rooflines.exp_rate(meta)
    figures = [rooflines.roofline_figure(family, rooflines.roofs_from_meta(meta, dtype, kind), kind, exp2_per_s=exp2)
               for kind in ("compulsory", "tile")]
    figures += list(plots.scaling_figures(family).values())
    if (family.seq_q < family.seq_kv).any():  # decode rows: achieved bandwidth against the HBM roof
        figures.append(plots.bandwidth_figure(family, meta))
    figures.append(plots.step_breakdown_figure(family))
    kernels_path = folder / "kernels.parquet"
    if kernels_path.exists():
        kernels = pd.read_parquet(kernels_path)
        if not kernels.empty:
            figures.append(plots.trace_figure(kernels[kernels.impl == kernels.impl.iloc[0]]))
    validation_path = folder / "validation.parquet"
    validation = pd.read_parquet(validation_path) if validation_path.exists() else None
    if validation is not None:
        figures.append(plots.hierarchical_roofline_figure(validation, meta, dtype))
    charts = [fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
              for i, fig in enumerate(figures)]
    totals = family[family.step == "total"][["impl", "path", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "time_ms",
                                             "tflops", "gbps", "arithmetic_intensity", "bound", "roof_fraction",
                                             "peak_mem_bytes", "max_rel_err", "status"]]
    longest = int(family.seq_q.max())
    trips = plots.hbm_trips_table(replace(cm.Shape.from_row(first), seq_q=longest, seq_kv=longest, mode="fwd"))
    title = f"Attention roofline: {folder.name}"
    shape = f"D={first.head_dim} {dtype} {'causal' if first.causal else 'full'} {first['mode']}"
    return "\n".join([
        "<!doctype html><html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;"
        "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(str(meta.get('device')))} · torch {html.escape(str(meta.get('torch')))} · triton "
        f"{html.escape(str(meta.get('triton')))} · {html.escape(str(meta.get('time')))} · {html.escape(shape)}</p>",
        "<h2>Summary</h2>", totals.to_html(index=False, float_format=lambda x: f"{x:.4g}"),
        *charts,
        "<h2>HBM trips of the N×N matrix (model)</h2>", trips.to_html(index=False),
        *([] if validation is None else [
            "<h2>Nsight Compute counters vs the cost model</h2>",
            plots.validation_table_view(validation).to_html(index=False, float_format=lambda x: f"{x:.4g}")]),
        "</body></html>",
    ])


def write_report(folder: Path | str, out: Path | str | None = None) -> Path:
    out = Path(out) if out else Path(folder) / "report.html"
    write_bytes_atomic(out, build_report(folder).encode("utf-8"))
    return out
