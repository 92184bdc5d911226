"""Roofs and roofline arithmetic (Williams, Waterman & Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 2009): attainable FLOP/s =
min(peak, intensity × bandwidth).

:class:`Ceilings` holds what profiler.measure.ceilings measured on a machine; :class:`Roofs` pairs
them with the datasheet entry (profiler.model.hardware) that rows are judged against. Pure: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from profiler.model import hardware


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


@dataclass(frozen=True)
class Ceilings:
    """Measured roofs of one machine: a large matmul per dtype and a large device copy."""

    device: str
    matmul_tflops: dict[str, float]  # by dtype; fp32 is IEEE fp32 (tf32 off)
    copy_gbps: float  # bytes read + written per second / 1e9
    matmul_n: int
    copy_bytes: int
    torch_version: str
    measured_at: str

    def peak_flops(self, dtype: str) -> float:
        return self.matmul_tflops[dtype] * 1e12

    @property
    def bandwidth(self) -> float:
        return self.copy_gbps * 1e9


@dataclass(frozen=True)
class Roofs:
    """The roofs rows are judged against: datasheet (None for an unknown device) and measured."""

    datasheet: hardware.Device | None
    measured: Ceilings | None

    def datasheet_peak(self, dtype: str) -> tuple[float, float] | None:
        if self.datasheet is None:
            return None
        try:
            return self.datasheet.peak_flops(dtype), self.datasheet.hbm_bytes_per_s
        except (KeyError, ValueError):
            return None

    def measured_peak(self, dtype: str) -> tuple[float, float] | None:
        if self.measured is None or dtype not in self.measured.matmul_tflops:
            return None
        return self.measured.peak_flops(dtype), self.measured.bandwidth

    @classmethod
    def from_meta(cls, meta: dict) -> Roofs:
        """The roofs a stored capture was judged against, from its meta.json."""
        sheet = hardware.lookup(meta.get("datasheet_device") or meta.get("device") or "")
        stored = meta.get("measured_ceilings")
        measured = None if not stored else Ceilings(
            device=meta.get("device", ""), matmul_tflops=stored["matmul_tflops"], copy_gbps=stored["copy_gbps"],
            matmul_n=stored.get("matmul_n", 0), copy_bytes=stored.get("copy_bytes", 0),
            torch_version=meta.get("torch", ""), measured_at=stored.get("measured_at", ""))
        return cls(sheet, measured)

    def as_meta(self) -> dict:
        return {
            "datasheet_device": self.datasheet.name if self.datasheet else None,
            "datasheet": None if self.datasheet is None else {
                "tensor_tflops": self.datasheet.tensor_tflops, "fp32_tflops": self.datasheet.fp32_tflops,
                "hbm_tbps": self.datasheet.hbm_tbps, "l2_bytes": self.datasheet.l2_bytes,
                "sources": self.datasheet.sources,
            },
            "measured_ceilings": None if self.measured is None else {
                "matmul_tflops": self.measured.matmul_tflops, "copy_gbps": self.measured.copy_gbps,
                "matmul_n": self.measured.matmul_n, "copy_bytes": self.measured.copy_bytes,
                "measured_at": self.measured.measured_at,
            },
        }
