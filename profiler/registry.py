"""The one registry of attention implementations, ours, PyTorch's and the user's.

The CLI's ``--impl`` choices, the sweeps and the cost model (through each entry's ``costing``) come
from ``REGISTRY``, and an entry carries everything else about its implementation: its colour in the
charts (profiler.views.style), why its points may sit above a roof (profiler.views.rooflines), the
tile Nsight Compute saw it run with (profiler.nsight.validate) and whether it is a baseline ours are
measured against. Adding an implementation is one entry here, or, from outside this package, :func:`register`:

    @register(name="my_attention", layout="bshd")       # or register(fn, name=...) without the @
    def my_attention(q, k, v, causal=False, sm_scale=None): ...

Every ``fn`` in the registry takes BHSD tensors ``(q, k, v, causal=False, sm_scale=None)`` and
returns o: (batch, heads, seq_q, head_dim); a BSHD function is adapted through strides (no copy).
On the command line ``--impl mypkg.attn:my_attention`` (or ``path/to/file.py:my_attention``)
imports the module and takes that function, or the implementation it registered.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from attention_core.costing import Costing, Tiles
from attention_core.shape import Shape
from kernels import fa4, flash_bwd, flash_bwd_hopper, flash_fwd, flash_fwd_hopper, reference, sdpa, triton_naive
from kernels._checks import dtype_name
from kernels.flash_attention import flash_attention

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LAYOUTS = ("bhsd", "bshd")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # also a valid NVTX range part and trace file name


@dataclass(frozen=True)
class Impl:
    name: str
    fn: Callable[..., torch.Tensor]
    description: str
    costing: Costing  # how profiler.model.cost.cost_of counts its FLOPs and bytes
    supports_backward: bool
    needs_cuda: bool  # False: also runs on a CPU (Triton ones only under TRITON_INTERPRET=1)
    is_triton: bool
    dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES
    head_dims: tuple[int, ...] | None = None  # None: any head_dim
    backward_head_dims: tuple[int, ...] | None = None
    gqa: bool = True  # takes k, v with fewer heads than q (grouped-query attention)
    spec: str = ""  # "module:attr" a user implementation is imported from ("" for ours)
    # (q, k, v, causal) -> the forward path a call takes ('gluon-ws', 'tiled', 'split-kv x8'), for the row's
    # ``path`` column; None for implementations with one path.
    path_of: Callable[..., str] | None = None
    # (q, k, v) -> the backward path a call takes ('gluon-ws', 'tiled'); None: the shape's.
    backward_path_of: Callable[..., str] | None = None
    # The largest relative error against fp32 naive attention a correct run may have; None: the
    # dtype's (kernels.reference.TOLERANCE). Above it the case is recorded as 'wrong'.
    tolerance: float | None = None
    # Its colour in every chart of the dashboard and the report (a name outside the registry, or an
    # entry without one, takes a spare colour by its CRC-32: profiler.views.style.impl_color).
    color: str = ""
    # Why a point of it may sit above the L2 roof, where its costing is known to charge bytes a cache
    # below L2 serves (the roofline's hover says it; profiler.views.rooflines.above_roof_reason).
    above_roof_reason: str = ""
    # (kernel names, grid, shape) -> the (query rows, key columns) tile of the kernel Nsight Compute
    # profiled, read from what ran; None (or a None result): its costing's forward tile
    # (profiler.nsight.validate.kernel_tile).
    kernel_tile: Callable[[str, str, Shape], tuple[int, int] | None] | None = None
    # A production kernel ours are measured against (tritonbench's baseline=True): bench's peers.
    baseline: bool = False
    # (device, head_dim) -> why it cannot run there beyond what the fields above say (an optional
    # package missing, a GPU generation it has no kernel for), or None. Asked first, so a missing
    # package is named on any device.
    unsupported_here: Callable[[torch.device, int], str | None] | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def fused(self) -> bool:
        """One kernel for the whole attention, or separate steps through HBM."""
        return self.costing.fused

    @property
    def steps(self) -> tuple[str, ...]:
        """The steps timed one by one; ("total",) when the implementation is timed only whole."""
        return reference.STEPS if self.costing.kind == "stepwise" else ("total",)

    @property
    def row_steps(self) -> tuple[str, ...]:
        """The ``step`` of each row a capture records for one case: "total", then the steps."""
        return tuple(dict.fromkeys(("total", *self.steps)))

    def unsupported_reason(
        self, device: torch.device | str, dtype: torch.dtype, head_dim: int, backward: bool = False,
        grouped: bool = False,
    ) -> str | None:
        """Why this implementation cannot run this case here, or None when it can (``grouped``: K and
        V have fewer heads than Q)."""
        device_type = torch.device(device).type
        here = self.unsupported_here(torch.device(device), head_dim) if self.unsupported_here else None
        if here:
            return here
        if self.needs_cuda and device_type != "cuda":
            return f"{self.name} needs a CUDA device"
        if self.is_triton and device_type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return f"{self.name} is a Triton kernel: it needs a CUDA device (or TRITON_INTERPRET=1)"
        if dtype not in self.dtypes:
            return f"{self.name} does not take {dtype_name(dtype)}"
        if self.head_dims is not None and head_dim not in self.head_dims:
            return f"{self.name} takes head_dim in {self.head_dims}, not {head_dim}"
        if grouped and not self.gqa:
            return f"{self.name} does not take fewer K/V heads than query heads (register it with gqa=True if it does)"
        if backward:
            if not self.supports_backward:
                return f"{self.name} has no backward pass"
            if self.backward_head_dims is not None and head_dim not in self.backward_head_dims:
                return f"{self.name} backward takes head_dim in {self.backward_head_dims}, not {head_dim}"
        return None


def _flash_tiles(head_dim: int, dtype: str) -> Tiles:
    """Our kernels' default tiles for this problem (the first autotune candidate of each kernel)."""
    if head_dim not in flash_fwd.HEAD_DIMS:
        return Tiles(None)
    backward = flash_bwd.backward_tiles(head_dim, dtype) if head_dim in flash_bwd.HEAD_DIMS else (None, None)
    return Tiles(flash_fwd.forward_tile(head_dim, dtype), *backward)


