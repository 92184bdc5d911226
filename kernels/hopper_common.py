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
