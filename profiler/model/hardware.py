"""Datasheet peaks of the GPUs a user is likely to profile on, each figure with its source.

These are vendor figures, not measurements: dense tensor-core rates (the "with sparsity" figures
of the datasheets halved), plain fp32 (non-tensor) rates, HBM bandwidth, L2 size, shared memory
per SM and SM count. Measured ceilings live in :mod:`profiler.measure.ceilings` and in each capture's
metadata. ``None`` means the source at hand does not give the figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TFLOP = 1e12
TB = 1e12
MB = 1e6
KIB = 1024


@dataclass(frozen=True)
class Device:
    name: str
    match: str  # regex on torch.cuda.get_device_name()
    # dense tensor-core TFLOP/s by input dtype, fp32 accumulation; fp8 is e4m3/e5m2 (H100 SXM 3,958, PCIe 3,026,
    # H200 3,958 and L40S 1,466 TFLOP/s "with sparsity" in their datasheets, halved)
    tensor_tflops: dict[str, float]
    fp32_tflops: float | None  # plain fp32 (CUDA cores)
    hbm_tbps: float  # TB/s (1e12 bytes/s)
    l2_bytes: float | None
    smem_per_sm_bytes: int | None
    sm_count: int | None
    sources: dict[str, str] = field(default_factory=dict)
    # Dense fp16 tensor-core FLOPs per exp2 the special-function units (SFU) can do in the same time:
    # (tensor FLOP per clock per SM) / (exp2 results per clock per SM). None where not established.
    tensor_flops_per_exp: int | None = None
    # (major, minor) compute capability: which of our kernels' paths the GPU takes (python -m profiler model --path
    # auto: kernels.flash_fwd.planned_forward_path). None where not listed.
    compute_capability: tuple[int, int] | None = None

    @property
    def exp2_per_s(self) -> float | None:
        """exp2 results per second of the SFUs (a softmax exponential each): the fp16 tensor peak
        over ``tensor_flops_per_exp``. H100 SXM: 989.5 TFLOP/s / 256 = 3.9·10¹² per second, the
        figure FlashAttention-3 (Shah et al. 2024, §3.1) quotes for "special functions"."""
        if self.tensor_flops_per_exp is None:
            return None
        return self.tensor_tflops["fp16"] * TFLOP / self.tensor_flops_per_exp

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for attention in ``dtype``: the tensor-core rate for fp16/bf16/fp8 and,
        for fp32, the plain fp32 rate (our fp32 kernels use IEEE fp32, not tf32)."""
        if dtype == "fp32":
            if self.fp32_tflops is None:
                raise ValueError(f"{self.name}: no fp32 peak in the datasheet table")
            return self.fp32_tflops * TFLOP
        return self.tensor_tflops[dtype] * TFLOP

    def peak_flops_or_none(self, dtype: str) -> float | None:
        """:meth:`peak_flops`, or None where the datasheet table gives no figure for ``dtype``."""
        try:
            return self.peak_flops(dtype)
        except (KeyError, ValueError):
            return None

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * TB


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021): dense = half the 'with sparsity' figure"
_AMPERE_WP = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023): dense = half the 'with sparsity' figure"
_HOPPER_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)"
_ADA_WP = "NVIDIA Ada GPU Architecture whitepaper v2.1, Appendix A"
_CUDA_GUIDE = "CUDA C++ Programming Guide, table of technical specifications per compute capability"
# NVIDIA's list of CUDA GPUs and their compute capability (developer.nvidia.com/cuda-gpus)
_CC = "NVIDIA, CUDA GPUs: compute capability by product (developer.nvidia.com/cuda-gpus)"
# The CUDA C++ Programming Guide's throughput table (arithmetic instructions) gives 16 results per
# clock per SM for exp2 (and the other SFU functions) at compute capability 8.0, 8.9 and 9.0. The
# tensor cores' dense fp16 FLOP per clock per SM is the datasheet peak over SMs × boost clock:
# Hopper 989.5e12 / (132 × 1.83e9) = 4096, Ampere 312e12 / (108 × 1.41e9) = 2048, L40S
# 362e12 / (142 × 2.52e9) = 1012 and RTX 4090 (fp32 accumulation at half rate on GeForce)
# 165.2e12 / (128 × 2.52e9) = 512. Hence 256, 128, 64 and 32 tensor FLOPs per exponential.
_SFU = ("CUDA C++ Programming Guide, arithmetic instruction throughput: 16 exp2 per clock per SM; tensor FLOP "
        "per clock per SM from the datasheet peak, SM count and boost clock")

