"""What the Gluon Hopper kernels share: the checks that pick them, their TMA descriptors and shared layouts,
and the small Gluon functions both the forward (kernels/flash_fwd_hopper.py) and the backward
(kernels/flash_bwd_hopper.py) call: the ring's mbarrier phase, the tile order, a tile seen as a TMA box, and the
clock marks a probe's compile writes (:func:`clock_mark`)."""

from __future__ import annotations

import functools
import os
import types

import torch
import triton

from kernels._autotune import INTERPRET
from kernels._checks import cuda_properties

try:  # Gluon's Hopper API as triton 3.6 ships it; other versions may lack or rename parts of it
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    GLUON_IMPORT_ERROR = None
    # Later Gluon renamed what these kernels call (triton 3.9: gl.thread_barrier is gl.barrier, and
    # tma.async_copy_global_to_shared raises "removed; call async_load"), so they would not compile.
    if not hasattr(gl, "thread_barrier"):
        GLUON_IMPORT_ERROR = (f"triton {triton.__version__}'s Gluon API differs from triton 3.6's, which the "
                              "Gluon kernels are written and checked for (it has no gl.thread_barrier)")
except ImportError as error:  # pragma: no cover - depends on the installed triton
    GLUON_IMPORT_ERROR = f"triton {triton.__version__} has no Gluon Hopper API ({error})"
    # The kernels are still defined (their bodies are only read when compiled); sm90_reason returns
    # this error, so nothing launches them.
    gluon = types.SimpleNamespace(jit=lambda fn=None, **options: fn if fn is not None else (lambda f: f))


HALF_DTYPES = (torch.float16, torch.bfloat16)
_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8 (e4m3)"}


def sm90_reason(kernel: str, head_dims: tuple[int, ...], dtypes: tuple[torch.dtype, ...] = HALF_DTYPES,
                **tensors: torch.Tensor) -> str | None:
    """Why a Gluon sm_90 kernel (``kernel``: 'forward', 'backward', 'fp8 forward') cannot take these
    tensors (q first), or None when it can: Gluon present and on, an sm_90 GPU, q in one of ``dtypes``,
    a head_dim it has, and every tensor in a layout its TMA descriptor can read (:func:`tma_layout_reason`).

    The answer depends on each tensor's device, dtype, shape, strides and base address modulo 16
    only, so it is kept per such layout: a model calls attention with the same few layouts every
    step, and the checks cost more host time than the key (about 25 us a call on the H100 machine)."""
    key = (kernel, head_dims, dtypes, os.environ.get("ATTN_GLUON", "1"),
           *((name, t.device, t.dtype, t.shape, t.stride(), t.data_ptr() % 16) for name, t in tensors.items()))
    reason = _SM90_REASONS.get(key, _UNKNOWN)
    if reason is _UNKNOWN:
        if len(_SM90_REASONS) >= 4096:
            _SM90_REASONS.clear()
        reason = _SM90_REASONS[key] = _sm90_reason(kernel, head_dims, dtypes, tensors)
    return reason


_SM90_REASONS: dict = {}
_UNKNOWN = object()


def _sm90_reason(kernel: str, head_dims: tuple[int, ...], dtypes: tuple[torch.dtype, ...],
                 tensors: dict[str, torch.Tensor]) -> str | None:
    q = next(iter(tensors.values()))
    if GLUON_IMPORT_ERROR is not None:
        return GLUON_IMPORT_ERROR
    if INTERPRET or os.environ.get("ATTN_GLUON", "1") == "0":
        return "Gluon kernels are off (TRITON_INTERPRET=1 or ATTN_GLUON=0)"
    if not q.is_cuda:
        return f"the Gluon {kernel} needs an sm_90 GPU (H100/H200)"
    props = cuda_properties(q.device.index)
    if (props.major, props.minor) != (9, 0):
        return f"the Gluon {kernel} needs an sm_90 GPU (H100/H200)"
    if q.dtype not in dtypes:
        allowed = " or ".join(_DTYPE_NAMES[d] for d in dtypes)
        return f"the Gluon {kernel} takes {allowed}, not {q.dtype}"
    if q.shape[-1] not in head_dims:
        return f"the Gluon {kernel} takes head_dim in {head_dims}, not {q.shape[-1]}"
    for name, t in tensors.items():
        reason = tma_layout_reason(t)
        if reason is not None:
            return f"the Gluon {kernel}'s TMA descriptors cannot read {name}: {reason}"
    return None


