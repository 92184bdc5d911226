"""The roofline chart: where each measured row sits, which ceiling holds it down, and whether it
is memory- or compute-bound, at a glance.

:func:`roofline_points` is the analysis (rows in, one row per point out, no plotly): the intensity
for the chosen bytes (compulsory bytes against the HBM roof, tile bytes against the measured L2
roof), the roof there, the exp ceiling of fused kernels (profiler.model.roofs.exp_ceiling), which
of them binds, the bound and the fractions. :func:`roofline_figure` draws it; the dashboard's
table shows the same frame, so the two always agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attention_core.shape import TENSOR_DTYPES, Shape
from profiler.model.counters import issued_flops
from profiler.model.roofs import Roofs, exp_ceiling, ridge_point
from profiler.registry import REGISTRY, costing_for
from profiler.views.style import (
    ABOVE_COMPUTE_NOTE,
    ABOVE_ROOF_NOTE,
    CACHE_BELOW,
    LENGTHS,
    OBSERVED_SYMBOL,
    PLOTLY_TEMPLATE,
    STEP_SYMBOL,
    families_title,
    impl_color,
    log_ticks,
    memory_name,
)

MAX_MARKERS = 400  # beyond this many points the chart shows an even sample per implementation and step
MAX_LABELS = 40  # beyond this many points sequence lengths move from labels to the hover text
JITTER = 1.07  # fused kernels at one intensity are spread by this factor per implementation (x only)
RIDGE_FONT = 10  # px, the ridge labels' font size
# The ridge labels sit in a band above the highest roof, where no measured point can be (a point
# above every compute peak would be above its roof): the y axis runs to TOP_BAND times that peak,
# and the labels' centres sit LABEL_LIFT decades above it.
TOP_BAND = 4.0
LABEL_LIFT = 0.3  # decades from the highest roof to the first label's centre
LABEL_STEP = 0.3  # decades between stacked labels, at least (more where the y axis is long)
# A dash marks the size-aware roof over a point where it is below this share of the lowest roof drawn (the
# measured large copy's, where the datasheet's is above it); at or above it the dash would sit on that roof.
SIZE_ROOF_SHOWN = 0.97
SIZE_ROOF_NAME = "roof at the step's size<br>(a copy of its bytes, same run)"
PLOT_PX = (700, 480)  # a narrow plot area (width, height): labels placed to fit it fit any wider one


@dataclass(frozen=True)
class Roof:
    label: str  # e.g. "H200 datasheet", "measured"
    peak_flops: float
    bandwidth: float  # bytes/s
    dash: str = "solid"
    memory: str = "HBM"  # the level whose bandwidth makes the slanted part: HBM or L2

    @property
    def ridge(self) -> float:
        return ridge_point(self.peak_flops, self.bandwidth)


def roofs_from_meta(meta: dict, dtype: str, bytes_kind: str = "compulsory") -> list[Roof]:
    """The roofs a capture is judged against for ``bytes_kind``, drawn from the roofs its rows were
    judged against (:meth:`profiler.model.roofs.Roofs.from_meta`): compulsory bytes against HBM
    (datasheet, when the device is known, then the measured matmul and copy); tile bytes against
    the L2 bandwidth ``ceilings`` measured (no datasheet gives one), under the same compute peaks.
    Empty for tile bytes when the capture holds no L2 measurement. On a CPU capture (meta.json's
    ``device_type``) the memory roof is the DRAM copy it measured, and is named so."""
    stored = Roofs.from_meta(meta)
    sheet, sheet_peak = stored.datasheet, stored.datasheet_peak(dtype)
    measured, measured_peak = stored.measured, stored.measured_peak(dtype)
    memory = memory_name(meta.get("device_type"))  # a CPU's roof is the DRAM copy it measured
    roofs = []
    if bytes_kind == "tile":
        l2 = None if measured is None else measured.l2_bandwidth
        if l2 is None:
            return []
        if sheet_peak is not None:
            roofs.append(Roof(f"{sheet.name} datasheet compute, measured L2", sheet_peak[0], l2, memory="L2"))
        if measured_peak is not None:
            roofs.append(Roof("measured, L2", measured_peak[0], l2, "dash", memory="L2"))
        return roofs
    if sheet_peak is not None:
        roofs.append(Roof(f"{sheet.name} datasheet", *sheet_peak))
    if measured_peak is not None:
        label = "measured" if memory == "HBM" else f"measured matmul, {memory} copy"
        roofs.append(Roof(label, *measured_peak, "dash", memory=memory))
    return roofs


def exp_rate(meta: dict) -> float | None:
    """exp2 per second of the capture's GPU (profiler.model.hardware), None where not known."""
    sheet = Roofs.from_meta(meta).datasheet
    return None if sheet is None else sheet.exp2_per_s


