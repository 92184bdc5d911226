"""Tables a person reads: the capture summary, the benchmark's ratios, the cost model per implementation,
and the dashboard's tables of roofline points and decode bandwidth. DataFrames in, DataFrames out (the CLI
prints them, the report renders them, the dashboard shows them)."""

from __future__ import annotations

import pandas as pd

from attention_core.shape import Shape
from profiler.model import hardware
from profiler.model.cost import arithmetic_intensity, cost_of
from profiler.model.roofs import CopyCurve, attainable_flops, bound
from profiler.registry import baseline_impl
from profiler.views.selection import shape_labels


def summary_frame(rows: list[dict]) -> pd.DataFrame:
    """The seed posts' benchmark table: per shape, each implementation's ms, TFLOP/s, speedup over
    naive, peak memory and bound. Only rows with status ok have a speedup, and only against a naive
    row that is ok: a 'wrong' row keeps its time for the record, but it is no point of comparison."""
    from profiler.store import to_frame

    totals = [r for r in rows if r["step"] == "total"]
    if not totals:
        return pd.DataFrame()
    frame = to_frame(totals)  # every column of the schema, also where no case ran
    shape_key = list(Shape.KEY)
    naive = frame[(frame.impl == baseline_impl()) & (frame.status == "ok")].set_index(shape_key)["time_ms"]
    speedups = []
    for _, r in frame.iterrows():
        key = tuple(r[c] for c in shape_key)
        base = naive.get(key) if key in naive.index else None
        ok = (r["status"] == "ok" and not pd.isna(r.get("time_ms")) and base is not None and not pd.isna(base))
        speedups.append(base / r["time_ms"] if ok else None)
    frame["speedup_vs_naive"] = speedups
    return frame


def bench_table(frame: pd.DataFrame, impls: list[str], baseline: str, copy_gbps: float | None = None
                ) -> pd.DataFrame:
    """One row per shape: each implementation's TFLOP/s, GB/s at the model's compulsory bytes and,
    given the measured copy bandwidth, that as a fraction of it; the model's bound; and for each
    peer baseline / peer (above 1 means the baseline is faster). Rates come from rows with status ok
    only: a peer or baseline that did not run, or whose output was 'wrong', has no ratio."""
    totals = frame[(frame.step == "total") & frame.impl.isin(impls)]
    rows = []
    for key, group in totals.groupby(list(Shape.KEY), sort=False):
        by_impl = {r.impl: r for r in group.itertuples()}
        row = dict(zip(Shape.KEY, key))
        # The shape's class, for choosing TFLOP/s or GB/s: the baseline's, else any measured row's (a row
        # that did not run, or ran wrong, has no bound).
        bounds = [r.bound for r in ([by_impl[baseline]] if baseline in by_impl else []) + list(by_impl.values())
                  if isinstance(r.bound, str)]
        row["bound"] = bounds[0] if bounds else None
        for name in impls:
            r = by_impl.get(name)
            ok = r is not None and r.status == "ok"
            row[f"{name}_tflops"] = r.tflops if ok else None
            row[f"{name}_time_ms"] = getattr(r, "time_ms", None) if ok else None
            row[f"{name}_gbps"] = r.gbps if ok else None
            row[f"{name}_copy_fraction"] = r.gbps / copy_gbps if ok and copy_gbps else None
            row[f"{name}_status"] = r.status if r is not None else "missing"
            row[f"{name}_max_rel_err"] = r.max_rel_err if r is not None else None
        base = row[f"{baseline}_tflops"]
        for name in impls:
            if name != baseline:
                peer = row[f"{name}_tflops"]
                row[f"{baseline}/{name}"] = base / peer if base and peer else None
        rows.append(row)
    return pd.DataFrame(rows)


def model_table(shape: Shape, device: hardware.Device, impls, path: str = "") -> list[dict]:
    """The cost model for every implementation and step a capture of ``shape`` would record, with
    the intensity and roof on ``device``'s datasheet; implementations without the shape's mode
    (no backward) are left out. ``impls`` are registry entries (name, row_steps, costing); ``path``, the
    kernel path the multi-path ones are costed on (profiler.model.cost.cost_of: '' for the portable one)."""
    peak, bw = device.peak_flops(shape.dtype), device.hbm_bytes_per_s
    rows = []
    for impl in impls:
        if shape.mode != "fwd" and not impl.supports_backward:
            continue
        for step in impl.row_steps:
            cost = cost_of(impl.costing, shape, step, path if step == "total" else "")
            ai = arithmetic_intensity(cost.flops, cost.hbm_bytes)
            rows.append({
                "impl": impl.name, "step": step, **cost._asdict(), "arithmetic_intensity": ai,
                "tile_intensity": arithmetic_intensity(cost.flops, cost.tile_bytes),
                "attainable_tflops": attainable_flops(ai, peak, bw) / 1e12,
                "bound": bound(ai, peak, bw),
            })
    return rows


