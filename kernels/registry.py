"""The one registry of attention implementations.

The CLI's ``--impl`` choices, the sweeps and the dashboard's colours all come from ``REGISTRY``.
Adding an implementation is one entry here. Every ``fn`` takes BHSD tensors
``(q, k, v, causal=False, sm_scale=None)`` and returns o: (batch, heads, seq_q, head_dim).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import flash_bwd, flash_fwd, reference, sdpa, triton_naive
from kernels._checks import dtype_name
from kernels.flash_attention import flash_attention

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class Impl:
    name: str
    fn: Callable[..., torch.Tensor]
    description: str
    fused: bool  # one kernel for the whole attention, or separate steps through HBM
    steps: tuple[str, ...]  # the named steps timed separately; ("total",) when fused
    supports_backward: bool
    needs_cuda: bool  # False: also runs on a CPU (Triton ones only under TRITON_INTERPRET=1)
    is_triton: bool
    dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES
    head_dims: tuple[int, ...] | None = None  # None: any head_dim
    backward_head_dims: tuple[int, ...] | None = None

    def unsupported_reason(
        self, device: torch.device | str, dtype: torch.dtype, head_dim: int, backward: bool = False
    ) -> str | None:
        """Why this implementation cannot run this case here, or None when it can."""
        device_type = torch.device(device).type
        if self.needs_cuda and device_type != "cuda":
            return f"{self.name} needs a CUDA device"
        if self.is_triton and device_type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return f"{self.name} is a Triton kernel: it needs a CUDA device (or TRITON_INTERPRET=1)"
        if dtype not in self.dtypes:
            return f"{self.name} does not take {dtype_name(dtype)}"
        if self.head_dims is not None and head_dim not in self.head_dims:
            return f"{self.name} takes head_dim in {self.head_dims}, not {head_dim}"
        if backward:
            if not self.supports_backward:
                return f"{self.name} has no backward pass"
            if self.backward_head_dims is not None and head_dim not in self.backward_head_dims:
                return f"{self.name} backward takes head_dim in {self.backward_head_dims}, not {head_dim}"
        return None


REGISTRY: dict[str, Impl] = {
    impl.name: impl
    for impl in [
        Impl(
            "naive", reference.naive_attention,
            "PyTorch, four steps through HBM (S = QKᵀ, scale/mask, softmax, PV)",
            fused=False, steps=reference.STEPS, supports_backward=True, needs_cuda=False, is_triton=False,
        ),
        Impl(
            "triton_naive", triton_naive.triton_naive_attention,
            "Triton, one program per query row, online softmax, no tensor cores",
            fused=True, steps=("total",), supports_backward=False, needs_cuda=False, is_triton=True,
            head_dims=triton_naive.HEAD_DIMS,
        ),
        Impl(
            "triton_flash", flash_attention,
            "Triton FlashAttention-2 (ours): tiled, online softmax, recomputing backward",
            fused=True, steps=("total",), supports_backward=True, needs_cuda=False, is_triton=True,
            head_dims=flash_fwd.HEAD_DIMS, backward_head_dims=flash_bwd.HEAD_DIMS,
        ),
        Impl(
            "sdpa_flash", sdpa.sdpa_flash, "PyTorch SDPA, FlashAttention-2 backend",
            fused=True, steps=("total",), supports_backward=True, needs_cuda=False, is_triton=False,
        ),
        Impl(
            "sdpa_efficient", sdpa.sdpa_efficient, "PyTorch SDPA, memory-efficient (xFormers) backend",
            fused=True, steps=("total",), supports_backward=True, needs_cuda=True, is_triton=False,
        ),
        Impl(
            "sdpa_cudnn", sdpa.sdpa_cudnn, "PyTorch SDPA, cuDNN backend",
            fused=True, steps=("total",), supports_backward=True, needs_cuda=True, is_triton=False,
            dtypes=(torch.float16, torch.bfloat16),
        ),
        Impl(
            "sdpa_math", sdpa.sdpa_math, "PyTorch SDPA, math backend (unfused reference)",
            fused=False, steps=("total",), supports_backward=True, needs_cuda=False, is_triton=False,
        ),
    ]
}


def get_impl(name: str) -> Impl:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown implementation '{name}'; choose from: {', '.join(REGISTRY)}") from None