def size_roof_note(meta: dict) -> str:
    """'' or a sentence on the capture's copy curve (profiler.model.roofs.CopyCurve): Hockney's r∞ and n½
    and what they mean for the dashes of the roof at a step's size."""
    measured = Roofs.from_meta(meta).measured
    curve = None if measured is None else measured.copy_curve
    if curve is None:
        return ""
    r_inf, n_half = curve.hockney()
    return (f"dash: the roof at the step's size; device copies in this run ({curve.timing}) stream at r∞ "
            f"{r_inf / 1e9:,.0f} GB/s and reach half of it at n½ {n_half / 1e6:.3g} MB moved (Hockney's t = (n + n½) "
            "/ r∞): below that, a step's time goes mostly to a copy's fixed cost (launch, the first requests' "
            "latency, the ramp, the tail)" + (
                "; on a CPU the small copies run from its caches, faster than the large one, so the roof at a "
                "small step's size is higher, not lower" if meta.get("device_type") == "cpu" else ""))


ISSUED_TITLE = "Roofline, issued tensor FLOPs"


def issued_work(rows: pd.DataFrame, meta: dict | None = None, compute: bool = False) -> tuple[pd.DataFrame, str]:
    """The rows as the issued-work roofline draws them, and a note on those it leaves out. ``flops`` is
    what the kernels issue (profiler.model.counters.issued_flops: whole tiles on the causal diagonal and at
    ragged ends, decode rows padded to a tile, unfused attention's full score matrix), ``tflops`` that
    over the time, ``useful_flops`` the convention's count and ``issued_ratio`` the one over the other;
    the bytes stay the compulsory ones, so a point moves up and right by the same factor. The size-aware
    fraction (a ratio of useful work) is dropped. Left out: rows without tensor work (naive's elementwise
    steps) and rows whose issued work the model does not know (tiles not declared, a decode kernel's
    packing no trace recorded, a real run's observed calls). The count is the row's stored ``issued_flops``
    (captures since that column); where a row has none, ``compute`` asks the model now, which imports the
    kernels' tile tables (torch, triton): the dashboard does on request, the report never."""
    ok = rows[(rows.status == "ok") & rows.tflops.notna()]
    stored = ok["issued_flops"] if "issued_flops" in ok else pd.Series(np.nan, index=ok.index)

    def issued(r) -> float:
        if pd.notna(stored[r.Index]) or not compute:
            return stored[r.Index]
        if getattr(r, "source", "") == "observed" or (r.impl not in REGISTRY and r.impl not in (
                (meta or {}).get("user_impls") or {})):
            return np.nan  # a real run's calls (impl is the API it called) or an implementation not described
        path = str(r.path) if pd.notna(r.path) else ""
        return issued_flops(r.impl, Shape.from_row(r), r.step, path, costing=costing_for(r.impl, meta))

    issued = pd.Series([issued(r) for r in ok.itertuples()], index=ok.index, dtype="float64")
    known = issued > 0
    out = ok[known].assign(useful_flops=ok.flops[known], flops=issued[known],
                           issued_ratio=issued[known] / ok.flops[known])
    out["tflops"] = out.tflops * out.issued_ratio
    out["roof_fraction_size"] = np.nan
    unknown = ok[issued.isna()]
    groups = sorted({f"{r.impl} {r.mode}" + ("" if r.step == "total" else f" {r.step}") for r in unknown.itertuples()})
    note = (f"not drawn, issued work not modelled: {', '.join(groups)}" if groups else "")
    if not compute and len(unknown) and stored.isna().all():
        note = ("no issued work stored in this capture (captured before the issued_flops column; the dashboard's "
                "FLOPs switch computes it)")
    return out, note