# The roofline table's headers, as the dashboard names its columns (rooflines.roofline_points' own names).
ROOFLINE_HEADERS = {"time_ms": "time (ms)", "tflops": "TFLOP/s", "sm_clock_mhz": "SM clock (MHz)",
                    "round_spread": "rounds' spread (%)",
                    "issued_ratio": "issued ÷ useful FLOPs",
                    "x": "FLOP/B", "view_bound": "bound",
                    "of_roof": "% of roof", "of_size_roof": "% of roof at its size", "binds": "binding ceiling",
                    "of_ceiling": "% of binding ceiling"}


def roofline_table(points: pd.DataFrame) -> pd.DataFrame:
    """The Roofline tab's table of :func:`rooflines.roofline_points`: whole kernels first, then naive steps,
    by implementation, step and what tells the points apart first (their lengths); a compact shape label
    (selection.shape_labels) and the columns that vary (one-valued columns are the filters'); the kernel
    path where an implementation has several and the call site of observed rows, where any row has one;
    fractions as percentages (the roof at the step's size where the captures measured a copy curve); the SM clock
    NVML read while a row was timed, where any row has one (profiler.measure.gpu_state); and how far a row's
    rounds spread where any row was timed in rounds (``--rounds``: profiler.measure.runner.median_round)."""
    # the capture has a column of its own here: a shape label names the shape (N=4096 where only the capture varies)
    shape, extra_columns = shape_labels(points.drop(columns=["capture"], errors="ignore"))
    captures = bool("capture" in points and points.capture.nunique() > 1)
    order = [c for c in ("seq_kv", "seq_q") if c in extra_columns] + [c for c in extra_columns if c[:3] != "seq"]
    table = points.assign(shape=shape, steps_last=points.step != "total")
    table = table.sort_values(["steps_last", "impl", "step", *order])
    has_path = bool("path" in table and table.path.fillna("").astype(str).ne("").any())  # gluon-ws, split-kv xS
    has_site = bool("site" in table and table.site.fillna("").astype(str).ne("").any())  # model.layers.3.self_attn
    has_size = bool("of_size_roof" in table and table.of_size_roof.notna().any())  # captures with a copy curve
    issued = ["issued_ratio"] * ("issued_ratio" in table)  # the issued-work roofline (rooflines.issued_work)
    clock = ["sm_clock_mhz"] * bool("sm_clock_mhz" in table and table.sm_clock_mhz.notna().any())  # NVML, on a GPU
    spread = ["round_spread"] * bool("round_spread" in table and table.round_spread.notna().any())  # --rounds
    columns = ["impl", *["site"] * has_site, *["path"] * has_path, "step", "shape", "time_ms", "tflops", *clock,
               *spread, *issued, "x",
               "view_bound", "of_roof", *["of_size_roof"] * has_size, "binds", "of_ceiling", *extra_columns]
    table = table[["capture"] * captures + columns].rename(columns=ROOFLINE_HEADERS)
    for column in ("% of roof", "% of roof at its size", "% of binding ceiling", "rounds' spread (%)"):
        if column in table:
            table[column] = table[column] * 100
    return table


def decode_table(decode: pd.DataFrame, copy_gbps: float | None, curves: dict[str, CopyCurve] | None = None
                 ) -> pd.DataFrame:
    """The Bandwidth tab's table of decode rows (selection.decode_rows): their shapes, time and GB/s at the
    model's compulsory bytes, and that as a percentage of the measured copy (``copy_gbps``; empty without
    one) and, with the captures' copy ``curves`` (by capture name), of what a copy of the step's own bytes
    reached in its capture's run; the call site where the rows are an observed run's; by batch, query and
    key length."""
    site = ["site"] * bool("site" in decode and decode.site.fillna("").astype(str).ne("").any())
    shown = decode[["capture", "impl", *site, "path", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                    "dtype", "time_ms", "gbps"]].copy()
    shown["of measured copy"] = shown.gbps / copy_gbps * 100 if copy_gbps else None
    if curves:
        shown["of a copy its size"] = [
            g / (curves[c].bandwidth(b) / 1e9) * 100 if c in curves else float("nan")
            for g, b, c in zip(shown.gbps, decode.hbm_bytes, decode.capture)]
    return shown.sort_values(["batch", "seq_q", "seq_kv", "impl"])
