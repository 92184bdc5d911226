"""Colours, symbols, names, ticks and the plotly template shared by every chart of the dashboard and the
report."""

from __future__ import annotations

import math
import zlib

import plotly.graph_objects as go

from attention_core.shape import Shape
from profiler.registry import BUILTIN, REGISTRY

# Colours of names outside the registry (user implementations: picked by a CRC-32 of the name); the
# registry's entries carry their own (profiler.registry.Impl.color).
SPARE_COLORS = ["#7f7f7f", "#bcbd22", "#393b79", "#ad494a"]
PALETTE = [*(REGISTRY[name].color for name in BUILTIN), *SPARE_COLORS]  # the template's colorway
STEP_SYMBOL = {"total": "circle", "qk_matmul": "triangle-up", "scale_mask": "square", "softmax": "diamond",
               "pv_matmul": "triangle-down"}
OBSERVED_SYMBOL = "star"  # a real run's calls (source observed) on a roofline, beside measured and replayed rows
STEP_COLOR = {"qk_matmul": "#1f77b4", "scale_mask": "#9edae5", "softmax": "#d62728", "pv_matmul": "#ff9896"}
LENGTHS = ["seq_q", "seq_kv"]
FAMILY_COLUMNS = [c for c in Shape.KEY if c not in LENGTHS]  # a shape family: the shape's key but its lengths


def impl_color(name: str) -> str:
    """A colour per implementation, the same in every chart, run and process: its registry entry's,
    else one of SPARE_COLORS by the name's CRC-32 (Python's hash() of a str changes from run to run)."""
    impl = REGISTRY.get(name)
    if impl is not None and impl.color:
        return impl.color
    return SPARE_COLORS[zlib.crc32(name.encode()) % len(SPARE_COLORS)]


def impl_rank(name: str) -> tuple[int, str]:
    """Where an implementation sorts in tables: registry order, then any other name alphabetically."""
    names = list(REGISTRY)
    return (names.index(name) if name in names else len(names), name)


def family_label(family) -> str:
    """'B4 H32 D64 fp16 causal fwd' ('H32/8' with grouped-query attention): a shape family, as titles
    and legends name it. ``family``: a mapping with the FAMILY_COLUMNS (a dict, a row), or their
    values in that order (a groupby key)."""
    f = family if hasattr(family, "keys") else dict(zip(FAMILY_COLUMNS, family))
    return (f"B{f['batch']} {heads_label(f['heads'], f['kv_heads'])} D{f['head_dim']} {f['dtype']} "
            f"{'causal' if f['causal'] else 'full'} {f['mode']}")


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
            values = rows[column].dropna().unique().tolist()
            try:  # numbers as numbers ({B2,B4,B16}, not {B16,B2,B4}); mixed types as text
                values = sorted(values)
            except TypeError:
                values = sorted(values, key=str)
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