def is_fused(rows: pd.DataFrame) -> pd.Series:
    """Whole-attention rows of fused kernels: the store gives unfused ones tile bytes equal to
    their HBM bytes (profiler.store), fused ones more (or none, where their tiles are not declared)."""
    return (rows.step == "total") & (rows.tile_bytes != rows.hbm_bytes)


def untiled_note(rows: pd.DataFrame) -> str:
    """'' or a sentence naming the implementations the tile-bytes roofline leaves out: ok whole-attention
    rows without tile bytes (no tile shape declared for the cost model, e.g. a vendor kernel's backward)."""
    totals = rows[(rows.step == "total") & (rows.status == "ok")]
    missing = sorted(set(totals.impl[~(totals.tile_bytes > 0)]) - set(totals.impl[totals.tile_bytes > 0]))
    return f"not drawn, no tile shape declared for the cost model: {', '.join(missing)}" if missing else ""


def roofline_points(rows: pd.DataFrame, roofs: list[Roof], bytes_kind: str = "compulsory",
                    exp2_per_s: float | None = None) -> pd.DataFrame:
    """One row per measured point: intensity ``x``, the roof there (``roofs[0]``), on the compulsory-bytes
    chart the size-aware roof the row was judged against (``size_roof_tflops``, ``of_size_roof``: the
    measured matmul, and a copy of the row's own bytes in its capture's run; NaN without one), for fused
    fp16/bf16 kernels the exp ceiling (softmax not overlapped with matmuls that run at the lowest
    compute peak among ``roofs``: the measured matmul where the capture has one, as
    docs/perf-notes.md derives the cap), the ceiling that
    binds, ``bound`` (memory left of the ridge, compute right of it, judged against the bandwidth
    of ``bytes_kind``), and the fractions of the roof and of the binding ceiling."""
    bytes_col = "tile_bytes" if bytes_kind == "tile" else "hbm_bytes"
    data = rows[(rows.status == "ok") & rows.tflops.notna() & (rows[bytes_col] > 0)].copy()
    data["x"] = data.flops / data[bytes_col]
    data["bytes"] = data[bytes_col]
    # The size-aware roof (profiler.model.roofs.size_roof) each row was judged against when measured, by its
    # own capture's copy curve: on the compulsory-bytes chart only, where a row has one.
    size = data["roof_fraction_size"] if bytes_kind == "compulsory" and "roof_fraction_size" in data else np.nan
    data["of_size_roof"] = size
    data["size_roof_tflops"] = data.tflops / data.of_size_roof
    if not roofs or data.empty:
        for column in ("roof_tflops", "exp_ceiling_tflops", "ceiling_tflops", "of_roof", "of_ceiling"):
            data[column] = np.nan
        data["binds"], data["view_bound"] = "", ""
        return data
    roof = roofs[0]
    data["roof_tflops"] = np.minimum(roof.peak_flops, data.x * roof.bandwidth) / 1e12
    exp = pd.Series(np.nan, index=data.index)
    if exp2_per_s is not None:
        applies = is_fused(data) & data.dtype.isin(TENSOR_DTYPES)
        matmul = min(r.peak_flops for r in roofs)  # a real matmul's rate, not the datasheet's
        exp[applies] = [exp_ceiling(matmul, exp2_per_s, int(d), m) / 1e12
                        for d, m in zip(data.head_dim[applies], data["mode"][applies])]
    data["exp_ceiling_tflops"] = exp
    memory_binds = data.x * roof.bandwidth < roof.peak_flops
    data["view_bound"] = np.where(memory_binds, "memory", "compute")
    data["binds"] = np.where(memory_binds, f"{roof.memory} bandwidth", "compute peak")
    exp_binds = exp.notna() & (exp < data.roof_tflops)
    data.loc[exp_binds, "binds"] = "exp (SFU), no overlap"
    data["ceiling_tflops"] = data.roof_tflops.where(~exp_binds, exp)
    data["of_roof"] = data.tflops / data.roof_tflops
    data["of_ceiling"] = data.tflops / data.ceiling_tflops
    return data