def tma_layout_reason(t: torch.Tensor) -> str | None:
    """Why a 4-D BHSD tensor cannot back a TMA descriptor on its own strides, or None when it can.

    A tensor map (CUDA driver API, cuTensorMapEncodeTiled) needs a 16-byte aligned base address, a
    unit-stride innermost dimension and every other stride a multiple of 16 bytes. Contiguous BHSD,
    the (batch, seq, heads, head_dim) storage that transformers and flash-attn hand over as a BHSD
    view, and the q, k, v slices of a packed QKV projection all qualify at head_dim 64 and 128. A
    dimension of extent 1 is never stepped along, so its stride does not count (see tma_strides)."""
    strides, shape, size = t.stride(), t.shape, t.element_size()
    if strides[-1] != 1:
        return f"its head_dim is not unit-stride (strides {tuple(strides)})"
    for stride, extent in zip(strides[:-1], shape[:-1]):
        if extent > 1 and stride == 0:
            return f"it is expanded (a stride of 0: strides {tuple(strides)})"
        if extent > 1 and (stride * size) % 16:
            return f"stride {stride} x {size} bytes is not a multiple of 16 bytes (strides {tuple(strides)})"
    if t.data_ptr() % 16:
        return f"its address is not 16-byte aligned (offset {t.data_ptr() % 16} bytes)"
    return None


def tma_strides(t: torch.Tensor) -> list[int]:
    """t's strides for a tensor map, a dimension of extent 1 given its next dimension's span instead
    (any multiple of 16 bytes does: its only index is 0)."""
    strides = list(t.stride())
    for dim in range(t.dim() - 2, -1, -1):
        if t.shape[dim] == 1:
            strides[dim] = strides[dim + 1] * t.shape[dim + 1]
    return strides


def tensor_descriptor(t: torch.Tensor, rows: int, cols: int | None = None):
    """A 4-D TMA descriptor of BHSD ``t`` on its own strides whose tile is ``rows`` consecutive
    positions of one (batch, head) by ``cols`` of the last dimension (default: all of it, the whole
    head_dim): a tile never crosses into another sequence, batch or head (TMA fills positions past
    the sequence's end with zeros)."""
    block = [1, 1, rows, cols or t.shape[-1]]
    return TensorDescriptor(t, list(t.shape), tma_strides(t), block, shared_layout(tuple(block), t.dtype))


@functools.cache
def shared_layout(block: tuple[int, ...], dtype: torch.dtype):
    """NVMMASharedLayout.get_default_for, once per block shape and dtype: it costs tens of microseconds
    a call, which a decode step or a short prefill pays on the host before every launch."""
    element = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32,
               torch.float8_e4m3fn: gl.float8e4nv}[dtype]
    return gl.NVMMASharedLayout.get_default_for(list(block), element)


def tile_layout(rows: int, head_dim: int, dtype: torch.dtype):
    """The shared-memory layout of a 2-D (rows, head_dim) tile, as the wgmma reads it."""
    return shared_layout((rows, head_dim), dtype)


