"""Rows of a capture: measured times joined with the cost model and the roofs.

:func:`roofline_row` makes one row of the store's schema (profiler.store) from an implementation's
costing, a shape, a step and a timing; :func:`remodel` joins stored rows again with the current
model. Both go through profiler.model.cost_model.cost_of, so a row's FLOPs and bytes are the same
whether a capture, ``model``, ``validate`` or ``remodel`` made it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from profiler.model import cost_model as cm
from profiler.model import roofs as roofline
from profiler.model.costing import Costing
from profiler.model.roofs import Roofs
from profiler.store import COLUMNS, RESULTS, load_capture, to_frame, write_bytes_atomic, write_json_atomic


@dataclass(frozen=True)
class Timing:
    """A case's time (profiler.measure.timing measures it; a stored row or an ncu run gives it back)."""

    median_ms: float
    p10_ms: float
    p90_ms: float


MEASURED = ("time_ms", "time_ms_p10", "time_ms_p90", "status", "message", "peak_mem_bytes", "max_rel_err")
MODEL = ("flops", "hbm_bytes", "tile_bytes")


def roofline_row(impl: str, costing: Costing, shape: cm.Shape, step: str, roofs: Roofs, *,
                 timing: Timing | None, status: str, message: str = "", peak_mem_bytes=None,
                 max_rel_err=None, path: str | None = None) -> dict:
    """One row: the model's FLOPs and bytes, the achieved rates, the bound and the roof fractions.
    Rates, bound and roof fractions belong to a point on the roofline, so only a row with status
    ok has them; a 'wrong' row (its output failed the correctness check) keeps its times for the
    record, and rows that did not run (oom, unsupported, error) have the model's numbers only.
    ``path``: the kernel path the case ran (cost_model.kernel_path with the forward path the
    implementation reported); None: the path the shape gives."""
    path = cm.kernel_path(costing, shape) if path is None else path
    flops, hbm_bytes, tile = cm.cost_of(costing, shape, step, path)
    ai = cm.arithmetic_intensity(flops, hbm_bytes)
    row = {
        "impl": impl, "step": step, "mode": shape.mode, "batch": shape.batch, "heads": shape.heads,
        "kv_heads": shape.kv_heads, "seq_q": shape.seq_q, "seq_kv": shape.seq_kv, "head_dim": shape.head_dim,
        "dtype": shape.dtype, "causal": shape.causal, "path": path, "flops": flops,
        "hbm_bytes": hbm_bytes, "tile_bytes": tile,
        "arithmetic_intensity": ai, "status": status, "message": message,
        "peak_mem_bytes": peak_mem_bytes, "max_rel_err": max_rel_err,
    }
    if timing is not None:
        row.update(time_ms=timing.median_ms, time_ms_p10=timing.p10_ms, time_ms_p90=timing.p90_ms)
    if timing is None or status != "ok":
        return row
    sheet, measured = roofs.datasheet_peak(shape.dtype), roofs.measured_peak(shape.dtype)
    judge = sheet or measured
    if judge:
        row["bound"] = roofline.bound(ai, *judge)
    seconds = timing.median_ms * 1e-3
    achieved = flops / seconds
    row.update(tflops=achieved / 1e12, gbps=hbm_bytes / seconds / 1e9)
    if sheet:
        row["roof_fraction"] = roofline.roof_fraction(achieved, ai, *sheet)
    if measured:
        row["roof_fraction_measured"] = roofline.roof_fraction(achieved, ai, *measured)
    return row


def same_number(a, b) -> bool:
    """Equal to 12 digits, NaN equal to NaN (a tile count the model does not give)."""
    if pd.isna(a) or pd.isna(b):
        return bool(pd.isna(a) and pd.isna(b))
    return math.isclose(a, b, rel_tol=1e-12)


def _text(value) -> str:
    return "" if value is None or pd.isna(value) else str(value)


def remodel(frame: pd.DataFrame, roofs: Roofs, meta: dict | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """Stored rows joined again with the current cost model, for captures stored before a change of
    the model. A row whose FLOPs and bytes the model still gives is kept as it is; a row where they
    changed gets its intensity, rates, bound and roof fractions recomputed against ``roofs``, and
    keeps its measured columns (times, status, peak memory, error). Returns the new frame and a
    mask of the rows that changed."""
    rows, changed = [], []
    for record in frame.to_dict("records"):
        costing = cm.costing_for(record["impl"], meta)
        stored_path = _text(record.get("path"))
        # A path the device chose when the case ran (costing.fast_path) is a measured fact, kept;
        # any other path follows from the shape and the current model.
        path = stored_path if costing.fast_path and costing.fast_path in stored_path else cm.kernel_path(
            costing, cm.Shape.from_row(record))
        new = cm.cost_of(costing, cm.Shape.from_row(record), record["step"], path)._asdict()
        if all(same_number(new[k], record[k]) for k in MODEL) and stored_path == path:
            rows.append(record)
            changed.append(False)
            continue
        timed = not pd.isna(record["time_ms"])  # ok rows, and 'wrong' rows, which keep their times
        measured = {k: (None if pd.isna(record[k]) else record[k]) for k in MEASURED}
        row = roofline_row(record["impl"], costing, cm.Shape.from_row(record), record["step"], roofs,
                           timing=Timing(record["time_ms"], record["time_ms_p10"], record["time_ms_p90"]) if timed
                           else None, status=measured["status"],
                           message=measured["message"] or "", peak_mem_bytes=measured["peak_mem_bytes"],
                           max_rel_err=measured["max_rel_err"], path=path)
        rows.append(row | {k: v for k, v in record.items() if k not in COLUMNS})  # e.g. nsys_gpu_ms
        changed.append(True)
    return to_frame(rows), pd.Series(changed, index=frame.index)


def remodel_capture(folder: Path | str, *, write: bool = True, reason: str | None = None
                    ) -> tuple[pd.DataFrame, pd.Series]:
    """:func:`remodel` a capture folder against the roofs its meta.json recorded; with ``write``
    and any row changed, replace its results.parquet and record the remodel (and ``reason``) in
    its meta.json. Returns the stored frame and the mask of rows that changed."""
    folder = Path(folder)
    meta, frame = load_capture(folder)
    new, changed = remodel(frame, Roofs.from_meta(meta), meta)
    if write and changed.any():
        write_bytes_atomic(folder / RESULTS, new.to_parquet(index=False))
        meta.setdefault("remodelled", []).append({
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows_changed": int(changed.sum()),
            "note": "FLOPs, bytes, intensity, rates, bound and roof fractions of these rows recomputed from their "
                    "stored times with the cost model of this time, against this meta's roofs",
            **({"reason": reason} if reason else {})})
        write_json_atomic(folder / "meta.json", meta)
    return frame, changed
