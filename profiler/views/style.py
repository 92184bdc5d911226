"""Colours, symbols, names, ticks and the plotly template shared by every chart of the dashboard and the
report."""

from __future__ import annotations

import math
import zlib

import plotly.graph_objects as go

# Colours by implementation: the registry's built-ins in registry order (profiler.registry.BUILTIN;
# listed here so the dashboard need not load torch), then any other name by a CRC-32 of it.
IMPL_ORDER = ["naive", "triton_naive", "triton_flash", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math",
              "sdpa_repeat_kv"]
PALETTE = ["#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#393b79", "#ad494a"]
STEP_SYMBOL = {"total": "circle", "qk_matmul": "triangle-up", "scale_mask": "square", "softmax": "diamond",
               "pv_matmul": "triangle-down"}
STEP_COLOR = {"qk_matmul": "#1f77b4", "scale_mask": "#9edae5", "softmax": "#d62728", "pv_matmul": "#ff9896"}
SHAPE_COLUMNS = ["batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "dtype", "causal", "mode"]
FAMILY_COLUMNS = ["batch", "heads", "kv_heads", "head_dim", "dtype", "causal", "mode"]  # a shape but its lengths


def impl_color(name: str) -> str:
    """A colour per implementation, the same in every chart, run and process (registry order first,
    then any other name by its CRC-32: Python's hash() of a str changes from run to run)."""
    if name in IMPL_ORDER:
        return PALETTE[IMPL_ORDER.index(name)]
    spare = PALETTE[len(IMPL_ORDER):]
    return spare[zlib.crc32(name.encode()) % len(spare)]


def family_label(batch, heads, kv_heads, head_dim, dtype, causal, mode) -> str:
    """'B4 H32 D64 fp16 causal fwd' ('H32/8' with grouped-query attention): a shape family, as titles
    and legends name it."""
    return f"B{batch} {heads_label(heads, kv_heads)} D{head_dim} {dtype} {'causal' if causal else 'full'} {mode}"


def heads_label(heads, kv_heads) -> str:
    """'H32', or 'H32/8' with fewer K/V heads (grouped-query attention), as family_label writes it."""
    grouped = kv_heads is not None and kv_heads == kv_heads and int(kv_heads) != int(heads)
    return f"H{int(heads)}" + (f"/{int(kv_heads)}" if grouped else "")


def families_title(rows) -> str:
    """The shape families in ``rows``: one label, or each column's values where they differ (heads
    and K/V heads as one 'H32/8', the spelling of family_label)."""
    parts = []
    kv = rows["kv_heads"] if "kv_heads" in rows else rows["heads"]
    pairs = sorted({(int(h), int(k)) for h, k in zip(rows["heads"], kv) if h == h and k == k})
    for column, fmt in (("batch", "B{}"), ("heads", None), ("head_dim", "D{}"), ("dtype", "{}"),
                        ("causal", "{}"), ("mode", "{}")):
        if column == "heads":
            shown = [heads_label(h, k) for h, k in pairs]
        else:
            values = sorted(rows[column].dropna().unique().tolist(), key=str)
            shown = [("causal" if v else "full") if column == "causal" else fmt.format(v) for v in values]
        if shown:
            parts.append(shown[0] if len(shown) == 1 else "{" + ",".join(shown) + "}")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------- the look

# One template for every figure, so the dashboard (which draws with theme=None) and the HTML report
# look alike: Streamlit's light theme as its docs show it (Source Sans Pro, text #31333F on white,
# light grid; https://docs.streamlit.io/develop/concepts/configuration/theming), with this module's
# palette as the colorway. Built once as a plotly Template: plotly validates a template given as a
# dict on every figure (0.25 s each), a Template object in about 10 ms.
FONT_FAMILY = "Source Sans Pro, sans-serif"
_AXIS = {"gridcolor": "#e6e9ef", "linecolor": "#c7cad1", "zerolinecolor": "#d5d8de", "showline": True,
         "ticks": "outside", "tickcolor": "#c7cad1", "automargin": True, "title": {"standoff": 10}}
PLOTLY_TEMPLATE = go.layout.Template(layout={
    "font": {"family": FONT_FAMILY, "size": 13, "color": "#31333F"},
    "title": {"font": {"size": 17}, "x": 0.0, "xanchor": "left"},
    "paper_bgcolor": "white", "plot_bgcolor": "white", "colorway": PALETTE,
    "xaxis": _AXIS, "yaxis": _AXIS,
    "legend": {"bgcolor": "rgba(255,255,255,0.85)", "font": {"size": 12}},
    "hoverlabel": {"font": {"family": FONT_FAMILY}},
})


# --------------------------------------------------------------------------------------- the device

def memory_name(device_type: str | None) -> str:
    """The memory whose bandwidth makes a capture's memory roof: HBM on a GPU, DRAM on a CPU (a CPU
    capture's roof is the copy it measured: profiler.measure.ceilings)."""
    return "DRAM" if device_type == "cpu" else "HBM"


def timer_name(device_type: str | None) -> str:
    """What timed a capture's rows (profiler.store.SCHEMA, time_ms): CUDA events through do_bench on a
    GPU, torch.utils.benchmark on a CPU."""
    return "torch.utils.benchmark" if device_type == "cpu" else "CUDA events"


# ------------------------------------------------------------------------------------------- ticks

def length_ticks(lengths) -> tuple[list[int], list[str]]:
    """Tick values and labels for a sequence-length axis: the lengths measured (powers of two, so a
    log axis's 1-2-5 ticks would fall between them), labelled 512, 1k, 2k ... 128k. Past 16 lengths,
    every other one, the first and the last always kept."""
    values = sorted({int(v) for v in lengths if v == v and v > 0})
    if len(values) > 16:
        values = sorted({*values[::2], values[-1]})
    return values, [f"{v // 1024}k" if v >= 1024 and v % 1024 == 0 else f"{v:,}" for v in values]


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks for a log value axis whose data run from ``lo`` to ``hi``: 1, 2, 5 of each decade,
    written out in full (0.05, 2, 500, 20,000) rather than plotly's bare '2' and '5' between powers
    of ten; only the powers of ten past three decades (the ticks would crowd); 1 to 9 of each decade
    when fewer than two 1-2-5 ticks fall inside the data (none, for plotly's own, when even those do
    not). A tick outside the axis range is not drawn, so the values run a decade past the data."""
    if not (lo > 0 and hi > 0):
        return [], []
    lo, hi = min(lo, hi), max(lo, hi)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for steps in ((1,) if math.log10(hi / lo) > 3 else (1, 2, 5), tuple(range(1, 10))):
        values = [float(f"{m}e{e}") for e in range(first - 1, last + 1) for m in steps]
        if sum(lo <= v <= hi for v in values) >= 2:
            return values, [_number(v) for v in values]
    return [], []  # a range inside one step of 1 to 9: plotly's own ticks


def _number(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}" if v >= 1e-4 else f"{v:.0e}"


# ---------------------------------------------------------------------------------- above the roof

# A measured point above its roof means the bytes the cost model charges are not all served by the
# memory that roof is for: the cache below it (L2 under HBM, L1 and registers under L2) served some.
ABOVE_ROOF_NOTE = "above the roof: the model charges bytes that the cache below serves"
ABOVE_COMPUTE_NOTE = "above the compute roof: the roof is below what this kernel sustains"
CACHE_BELOW = {"HBM": "L2", "DRAM": "the CPU caches", "L2": "L1 and registers"}
# Why, where it is known for an implementation (its costing in profiler.registry says how it is
# charged; listed here so the views need not import the registry, which loads torch).
ABOVE_ROOF_REASON = {
    "triton_naive": "its per-row costing charges K and V once per query row (profiler.model.fused."
                    "per_row_bytes), but the programs of neighbouring rows of one head run side by side "
                    "and read the same K and V blocks, so L1 serves most of those re-reads and L2 sees "
                    "fewer bytes than charged",
}