@gluon.jit
def ring_phase(i, STAGES: gl.constexpr):
    """Parity of the mbarrier phase that use i of a ring of STAGES buffers completes: use i takes slot
    i % STAGES, whose barrier completes one phase per pass round the ring. A consumer waits for this
    phase (use i has landed); a producer waits for ``ring_phase(i) ^ 1``, the release of the slot's
    previous use, which a fresh mbarrier counts as complete, so the first pass goes straight through.
    Each consumer's Q buffer and its ping-pong turn are rings of one (STAGES = 1)."""
    return (i // STAGES) & 1


@gluon.jit
def swizzled_tile(t, n_blocks, bh, section, snake):
    """Tile t as (batch·head, rank), rank 0 its longest block: heads in sections of ``section``,
    each section rank by rank and head by head within a rank, every other section reversed when
    ``snake`` (kernels.tile_schedule.tile is the reference and says why)."""
    per_section = section * n_blocks
    sec = t // per_section
    r = t % per_section
    heads_here = gl.minimum(section, bh - sec * section)  # the last section may be short
    rank = r // heads_here
    flip = snake * (sec % 2)
    return sec * section + r % heads_here, rank + flip * (n_blocks - 1 - 2 * rank)


@gluon.jit
def as_box(smem, desc):
    """A 2-D shared-memory tile seen as ``desc``'s 4-D box (1, 1, rows, head_dim), for a TMA copy:
    the leading dimensions of extent 1 leave the bytes and their swizzle as they are. ``smem`` must
    be a whole tile, not a slice of a tile's rows: with rows wider than the 128-byte swizzle (head_dim
    128 in 16 bits) a tile lies in memory as column halves, and a row slice is not one contiguous box."""
    return smem._reinterpret(desc.dtype, desc.block_type.shape, desc.layout)


# A clock buffer holds, per tile a program takes (a query tile in the forward, a key block in the backward), per warp
# role (each consumer, then the loader), CLOCK_EVENTS int64 marks: what each event is, kernels/flash_fwd_hopper.py says
# above hopper_forward and kernels/flash_bwd_hopper.py above its loader partition. Probes pass one
# (scripts/perf_experiments/gluon_bwd_clock.py, gluon_fwd_clock.py); elsewhere CLOCK is a constexpr None, and the
# kernel compiles to the PTX it has without marks.
CLOCK_EVENTS = 6


@gluon.jit
def clock_note(CLOCK, t, who, event, value, NUM_WG: gl.constexpr):
    """``value`` into event ``event`` of warp role ``who`` (a consumer, or NUM_WG for the loader) of tile t, where
    there is a CLOCK buffer (a probe's compile only; else CLOCK is a constexpr None and nothing is written)."""
    if CLOCK is not None:
        gl.store(CLOCK + (t.to(gl.int64) * (NUM_WG + 1) + who) * 6 + event, value)  # 6: CLOCK_EVENTS


@gluon.jit
def clock_read(register: gl.constexpr, CLOCK):
    """A special register (``%clock64``, ``%globaltimer`` or ``%smid``) as an int64 where there is a CLOCK buffer
    (else 0)."""
    value = 0
    if CLOCK is not None:
        if register == "%smid":
            value = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=False,
                                              pack=1).to(gl.int64)
        else:
            value = gl.inline_asm_elementwise("mov.u64 $0, " + register + ";", "=l", [], dtype=gl.int64,
                                              is_pure=False, pack=1)
    return value


@gluon.jit
def clock_mark(CLOCK, t, who, event, NUM_WG: gl.constexpr):
    """``%clock64`` into event ``event`` of ``who`` for tile t (:func:`clock_note`)."""
    clock_note(CLOCK, t, who, event, clock_read("%clock64", CLOCK), NUM_WG)


