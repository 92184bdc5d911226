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


# Matmul FLOPs per softmax exponential, per score: forward Q Kᵀ and P V, 2·D each (4·D); backward
# by the FLOP convention of profiler.model.fused (2.5x the forward, 10·D) with P recomputed once
# (FlashAttention-2 paper, Algorithm 2); forward and backward together 14·D per two exponentials.
FLOPS_PER_EXP = {"fwd": 4, "bwd": 10, "fwd+bwd": 7}  # × head_dim


def exp_ceiling(matmul_flops: float, exp2_per_s: float, head_dim: int, mode: str = "fwd") -> float:
    """FLOP/s cap of a fused attention kernel that runs its exponentials and its matmuls one after
    the other: each score costs FLOPS_PER_EXP·D matmul FLOPs at ``matmul_flops`` plus one exp2 on the
    special-function units at ``exp2_per_s`` (FlashAttention-3, Shah et al. 2024, §3.1: on H100 the
    exponentials take 64/D of the matmul time, hence its overlap of softmax with the matmuls).
    Equals matmul_flops / (1 + matmul_flops / (FLOPS_PER_EXP·D · exp2_per_s)): at D = 64, forward,
    on the H100/H200 datasheet, half the matmul roof. Only overlap gets above it."""
    per_exp = FLOPS_PER_EXP[mode] * head_dim
    return per_exp / (per_exp / matmul_flops + 1.0 / exp2_per_s)


