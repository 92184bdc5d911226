"""Plot builders: pure functions from capture DataFrames to plotly figures.

Shared by the Streamlit dashboard (dashboards/roofline.py) and ``python -m profiler report``; no
Streamlit here, and plotly is imported only by this module (the capture path never loads it).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from profiler.model import cost_model as cm
from profiler.model import hardware
from profiler.model import roofs as roofline

# Colours by implementation: the registry's built-ins in registry order (kernels.registry.BUILTIN;
# listed here so the dashboard need not load torch), then any other name by a stable hash of it.
IMPL_ORDER = ["naive", "triton_naive", "triton_flash", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math"]
PALETTE = ["#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#393b79", "#ad494a"]
STEP_SYMBOL = {"total": "circle", "qk_matmul": "triangle-up", "scale_mask": "square", "softmax": "diamond",
               "pv_matmul": "triangle-down"}
SHAPE_COLUMNS = ["batch", "heads", "seq_q", "seq_kv", "head_dim", "dtype", "causal", "mode"]


def impl_color(name: str) -> str:
    """A colour per implementation, the same in every chart, run and process (registry order first,
    then any other name by its CRC-32: Python's hash() of a str changes from run to run)."""
    if name in IMPL_ORDER:
        return PALETTE[IMPL_ORDER.index(name)]
    spare = PALETTE[len(IMPL_ORDER):]
    return spare[zlib.crc32(name.encode()) % len(spare)]


@dataclass(frozen=True)
class Roof:
    label: str  # e.g. "H200 datasheet", "measured"
    peak_flops: float
    bandwidth: float  # bytes/s
    dash: str = "solid"

    @property
    def ridge(self) -> float:
        return roofline.ridge_point(self.peak_flops, self.bandwidth)


def roofs_from_meta(meta: dict, dtype: str) -> list[Roof]:
    """The roofs a capture was judged against: datasheet (when the device is known) and measured."""
    roofs = []
    sheet = hardware.lookup(meta.get("datasheet_device") or meta.get("device", ""))
    if sheet is not None:
        try:
            roofs.append(Roof(f"{sheet.name} datasheet", sheet.peak_flops(dtype), sheet.hbm_bytes_per_s))
        except (KeyError, ValueError):
            pass
    measured = meta.get("measured_ceilings") or {}
    if dtype in measured.get("matmul_tflops", {}):
        roofs.append(Roof("measured", measured["matmul_tflops"][dtype] * 1e12, measured["copy_gbps"] * 1e9, "dash"))
    return roofs


def _hover(df: pd.DataFrame, bytes_col: str) -> list[str]:
    texts = []
    for r in df.itertuples():
        text = (f"<b>{r.impl}</b> {r.step} ({r.mode})<br>B={r.batch} H={r.heads} N={r.seq_q} D={r.head_dim} "
                f"{r.dtype}{' causal' if r.causal else ''}<br>time {r.time_ms:.4g} ms · {r.tflops:.4g} TFLOP/s"
                f"<br>FLOPs {r.flops:.4g} · bytes {getattr(r, bytes_col):.4g}"
                f"<br>intensity {r.x:.4g} FLOP/B · {r.bound}")
        if pd.notna(r.roof_fraction):
            text += f"<br>fraction of roof {r.roof_fraction:.1%}"
        texts.append(text)
    return texts


def roofline_figure(rows: pd.DataFrame, roofs: list[Roof], bytes_kind: str = "compulsory",
                    title: str = "Roofline") -> go.Figure:
    """Log-log roofline: x = arithmetic intensity, y = achieved TFLOP/s; one marker per
    implementation and step (naive steps apart, coloured by implementation, shaped by step),
    labelled by sequence length; roofs with their ridge points and the memory- and compute-bound
    regions shaded. ``bytes_kind`` "tile" places fused kernels at their L2 (tile) intensity."""
    bytes_col = "tile_bytes" if bytes_kind == "tile" else "hbm_bytes"
    data = rows[(rows.status == "ok") & rows.tflops.notna() & (rows[bytes_col] > 0)].copy()
    data["x"] = data.flops / data[bytes_col]
    fig = go.Figure()
    xs = data.x.to_numpy() if not data.empty else np.array([1.0])
    ridges = [r.ridge for r in roofs]
    x_lo = 10 ** np.floor(np.log10(max(min([*xs, *ridges]) / 3, 1e-3)))
    x_hi = 10 ** np.ceil(np.log10(max([*xs, *ridges]) * 3))
    grid = np.logspace(np.log10(x_lo), np.log10(x_hi), 200)
    if roofs:
        main = roofs[0]
        top = max(r.peak_flops for r in roofs) / 1e12 * 2
        bottom = max(min(data.tflops.min() if not data.empty else top, main.bandwidth * x_lo / 1e12) / 3, 1e-6)
        for x0, x1, name, color in ((x_lo, main.ridge, "memory-bound", "rgba(214,39,40,0.06)"),
                                    (main.ridge, x_hi, "compute-bound", "rgba(31,119,180,0.06)")):
            fig.add_trace(go.Scatter(x=[x0, x1, x1, x0, x0], y=[bottom, bottom, top, top, bottom], fill="toself",
                                     fillcolor=color, line={"width": 0}, hoverinfo="skip", name=name,
                                     legendgroup="regions", showlegend=True, mode="lines"))
    for i, roof in enumerate(roofs):
        fig.add_trace(go.Scatter(
            x=grid, y=[roofline.attainable_flops(x, roof.peak_flops, roof.bandwidth) / 1e12 for x in grid],
            mode="lines", name=f"roof: {roof.label}", line={"color": "black", "dash": roof.dash, "width": 2},
            hovertemplate=f"{roof.label}<br>%{{x:.3g}} FLOP/B → %{{y:.4g}} TFLOP/s<extra></extra>",
        ))
        fig.add_trace(go.Scatter(
            x=[roof.ridge], y=[roof.peak_flops / 1e12], mode="markers+text", name=f"ridge: {roof.label}",
            marker={"symbol": "x", "size": 11, "color": "black"}, text=[f"ridge {roof.ridge:.0f} FLOP/B"],
            textposition="bottom right" if i == 0 else "top left", showlegend=False,
            hovertemplate=f"ridge point ({roof.label}): {roof.ridge:.1f} FLOP/B<extra></extra>",
        ))
    for (impl, step), group in data.groupby(["impl", "step"], sort=False):
        group = group.sort_values("seq_q")
        fig.add_trace(go.Scatter(
            x=group.x, y=group.tflops, mode="markers+text", name=impl if step == "total" else f"{impl}: {step}",
            legendgroup=impl, marker={"color": impl_color(impl), "symbol": STEP_SYMBOL.get(step, "circle"),
                                      "size": 10, "line": {"width": 1, "color": "white"}},
            text=[f"{n}" for n in group.seq_q], textposition="top center", textfont={"size": 9},
            hovertext=_hover(group, bytes_col), hoverinfo="text",
        ))
    per = "L2 tile" if bytes_kind == "tile" else "HBM"
    fig.update_xaxes(type="log", title=f"arithmetic intensity (FLOP per {per} byte)")
    fig.update_yaxes(type="log", title="achieved TFLOP/s")
    fig.update_layout(title=title, height=620, legend={"groupclick": "toggleitem"}, margin={"t": 60})
    return fig


def scaling_figures(totals: pd.DataFrame) -> dict[str, go.Figure]:
    """Time, TFLOP/s, peak memory (measured against the model's O(N²) and O(N) predictions) and
    speedup over naive against sequence length, one line per implementation (log axes)."""
    data = totals[(totals.step == "total") & (totals.status == "ok")].sort_values("seq_q")
    figs = {key: go.Figure() for key in ("time", "tflops", "memory", "speedup")}
    naive = data[data.impl == "naive"].set_index([c for c in SHAPE_COLUMNS if c != "seq_kv"])["time_ms"]
    for impl, group in data.groupby("impl", sort=False):
        style = {"color": impl_color(impl)}
        for key, col in (("time", "time_ms"), ("tflops", "tflops"), ("memory", "peak_mem_bytes")):
            y = group[col] / 2**20 if key == "memory" else group[col]
            figs[key].add_trace(go.Scatter(x=group.seq_q, y=y, mode="lines+markers", name=impl, line=style))
        keys = [tuple(r) for r in group[[c for c in SHAPE_COLUMNS if c != "seq_kv"]].itertuples(index=False)]
        base = [naive.get(k, np.nan) for k in keys]
        figs["speedup"].add_trace(go.Scatter(x=group.seq_q, y=np.array(base) / group.time_ms.to_numpy(),
                                             mode="lines+markers", name=impl, line=style))
    if not data.empty:
        first = cm.Shape.from_row(data.iloc[0])
        seqs = sorted(data.seq_q.unique())
        for fused, label in ((False, "model O(N²): naive keeps S and P"), (True, "model O(N): fused keeps O, lse")):
            y = [cm.predicted_peak_bytes(replace(first, seq_q=int(n), seq_kv=int(n)), fused) / 2**20 for n in seqs]
            figs["memory"].add_trace(go.Scatter(x=seqs, y=y, mode="lines", name=label,
                                                line={"dash": "dot", "color": "grey" if fused else "black"}))
    titles = {"time": ("median time (ms)", "Time"), "tflops": ("TFLOP/s", "Throughput"),
              "memory": ("peak memory above inputs (MiB)", "Peak memory: measured vs model"),
              "speedup": ("speedup over naive (x)", "Speedup over naive PyTorch")}
    for key, fig in figs.items():
        fig.update_xaxes(type="log", title="sequence length N")
        fig.update_yaxes(type="log", title=titles[key][0])
        fig.update_layout(title=titles[key][1], height=420)
    return figs


def step_breakdown_figure(rows: pd.DataFrame) -> go.Figure:
    """Naive attention's time per step per sequence length, stacked: CUDA events, and beside them
    Nsight Systems per-range time where the capture has it."""
    steps = rows[(rows.impl == "naive") & (rows.step != "total") & (rows.status == "ok")]
    fig = go.Figure()
    has_nsys = "nsys_gpu_ms" in steps and steps.nsys_gpu_ms.notna().any()
    for step in ["qk_matmul", "scale_mask", "softmax", "pv_matmul"]:
        group = steps[steps.step == step].sort_values("seq_q")
        fig.add_trace(go.Bar(x=[str(n) for n in group.seq_q], y=group.time_ms, name=f"{step} (CUDA events)",
                             offsetgroup="events", legendgroup=step))
        if has_nsys:
            fig.add_trace(go.Bar(x=[str(n) for n in group.seq_q], y=group.nsys_gpu_ms, name=f"{step} (nsys)",
                                 offsetgroup="nsys", legendgroup=step, marker_pattern_shape="/"))
    fig.update_layout(barmode="stack", title="Naive attention: time per step", height=440,
                      xaxis_title="sequence length N", yaxis_title="ms")
    return fig


def hbm_trips_table(shape: cm.Shape) -> pd.DataFrame:
    """How often each naive step moves the N×N matrix through HBM (reads and writes, in units of
    one N×N matrix of the input dtype), from the cost model, against a fused kernel's zero."""
    s_bytes = shape.score_elems * shape.elem_bytes
    fwd = shape.with_mode("fwd")
    rows = []
    trips = {"qk_matmul": (0, 1), "scale_mask": (2, 2) if shape.causal else (1, 1), "softmax": (1, 1),
             "pv_matmul": (1, 0)}
    for step, (reads, writes) in trips.items():
        rows.append({"step": step, "N×N reads": reads, "N×N writes": writes,
                     "HBM bytes (model)": cm.naive_step_bytes(fwd, step),
                     "of which N×N": (reads + writes) * s_bytes})
    rows.append({"step": "fused (FlashAttention)", "N×N reads": 0, "N×N writes": 0,
                 "HBM bytes (model)": cm.compulsory_bytes(fwd), "of which N×N": 0})
    return pd.DataFrame(rows)


def compare_figure(a: pd.DataFrame, b: pd.DataFrame, label_a: str, label_b: str) -> tuple[go.Figure, pd.DataFrame]:
    """Two captures side by side: TFLOP/s of each implementation and shape, and B / A ratios."""
    keys = ["impl", "step", "mode", "batch", "heads", "seq_q", "head_dim", "dtype", "causal"]
    ok_a = a[(a.status == "ok")][keys + ["time_ms", "tflops"]]
    ok_b = b[(b.status == "ok")][keys + ["time_ms", "tflops"]]
    joined = ok_a.merge(ok_b, on=keys, suffixes=(f" {label_a}", f" {label_b}"))
    joined["speedup B/A"] = joined[f"time_ms {label_a}"] / joined[f"time_ms {label_b}"]
    totals = joined[joined.step == "total"].sort_values(["impl", "seq_q"])
    fig = go.Figure()
    for impl, group in totals.groupby("impl", sort=False):
        fig.add_trace(go.Scatter(x=group.seq_q, y=group["speedup B/A"], mode="lines+markers", name=impl,
                                 line={"color": impl_color(impl)}))
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_xaxes(type="log", title="sequence length N")
    fig.update_yaxes(title=f"speedup of {label_b} over {label_a} (x)")
    fig.update_layout(title=f"{label_b} vs {label_a}", height=420)
    return fig, joined


def trace_figure(kernels: pd.DataFrame) -> go.Figure:
    """Per-range timeline of kernels (from a torch-profiler or Nsight Systems kernel table with
    columns kernel or name, start_us or start_ns, gpu_us or gpu_ns, range)."""
    data = kernels.copy()
    if "start_ns" in data:
        data["start_us"], data["gpu_us"] = data.start_ns / 1e3, data.gpu_ns / 1e3
    if "kernel" not in data:
        data["kernel"] = data["name"]
    data = data.sort_values("start_us")
    data["t0"] = data.start_us - data.start_us.min() if not data.empty else 0
    fig = go.Figure()
    for rng, group in data.groupby("range", sort=False):
        fig.add_trace(go.Bar(
            x=group.gpu_us, base=group.t0, y=[rng or "(no range)"] * len(group), orientation="h", name=rng or "-",
            hovertext=[f"{k[:90]}<br>{d:.1f} µs" for k, d in zip(group.kernel, group.gpu_us)], hoverinfo="text",
        ))
    fig.update_layout(title="Kernels per range (GPU timeline)", barmode="overlay", showlegend=False,
                      height=max(300, 40 * data["range"].nunique() + 120), xaxis_title="µs from first kernel")
    return fig


def whatif_figure(rows: pd.DataFrame, device: hardware.Device, dtype: str, bytes_kind: str = "compulsory") -> go.Figure:
    """Where each step would land on another GPU's roofline: the model's intensity and that GPU's
    attainable FLOP/s (a projection from the cost model and datasheet, not a measurement)."""
    bytes_col = "tile_bytes" if bytes_kind == "tile" else "hbm_bytes"
    roof = Roof(f"{device.name} datasheet", device.peak_flops(dtype), device.hbm_bytes_per_s)
    data = rows[rows[bytes_col] > 0].drop_duplicates(subset=["impl", "step", "seq_q", "head_dim", "dtype", "causal",
                                                             "mode"]).copy()
    data["x"] = data.flops / data[bytes_col]
    data["tflops"] = [roofline.attainable_flops(x, roof.peak_flops, roof.bandwidth) / 1e12 for x in data.x]
    data["status"], data["roof_fraction"], data["time_ms"] = "ok", 1.0, data.flops / (data.tflops * 1e12) * 1e3
    data["bound"] = [roofline.bound(x, roof.peak_flops, roof.bandwidth) for x in data.x]
    fig = roofline_figure(data, [roof], bytes_kind,
                          title=f"Projection onto {device.name} (model only: points sit on the roof by construction)")
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
    """Each kernel (or naive step) twice: at its DRAM intensity (filled) and its L2 intensity
    (open), both measured by Nsight Compute, at the FLOP/s it achieved. Roofs: DRAM (datasheet and
    measured copy) and L2, for which no datasheet figure exists: the highest L2 throughput observed
    in this capture stands in, a lower bound on the real L2 roof."""
    rows = validation_rows(validation[validation.dtype == dtype])
    roofs = roofs_from_meta(meta, dtype)
    if not rows.empty and roofs:
        l2_bw = rows.l2_tbps.max() * 1e12
        roofs.append(Roof(f"L2 (highest observed, {l2_bw / 1e12:.1f} TB/s)", roofs[0].peak_flops, l2_bw, "dot"))
    fig = go.Figure()
    xs = np.concatenate([rows.dram_intensity.to_numpy(), rows.l2_intensity.to_numpy()]) if not rows.empty \
        else np.array([1.0])
    grid = np.logspace(np.log10(max(xs.min() / 3, 1e-3)), np.log10(xs.max() * 3), 200)
    for roof in roofs:
        fig.add_trace(go.Scatter(
            x=grid, y=[roofline.attainable_flops(x, roof.peak_flops, roof.bandwidth) / 1e12 for x in grid],
            mode="lines", name=f"roof: {roof.label}", line={"color": "black", "dash": roof.dash, "width": 2}))
    for (impl, step), group in rows.groupby(["impl", "step"], sort=False):
        name = impl if step == "total" else f"{impl}: {step}"
        for level, column, fill in (("DRAM", "dram_intensity", True), ("L2", "l2_intensity", False)):
            fig.add_trace(go.Scatter(
                x=group[column], y=group.tflops, mode="markers", name=f"{name} ({level})", legendgroup=name,
                marker={"color": impl_color(impl), "size": 9,
                        "symbol": STEP_SYMBOL.get(step, "circle") + ("" if fill else "-open")},
                hovertext=[f"{name} {level}<br>N={r.seq_q} D={r.head_dim} {r.dtype}{' causal' if r.causal else ''}"
                           f"<br>{getattr(r, column):.3g} FLOP/B · {r.tflops:.3g} TFLOP/s" for r in group.itertuples()],
                hoverinfo="text"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP per byte measured at DRAM or L2)")
    fig.update_yaxes(type="log", title="achieved TFLOP/s (ncu kernel time)")
    fig.update_layout(title=f"Hierarchical roofline from Nsight Compute counters ({dtype})", height=620)
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