def check_clock(clock: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> None:
    """Raise where a probe's ``clock`` buffer is not the contiguous int64 tensor of ``shape`` on ``device`` that
    the kernel writes."""
    if (clock.dtype != torch.int64 or tuple(clock.shape) != shape or not clock.is_contiguous()
            or clock.device != device):
        raise ValueError(f"clock is a {clock.dtype} tensor of {tuple(clock.shape)} on {clock.device}; these inputs "
                         f"need a contiguous torch.int64 one of {shape} on {device}")


# 2^f for f in [0, 1] as 1 + f·(c1 + f·(c2 + f·c3)): the cubic through 2^0 = 1 of least maximum relative error,
# 8.6e-5 (under half an fp16 ulp, 4.9e-4, and a bf16 one's 3.9e-3), fitted by Lawson's iteratively reweighted least
# squares over 20,001 points of [0, 1] (C. L. Lawson, "Contributions to the theory of linear least maximum
# approximation", 1961; tests/test_gluon_dispatch.py fits it again and checks these figures).
EXP2_CUBIC = (0.69511682, 0.22764484, 0.07706718)
EXP2_FMA_EVERY = (2, 4, 8)  # the packs exp2_fma_asm is built for


def _f32_hex(x: float) -> str:
    """``x`` rounded to fp32 as a PTX float literal (0f + its 8 hex digits)."""
    bits = torch.tensor(x, dtype=torch.float32).view(torch.int32).item()
    return "0f" + bits.to_bytes(4, "big", signed=True).hex().upper()


def exp2_fma_asm(every: int) -> tuple[str, str]:
    """(asm, constraints) for ``gl.inline_asm_elementwise(..., pack=every)``: 2^x of ``every`` fp32 inputs x <= 0
    (-inf gives 0), the first on the FMA pipe and the others by ``ex2.approx.ftz.f32`` (MUFU.EX2, which gl.exp2
    compiles to). An SM of sm_90 runs 16 MUFU.EX2 a cycle against 128 FFMA (CUDA C++ Programming Guide,
    "Arithmetic Instructions", throughput table, compute capability 9.0), so one exponential of ``every`` leaves
    the SFU for nine FMA-pipe and integer instructions: Cody and Waite's split 2^x = 2^⌊x⌋ · 2^(x - ⌊x⌋) (W. J. Cody
    and W. Waite, "Software Manual for the Elementary Functions", 1980), ⌊x⌋ rounded down by adding 1.5·2^23 toward
    -inf (its integer lands in the sum's low mantissa bits), 2^(x - ⌊x⌋) by :data:`EXP2_CUBIC`, and 2^⌊x⌋ by adding
    ⌊x⌋ to that result's exponent field. x is first clamped at -127, where the sum is exactly 0."""
    if every not in EXP2_FMA_EVERY:
        raise ValueError(f"exp2_fma_asm packs {EXP2_FMA_EVERY} inputs, not {every}")
    c1, c2, c3 = (_f32_hex(c) for c in EXP2_CUBIC)
    one, magic, low = _f32_hex(1.0), _f32_hex(1.5 * 2 ** 23), _f32_hex(-127.0)
    cubic = (f"max.ftz.f32 x, ${every}, {low}; fma.rm.ftz.f32 r, x, {one}, {magic}; sub.ftz.f32 j, r, {magic}; "
             f"sub.ftz.f32 f, x, j; fma.rn.ftz.f32 p, f, {c3}, {c2}; fma.rn.ftz.f32 p, p, f, {c1}; "
             f"fma.rn.ftz.f32 p, p, f, {one}; shl.b32 r, r, 23; add.s32 $0, p, r;")
    rest = " ".join(f"ex2.approx.ftz.f32 ${i}, ${every + i};" for i in range(1, every))
    return "{ .reg .b32 x, r, j, f, p; " + cubic + " " + rest + " }", ",".join(["=r"] * every + ["r"] * every)


# exp2_fma_asm's packs as the constexprs exp2_fma reads (a Gluon function reads module globals only as constexprs)
_EXP2_FMA_2, _EXP2_FMA_2_C = (triton.language.constexpr(part) for part in exp2_fma_asm(2))
_EXP2_FMA_4, _EXP2_FMA_4_C = (triton.language.constexpr(part) for part in exp2_fma_asm(4))
_EXP2_FMA_8, _EXP2_FMA_8_C = (triton.language.constexpr(part) for part in exp2_fma_asm(8))


@gluon.jit
def exp2_fma(x, EVERY: gl.constexpr):
    """2^x of an fp32 tensor x <= 0: one in ``EVERY`` (2, 4 or 8) of each thread's elements on the FMA pipe
    (:func:`exp2_fma_asm`), the rest and every one where ``EVERY`` is 0 by gl.exp2."""
    if EVERY == 2:
        p = gl.inline_asm_elementwise(_EXP2_FMA_2, _EXP2_FMA_2_C, [x], dtype=gl.float32, is_pure=True, pack=2)
    elif EVERY == 4:
        p = gl.inline_asm_elementwise(_EXP2_FMA_4, _EXP2_FMA_4_C, [x], dtype=gl.float32, is_pure=True, pack=4)
    elif EVERY == 8:
        p = gl.inline_asm_elementwise(_EXP2_FMA_8, _EXP2_FMA_8_C, [x], dtype=gl.float32, is_pure=True, pack=8)
    else:
        p = gl.exp2(x)
    return p
