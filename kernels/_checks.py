"""Input validation shared by every attention implementation.

Each check raises ``ValueError`` or ``TypeError`` with one sentence that names the offending value
and what is allowed, so a user never meets an assert or a Triton compile error first.
"""

from __future__ import annotations

import functools
import math

import torch

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64",
               torch.float8_e4m3fn: "fp8"}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def check_qkv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    dtypes: tuple[torch.dtype, ...] = SUPPORTED_DTYPES,
    head_dims: tuple[int, ...] | None = None,
    same_seq: bool = False,
) -> tuple[int, int, int, int, int]:
    """Check q, k, v are BHSD attention inputs; return (batch, heads, seq_q, seq_kv, head_dim).

    k and v may have fewer heads than q when that number divides q's (grouped-query attention, and
    multi-query at 1 head): query head h then reads K/V head h // (heads // kv_heads), the grouping
    of SDPA's ``enable_gqa`` and of ``repeat_interleave``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D (batch, heads, seq, head_dim), got {t.dim()}-D shape {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in dtypes:
        allowed = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"dtype {q.dtype} is not supported here; allowed: {allowed}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    batch, heads, seq_q, head_dim = q.shape
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(
            f"k shape {tuple(k.shape)} does not match q shape {tuple(q.shape)} in batch or head_dim"
        )
    if k.shape[1] < 1 or heads % k.shape[1]:
        raise ValueError(f"k has {k.shape[1]} heads; it must divide q's {heads} heads (grouped-query attention) "
                         "or equal them")
    if v.shape != k.shape:
        raise ValueError(f"v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")
    seq_kv = k.shape[2]
    if same_seq and seq_kv != seq_q:
        raise ValueError(f"this implementation needs seq_q == seq_kv, got {seq_q} and {seq_kv}")
    if q.numel() == 0 or k.numel() == 0:
        raise ValueError(
            f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}; every dimension must be at least 1"
        )
    if head_dims is not None and head_dim not in head_dims:
        raise ValueError(f"head_dim {head_dim} is not supported; allowed: {', '.join(map(str, head_dims))}")
    return batch, heads, seq_q, seq_kv, head_dim


def check_backward_inputs(do, q, k, v, o, lse, *, head_dims: tuple[int, ...] | None = None
                          ) -> tuple[int, int, int, int, int]:
    """Check the upstream gradient ``do`` against the forward's o (shape, dtype, device) and the
    head_dim against what the backward supports; return (batch, heads, seq_q, seq_kv, head_dim)."""
    if not isinstance(do, torch.Tensor):
        raise TypeError(f"the gradient of o must be a torch.Tensor, got {type(do).__name__}")
    if do.shape != o.shape:
        raise ValueError(f"the gradient of o has shape {tuple(do.shape)}; it must match o {tuple(o.shape)}")
    if do.dtype != o.dtype:
        raise TypeError(f"the gradient of o has dtype {do.dtype}; it must match o ({o.dtype})")
    if do.device != o.device:
        raise ValueError(f"the gradient of o is on '{do.device}'; it must be on o's device '{o.device}'")
    batch, heads, seq_q, head_dim = q.shape
    if k.shape[1] < 1 or heads % k.shape[1] or v.shape != k.shape:
        raise ValueError(f"k and v have shapes {tuple(k.shape)}, {tuple(v.shape)}; they must be equal with heads "
                         f"dividing q's {heads}")
    if lse.shape != (batch, heads, seq_q):
        raise ValueError(f"lse has shape {tuple(lse.shape)}; it must be (batch, heads, seq_q) = "
                         f"{(batch, heads, seq_q)}")
    if head_dims is not None and head_dim not in head_dims:
        raise ValueError(
            f"backward supports head_dim in {head_dims}, got {head_dim} "
            "(the dK/dV tiles of head_dim 256 do not fit in shared memory)"
        )
    return batch, heads, seq_q, k.shape[2], head_dim


def resolve_scale(sm_scale: float | None, head_dim: int) -> float:
    """``None`` means 1/sqrt(head_dim), the scale of "Attention Is All You Need" (Vaswani et al. 2017)."""
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if not isinstance(sm_scale, (int, float)) or not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale must be a positive finite number or None, got {sm_scale!r}")
    return float(sm_scale)


def check_triton_device(t: torch.Tensor, name: str = "q") -> None:
    """Triton kernels run on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1."""
    import os

    if t.device.type == "cuda":
        return
    if t.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        return
    raise ValueError(
        f"{name} is on device '{t.device}'; Triton kernels need a CUDA tensor "
        "(or a CPU tensor with TRITON_INTERPRET=1 set before kernels are imported)"
    )


@functools.cache
def cuda_properties(index: int | None):
    """torch.cuda.get_device_properties of device ``index``, once: the SM count, L2 size and compute
    capability do not change while a process runs, and torch's own call costs a few microseconds of
    Python that every launch of a decode step or a short prefill paid again (docs/perf-notes.md,
    "Our kernels inside a transformers model")."""
    return torch.cuda.get_device_properties(index)