DEVICES: dict[str, Device] = {
    d.name: d
    for d in [
        Device(
            "A100-SXM4-40GB", r"A100.*SXM4?-40GB|A100-SXM-40GB",
            {"fp16": 312, "bf16": 312, "tf32": 156}, 19.5, 1.555, 40 * MB, 164 * KIB, 108,
            {"flops": _A100, "hbm": _A100, "l2": _AMPERE_WP, "smem": _CUDA_GUIDE, "sm": _AMPERE_WP, "sfu": _SFU,
             "cc": _CC},
            tensor_flops_per_exp=128,
            compute_capability=(8, 0),
        ),
        Device(
            "A100-SXM4-80GB", r"A100.*SXM4?-80GB",
            {"fp16": 312, "bf16": 312, "tf32": 156}, 19.5, 2.039, 40 * MB, 164 * KIB, 108,
            {"flops": _A100, "hbm": _A100, "l2": _AMPERE_WP, "smem": _CUDA_GUIDE, "sm": _AMPERE_WP, "sfu": _SFU,
             "cc": _CC},
            tensor_flops_per_exp=128,
            compute_capability=(8, 0),
        ),
        Device(
            "A100-PCIe-80GB", r"A100.*80GB PCIe|A100-PCIE-80GB",
            {"fp16": 312, "bf16": 312, "tf32": 156}, 19.5, 1.935, 40 * MB, 164 * KIB, 108,
            {"flops": _A100, "hbm": _A100 + " (the A100 of the seed post on IO-awareness)",
             "l2": _AMPERE_WP, "smem": _CUDA_GUIDE, "sm": _AMPERE_WP, "sfu": _SFU, "cc": _CC},
            tensor_flops_per_exp=128,
            compute_capability=(8, 0),
        ),
        Device(
            "H100-SXM", r"H100.*(SXM|HBM3)",
            {"fp16": 989.5, "bf16": 989.5, "tf32": 494.5, "fp8": 1979}, 67.0, 3.35, 50 * MB, 228 * KIB, 132,
            {"flops": _H100, "hbm": _H100, "l2": _HOPPER_WP, "smem": _CUDA_GUIDE, "sm": _HOPPER_WP, "sfu": _SFU,
             "cc": _CC},
            tensor_flops_per_exp=256,
            compute_capability=(9, 0),
        ),
        Device(
            "H100-PCIe", r"H100.*PCIe",
            {"fp16": 756.5, "bf16": 756.5, "tf32": 378, "fp8": 1513}, 51.0, 2.0, 50 * MB, 228 * KIB, 114,
            {"flops": _H100, "hbm": _H100, "l2": _HOPPER_WP, "smem": _CUDA_GUIDE, "sm": _HOPPER_WP, "sfu": _SFU,
             "cc": _CC},
            tensor_flops_per_exp=256,
            compute_capability=(9, 0),
        ),
        Device(
            "H200", r"H200",
            {"fp16": 989.5, "bf16": 989.5, "tf32": 494.5, "fp8": 1979}, 67.0, 4.8, 60 * MB, 228 * KIB, 132,
            {"flops": "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM: dense = half the sparse figure",
             "hbm": "NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s",
             "l2": "cudaDeviceProp.l2CacheSize reported by the driver on an H200 (60 MB; not in the datasheet)",
             "smem": _CUDA_GUIDE, "sm": "cudaDeviceProp.multiProcessorCount on an H200", "sfu": _SFU, "cc": _CC},
            tensor_flops_per_exp=256,
            compute_capability=(9, 0),
        ),
        Device(
            "B200", r"B200",
            {"fp16": 2250, "bf16": 2250, "tf32": 1100}, None, 8.0, None, 228 * KIB, None,
            {"flops": "NVIDIA DGX B200 datasheet (2024), per GPU: dense = half the sparse figure",
             "hbm": "NVIDIA DGX B200 datasheet: 8 TB/s HBM3e per GPU", "smem": _CUDA_GUIDE, "cc": _CC},
            compute_capability=(10, 0),
        ),
        Device(
            "L40S", r"L40S",
            {"fp16": 362.05, "bf16": 362.05, "tf32": 183, "fp8": 733}, 91.6, 0.864, 96 * MB, 100 * KIB, 142,
            {"flops": "NVIDIA L40S datasheet (2023): dense = half the sparse figure",
             "hbm": "NVIDIA L40S datasheet: 864 GB/s GDDR6", "l2": _ADA_WP, "smem": _CUDA_GUIDE,
             "sm": "NVIDIA L40S datasheet (142 RT cores, one per SM)", "sfu": _SFU, "cc": _CC},
            tensor_flops_per_exp=64,
            compute_capability=(8, 9),
        ),
        Device(
            "RTX-4090", r"RTX 4090",
            {"fp16": 165.2, "bf16": 165.2, "tf32": 82.6}, 82.6, 1.008, 72 * MB, 100 * KIB, 128,
            {"flops": _ADA_WP + ": FP16/BF16 tensor with FP32 accumulate, dense",
             "hbm": _ADA_WP, "l2": _ADA_WP, "smem": _CUDA_GUIDE, "sm": _ADA_WP, "sfu": _SFU, "cc": _CC},
            tensor_flops_per_exp=32,
            compute_capability=(8, 9),
        ),
        Device(
            "RTX-PRO-6000-Blackwell", r"RTX PRO 6000",
            {"fp16": 500, "bf16": 500}, 125.0, 1.792, 128 * MB, 100 * KIB, 188,
            {"flops": "NVIDIA RTX PRO 6000 Blackwell datasheet (2025): 4000 AI TOPS is FP4 with sparsity; "
                      "dense FP16 derived as 4000 / 2 (sparsity) / 2 (FP8) / 2 (FP16) = 500, not a "
                      "quoted figure. FP32 125 TFLOPS is quoted",
             "hbm": "same datasheet: 96 GB GDDR7 at 1792 GB/s", "l2": "same datasheet: 128 MB L2",
             "smem": _CUDA_GUIDE, "sm": "same datasheet: 24064 CUDA cores / 128 per SM", "cc": _CC},
            compute_capability=(12, 0),
        ),
    ]
}


def lookup(device_name: str) -> Device | None:
    """The datasheet entry for a name as torch.cuda.get_device_name() prints it, or a table key.
    None for an unknown device: then only measured ceilings apply."""
    if device_name in DEVICES:
        return DEVICES[device_name]
    for device in DEVICES.values():
        if re.search(device.match, device_name, flags=re.IGNORECASE):
            return device
    return None


def get_device(name: str) -> Device:
    """Like :func:`lookup` but an unknown name is an error naming the known ones."""
    device = lookup(name)
    if device is None:
        raise ValueError(f"unknown device '{name}'; known: {', '.join(DEVICES)}")
    return device
