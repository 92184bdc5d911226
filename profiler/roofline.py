"""Roofline arithmetic (Williams, Waterman & Patterson, "Roofline: an insightful visual performance
model for multicore architectures", CACM 2009): attainable FLOP/s = min(peak, intensity × bandwidth).
"""

from __future__ import annotations

import math


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return peak_flops / bandwidth


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roof at this intensity: min(peak, intensity · bandwidth)."""
    return min(peak_flops, intensity * bandwidth)


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    """'memory' left of the ridge point, 'compute' at or right of it."""
    return "memory" if intensity < ridge_point(peak_flops, bandwidth) else "compute"


def roof_fraction(achieved_flops: float, intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Achieved FLOP/s over the roof at the same intensity (1.0 = on the roof)."""
    roof = attainable_flops(intensity, peak_flops, bandwidth)
    return achieved_flops / roof if roof > 0 else math.nan
