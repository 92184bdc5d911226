"""Naive PyTorch attention, one step at a time, and the fp64 oracle every test compares against.

The stepwise version is the "before" picture of the seed posts: it materialises the N×N score
matrix S and makes four trips through HBM with it (Q Kᵀ writes S; scale/mask reads and writes it;
softmax reads S and writes P; P V reads P). Each step runs inside its own NVTX range
(domain "attn", e.g. ``attn:qk_matmul``) so Nsight Systems and the capture can time it alone.

NVTX comes from the ``nvtx`` package, which is a no-op where no profiler listens;
``torch.cuda.nvtx`` would raise on a CPU-only torch.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext

import nvtx
import torch

from kernels._checks import check_qkv, dtype_name, resolve_scale

NVTX_DOMAIN = "attn"
# ATTN_NVTX=0 turns every range of ours into a no-op: how the capture's overhead is measured.
NVTX_ENABLED = os.environ.get("ATTN_NVTX", "1") != "0"
STEPS = ("qk_matmul", "scale_mask", "softmax", "pv_matmul")


def nvtx_range(name: str):
    """An NVTX range ``attn:<name>`` (a no-op under ATTN_NVTX=0)."""
    return nvtx.annotate(name, domain=NVTX_DOMAIN) if NVTX_ENABLED else nullcontext()


@contextmanager
def step_range(name: str):
    """An NVTX range ``attn:<name>``; also a torch-profiler range while the torch profiler records
    (only then: record_function costs an op dispatch per call, which the timed runs should not pay)."""
    with nvtx_range(name):
        if getattr(torch.autograd.profiler, "_is_profiler_enabled", False):
            with torch.profiler.record_function(name):
                yield
        else:
            yield


def _grouped(x: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(B, H, N, C) -> (B, kv_heads, H/kv_heads · N, C): the rows of a K/V head's query heads stacked,
    so one batched matmul per K/V head serves its whole group without copying K or V (a view when
    x is contiguous in its last three dimensions)."""
    batch, heads, rows, cols = x.shape
    return x.reshape(batch, kv_heads, heads // kv_heads * rows, cols)


def qk_matmul(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """S = Q Kᵀ. q: (B, H, Nq, D), k: (B, Hkv, Nk, D) -> S: (B, H, Nq, Nk) in the input dtype.
    With grouped-query attention (Hkv < H) each K head is multiplied once by its group's queries."""
    with step_range("qk_matmul"):
        if k.shape[1] == q.shape[1]:
            return torch.matmul(q, k.transpose(-2, -1))
        s = torch.matmul(_grouped(q, k.shape[1]), k.transpose(-2, -1))
        return s.view(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def scale_mask(s: torch.Tensor, sm_scale: float, causal: bool) -> torch.Tensor:
    """S * sm_scale, then -inf above the diagonal when causal (top-left aligned, as SDPA's is_causal)."""
    with step_range("scale_mask"):
        s = s * sm_scale
        if causal:
            seq_q, seq_kv = s.shape[-2], s.shape[-1]
            above = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=s.device).triu_(1)
            s = s.masked_fill_(above, float("-inf"))
        return s


def softmax(s: torch.Tensor) -> torch.Tensor:
    """P = softmax(S) over keys. PyTorch accumulates in fp32 for fp16/bf16 but reads and writes S, P
    in the input dtype, so the bytes moved are those of the input dtype."""
    with step_range("softmax"):
        return torch.softmax(s, dim=-1)


def pv_matmul(p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """O = P V. p: (B, H, Nq, Nk), v: (B, Hkv, Nk, D) -> O: (B, H, Nq, D)."""
    with step_range("pv_matmul"):
        if v.shape[1] == p.shape[1]:
            return torch.matmul(p, v)
        o = torch.matmul(_grouped(p, v.shape[1]), v)
        return o.view(p.shape[0], p.shape[1], p.shape[2], v.shape[3])


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Stepwise attention softmax(Q Kᵀ · sm_scale) V on BHSD tensors: (batch, heads, seq, head_dim);
    k and v may have fewer heads (grouped-query attention, see kernels._checks.check_qkv).

    Works on any device and any floating dtype, and with autograd. Memory is O(N²): S and P are
    both materialised.
    """
    check_qkv(q, k, v, dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64))
    scale = resolve_scale(sm_scale, q.shape[-1])
    s = qk_matmul(q, k)
    s = scale_mask(s, scale, causal)
    p = softmax(s)
    return pv_matmul(p, v)


def attention_oracle(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    return_lse: bool = False,
):
    """The fp64 ground truth: the same maths as :func:`naive_attention` in float64 on the CPU.

    Returns O (float64, CPU) and, with ``return_lse``, the natural-log logsumexp of each row of the
    scaled, masked scores: (B, H, Nq). Differentiable, so tests also take gradients through it.
    """
    scale = resolve_scale(sm_scale, q.shape[-1])
    q64, k64, v64 = (t.to("cpu", torch.float64) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]  # grouped-query attention: query head h reads K/V head h // group
    k64, v64 = k64.repeat_interleave(group, dim=1), v64.repeat_interleave(group, dim=1)
    s = torch.matmul(q64, k64.transpose(-2, -1)) * scale
    if causal:
        above = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu_(1)
        s = s.masked_fill(above, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.exp(s - lse[..., None]), v64)
    if return_lse:
        return o, lse
    return o


def oracle_with_grads(q, k, v, do, causal=False, sm_scale=None):
    """fp64 output and gradients (dq, dk, dv) for upstream gradient ``do``, all on the CPU."""
    q64, k64, v64 = (t.detach().to("cpu", torch.float64).requires_grad_(True) for t in (q, k, v))
    o = attention_oracle(q64, k64, v64, causal=causal, sm_scale=sm_scale)
    o.backward(do.detach().to("cpu", torch.float64))
    return o.detach(), q64.grad, k64.grad, v64.grad


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 on the CPU (NaN stays NaN so it can never pass)."""
    out64 = out.detach().to("cpu", torch.float64)
    ref64 = ref.detach().to("cpu", torch.float64)
    denom = torch.linalg.vector_norm(ref64).item()
    num = torch.linalg.vector_norm(out64 - ref64).item()
    return num / denom if denom > 0 else num


# Largest relative error (``relative_error`` against fp32 naive attention) a correct kernel may
# have, by input dtype: 4 units of roundoff of the format its matmuls read. Unit roundoff u = 2^-11
# for fp16 (10 stored mantissa bits) and 2^-8 for bf16 (7 bits) (IEEE 754-2008 binary16; Google's
# bfloat16 format). fp32 inputs get fp16's u: a kernel may multiply fp32 as TF32 on tensor cores,
# tl.dot's default input precision (Triton's docs), whose mantissa is fp16's (NVIDIA A100
# whitepaper, "TF32"); ours multiply fp32 in IEEE fp32 and sit far below it. The shipped H100/H200
# captures of every implementation stay below 0.44 of these (largest: 8.5e-4 fp16 and
# 6.8e-3 bf16, naive fwd+bwd gradients). A consequence to know: in bf16 an output scaled by
# (1 + 1%) still passes, since 1% is within 4u = 1.6%.
# fp8 (e4m3: 3 stored mantissa bits, u = 2^-4, OCP 8-bit floating point specification) is compared on
# the values its inputs stand for (profiler.measure.runner feeds e4m3 tensors to an fp32 naive attention),
# so the one e4m3 rounding left is P's before P V (kernels/flash_fwd_fp8.py). A weight in e4m3's normal
# range (P >= 2^-6) moves by at most u of itself; a smaller one by at most 2^-10 (half the subnormal
# spacing), and the row's sum is taken before the rounding. The bound is u, e4m3's unit roundoff: four of
# them would let a 25% error pass. Measured on an H100: 1.4e-2 to 2.6e-2 (reports/perf-h100/
# fp8_gpu_tests_round1.txt, reports/fp8-h100), a quarter to two fifths of it.
TOLERANCE = {"fp16": 4 * 2.0**-11, "bf16": 4 * 2.0**-8, "fp32": 4 * 2.0**-11, "fp8": 2.0**-4}


def output_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype attention returns for inputs of ``dtype``: the same, except fp8 inputs give bf16."""
    return torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype


class WrongOutput(ValueError):
    """An implementation's output (or gradient) is not attention's: wrong shape, dtype, not finite,
    or further from the reference than the tolerance. The message says which, in one line."""


def check_output(name: str, out, ref: torch.Tensor, dtype: torch.dtype) -> None:
    """Raise :class:`WrongOutput` unless ``out`` is a tensor of ``ref``'s shape and of ``dtype``,
    with every element finite. Done before any arithmetic with ``ref``: a (B, H, 1, D) output
    would otherwise broadcast against the (B, H, N, D) reference and look close to it."""
    if not isinstance(out, torch.Tensor):
        raise WrongOutput(f"{name} is a {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        raise WrongOutput(f"{name} has shape {tuple(out.shape)}; attention's is {tuple(ref.shape)}")
    if out.dtype != dtype:
        raise WrongOutput(f"{name} has dtype {dtype_name(out.dtype)}; the inputs are {dtype_name(dtype)}")
    bad = (~torch.isfinite(out.detach())).sum().item()
    if bad:
        raise WrongOutput(f"{name} has {bad} non-finite element(s) (NaN or inf) of {out.numel()}")