def _sample(points: pd.DataFrame, limit: int) -> pd.DataFrame:
    """At most ``limit`` points, spread evenly over each implementation and step by intensity."""
    groups = points.groupby(["impl", "step"], sort=False)
    per_group = max(1, limit // max(groups.ngroups, 1))
    parts = []
    for _, group in groups:
        group = group.sort_values("x")
        take = np.unique(np.linspace(0, len(group) - 1, min(per_group, len(group))).round().astype(int))
        parts.append(group.iloc[take])
    return pd.concat(parts)


def above_roof_reason(impl: str, memory: str, bound: str = "memory") -> str:
    """Why a point of ``impl`` sits above its roof: on the sloped part (``bound`` memory) the bytes,
    the implementation's own reason where its registry entry gives one (Impl.above_roof_reason), else the general
    one for the ``memory`` level; on the flat part (compute) the roof itself, since bytes play no
    part there."""
    if bound == "compute":
        return ("right of the ridge the roof is a FLOP rate, so the bytes do not matter: the roof underestimates "
                "what this kernel sustains (a measured matmul ceiling taken on a busy machine, or from a cache "
                "filled earlier: meta.json's measured_ceilings_source says which), or the kernel did less "
                "arithmetic than the FLOP convention counts")
    below = CACHE_BELOW.get(memory, "a cache below it")
    known = REGISTRY[impl].above_roof_reason if impl in REGISTRY else ""
    if known and memory == "L2":
        return known
    if memory == "L2":
        return (f"{below} served some of the re-reads the tile bytes charge to L2; the L2 roof is a measured "
                "copy, a lower bound on what L2 delivers")
    return f"{below} served some of the bytes the model charges to {memory}"


def _hover(group: pd.DataFrame, memory: str = "HBM") -> list[str]:
    texts = []
    for r in group.itertuples():
        path = getattr(r, "path", "")
        kernel = f" · path {path}" if isinstance(path, str) and path else ""  # which kernel ran, where several can
        text = (f"<b>{r.impl}</b> {r.step} ({r.mode}){kernel}<br>{Shape.from_row(r).label}<br>{r.time_ms:.4g} ms · "
                f"{r.tflops:.4g} TFLOP/s"
                f"<br>{r.flops:.4g} FLOP / {r.bytes:.4g} B = {r.x:.4g} FLOP/B<br><b>{r.view_bound}-bound</b>")
        if pd.notna(r.of_roof):
            text += f" · {r.of_roof:.1%} of the roof"
        if pd.notna(getattr(r, "issued_ratio", np.nan)):
            text += f"<br>issued tensor FLOPs: {r.issued_ratio:.3g}× the useful {r.useful_flops:.4g}"
        if pd.notna(r.of_size_roof):
            text += (f"<br>{r.of_size_roof:.1%} of the roof at its size ({r.size_roof_tflops:.4g} TFLOP/s: "
                     f"a copy of its {r.bytes / 1e6:.4g} MB, or the measured matmul)")
        if getattr(r, "source", "") == "observed":  # a real run's calls: where, how many, the time per call is a mean
            text += f"<br>observed at <b>{r.site}</b>: {int(r.calls):,} calls, {r.total_ms:.4g} ms in all ({r.mask})"
        elif getattr(r, "source", "") == "replay":
            text += "<br>replayed at an observed shape"
        if r.binds:
            text += f"<br>binding ceiling: {r.binds} ({r.ceiling_tflops:.4g} TFLOP/s, reached {r.of_ceiling:.1%})"
        if r.of_roof > 1:
            note = ABOVE_COMPUTE_NOTE if r.view_bound == "compute" else ABOVE_ROOF_NOTE
            text += f"<br><b>{note}</b>:<br>{_wrap(above_roof_reason(r.impl, memory, r.view_bound))}"
        texts.append(text)
    return texts


def _length_text(seq_q, seq_kv) -> str:
    """A point's label: its length N, or Nq×Nkv when they differ (decode points of one Nq stay apart)."""
    return f"{int(seq_q)}" if seq_q == seq_kv else f"{int(seq_q)}×{int(seq_kv)}"


def _wrap(text: str, width: int = 80) -> str:
    """Hover text broken into lines of about ``width`` characters (plotly does not wrap)."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "<br>".join([*lines, line])


def ridge_label_boxes(fig: go.Figure, plot_px: tuple[float, float] = PLOT_PX) -> list[tuple[str, tuple]]:
    """Each ridge label's text and its box (x0, x1, y0, y1) in log10 data coordinates, approximated
    from its text length and font size (:func:`label_box_px`) for a plot area of ``plot_px`` (width,
    height) pixels: the narrower the plot, the wider a box in decades."""
    (x_lo, x_hi), (y_lo, y_hi) = fig.layout.xaxis.range, fig.layout.yaxis.range
    per_x, per_y = plot_px[0] / (x_hi - x_lo), plot_px[1] / (y_hi - y_lo)  # px per decade
    boxes = []
    for note in fig.layout.annotations:
        if not (note.text or "").startswith("ridge "):
            continue
        width, height = label_box_px(note.text, note.font.size or RIDGE_FONT)
        width, height = width / per_x, height / per_y
        x0 = {"right": note.ax - width, "left": note.ax}.get(note.xanchor, note.ax - width / 2)
        boxes.append((note.text, (x0, x0 + width, note.ay - height / 2, note.ay + height / 2)))
    return boxes


def label_box_px(text: str, size: float) -> tuple[float, float]:
    """An annotation's box in pixels: at most 0.6 of the font size per character, 1.4 of it per
    line, plus the padding: 4 px each side across, 3 px up and down (borderpad 1, a margin of 2 to 3)."""
    return 0.6 * size * len(text) + 8, 1.3 * size + 6


def _ridge_text(roof: Roof) -> str:
    return f"ridge {roof.ridge:.0f} FLOP/B ({roof.label})"


def _ridge_placements(roofs: list[Roof], x_lo: float, x_hi: float, highest: float,
                      bottom: float) -> dict[int, tuple[bool, float]]:
    """For each roof's index: (the label reaches left of its ridge, its centre's height in decades
    above the highest roof)."""
    span_y = np.log10(highest / bottom) + LABEL_LIFT + 2 * LABEL_STEP  # about the y axis's length
    per_x, per_y = PLOT_PX[0] / np.log10(x_hi / x_lo), PLOT_PX[1] / span_y  # px per decade
    step = max(LABEL_STEP, 1.2 * label_box_px("x", RIDGE_FONT)[1] / per_y)
    placements, level = {}, 0
    for order, i in enumerate(sorted(range(len(roofs)), key=lambda k: roofs[k].ridge)):
        width = label_box_px(_ridge_text(roofs[i]), RIDGE_FONT)[0] / per_x
        fits_right = np.log10(roofs[i].ridge) + 0.04 + width <= np.log10(x_hi)
        left = order == 0 and len(roofs) > 1 or not fits_right
        if order > 0 and left:
            level += 1
        placements[i] = (left, LABEL_LIFT + level * step)
    return placements


def roofline_figure(rows: pd.DataFrame, roofs: list[Roof], bytes_kind: str = "compulsory",
                    title: str | None = None, exp2_per_s: float | None = None,
                    device_type: str | None = None) -> go.Figure:
    """Log-log roofline: x = arithmetic intensity, y = achieved TFLOP/s. Roofs with each ridge
    labelled in the band above the highest roof, an arrow to its own marker (no measured point is
    up there); the memory- and compute-bound regions shaded and named inside the plot; for fused
    kernels the exp ceiling of each head_dim and mode; one trace per implementation, step and source
    (coloured by implementation, shaped by step, filled when compute-bound and open when
    memory-bound; a star for a real run's observed calls, whose hover names their site and count,
    and '(replay)' in the legend for implementations re-run at those shapes). A point above its roof
    is ringed, says why in its hover, and the legend carries the note (style.ABOVE_ROOF_NOTE). Fused
    kernels sharing an intensity are spread a little along x (the hover gives the true value); past
    MAX_MARKERS points an even sample is drawn, and the chart says so. ``device_type`` (meta.json's;
    default: the roofs' memory, else a GPU's) names the memory of compulsory bytes: HBM on a GPU,
    DRAM on a CPU."""
    points = roofline_points(rows, roofs, bytes_kind, exp2_per_s)
    memory = roofs[0].memory if roofs else ("L2" if bytes_kind == "tile" else memory_name(device_type))
    total = len(points)
    notes = []
    if total > MAX_MARKERS:
        points = _sample(points, MAX_MARKERS)
        notes.append(f"showing {len(points):,} of {total:,} points (an even sample by intensity per implementation "
                     "and step); narrow the filters to see all")
    fig = go.Figure()
    xs = points.x.to_numpy() if not points.empty else np.array([1.0])
    ridges = [r.ridge for r in roofs]
    x_lo = 10 ** np.floor(np.log10(max(min([*xs, *ridges]) / 3, 1e-3)))
    x_hi = 10 ** np.ceil(np.log10(max([*xs, *ridges]) * 3))
    grid = np.logspace(np.log10(x_lo), np.log10(x_hi), 200)
    highest = max(r.peak_flops for r in roofs) / 1e12 if roofs else None
    top = highest * TOP_BAND if roofs else (points.tflops.max() * 3 if not points.empty else 1e3)
    lowest = points.tflops.min() if not points.empty else top / 1e3
    bottom = max(min(lowest, roofs[0].bandwidth * x_lo / 1e12 if roofs else lowest) / 3, 1e-6)
    # Ridge labels, left to right by ridge: the leftmost reaches left from above its ridge; each other
    # reaches right where it fits before the axis ends (judged on a narrow plot), else left from a
    # level higher. So no label meets another, a roof, or a point (all lie below the highest roof).
    placements = _ridge_placements(roofs, x_lo, x_hi, highest, bottom) if roofs else {}
    if placements:
        top = max(top, highest * 10 ** (max(lift for _, lift in placements.values()) + LABEL_STEP))
    if roofs:
        main = roofs[0]
        for x0, x1, name, color in ((x_lo, main.ridge, "memory-bound", "rgba(214,39,40,0.12)"),
                                    (main.ridge, x_hi, "compute-bound", "rgba(31,119,180,0.12)")):
            fig.add_trace(go.Scatter(x=[x0, x1, x1, x0, x0], y=[bottom, bottom, top, top, bottom], fill="toself",
                                     fillcolor=color, line={"width": 0}, hoverinfo="skip", name=name,
                                     legendgroup="regions", showlegend=True, mode="lines"))
        for x, name, anchor in ((np.sqrt(x_lo * main.ridge), "MEMORY-BOUND", "center"),
                                (np.sqrt(main.ridge * x_hi), "COMPUTE-BOUND", "center")):
            fig.add_annotation(x=np.log10(x), y=np.log10(bottom), yanchor="bottom", yshift=6,
                               text=f"<b>{name}</b>", showarrow=False, xanchor=anchor,
                               font={"size": 14, "color": "rgba(60,60,60,0.75)"})
    for i, roof in enumerate(roofs):
        fig.add_trace(go.Scatter(
            x=grid, y=np.minimum(roof.peak_flops, grid * roof.bandwidth) / 1e12, mode="lines",
            name=f"roof: {roof.label}", line={"color": "black", "dash": roof.dash, "width": 2},
            hovertemplate=f"{roof.label}<br>%{{x:.3g}} FLOP/B → %{{y:.4g}} TFLOP/s<extra></extra>",
        ))
        fig.add_trace(go.Scatter(
            x=[roof.ridge], y=[roof.peak_flops / 1e12], mode="markers", name=f"ridge: {roof.label}",
            marker={"symbol": "x", "size": 11, "color": "black"}, showlegend=False,
            hovertemplate=f"ridge point ({roof.label}): {roof.ridge:.1f} FLOP/B<extra></extra>",
        ))
        left, lift = placements[i]
        fig.add_annotation(x=np.log10(roof.ridge), y=np.log10(roof.peak_flops / 1e12), axref="x", ayref="y",
                           ax=np.log10(roof.ridge) + (-0.04 if left else 0.04), ay=np.log10(highest) + lift,
                           showarrow=True, arrowhead=0, arrowwidth=1, arrowcolor="rgba(0,0,0,0.45)", standoff=7,
                           text=_ridge_text(roof), font={"size": RIDGE_FONT},
                           xanchor="right" if left else "left", yanchor="middle", bgcolor="rgba(255,255,255,0.85)")
    if roofs and not points.empty:
        caps = points.dropna(subset=["exp_ceiling_tflops"]).groupby(["head_dim", "mode"]).exp_ceiling_tflops.first()
        for (head_dim, mode), cap in caps.items():
            start = cap * 1e12 / roofs[0].bandwidth  # where the memory roof reaches the cap
            fig.add_trace(go.Scatter(
                x=[start, x_hi], y=[cap, cap], mode="lines", name=f"exp ceiling D{head_dim} {mode} (no overlap)",
                line={"color": "#7f3c8d", "dash": "dashdot", "width": 1.5},
                hovertemplate=(f"exp ceiling, head_dim {head_dim}, {mode}: {cap:.4g} TFLOP/s<br>a fused kernel that "
                               "runs softmax's exponentials and the matmuls one after the other cannot pass it"
                               "<extra></extra>")))
    show_labels = len(points) <= MAX_LABELS
    if not show_labels:
        notes.append("sequence lengths are in the hover text")
    fused_names = list(dict.fromkeys(points[is_fused(points)].impl)) if not points.empty else []
    above = []
    # Observed calls (source observed) and their replays (source replay) get traces of their own: a
    # star for what the run did, the usual marker for what an implementation did at its shapes.
    sources = (points["source"] if "source" in points else pd.Series(index=points.index, dtype=object)).fillna(
        "measured")
    for (impl, step, source), group in points.groupby([points.impl, points.step, sources], sort=False):
        group = group.sort_values(LENGTHS)
        shift = JITTER ** (fused_names.index(impl) - (len(fused_names) - 1) / 2) if (
            step == "total" and impl in fused_names) else 1.0
        symbol = OBSERVED_SYMBOL if source == "observed" else STEP_SYMBOL.get(step, "circle")
        hover = _hover(group, memory)
        name = impl if step == "total" else f"{impl}: {step}"
        fig.add_trace(go.Scatter(
            x=group.x * shift, y=group.tflops, mode="markers+text" if show_labels else "markers",
            name=name if source == "measured" else f"{name} ({source})", legendgroup=impl,
            marker={"color": impl_color(impl), "size": 10, "line": {"width": 1.5, "color": impl_color(impl)},
                    "symbol": [symbol if b == "compute" else f"{symbol}-open" for b in group.view_bound]},
            text=[_length_text(q, k) for q, k in zip(group.seq_q, group.seq_kv)] if show_labels else None,
            textposition="top center",
            textfont={"size": 9}, hovertext=hover, hoverinfo="text",
        ))
        over = (group.of_roof > 1).to_numpy()
        if over.any():
            above.append((group.x[over] * shift, group.tflops[over], group.view_bound[over]))
    lowest_roof = pd.concat([np.minimum(r.peak_flops, points.x * r.bandwidth) / 1e12 for r in roofs], axis=1).min(
        axis=1) if roofs and not points.empty else pd.Series(np.nan, index=points.index)
    lower = points[points.size_roof_tflops < SIZE_ROOF_SHOWN * lowest_roof]
    if not lower.empty:
        # Where the step is too small for a copy of its bytes to reach the roof's bandwidth, a dash marks the
        # roof at its size (profiler.model.roofs.size_roof), straight above the point.
        shifts = [JITTER ** (fused_names.index(i) - (len(fused_names) - 1) / 2) if (s == "total" and i in fused_names)
                  else 1.0 for i, s in zip(lower.impl, lower.step)]
        fig.add_trace(go.Scatter(
            x=lower.x * shifts, y=lower.size_roof_tflops, mode="markers", name=SIZE_ROOF_NAME,
            marker={"symbol": "line-ew", "size": 16, "line": {"width": 2.5, "color": "#333"}},
            hovertext=[f"the roof at this step's size: {t:.4g} TFLOP/s<br>a device copy of its {b / 1e6:.4g} MB, "
                       f"measured in the same run, or the measured matmul<br>{r.impl} reached {f:.1%} of it"
                       for t, b, f, r in zip(lower.size_roof_tflops, lower.bytes, lower.of_size_roof,
                                             lower.itertuples())], hoverinfo="text"))
        notes.append("dash: the roof at the step's size")
    if above:
        # One ring per point above its roof, one legend entry per side of the ridge: the bytes explain a
        # point above the slope, the roof itself one above the flat part.
        xs, ys, sides = (np.concatenate([a[i] for a in above]) for i in range(3))
        names = {"memory": ABOVE_ROOF_NOTE.replace(" bytes", "<br>bytes")
                 + f"<br>({CACHE_BELOW.get(memory, 'a cache')} under {memory}; hover for why)",
                 "compute": ABOVE_COMPUTE_NOTE.replace(" is below", "<br>is below") + "<br>(hover for why)"}
        for side in ("memory", "compute"):
            if (sides == side).any():
                fig.add_trace(go.Scatter(
                    x=xs[sides == side], y=ys[sides == side], mode="markers", name=names[side],
                    marker={"symbol": "circle-open", "size": 20, "color": "#444", "line": {"width": 1.5}},
                    hoverinfo="skip", legendgroup="above"))  # the point beneath carries the hover and reason
        notes.append("ringed: above the roof (hover for why)")
    per = "L2 tile" if bytes_kind == "tile" else memory
    x_ticks, y_ticks = log_ticks(x_lo, x_hi), log_ticks(bottom, top)
    fig.update_xaxes(type="log", title=f"arithmetic intensity (FLOP per {per} byte)",
                     range=[np.log10(x_lo), np.log10(x_hi)], tickvals=x_ticks[0], ticktext=x_ticks[1])
    fig.update_yaxes(type="log", title="achieved TFLOP/s", range=[np.log10(bottom), np.log10(top)],
                     tickvals=y_ticks[0], ticktext=y_ticks[1])
    if title is None and not rows.empty:
        title = f"Roofline, {bytes_kind} bytes: {families_title(rows)}"
    subtitle = "filled: compute-bound · open: memory-bound" + ("" if not notes else " · " + " · ".join(notes))
    fig.update_layout(template=PLOTLY_TEMPLATE, title={"text": f"{title or 'Roofline'}<br><sup>{subtitle}</sup>"},
                      height=640, legend={"groupclick": "toggleitem"}, margin={"t": 80})
    declutter_labels(fig)
    return fig


def declutter_labels(fig: go.Figure, plot_px: tuple[float, float] = PLOT_PX) -> int:
    """Blank each point label that would overlap one already kept (traces in drawing order, points left to
    right), on the narrowest plot area the app draws (:data:`PLOT_PX`): an observed call's star and its
    replays at one shape, What-if points on one roof, sweeps near one intensity each keep one legible label;
    every point keeps its hover. Labels sit above their marker (textposition "top center"), sized as
    :func:`label_box_px` sizes text. Returns how many were blanked."""
    (x_lo, x_hi), (y_lo, y_hi) = fig.layout.xaxis.range, fig.layout.yaxis.range
    width, height = plot_px
    kept: list[tuple[float, float, float, float]] = []  # boxes: centre x, centre y, half width, half height
    blanked = 0
    for trace in fig.data:
        if trace.text is None or "text" not in (trace.mode or "") or isinstance(trace.text, str):
            continue
        size = (trace.textfont.size if trace.textfont and trace.textfont.size else 9)
        texts = list(trace.text)
        for i, (x, y, text) in enumerate(zip(trace.x, trace.y, texts)):
            if not text or not x or not y or x <= 0 or y <= 0:
                continue
            w, h = label_box_px(str(text), size)
            cx = (np.log10(x) - x_lo) / (x_hi - x_lo) * width
            cy = (np.log10(y) - y_lo) / (y_hi - y_lo) * height + h / 2 + 5  # above the 10-px marker
            if any(abs(cx - kx) < (w / 2 + kw) and abs(cy - ky) < (h / 2 + kh) for kx, ky, kw, kh in kept):
                texts[i] = ""
                blanked += 1
            else:
                kept.append((cx, cy, w / 2, h / 2))
        trace.text = texts
    return blanked