def _fa2_tiles(head_dim: int, dtype: str) -> Tiles:
    """FlashAttention-2's forward tile (kBlockM, kBlockN) from the Flash_fwd_kernel_traits in the
    names of the kernels Nsight Compute profiled on the H200 (reports/validate-h200): 128 × 128 at
    head_dim 64, 128 × 64 at 128. Other head_dims and its backward (one kernel with atomic dQ, not
    our two) are not modelled."""
    return Tiles({64: (128, 128), 128: (128, 64)}.get(head_dim))


def _cudnn_tiles(head_dim: int, dtype: str) -> Tiles:
    """cuDNN's sm90 forward: 128 × 128 (two 64-row consumer warpgroups; the H200 counters of
    reports/validate-h200 agree at head_dim 64 and 128). Its backward is not modelled."""
    return Tiles((128, 128) if head_dim in (64, 128) else None)


def _fa4_tiles(head_dim: int, dtype: str) -> Tiles:
    """FlashAttention-4's sm_90 forward tile (tile_m, tile_n): ``_tile_size_fwd_sm90`` in
    flash_attn/cute/interface.py (flash-attn-4 4.0.0b36, and Dao-AILab/flash-attention 0251105a):
    192 × 128 to head_dim 64, 128 × 128 to 128, 128 × 112 to 192 (head_dim_v > 128, as ours), 128 × 80
    to 256. From 72 to 96 it is 192 × 144 without a causal mask and 192 × 128 with one, which a
    costing's tiles cannot tell apart: None there. Grouped-query heads share a tile's rows in FA4
    (PackGQA: the query rows of a K/V head's group stacked), where the model tiles each query head
    alone: it charges the same K/V re-reads where Nq fills whole tiles without a causal mask, up to
    the group size times more for a short Nq (decode), and other diagonal tiles with a causal mask
    (at 192 × 128, group 4, Nq 768: 64 key tiles a K/V head against FA4's 58). Its backward is one
    kernel (dK, dV per key tile, dQ added atomically in fp32; ``_tile_size_bwd_sm90``: 128 × 128 to
    head_dim 64, 64 × 128 to 96, 80 × 128 or causal 64 × 128 to 128), not our two, so it is not
    modelled, as FA2's is not. On sm_100 FA4 runs other tiles; these are sm_90's."""
    if head_dim <= 64:
        return Tiles((192, 128))
    if head_dim <= 96:
        return Tiles(None)
    return Tiles((128, 128) if head_dim <= 128 else (128, 112) if head_dim <= 192 else (128, 80))