def roof_fraction(achieved_flops: float, intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Achieved FLOP/s over the roof at the same intensity (1.0 = on the roof)."""
    roof = attainable_flops(intensity, peak_flops, bandwidth)
    return achieved_flops / roof if roof > 0 else math.nan


@dataclass(frozen=True)
class CopyCurve:
    """How fast a device copy of a given size runs: the median time of copies moving ``nbytes[i]``
    bytes (read + written), timed as the capture times its kernels (``timing``), in the same run.

    One figure, a 2 GiB copy's rate, is what a large step can reach; a small one cannot. Hockney's
    model of a vector pipeline (R. W. Hockney and C. R. Jesshope, "Parallel Computers 2", 1988, §1.3.3:
    t(n) = (n + n½) / r∞) names what sets the curve: a fixed cost n½ / r∞ (the launch, the first
    requests' DRAM latency, the ramp while too few bytes are in flight to cover it, Little's law, and
    the last wave's tail), then the streaming rate r∞. n½ is the size that reaches half of r∞.
    Between the measured sizes the time is interpolated linearly in bytes, which is exact for that
    model; below the smallest the smallest's time holds (a copy cannot beat its fixed cost), above
    the largest the largest's rate."""

    nbytes: tuple[int, ...]  # increasing
    seconds: tuple[float, ...]
    timing: str = ""
    measured_at: str = ""

    def time_for(self, nbytes: float) -> float:
        """Seconds a device copy moving ``nbytes`` takes, by the measured curve."""
        sizes, times = self.nbytes, self.seconds
        if nbytes <= sizes[0]:
            return times[0]
        if nbytes >= sizes[-1]:
            return times[-1] * nbytes / sizes[-1]
        i = next(k for k in range(1, len(sizes)) if sizes[k] >= nbytes)
        share = (nbytes - sizes[i - 1]) / (sizes[i] - sizes[i - 1])
        return times[i - 1] + share * (times[i] - times[i - 1])

    def bandwidth(self, nbytes: float) -> float:
        """Bytes per second a copy moving ``nbytes`` reaches (read + written)."""
        return nbytes / self.time_for(nbytes) if nbytes > 0 else math.nan

    def hockney(self) -> tuple[float, float]:
        """(r∞ in bytes/s, n½ in bytes), read off the measured curve rather than fitted: r∞ the largest
        copy's rate (the streaming plateau), n½ the size whose copy reaches half of it (bisection on the
        interpolated curve; the smallest size where even that one is above half)."""
        r_inf = self.bandwidth(self.nbytes[-1])
        lo, hi = float(self.nbytes[0]), float(self.nbytes[-1])
        if self.bandwidth(lo) >= r_inf / 2:
            return r_inf, lo
        for _ in range(100):
            mid = (lo * hi) ** 0.5
            lo, hi = (mid, hi) if self.bandwidth(mid) < r_inf / 2 else (lo, mid)
        return r_inf, hi

    def as_meta(self) -> dict:
        return {"bytes": list(self.nbytes), "us": [t * 1e6 for t in self.seconds], "timing": self.timing,
                "measured_at": self.measured_at}

    @classmethod
    def from_meta(cls, stored: dict | None) -> CopyCurve | None:
        if not stored or not stored.get("bytes"):
            return None
        return cls(tuple(int(n) for n in stored["bytes"]), tuple(float(t) * 1e-6 for t in stored["us"]),
                   stored.get("timing", ""), stored.get("measured_at", ""))


def size_roof(intensity: float, nbytes: float, peak_flops: float, curve: CopyCurve) -> float:
    """The roof at this intensity for a step that moves ``nbytes``: min(peak, intensity × the rate a
    copy of ``nbytes`` reached), i.e. no faster than the compute peak, nor than copying its own bytes."""
    return min(peak_flops, intensity * curve.bandwidth(nbytes))


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
    l2_copy_gbps: float | None = None  # a device copy that fits in L2 (read + write), when measured
    l2_copy_bytes: int | None = None
    copy_curve: CopyCurve | None = None  # copy rate by size, measured by each capture (never cached)

    def peak_flops(self, dtype: str) -> float:
        return self.matmul_tflops[dtype] * 1e12

    @property
    def bandwidth(self) -> float:
        return self.copy_gbps * 1e9

    @property
    def l2_bandwidth(self) -> float | None:
        return None if self.l2_copy_gbps is None else self.l2_copy_gbps * 1e9


@dataclass(frozen=True)
class Roofs:
    """The roofs rows are judged against: datasheet (None for an unknown device) and measured."""

    datasheet: hardware.Device | None
    measured: Ceilings | None

    def datasheet_peak(self, dtype: str) -> tuple[float, float] | None:
        peak = None if self.datasheet is None else self.datasheet.peak_flops_or_none(dtype)
        return None if peak is None else (peak, self.datasheet.hbm_bytes_per_s)

    def measured_peak(self, dtype: str) -> tuple[float, float] | None:
        if self.measured is None or dtype not in self.measured.matmul_tflops:
            return None
        return self.measured.peak_flops(dtype), self.measured.bandwidth

    @classmethod
    def from_meta(cls, meta: dict, device: str | None = None) -> Roofs:
        """The roofs a stored capture was judged against, from its meta.json; with ``device``, the
        roofs of that one of the capture's devices (a sweep over ranks on different GPUs keeps each
        device's in meta.json's ``devices``)."""
        meta = meta_for_device(meta, device)
        sheet = hardware.lookup(meta.get("datasheet_device") or meta.get("device") or "")
        stored = meta.get("measured_ceilings")
        measured = None if not stored else Ceilings(
            device=meta.get("device", ""), matmul_tflops=stored["matmul_tflops"], copy_gbps=stored["copy_gbps"],
            matmul_n=stored.get("matmul_n", 0), copy_bytes=stored.get("copy_bytes", 0),
            torch_version=meta.get("torch", ""), measured_at=stored.get("measured_at", ""),
            l2_copy_gbps=stored.get("l2_copy_gbps"), l2_copy_bytes=stored.get("l2_copy_bytes"),
            copy_curve=CopyCurve.from_meta(stored.get("copy_curve")))
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
                **({} if self.measured.l2_copy_gbps is None else {
                    "l2_copy_gbps": self.measured.l2_copy_gbps, "l2_copy_bytes": self.measured.l2_copy_bytes}),
                **({} if self.measured.copy_curve is None else {"copy_curve": self.measured.copy_curve.as_meta()}),
            },
        }


def meta_for_device(meta: dict, device: str | None) -> dict:
    """A capture's meta.json as one of its devices sees it: where ranks on different GPUs measured
    one capture (--allow-mixed), ``devices`` holds each one's datasheet and measured ceilings, which
    replace the top-level ones (rank 0's); otherwise, or for a device it does not list, ``meta``."""
    if not device or device not in (meta.get("devices") or {}):
        return meta
    return {**meta, "device": device, **meta["devices"][device]}
