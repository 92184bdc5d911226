"""``remodel``: a stored capture's rows joined again with the current cost model.

A capture keeps its measurements (times, status, peak memory, error) and the model's numbers of the
day it ran; when the model changes, :func:`remodel` recomputes the model's columns and what follows
from them (intensity, rates, bound, roof fractions) against the roofs the capture recorded. Rows
observed in a real run are kept as they are (:func:`remodel` says why).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from attention_core.shape import Shape
from profiler.model.cost import cost_of, kernel_path
from profiler.model.roofs import Roofs
from profiler.model.rows import MEASURED, MODEL, Timing, capture_row, same_number
from profiler.registry import costing_for
from profiler.store import COLUMNS, Capture, to_frame


def _text(value) -> str:
    return "" if value is None or pd.isna(value) else str(value)


def remodel(frame: pd.DataFrame, roofs: Roofs, meta: dict | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """Stored rows joined again with the current cost model, for captures stored before a change of
    the model. A row whose FLOPs and bytes the model still gives is kept as it is; a row where they
    changed gets its intensity, rates, bound and roof fractions recomputed against ``roofs``, and
    keeps its measured columns (times, status, peak memory, error). Returns the new frame and a
    mask of the rows that changed.

    Rows of a real run's calls (``source`` observed, ``observe``) are left as they are: their FLOPs
    and bytes are means of exact sums over many calls (decode buckets of growing Nkv, masks counted
    pair by pair: profiler.observer.recorder), which the row's one shape cannot reproduce. Their
    replays are ordinary rows of registered implementations, and are remodelled. A row with a
    ``device`` (a sweep over ranks on different GPUs) is judged against that device's roofs. The
    size-aware fraction of a row that changed is judged against the copy curve in ``meta`` (the last
    run's, where a capture was resumed: rows do not record which run measured them, and the earlier
    runs' curves stay in meta.json's ``earlier_runs``)."""
    rows, changed = [], []
    # A capture from before the issued_flops column keeps none: one recomputed row would not make the column whole.
    stores_issued = "issued_flops" in frame and bool(frame["issued_flops"].notna().any())
    for record in frame.to_dict("records"):
        if record.get("source") == "observed":
            rows.append(record)
            changed.append(False)
            continue
        costing = costing_for(record["impl"], meta)
        stored_path = _text(record.get("path"))
        # A path the device chose when the case ran (costing.fast_path) is a measured fact, kept;
        # any other path follows from the shape and the current model.
        path = stored_path if costing.fast_path and costing.fast_path in stored_path else kernel_path(
            costing, Shape.from_row(record))
        new = cost_of(costing, Shape.from_row(record), record["step"], path)._asdict()
        if all(same_number(new[k], record[k]) for k in MODEL) and stored_path == path:
            rows.append(record)
            changed.append(False)
            continue
        timed = not pd.isna(record["time_ms"])  # ok rows, and 'wrong' rows, which keep their times
        # a frame built without a column added later (sm_clock_mhz, power_w, rounds) reads it as empty
        measured = {k: (None if pd.isna(record.get(k)) else record[k]) for k in MEASURED}
        device = _text(record.get("device"))
        row_roofs = Roofs.from_meta(meta, device) if device and meta else roofs
        row = capture_row(record["impl"], costing, Shape.from_row(record), record["step"], row_roofs,
                           timing=Timing(record["time_ms"], record["time_ms_p10"], record["time_ms_p90"],
                                         measured["sm_clock_mhz"], measured["power_w"],
                                         None if measured["rounds"] is None else int(measured["rounds"]),
                                         measured["round_spread"]) if timed else None,
                           status=measured["status"],
                           message=measured["message"] or "", peak_mem_bytes=measured["peak_mem_bytes"],
                           max_rel_err=measured["max_rel_err"], path=path)
        # what says where the row came from is kept (source, site, device), and columns beyond the schema (nsys_gpu_ms)
        row = row if stores_issued else row | {"issued_flops": None}
        rows.append(row | {k: v for k, v in record.items() if k not in COLUMNS or k in ("source", "site", "device")})
        changed.append(True)
    return to_frame(rows), pd.Series(changed, index=frame.index)


def remodel_capture(folder: Path | str, *, write: bool = True, reason: str | None = None
                    ) -> tuple[pd.DataFrame, pd.Series]:
    """:func:`remodel` a capture folder against the roofs its meta.json recorded; with ``write``
    and any row changed, replace its results.parquet and record the remodel (and ``reason``) in
    its meta.json. Returns the stored frame and the mask of rows that changed."""
    capture = Capture(folder)
    meta, frame = capture.load()
    new, changed = remodel(frame, Roofs.from_meta(meta), meta)
    if write and changed.any():
        capture.write_results(new)
        meta.setdefault("remodelled", []).append({
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows_changed": int(changed.sum()),
            "note": "FLOPs, bytes, intensity, rates, bound and roof fractions of these rows recomputed from their "
                    "stored times with the cost model of this time, against this meta's roofs",
            **({"reason": reason} if reason else {})})
        capture.write_meta(meta)
    return frame, changed
