"""Rows of a capture: measured times joined with the cost model and the roofs.

:func:`capture_row` makes one row of the store's schema (profiler.store) from an implementation's
costing, a shape, a step and a timing, through profiler.model.cost.cost_of, so a row's FLOPs and
bytes are the same whether a capture, ``model``, ``validate`` or ``remodel`` (profiler.remodel) made it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from attention_core.costing import Costing
from attention_core.shape import ROW_KEY, Shape
from profiler.model.cost import arithmetic_intensity, cost_of, kernel_path
from profiler.model.counters import issued_flops
from profiler.model.roofs import Roofs, bound, roof_fraction, size_roof


@dataclass(frozen=True)
class Timing:
    """A case's time (profiler.measure.timing measures it; a stored row or an ncu run gives it back)."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    # The GPU's median SM clock and mean board power while it was timed (profiler.measure.gpu_state); None where
    # NVML was not read
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    # Timed in several interleaved rounds (--rounds of bench, capture and sweep; profiler.measure.runner.median_round):
    # how many, and the slowest round's median over the fastest's, minus one. The times, clock and power are then the
    # median round's.
    rounds: int | None = None
    round_spread: float | None = None


MEASURED = ("time_ms", "time_ms_p10", "time_ms_p90", "sm_clock_mhz", "power_w", "rounds", "round_spread", "status",
            "message", "peak_mem_bytes", "max_rel_err")
MODEL = ("flops", "hbm_bytes", "tile_bytes")


def capture_row(impl: str, costing: Costing, shape: Shape, step: str, roofs: Roofs, *,
                 timing: Timing | None, status: str, message: str = "", peak_mem_bytes=None,
                 max_rel_err=None, path: str | None = None) -> dict:
    """One row: the model's FLOPs and bytes, the achieved rates, the bound and the roof fractions.
    Rates, bound and roof fractions belong to a point on the roofline, so only a row with status
    ok has them; a 'wrong' row (its output failed the correctness check) keeps its times for the
    record, and rows that did not run (oom, unsupported, error) have the model's numbers only.
    ``path``: the kernel path the case ran (profiler.model.cost.kernel_path with the forward path the
    implementation reported); None: the path the shape gives."""
    path = kernel_path(costing, shape) if path is None else path
    flops, hbm_bytes, tile = cost_of(costing, shape, step, path)
    ai = arithmetic_intensity(flops, hbm_bytes)
    row = {
        **dict(zip(ROW_KEY, shape.row_key(impl, step))), "path": path, "flops": flops,
        "hbm_bytes": hbm_bytes, "tile_bytes": tile,
        "arithmetic_intensity": ai, "issued_flops": _issued(impl, shape, step, path or "", costing),
        "status": status, "message": message,
        "peak_mem_bytes": peak_mem_bytes, "max_rel_err": max_rel_err,
    }
    if timing is not None:
        row.update(time_ms=timing.median_ms, time_ms_p10=timing.p10_ms, time_ms_p90=timing.p90_ms,
                   sm_clock_mhz=timing.sm_clock_mhz, power_w=timing.power_w, rounds=timing.rounds,
                   round_spread=timing.round_spread)
    if timing is None or status != "ok":
        return row
    return row | rates(flops, hbm_bytes, timing.median_ms * 1e-3, shape.dtype, roofs)


def _issued(impl: str, shape: Shape, step: str, path: str, costing: Costing) -> float:
    """profiler.model.counters.issued_flops, NaN where a user's costing cannot give it: a measured row is never
    lost to the model."""
    try:
        return issued_flops(impl, shape, step, path, costing=costing)
    except (ValueError, KeyError, TypeError):
        return math.nan


def rates(flops: float, hbm_bytes: float, seconds: float, dtype: str, roofs: Roofs,
          step_bytes: float | None = None) -> dict:
    """A measured point on the roofline: TFLOP/s and GB/s of ``flops`` and ``hbm_bytes`` done in
    ``seconds``, the bound (against the datasheet roof, else the measured one) and the fraction of
    each roof reached at this intensity; with a measured copy curve, also of the size-aware roof
    (profiler.model.roofs.size_roof: the measured matmul, and a copy of one step's bytes: ``hbm_bytes``,
    or ``step_bytes`` where the rate is of several calls, as an observed row's)."""
    ai = arithmetic_intensity(flops, hbm_bytes)
    achieved = flops / seconds
    out = {"tflops": achieved / 1e12, "gbps": hbm_bytes / seconds / 1e9}
    sheet, measured = roofs.datasheet_peak(dtype), roofs.measured_peak(dtype)
    if sheet or measured:
        out["bound"] = bound(ai, *(sheet or measured))
    if sheet:
        out["roof_fraction"] = roof_fraction(achieved, ai, *sheet)
    if measured:
        out["roof_fraction_measured"] = roof_fraction(achieved, ai, *measured)
        curve = roofs.measured.copy_curve
        roof = size_roof(ai, step_bytes or hbm_bytes, measured[0], curve) if curve is not None and hbm_bytes > 0 \
            else 0.0
        if roof > 0:
            out["roof_fraction_size"] = achieved / roof
    return out


def same_number(a, b) -> bool:
    """Equal to 12 digits, NaN equal to NaN (a tile count the model does not give)."""
    if pd.isna(a) or pd.isna(b):
        return bool(pd.isna(a) and pd.isna(b))
    return math.isclose(a, b, rel_tol=1e-12)
