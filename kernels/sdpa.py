"""PyTorch's scaled_dot_product_attention, one backend at a time, as peers of our kernels.

Each function forces a single backend with ``torch.nn.attention.sdpa_kernel``. Where PyTorch
cannot run that backend on the input (wrong device, dtype, head_dim, a missing build), the
function raises :class:`Unsupported` with PyTorch's reason, so a sweep records "unsupported"
instead of crashing or silently falling back to another backend.

Grouped-query inputs (k and v with fewer heads than q) go through SDPA's ``enable_gqa=True``
(PyTorch 2.5 and later), which the backend runs without copying K and V where it can; the math
backend expands them with repeat_interleave (its profile shows aten::repeat_interleave). Where a
backend or the installed PyTorch declines, the case is unsupported, and ``sdpa_repeat_kv`` is the
baseline users wrote before enable_gqa: repeat_interleave, then SDPA's own choice of backend.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels._checks import check_qkv, resolve_scale


class Unsupported(RuntimeError):
    """An implementation cannot run this input here; the message says why."""


BACKENDS = {
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_math": SDPBackend.MATH,
}


def _run_backend(name: str, q, k, v, causal: bool, sm_scale: float | None) -> torch.Tensor:
    check_qkv(q, k, v)
    scale = resolve_scale(sm_scale, q.shape[-1])
    if name in ("sdpa_efficient", "sdpa_cudnn") and q.device.type != "cuda":
        raise Unsupported(f"{name} needs a CUDA device, got '{q.device}'")
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(BACKENDS[name]):
        warnings.simplefilter("always")
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **gqa)
        except TypeError as err:
            if gqa and "enable_gqa" in str(err):
                raise Unsupported(f"{name}: this PyTorch ({torch.__version__}) has no enable_gqa") from err
            raise
        except torch.OutOfMemoryError:
            raise  # out of memory is not "unsupported": the caller records it as oom
        except RuntimeError as err:
            # PyTorch explains why a backend declined in warnings raised just before the error; keep
            # the explanations, drop the "not used because" and "runtime disabled" boilerplate.
            reasons = "; ".join(
                msg.split(" (Triggered internally")[0]
                for msg in (str(w.message).splitlines()[0] for w in caught)
                if "not used because" not in msg and "has been runtime disabled" not in msg
            )
            raise Unsupported(f"{name} cannot run this input: {reasons or str(err).splitlines()[0]}") from err


def sdpa_flash(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """SDPA's FlashAttention-2 backend. q, k, v: (batch, heads, seq, head_dim)."""
    return _run_backend("sdpa_flash", q, k, v, causal, sm_scale)


def sdpa_efficient(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """SDPA's memory-efficient (xFormers) backend. q, k, v: (batch, heads, seq, head_dim)."""
    return _run_backend("sdpa_efficient", q, k, v, causal, sm_scale)


def sdpa_cudnn(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """SDPA's cuDNN backend. q, k, v: (batch, heads, seq, head_dim)."""
    return _run_backend("sdpa_cudnn", q, k, v, causal, sm_scale)


def sdpa_math(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """SDPA's math backend (unfused PyTorch ops). q, k, v: (batch, heads, seq, head_dim)."""
    return _run_backend("sdpa_math", q, k, v, causal, sm_scale)


def sdpa_repeat_kv(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """Grouped-query attention as written before ``enable_gqa``: K and V repeated to every query
    head (``repeat_interleave``, a copy), then SDPA with its own choice of backend. With as many
    K/V heads as query heads nothing is repeated."""
    check_qkv(q, k, v)
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=resolve_scale(sm_scale, q.shape[-1]))
