"""FlashAttention forward with fp8 (e4m3) Q, K and V, in Triton.

The algorithm of kernels/flash_fwd.py (one program per (query block, batch·head), an online softmax in
fp32) with the two matmuls in fp8, as FlashAttention-3 runs them on Hopper (Shah et al. 2024, §3.3):

- Q, K and V arrive in ``torch.float8_e4m3fn`` (Triton's ``float8e4nv``: 4 exponent bits, 3 mantissa
  bits, largest finite 448), each with a descale factor per (batch, head): the value a stored element
  stands for is the element times its descale (:func:`quantize_fp8` makes them from a wider tensor).
- S = Q Kᵀ is an fp8 × fp8 matmul accumulated in fp32; the descales of Q and K fold into the softmax
  scale, so the scores cost nothing extra.
- P (in [0, 1] once the row's running maximum is subtracted) is rounded to e4m3 for P V; V's descale
  multiplies the output once, at the end. That rounding of P is the one e4m3 rounding the kernel adds to
  its dequantized inputs, which sets its tolerance (kernels.reference.TOLERANCE["fp8"]).
- The output is bf16 (or fp16), with the natural-log logsumexp of the true scaled scores.

On sm_90 Triton lowers both dots to fp8 wgmma (twice bf16's rate: 1,979 against 989 dense TFLOP/s on an
H100 SXM, NVIDIA's datasheet). fp8 tensor cores exist from compute capability 8.9, but the tiles are sm_90's;
the CPU interpreter cannot run an fp8 dot, so this kernel runs on a Hopper GPU or later only
(:func:`unsupported_on` says why not). On sm_90, :func:`flash_attention_fp8` hands inputs with V's keys contiguous
to the Gluon kernel of kernels/flash_fwd_hopper.py (its ``FP8`` path: warpgroups taking turns, one's
exponentials under another's matmuls), except causal head_dim 64, where this one measured faster; :func:`fp8_path`
says which runs.
Pointer arithmetic only (triton 3.9 removed ``tl.make_block_ptr``).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from kernels import flash_fwd_hopper
from kernels._autotune import LN2_C, LOG2E
from kernels._checks import check_qkv, resolve_scale
from kernels._layout import empty_in_layout

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value (OCP 8-bit floating point specification, E4M3)
HEAD_DIMS = (64, 128)  # fp8 wgmma's K is 32: any multiple works; these are the ones tested
OUT_DTYPES = (torch.bfloat16, torch.float16)
# (BLOCK_M, BLOCK_N, num_warps, num_stages) by head_dim, of six timed on an H100 at 32768 tokens with V's keys
# contiguous: at D64 the fastest causal or not; at D128 within 5% of the fastest without a mask and 0.5% causal
# (docs/perf-notes.md, "FP8 forward", round 1: reports/perf-h100/fp8_probe_round1.jsonl).
TILES = {64: (64, 128, 4, 3), 128: (128, 128, 8, 3)}


def unsupported_on(device: torch.device, head_dim: int = 0) -> str | None:
    """Why the fp8 kernel cannot run on ``device``, or None: it needs fp8 tensor cores on sm_90 or later and a
    compiled Triton (the interpreter has no fp8 dot). Also the registry's hook
    (attention_core.implementations.Impl.unsupported_here), whose signature passes ``head_dim`` (unused:
    the registry entry's head_dims say which it takes)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "fp8 attention needs a GPU: the Triton interpreter (TRITON_INTERPRET=1) cannot run an fp8 dot"
    if device.type != "cuda":
        return f"fp8 attention needs a CUDA GPU with fp8 tensor cores; the device is '{device}'"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (9, 0):  # Ada (8.9) has fp8 tensor cores, but its ~99 KB of shared memory per block
        # does not hold TILES' K/V stages (tuned on sm_90's 227 KB); untested there
        return (f"our fp8 attention runs on Hopper and later (compute capability 9.0+, tested on an H100); "
                f"{torch.cuda.get_device_name(device)} is {major}.{minor}")
    return None


def keys_contiguous_layout(x: torch.Tensor) -> torch.Tensor:
    """``x`` (B, H, N, D) with the same values, laid out with N contiguous: a BHSD view of (B, H, D, N) memory,
    the order P V's fp8 wgmma reads V in (:data:`TILES`' measurement: 1.44x to 2.65x faster). Each run of N
    is padded to a multiple of 16 bytes, so that a TMA descriptor can step from one head_dim row to the next
    (CUDA driver API, cuTensorMapEncodeTiled: strides are multiples of 16 bytes) at any N."""
    batch, heads, seq, head_dim = x.shape
    padded = seq + -seq % (16 // x.element_size())
    runs = torch.empty((batch, heads, head_dim, padded), dtype=x.dtype, device=x.device)
    runs[..., :seq].copy_(x.transpose(2, 3))
    return runs[..., :seq].transpose(2, 3)


def quantize_fp8(x: torch.Tensor, keys_contiguous: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (B, H, N, D) in e4m3 and its descale per (batch, head), fp32 (B, H): each head scaled so
    that its largest magnitude maps to 448 (per-head scaling, as FlashAttention-3's fp8 path takes it).
    ``x8.float() * descale[..., None, None]`` is what the kernel computes with. ``keys_contiguous``: lay
    the result out as :func:`keys_contiguous_layout` does, the order to give V in."""
    amax = x.detach().abs().amax(dim=(2, 3)).float().clamp(min=torch.finfo(torch.float32).tiny)
    scale = FP8_MAX / amax
    x8 = (x.float() * scale[..., None, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    if keys_contiguous:
        x8 = keys_contiguous_layout(x8)
    return x8, (1.0 / scale).contiguous()


def dequantize_fp8(x8: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    """The values an e4m3 tensor and its per-(batch, head) descale stand for, in fp32."""
    return x8.float() * descale.float()[..., None, None]


@triton.jit
def _fp8_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd, offs_m, offs_n, offs_d,
               lo, hi, seq_kv, scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Key tiles lo..hi of one query block: S = Q Kᵀ in fp8, the online softmax in fp32, P rounded to e4m3
    for P V. ``MASKED``: the tiles a mask touches (the ragged end, the causal diagonal); the others skip it."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:
            kt = tl.load(k_base + cols.to(tl.int64)[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                         mask=(cols < seq_kv)[None, :], other=0.0)  # (HEAD_DIM, BLOCK_N) e4m3
        else:
            kt = tl.load(k_base + cols.to(tl.int64)[None, :] * stride_kn + offs_d[:, None] * stride_kd)
        s = tl.dot(q, kt) * scale  # fp8 x fp8, fp32 accumulate; log2 units
        if MASKED:
            visible = (cols < seq_kv)[None, :]
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASKED:
            v = tl.load(v_base + cols.to(tl.int64)[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                        mask=(cols < seq_kv)[:, None], other=0.0)  # (BLOCK_N, HEAD_DIM) e4m3
        else:
            v = tl.load(v_base + cols.to(tl.int64)[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        acc = tl.dot(p.to(tl.float8e4nv), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_fp8(
    Q, K, V, O, LSE, Q_DESCALE, K_DESCALE, V_DESCALE,
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    heads, kv_heads, seq_q, seq_kv, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // heads
    off_h = off_hz % heads
    off_hk = off_h // (heads // kv_heads)  # grouped-query attention: query head h reads K/V head h // group
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    q_ptrs = (Q + off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
              + offs_m.to(tl.int64)[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=(offs_m < seq_q)[:, None], other=0.0)
    kv_head = off_z * kv_heads + off_hk
    # Q's and K's descales fold into the exp2 scale: s = (q8 · k8) · dq · dk · sm_scale · log2(e)
    scale = qk_scale * tl.load(Q_DESCALE + off_hz) * tl.load(K_DESCALE + kv_head)
    k_base = K + off_z.to(tl.int64) * stride_kz + off_hk.to(tl.int64) * stride_kh
    v_base = V + off_z.to(tl.int64) * stride_vz + off_hk.to(tl.int64) * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = seq_kv
    if CAUSAL:  # top-left causal: row i sees keys 0..i
        hi = tl.minimum(seq_kv, (start_m + 1) * BLOCK_M)
    # Tiles before lo need no mask, in a loop of their own (as kernels/flash_fwd.py's): whole tiles, and when
    # causal below the block's first row. 1.08x to 1.34x the one masked loop of round 1 (docs/perf-notes.md,
    # "FP8 forward", round 2).
    lo = (seq_kv // BLOCK_N) * BLOCK_N
    if CAUSAL:
        lo = tl.minimum(lo, (start_m * BLOCK_M // BLOCK_N) * BLOCK_N)
    acc, l_i, m_i = _fp8_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                               offs_m, offs_n, offs_d, 0, lo, seq_kv, scale, BLOCK_N, False, CAUSAL)
    acc, l_i, m_i = _fp8_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                               offs_m, offs_n, offs_d, lo, hi, seq_kv, scale, BLOCK_N, True, CAUSAL)

    out = acc * (tl.load(V_DESCALE + kv_head) / l_i[:, None])
    o_ptrs = (O + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
              + offs_m.to(tl.int64)[:, None] * stride_om + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(offs_m < seq_q)[:, None])
    # natural-log logsumexp of the true scaled scores (m_i, log2 l_i in log2 units)
    tl.store(LSE + off_hz.to(tl.int64) * seq_q + offs_m, (m_i + tl.math.log2(l_i)) * LN2_C, mask=offs_m < seq_q)


def flash_attention_fp8(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, q_descale: torch.Tensor,
                        k_descale: torch.Tensor, v_descale: torch.Tensor, causal: bool = False,
                        sm_scale: float | None = None, out_dtype: torch.dtype = torch.bfloat16,
                        tile: tuple[int, int, int, int] | None = None, return_lse: bool = False,
                        gluon: bool = True):
    """softmax(Q Kᵀ · sm_scale) V for e4m3 BHSD q8, k8, v8 (k8 and v8 may have fewer heads: grouped-query
    attention; any strides, and v8 fastest with its keys contiguous: :func:`quantize_fp8`'s
    ``keys_contiguous``) and their fp32 descales per (batch, head) ((B, H) for q, (B, H_kv) for k and v); the output
    in ``out_dtype`` (bf16 or fp16), and with ``return_lse`` the fp32 (B, H, Nq) logsumexp. ``sm_scale``
    defaults to 1/sqrt(head_dim); ``tile`` (BLOCK_M, BLOCK_N, num_warps, num_stages) overrides :data:`TILES`.

    On an sm_90 GPU, inputs the Gluon kernel takes (V's keys contiguous: kernels.flash_fwd_hopper.fp8_reason)
    run there, warp-specialized so that one warpgroup's exponentials run under the other's matmuls; the rest,
    and ``gluon`` False or ``tile`` given, run this module's Triton kernel. :func:`fp8_path` names which."""
    batch, heads, seq_q, seq_kv, head_dim = check_qkv(q8, k8, v8, dtypes=(FP8,), head_dims=HEAD_DIMS)
    kv_heads = k8.shape[1]
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype {out_dtype} is not supported; allowed: bf16, fp16")
    for name, descale, want in (("q_descale", q_descale, (batch, heads)), ("k_descale", k_descale, (batch, kv_heads)),
                                ("v_descale", v_descale, (batch, kv_heads))):
        if not isinstance(descale, torch.Tensor) or tuple(descale.shape) != want or descale.dtype != torch.float32:
            got = (f"{tuple(descale.shape)} {descale.dtype}" if isinstance(descale, torch.Tensor)
                   else type(descale).__name__)
            raise ValueError(f"{name} must be an fp32 tensor of shape {want} (one descale per batch and head), "
                             f"got {got}")
        if descale.device != q8.device:
            raise ValueError(f"{name} is on '{descale.device}'; it must be on q8's device, '{q8.device}'")
    reason = unsupported_on(q8.device)
    if reason is not None:
        raise ValueError(reason)
    scale = resolve_scale(sm_scale, head_dim)
    descales = tuple(d.contiguous() for d in (q_descale, k_descale, v_descale))
    if gluon and tile is None and flash_fwd_hopper.fp8_reason(q8, k8, v8, causal) is None:
        o, lse = flash_fwd_hopper.hopper_forward(q8, k8, v8, causal, scale, descales=descales, out_dtype=out_dtype)
        return (o, lse) if return_lse else o
    block_m, block_n, warps, stages = tile or TILES[head_dim]
    o = empty_in_layout(q8, out_dtype)  # in q's memory order, as the Gluon kernel writes it
    lse = torch.empty((batch, heads, seq_q), device=q8.device, dtype=torch.float32)
    grid = (triton.cdiv(seq_q, block_m), batch * heads)
    _attn_fwd_fp8[grid](
        q8, k8, v8, o, lse, *descales,
        *q8.stride(), *k8.stride(), *v8.stride(), *o.stride(),
        heads, kv_heads, seq_q, seq_kv, scale * LOG2E,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
        num_warps=warps, num_stages=stages,
    )
    return (o, lse) if return_lse else o


def fp8_path(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, causal: bool = False) -> str:
    """The kernel :func:`flash_attention_fp8` runs these inputs on with its defaults: 'gluon-ws' (the Gluon
    kernel of kernels.flash_fwd_hopper) or 'tiled' (this module's)."""
    return "tiled" if flash_fwd_hopper.fp8_reason(q8, k8, v8, causal) else "gluon-ws"


def attention_fp8_unit_descale(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, causal: bool = False,
                               sm_scale: float | None = None) -> torch.Tensor:
    """:func:`flash_attention_fp8` on e4m3 tensors whose values are what they stand for (descales of one):
    the registry's entry point, fed the profiler's fp8 inputs (profiler.measure.runner.make_inputs)."""
    ones_q = torch.ones(q8.shape[:2], device=q8.device, dtype=torch.float32)
    ones_kv = torch.ones(k8.shape[:2], device=q8.device, dtype=torch.float32)
    return flash_attention_fp8(q8, k8, v8, ones_q, ones_kv, ones_kv, causal=causal, sm_scale=sm_scale)
