"""Colours, symbols and names shared by every chart of the dashboard and the report."""

from __future__ import annotations

import zlib

# Colours by implementation: the registry's built-ins in registry order (kernels.registry.BUILTIN;
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
    grouped = "" if kv_heads is None or kv_heads != kv_heads or int(kv_heads) == int(heads) else f"/{int(kv_heads)}"
    return f"B{batch} H{heads}{grouped} D{head_dim} {dtype} {'causal' if causal else 'full'} {mode}"


def families_title(rows) -> str:
    """The shape families in ``rows``: one label, or each column's values where they differ."""
    parts = []
    grouped = "kv_heads" in rows and bool((rows["kv_heads"] != rows["heads"]).any())
    for column, fmt in (("batch", "B{}"), ("heads", "H{}"), *((("kv_heads", "KV{}"),) if grouped else ()),
                        ("head_dim", "D{}"), ("dtype", "{}"),
                        ("causal", "{}"), ("mode", "{}")):
        values = sorted(rows[column].dropna().unique().tolist(), key=str)
        shown = [("causal" if v else "full") if column == "causal" else fmt.format(v) for v in values]
        parts.append(shown[0] if len(shown) == 1 else "{" + ",".join(shown) + "}")
    return " ".join(parts)