def _flash_kernel_tile(kernel: str, grid: str, shape: Shape) -> tuple[int, int] | None:
    """Our forward's tile from what ran: the sm_90 Gluon kernel (``_attn_fwd_hopper``, a 1-D grid of
    tiles or of SMs) runs its costing's fast tile; the tiled kernel launches cdiv(Nq, BLOCK_M) programs
    along x, and its BLOCK_N divides BLOCK_M, so the query tile alone decides."""
    gluon = flash_fwd_hopper.forward_tile(shape.head_dim, shape.dtype)
    if "_attn_fwd_hopper" in kernel and gluon is not None:
        return gluon
    programs = int(str(grid).strip("()").split(",")[0])
    rows = -(-shape.seq_q // programs)
    return rows, rows


def _fa2_kernel_tile(kernel: str, grid: str, shape: Shape) -> tuple[int, int] | None:
    """FlashAttention-2's (kBlockM, kBlockN), the 2nd and 3rd of its kernel traits in the kernel's
    name (Flash_fwd_kernel_traits<head_dim, kBlockM, kBlockN, ...>), its split-KV kernel's too."""
    match = re.search(r"Flash_fwd_kernel_traits<\d+, (\d+), (\d+)", kernel)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _cudnn_kernel_tile(kernel: str, grid: str, shape: Shape) -> tuple[int, int] | None:
    """cuDNN's sm80 kernel (which it runs for decode) names its (rows, keys, head_dim) tile:
    ``..._wmma_f16_knob_35_16x128x128_...`` is 16 query rows by 128 keys; its sm90 kernels do not
    (None: the costing's 128 × 128)."""
    if "sdpa_sm80" not in kernel:
        return None
    match = re.search(r"_(\d+)x(\d+)x\d+_", kernel[kernel.index("sdpa_sm80"):])
    return (int(match.group(1)), int(match.group(2))) if match else None


# Each entry's colour is one of matplotlib's tab10 (its default colour cycle), one per entry; fa4's is
# tab20b's dark green (tab10's last two are profiler.views.style's spare colours).
REGISTRY: dict[str, Impl] = {
    impl.name: impl
    for impl in [
        Impl(
            "naive", reference.naive_attention,
            "PyTorch, four steps through HBM (S = QKᵀ, scale/mask, softmax, PV)",
            Costing("stepwise"), supports_backward=True, needs_cuda=False, is_triton=False, color="#d62728",
        ),
        Impl(
            "triton_naive", triton_naive.triton_naive_attention,
            "Triton, one program per query row, online softmax, no tensor cores",
            Costing("per_row", writes_lse=False, source="kernels/triton_naive.py: writes O only"),
            supports_backward=False, needs_cuda=False, is_triton=True, head_dims=triton_naive.HEAD_DIMS,
            color="#ff7f0e",
            above_roof_reason="its per-row costing charges K and V once per query row (profiler.model.fused."
                              "per_row_bytes), but the programs of neighbouring rows of one head run side by side "
                              "and read the same K and V blocks, so L1 serves most of those re-reads and L2 sees "
                              "fewer bytes than charged",
        ),
        Impl(
            "triton_flash", flash_attention,
            "Triton FlashAttention-2 (ours): tiled, online softmax, recomputing backward",
            Costing("fused", _flash_tiles, source="the first autotune candidate of kernels/flash_fwd.py and "
                    "flash_bwd.py; an autotuned run may pick another (ATTN_AUTOTUNE=0 runs this one); decode "
                    "shapes take the split-KV path of kernels/flash_decode.py (attention_core.split_kv.plan); "
                    "on sm_90 the forward runs the Gluon kernel of kernels/flash_fwd_hopper.py and the backward the "
                    "one-pass Gluon kernel of kernels/flash_bwd_hopper.py (path gluon-ws)",
                    split_kv=True, fast_path="gluon-ws", fast_fwd_tile=flash_fwd_hopper.forward_tile,
                    fast_bwd_tile=flash_bwd_hopper.backward_tile),
            supports_backward=True, needs_cuda=False, is_triton=True,
            head_dims=flash_fwd.HEAD_DIMS, backward_head_dims=flash_bwd.HEAD_DIMS, path_of=flash_fwd.forward_path,
            backward_path_of=flash_bwd.backward_path,
            color="#1f77b4", kernel_tile=_flash_kernel_tile,
        ),
        Impl(
            "sdpa_flash", sdpa.sdpa_flash, "PyTorch SDPA, FlashAttention-2 backend",
            Costing("fused", _fa2_tiles, source="Flash_fwd_kernel_traits in the profiled kernel names"),
            supports_backward=True, needs_cuda=False, is_triton=False, color="#2ca02c", kernel_tile=_fa2_kernel_tile,
            baseline=True,
        ),
        Impl(
            "sdpa_efficient", sdpa.sdpa_efficient, "PyTorch SDPA, memory-efficient (xFormers) backend",
            Costing("fused", source="tiles not modelled"),
            supports_backward=True, needs_cuda=True, is_triton=False, color="#9467bd",
        ),
        Impl(
            "sdpa_cudnn", sdpa.sdpa_cudnn, "PyTorch SDPA, cuDNN backend",
            Costing("fused", _cudnn_tiles, source="H200 counters (reports/validate-h200)"),
            supports_backward=True, needs_cuda=True, is_triton=False, dtypes=(torch.float16, torch.bfloat16),
            color="#17becf", baseline=True, kernel_tile=_cudnn_kernel_tile,
        ),
        Impl(
            "sdpa_math", sdpa.sdpa_math, "PyTorch SDPA, math backend (unfused reference)",
            Costing("unfused", repeats_kv=True), supports_backward=True, needs_cuda=False, is_triton=False,
            color="#8c564b",
        ),
        Impl(
            "sdpa_repeat_kv", sdpa.sdpa_repeat_kv,
            "PyTorch SDPA (its own backend choice) after repeat_interleave of K and V: GQA before enable_gqa",
            Costing("fused", repeats_kv=True, source="tiles not modelled: SDPA picks the backend"),
            supports_backward=True, needs_cuda=False, is_triton=False, color="#e377c2",
            kernel_tile=_fa2_kernel_tile,  # SDPA's own backend choice: FlashAttention-2's kernel where it picks it
        ),
        Impl(
            "fa4", fa4.fa4_attention,
            "FlashAttention-4 (flash-attn-4, CuTe DSL) for Hopper and Blackwell; causal only at Nq == Nkv",
            # writes_lse as a training forward: without a gradient FA4 skips the logsumexp (4 bytes a query row).
            Costing("fused", _fa4_tiles, source="FA4's sm_90 forward tile (_tile_size_fwd_sm90, flash_attn/cute/"
                    "interface.py of flash-attn-4 4.0.0b36); its one-kernel backward not modelled"),
            supports_backward=True, needs_cuda=True, is_triton=False, dtypes=fa4.DTYPES, head_dims=fa4.HEAD_DIMS,
            backward_head_dims=fa4.BACKWARD_HEAD_DIMS, color="#637939", unsupported_here=fa4.unsupported_reason,
        ),
    ]
}
BUILTIN = tuple(REGISTRY)


def _bshd_adapter(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A BHSD function from a BSHD one: inputs and output are transposed views, nothing is copied."""

    def bhsd(q, k, v, causal=False, sm_scale=None):
        o = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, sm_scale=sm_scale)
        return o.transpose(1, 2)

    bhsd.__wrapped__ = fn
    return bhsd


def _origin(target) -> tuple[str, str | None, int]:
    """Where a function (or a callable object's class) is defined: the same definition imported
    twice (by module name and by file path, or reloaded) registers again without a clash."""
    if isinstance(target, Impl):
        target = getattr(target.fn, "__wrapped__", target.fn)
    defined = target if inspect.isfunction(target) or inspect.isclass(target) else type(target)
    try:
        source = inspect.getsourcefile(defined)
    except TypeError:
        source = None
    line = defined.__code__.co_firstlineno if inspect.isfunction(defined) else 0
    return defined.__qualname__, source and os.path.realpath(source), line


def register(fn: Callable[..., torch.Tensor] | None = None, *, name: str | None = None, layout: str = "bhsd",
             description: str = "", costing: Costing | None = None, supports_backward: bool = True,
             needs_cuda: bool = False, is_triton: bool = False, dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES,
             head_dims: tuple[int, ...] | None = None, gqa: bool = False, spec: str = "", replace: bool = False,
             tolerance: float | None = None):
    """Add an attention function to REGISTRY; usable as ``register(fn, ...)`` or as a decorator
    ``@register(...)`` (the function is returned unchanged, with ``__attn_impl__`` set).

    ``fn(q, k, v, causal=False, sm_scale=None)`` returns o; ``layout`` says whether its tensors are
    BHSD (batch, heads, seq, head_dim) or BSHD (batch, seq, heads, head_dim). ``costing`` defaults
    to a fused kernel of unknown tiles: FLOPs and compulsory bytes as for FlashAttention, no tile
    bytes. ``gqa`` says the function takes k and v with fewer heads than q (query head h reading
    K/V head h // (heads // kv_heads)); without it, grouped-query cases are recorded as unsupported.
    ``tolerance`` is the largest relative error against fp32 naive attention that a correct run
    may have (default: the dtype's, kernels.reference.TOLERANCE); state one for an approximate
    kernel (e.g. fp8 or sparse), or its cases are recorded as 'wrong' and left off every chart.
    Names are letters, digits and underscores; a built-in name is refused, and a name taken
    by another user implementation needs ``replace=True``.
    """
    if fn is None:
        return lambda f: register(f, name=name, layout=layout, description=description, costing=costing,
                                  supports_backward=supports_backward, needs_cuda=needs_cuda, is_triton=is_triton,
                                  dtypes=dtypes, head_dims=head_dims, gqa=gqa, spec=spec, replace=replace,
                                  tolerance=tolerance)
    if not callable(fn):
        raise TypeError(f"register needs a callable, got {type(fn).__name__}")
    name = name or getattr(fn, "__name__", "")
    if not NAME.match(name):
        raise ValueError(f"implementation name '{name}' must be letters, digits and underscores, not starting "
                         "with a digit (it names NVTX ranges and trace files)")
    if name in BUILTIN or (name in REGISTRY and not replace and _origin(REGISTRY[name]) != _origin(fn)):
        raise ValueError(f"implementation name '{name}' is taken; choose another"
                         + ("" if name in BUILTIN else " or pass replace=True"))
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and 0 < tolerance < float("inf")):
        raise ValueError(f"tolerance {tolerance!r} must be a positive finite number (a relative error) or None")
    if layout not in LAYOUTS:
        raise ValueError(f"layout '{layout}' is not one of {', '.join(LAYOUTS)}")
    impl = Impl(name, _bshd_adapter(fn) if layout == "bshd" else fn,
                description or (fn.__doc__ or "").strip().split("\n")[0] or f"user implementation {name}",
                costing or Costing("fused", source="user implementation: tiles not declared"),
                supports_backward=supports_backward, needs_cuda=needs_cuda, is_triton=is_triton, dtypes=dtypes,
                head_dims=head_dims, gqa=gqa, spec=spec, extra={"layout": layout}, tolerance=tolerance)
    REGISTRY[name] = impl
    try:
        fn.__attn_impl__ = impl
    except (AttributeError, TypeError):  # a builtin or a bound method: the registry still has it
        pass
    return fn


def _import(module: str):
    """A module by dotted name (the current directory first, as ``python -m`` does) or by file path."""
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise ValueError(f"no file '{module}'")
        mod_name = f"attn_user_{re.sub(r'[^0-9A-Za-z_]', '_', str(path.resolve()))}"
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        loader = importlib.util.spec_from_file_location(mod_name, path)
        mod = importlib.util.module_from_spec(loader)
        sys.modules[mod_name] = mod
        loader.loader.exec_module(mod)
        return mod
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(module)


def get_impl(name: str) -> Impl:
    """A registered implementation by name, or a user's by ``module:attr`` / ``file.py:attr``: the
    attribute may be an :class:`Impl`, a function registered with :func:`register`, or any function
    with our BHSD signature (registered under its own name, with the default costing)."""
    if name in REGISTRY:
        return REGISTRY[name]
    if ":" not in name:
        raise ValueError(f"unknown implementation '{name}'; choose from: {', '.join(REGISTRY)}, "
                         "or name your own as module:function")
    module, _, attr = name.rpartition(":")
    try:
        loaded = _import(module)
    except Exception as err:  # whatever the user's module raises on import is reported, not re-raised
        raise ValueError(f"cannot load implementation '{name}': {type(err).__name__}: {err}") from None
    if not hasattr(loaded, attr):
        public = sorted(n for n, v in vars(loaded).items() if callable(v) and not n.startswith("_"))
        raise ValueError(f"cannot load implementation '{name}': '{module}' has no '{attr}'"
                         + (f" (it has: {', '.join(public[:12])})" if public else ""))
    target = getattr(loaded, attr)
    if isinstance(target, Impl):
        impl = target
    elif isinstance(getattr(target, "__attn_impl__", None), Impl):
        impl = target.__attn_impl__
    elif callable(target):
        register(target, name=attr, spec=name, replace=True)
        impl = REGISTRY[attr]
    else:
        raise ValueError(f"'{name}' is a {type(target).__name__}, not an attention function")
    if not impl.spec:  # remember where it came from: ncu's driver runs in another process
        impl = replace(impl, spec=name)
    REGISTRY[impl.name] = impl
    return impl


def costing_for(impl: str, meta: dict | None = None) -> Costing:
    """The costing of a stored row's implementation: what the capture recorded for a user
    implementation (meta.json's ``user_impls``), else the registry's entry."""
    stored = ((meta or {}).get("user_impls") or {}).get(impl)
    if stored is not None:
        return Costing.from_meta(stored["costing"])
    if impl not in REGISTRY:
        raise ValueError(f"implementation '{impl}' is neither in the registry nor described in the capture's "
                         "meta.json (user_impls)")
    return REGISTRY[impl].costing
