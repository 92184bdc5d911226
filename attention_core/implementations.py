"""Every attention implementation by name, ours and PyTorch's, as torch-free metadata.

An entry says everything about its implementation: how the cost model counts it (``costing``), its
colour in the charts (profiler.views.style), why its points may sit above a roof
(profiler.views.rooflines), the tiles and grouped-query packing Nsight Compute saw its kernels run
with (profiler.nsight.validate), whether it is the baseline speedups are measured against, which
default ``--impl`` lists it is in (bench on a GPU and on a CPU, validate and its Nsight Compute
driver: :func:`default_impls`) and which public function ``observe`` intercepts as it
(profiler.observer.hooks). Adding an implementation is one entry in :data:`REGISTRY` (a user's own:
profiler.registry.register).

The functions an entry runs are named as ``"kernels.module:function"`` and imported on their first
call (:class:`Lazy`), so the dashboard, the report and the cost model read the registry without
loading torch, triton or any kernel. Every ``fn`` takes BHSD tensors ``(q, k, v, causal=False,
sm_scale=None)`` and returns o: (batch, heads, seq_q, head_dim). Dtypes are named as in
attention_core.shape ("fp16", "bf16", "fp32", and "fp8" for e4m3 inputs, whose output is bf16).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from attention_core.costing import Costing, Tiles
from attention_core.shape import NAIVE_STEPS, Shape

FLOAT_DTYPES = ("fp16", "bf16", "fp32")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # also a valid NVTX range part and trace file name

# The default --impl lists an entry may be in (Impl.defaults): bench on a GPU, bench on a CPU, and
# validate (whose Nsight Compute driver, profiler.nsight.ncu_driver, profiles the same list).
BENCH, BENCH_CPU, VALIDATE = "bench", "bench_cpu", "validate"
DEFAULT_LISTS = (BENCH, BENCH_CPU, VALIDATE)
# How an intercepted function takes its arguments (Impl.observes_signature; profiler.observer.hooks
# reads each): "bhsd" as every registry fn does, "flash_attn" as flash_attn_func does (BSHD,
# causal=, softmax_scale=), "fp8" as kernels.flash_fwd_fp8.flash_attention_fp8 does (BHSD e4m3 q, k, v, then
# their three descales).
SIGNATURES = ("bhsd", "flash_attn", "fp8")
# The attribute profiler.observer.hooks sets on the wrapper it binds in place of an intercepted function.
OBSERVED_WRAPPER = "__attention_roofline_wrapped__"


class Lazy:
    """A function named ``"module:attr"``, imported on its first call (or :meth:`bound`): an entry names
    its kernel without importing it. Where an observation runs (profiler.observer.hooks) and has bound
    its wrapper in the function's place, the function itself is taken, as an import before the
    observation would have."""

    __slots__ = ("spec", "_target")

    def __init__(self, spec: str):
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ValueError(f"'{spec}' does not name a function as module:attr")
        self.spec = spec
        self._target = None

    def bound(self) -> Callable:
        if self._target is None:
            module, _, attr = self.spec.partition(":")
            target = getattr(importlib.import_module(module), attr)
            while getattr(target, OBSERVED_WRAPPER, False):
                target = target.__wrapped__
            self._target = target
        return self._target

    def __call__(self, *args, **kwargs):
        return self.bound()(*args, **kwargs)

    def __eq__(self, other) -> bool:
        return isinstance(other, Lazy) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash(self.spec)

    def __repr__(self) -> str:
        return f"Lazy({self.spec!r})"


def dtype_label(dtype) -> str:
    """A dtype's name as the rows spell it ("fp16"), from the name or from a torch dtype (read by its
    name, so torch is not imported here)."""
    name = str(dtype).removeprefix("torch.")
    return {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32",
            "float8_e4m3fn": "fp8"}.get(name, name)


@dataclass(frozen=True)
class Impl:
    name: str
    fn: Callable | str  # the attention function, or "module:attr" (bound on its first call: Lazy)
    description: str
    costing: Costing  # how profiler.model.cost.cost_of counts its FLOPs and bytes
    supports_backward: bool
    needs_cuda: bool  # False: also runs on a CPU (Triton ones only under TRITON_INTERPRET=1)
    is_triton: bool
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    head_dims: tuple[int, ...] | None = None  # None: any head_dim
    backward_head_dims: tuple[int, ...] | None = None
    gqa: bool = True  # takes k, v with fewer heads than q (grouped-query attention)
    spec: str = ""  # "module:attr" a user implementation is imported from ("" for ours)
    # (q, k, v, causal) -> the forward path a call takes ('gluon-ws', 'tiled', 'split-kv x8'), for the row's
    # ``path`` column; None for implementations with one path. A "module:attr" is bound on its first call.
    path_of: Callable[..., str] | str | None = None
    # (q, k, v) -> the backward path a call takes ('gluon-ws', 'tiled'); None: the shape's.
    backward_path_of: Callable[..., str] | str | None = None
    # The largest relative error against fp32 naive attention a correct run may have; None: the
    # dtype's (kernels.reference.TOLERANCE). Above it the case is recorded as 'wrong'.
    tolerance: float | None = None
    # Its colour in every chart of the dashboard and the report (a name outside the registry, or an
    # entry without one, takes a spare colour by its CRC-32: profiler.views.style.impl_color).
    color: str = ""
    # Why a point of it may sit above the L2 roof, where its costing is known to charge bytes a cache
    # below L2 serves (the roofline's hover says it; profiler.views.rooflines.above_roof_reason).
    above_roof_reason: str = ""
    # (kernel names, grid, shape) -> the (query rows, key columns) tile of the forward kernel Nsight
    # Compute profiled, read from what ran; None (or a None result): its costing's forward tile
    # (profiler.nsight.validate.kernel_tile).
    kernel_tile: Callable[[str, str, Shape], tuple[int, int] | None] | None = None
    # (kernel names, shape) -> the (query rows, keys) step of the one-pass backward kernel that ran; None
    # (or a None result): what the kernel's name says (profiler.model.counters.backward_tile).
    backward_tile: Callable[[str, Shape], tuple[int, int] | None] | None = None
    # True: its forward stacks a K/V head's query heads into one tile's rows whenever heads > kv_heads
    # (FA4's PackGQA); None: as the kernel that ran says (profiler.model.counters.packs_gqa).
    packs_gqa: bool | None = None
    # The implementation every speedup is measured against (tritonbench's baseline=True): the views'
    # and the demo's "speedup vs naive" (:func:`baseline_impl`).
    baseline: bool = False
    # The default --impl lists it is in (DEFAULT_LISTS, :func:`default_impls`), and those it leads:
    # bench's ratios are to the first of its list.
    defaults: tuple[str, ...] = ()
    leads: tuple[str, ...] = ()
    # The public function whose calls ``observe`` records as this implementation ("module:attr",
    # profiler.observer.hooks.default_targets) and how it takes its arguments (SIGNATURES); "": none.
    observes: str = ""
    observes_signature: str = "bhsd"
    # (device, head_dim) -> why it cannot run there beyond what the fields above say (an optional
    # package missing, a GPU generation it has no kernel for), or None. Asked first, so a missing
    # package is named on any device. The device is a torch.device.
    unsupported_here: Callable[..., str | None] | str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for name in ("fn", "path_of", "backward_path_of", "unsupported_here"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, Lazy(getattr(self, name)))
        object.__setattr__(self, "dtypes", tuple(dtype_label(d) for d in self.dtypes))
        unknown = [d for d in (*self.defaults, *self.leads) if d not in DEFAULT_LISTS]
        if unknown:
            raise ValueError(f"{self.name}: default lists {unknown} are not among {', '.join(DEFAULT_LISTS)}")
        if not set(self.leads) <= set(self.defaults):
            raise ValueError(f"{self.name}: leads {self.leads} must be lists it is in ({self.defaults})")
        if self.observes_signature not in SIGNATURES:
            raise ValueError(f"{self.name}: observes_signature '{self.observes_signature}' is not one of "
                             f"{', '.join(SIGNATURES)}")

    @property
    def fused(self) -> bool:
        """One kernel for the whole attention, or separate steps through HBM."""
        return self.costing.fused

    @property
    def steps(self) -> tuple[str, ...]:
        """The steps timed one by one; ("total",) when the implementation is timed only whole."""
        return NAIVE_STEPS if self.costing.kind == "stepwise" else ("total",)

    @property
    def row_steps(self) -> tuple[str, ...]:
        """The ``step`` of each row a capture records for one case: "total", then the steps."""
        return tuple(dict.fromkeys(("total", *self.steps)))

    def unsupported_reason(self, device, dtype, head_dim: int, backward: bool = False,
                           grouped: bool = False) -> str | None:
        """Why this implementation cannot run this case here, or None when it can (``device``: a
        torch.device or its name, ``dtype``: a torch dtype or its name; ``grouped``: K and V have fewer
        heads than Q)."""
        device_type = str(device).split(":")[0]
        if self.unsupported_here is not None:
            import torch  # the hook asks the device (and imports its package): a measuring path

            here = self.unsupported_here(torch.device(device), head_dim)
            if here:
                return here
        if self.needs_cuda and device_type != "cuda":
            return f"{self.name} needs a CUDA device"
        if self.is_triton and device_type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return f"{self.name} is a Triton kernel: it needs a CUDA device (or TRITON_INTERPRET=1)"
        if dtype_label(dtype) not in self.dtypes:
            return f"{self.name} does not take {dtype_label(dtype)}"
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


# ------------------------------------------------------------------------- tiles, read without torch

# Our kernels' head_dims (kernels/flash_fwd.py, flash_bwd.py and triton_naive.py hold the same; a test
# checks) and the functions that give their default tiles, imported when a cost is asked for.
FLASH_HEAD_DIMS = (16, 32, 64, 128, 256)
FLASH_BACKWARD_HEAD_DIMS = (16, 32, 64, 128)
TRITON_NAIVE_HEAD_DIMS = (16, 32, 64, 128, 256)
FA4_HEAD_DIMS = tuple(range(8, 257, 8))  # kernels/fa4.py: sm_90's range
FA4_BACKWARD_HEAD_DIMS = tuple(range(8, 129, 8))
_forward_tile = Lazy("kernels.flash_fwd:forward_tile")
_backward_tiles = Lazy("kernels.flash_bwd:backward_tiles")
_gluon_forward_tile = Lazy("kernels.flash_fwd_hopper:forward_tile")
_gluon_backward_tile = Lazy("kernels.flash_bwd_hopper:backward_tile")


def _flash_tiles(head_dim: int, dtype: str) -> Tiles:
    """Our kernels' default tiles for this problem (the first autotune candidate of each kernel)."""
    if head_dim not in FLASH_HEAD_DIMS:
        return Tiles(None)
    backward = _backward_tiles(head_dim, dtype) if head_dim in FLASH_BACKWARD_HEAD_DIMS else (None, None)
    return Tiles(_forward_tile(head_dim, dtype), *backward)


FP8_HEAD_DIMS = (64, 128)  # kernels.flash_fwd_fp8.HEAD_DIMS (kept torch-free here)


def _fp8_tiles(head_dim: int, dtype: str) -> Tiles:
    """The fp8 forward's tile (kernels.flash_fwd_fp8.TILES: 64 × 128 at head_dim 64, 128 × 128 at 128); no
    backward."""
    return Tiles({64: (64, 128), 128: (128, 128)}[head_dim]) if head_dim in FP8_HEAD_DIMS else Tiles(None)


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
    along x, BLOCK_M a power of two (tl.arange's extents are), and its BLOCK_N divides BLOCK_M, so the
    query tile alone decides (N = 2500 on 40 programs: BLOCK_M 64, not 63)."""
    if "_attn_fwd_hopper" in kernel:
        gluon = _gluon_forward_tile(shape.head_dim, shape.dtype, shape.causal, shape.seq_q)
        if gluon is not None:
            return gluon
    programs = int(str(grid).strip("()").split(",")[0])
    rows = 1 << (-(-shape.seq_q // programs) - 1).bit_length()
    return rows, rows


def _flash_backward_tile(kernel: str, shape: Shape) -> tuple[int, int] | None:
    """Our one-pass backward on sm_90 (``_attn_bwd_hopper``) runs its costing's fast tile
    (kernels.flash_bwd_hopper.backward_tile); the portable backward's two kernels are its costing's
    :attr:`Tiles.dkdv` and :attr:`Tiles.dq`, not one step (None)."""
    return _gluon_backward_tile(shape.head_dim, shape.dtype) if "_attn_bwd_hopper" in kernel else None


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


def _fa4_backward_tile(kernel: str, shape: Shape) -> tuple[int, int] | None:
    """FlashAttention-4's one-kernel backward on sm_90: ``_tile_size_bwd_sm90`` (flash_attn/cute/
    interface.py, 4.0.0b36): 128 × 128 to head_dim 64, 64 × 128 to 96, 80 × 128 (causal 64 × 128) to 128."""
    d = shape.head_dim
    return (128, 128) if d <= 64 else (64, 128) if d <= 96 or shape.causal else (80, 128) if d <= 128 else None


# Each entry's colour is one of matplotlib's tab10 (its default colour cycle), one per entry; fa4's is
# tab20b's dark green (tab10's last two are profiler.views.style's spare colours).
REGISTRY: dict[str, Impl] = {
    impl.name: impl
    for impl in [
        Impl(
            "naive", "kernels.reference:naive_attention",
            "PyTorch, four steps through HBM (S = QKᵀ, scale/mask, softmax, PV)",
            Costing("stepwise"), supports_backward=True, needs_cuda=False, is_triton=False, color="#d62728",
            baseline=True, defaults=(BENCH_CPU, VALIDATE),
        ),
        Impl(
            "triton_naive", "kernels.triton_naive:triton_naive_attention",
            "Triton, one program per query row, online softmax, no tensor cores",
            Costing("per_row", writes_lse=False, source="kernels/triton_naive.py: writes O only"),
            supports_backward=False, needs_cuda=False, is_triton=True, head_dims=TRITON_NAIVE_HEAD_DIMS,
            color="#ff7f0e",
            above_roof_reason="its per-row costing charges K and V once per query row (profiler.model.fused."
                              "per_row_bytes), but the programs of neighbouring rows of one head run side by side "
                              "and read the same K and V blocks, so L1 serves most of those re-reads and L2 sees "
                              "fewer bytes than charged",
        ),
        Impl(
            "triton_flash", "kernels.flash_attention:flash_attention",
            "FlashAttention-2 (ours): online softmax, recomputing backward; Gluon warp-specialized kernels on sm_90, "
            "portable Triton elsewhere",
            Costing("fused", _flash_tiles, source="the first autotune candidate of kernels/flash_fwd.py and "
                    "flash_bwd.py; an autotuned run may pick another (ATTN_AUTOTUNE=0 runs this one); decode "
                    "shapes take the split-KV path of kernels/flash_decode.py (attention_core.split_kv.plan); "
                    "on sm_90 the forward runs the Gluon kernel of kernels/flash_fwd_hopper.py and the backward the "
                    "one-pass Gluon kernel of kernels/flash_bwd_hopper.py (path gluon-ws)",
                    split_kv=True, fast_path="gluon-ws", fast_fwd_tile=_gluon_forward_tile,
                    fast_bwd_tile=_gluon_backward_tile),
            supports_backward=True, needs_cuda=False, is_triton=True,
            head_dims=FLASH_HEAD_DIMS, backward_head_dims=FLASH_BACKWARD_HEAD_DIMS,
            path_of="kernels.flash_fwd:forward_path", backward_path_of="kernels.flash_bwd:backward_path",
            color="#1f77b4", kernel_tile=_flash_kernel_tile, backward_tile=_flash_backward_tile,
            defaults=(BENCH, VALIDATE), leads=(BENCH,), observes="kernels.flash_attention:flash_attention",
        ),
        Impl(
            "triton_flash_fp8", "kernels.flash_fwd_fp8:attention_fp8_unit_descale",
            "FlashAttention forward in fp8 (ours): e4m3 Q, K, V with descales, P rounded to e4m3, bf16 out; "
            "Gluon on sm_90 (V keys-contiguous, not causal at head_dim 64), Triton otherwise",
            Costing("fused", _fp8_tiles, source="kernels/flash_fwd_fp8.py's TILES; on sm_90 the Gluon kernel of "
                    "kernels/flash_fwd_hopper.py with its FP8_CONFIGS (path gluon-ws)",
                    fast_path="gluon-ws", fast_fwd_tile=_gluon_forward_tile),
            supports_backward=False, needs_cuda=True, is_triton=True, dtypes=("fp8",), head_dims=FP8_HEAD_DIMS,
            path_of="kernels.flash_fwd_fp8:fp8_path",
            color="#0b3d91", unsupported_here="kernels.flash_fwd_fp8:unsupported_on",
            observes="kernels.flash_fwd_fp8:flash_attention_fp8", observes_signature="fp8",
        ),
        Impl(
            "sdpa_flash", "kernels.sdpa:sdpa_flash", "PyTorch SDPA, FlashAttention-2 backend",
            Costing("fused", _fa2_tiles, source="Flash_fwd_kernel_traits in the profiled kernel names"),
            supports_backward=True, needs_cuda=False, is_triton=False, color="#2ca02c", kernel_tile=_fa2_kernel_tile,
            # on a CPU, PyTorch's fused FlashAttention-style kernel: the nearest native peer of ours there
            defaults=(BENCH, BENCH_CPU, VALIDATE), leads=(BENCH_CPU,),
        ),
        Impl(
            "sdpa_efficient", "kernels.sdpa:sdpa_efficient", "PyTorch SDPA, memory-efficient (xFormers) backend",
            Costing("fused", source="tiles not modelled"),
            supports_backward=True, needs_cuda=True, is_triton=False, color="#9467bd",
        ),
        Impl(
            "sdpa_cudnn", "kernels.sdpa:sdpa_cudnn", "PyTorch SDPA, cuDNN backend",
            Costing("fused", _cudnn_tiles, source="H200 counters (reports/validate-h200)"),
            supports_backward=True, needs_cuda=True, is_triton=False, dtypes=("fp16", "bf16"),
            color="#17becf", kernel_tile=_cudnn_kernel_tile, defaults=(BENCH, VALIDATE),
        ),
        Impl(
            "sdpa_math", "kernels.sdpa:sdpa_math", "PyTorch SDPA, math backend (unfused reference)",
            Costing("unfused", repeats_kv=True), supports_backward=True, needs_cuda=False, is_triton=False,
            color="#8c564b", defaults=(BENCH_CPU,),
        ),
        Impl(
            "sdpa_repeat_kv", "kernels.sdpa:sdpa_repeat_kv",
            "PyTorch SDPA (its own backend choice) after repeat_interleave of K and V: GQA before enable_gqa",
            Costing("fused", repeats_kv=True, source="tiles not modelled: SDPA picks the backend"),
            supports_backward=True, needs_cuda=False, is_triton=False, color="#e377c2",
            kernel_tile=_fa2_kernel_tile,  # SDPA's own backend choice: FlashAttention-2's kernel where it picks it
        ),
        Impl(
            "fa4", "kernels.fa4:fa4_attention",
            "FlashAttention-4 (flash-attn-4, CuTe DSL) for Hopper and Blackwell; causal only at Nq == Nkv",
            # writes_lse as a training forward: without a gradient FA4 skips the logsumexp (4 bytes a query row).
            Costing("fused", _fa4_tiles, source="FA4's sm_90 forward tile (_tile_size_fwd_sm90, flash_attn/cute/"
                    "interface.py of flash-attn-4 4.0.0b36); its one-kernel backward not modelled"),
            supports_backward=True, needs_cuda=True, is_triton=False, dtypes=("fp16", "bf16"), head_dims=FA4_HEAD_DIMS,
            backward_head_dims=FA4_BACKWARD_HEAD_DIMS, color="#637939",
            unsupported_here="kernels.fa4:unsupported_reason",
            backward_tile=_fa4_backward_tile, packs_gqa=True,  # pack_gqa = qhead_per_kvhead > 1 (interface.py)
            observes="flash_attn.cute:flash_attn_func", observes_signature="flash_attn",
        ),
    ]
}
BUILTIN = tuple(REGISTRY)


def registered_costing(impl: str) -> Costing:
    """The costing of a registered implementation; an implementation the registry does not have is an
    error (profiler.registry.costing_for first looks in a capture's meta.json for a user's own)."""
    if impl not in REGISTRY:
        raise ValueError(f"implementation '{impl}' is neither in the registry nor described in the capture's "
                         "meta.json (user_impls)")
    return REGISTRY[impl].costing


def default_impls(which: str) -> list[str]:
    """The names in one default --impl list (DEFAULT_LISTS): those that lead it first, then registry order."""
    if which not in DEFAULT_LISTS:
        raise ValueError(f"no default list '{which}'; the lists are {', '.join(DEFAULT_LISTS)}")
    members = [impl for impl in REGISTRY.values() if which in impl.defaults]
    return [impl.name for impl in sorted(members, key=lambda impl: which not in impl.leads)]


def baseline_impl() -> str:
    """The name of the implementation every speedup is measured against (the entry with ``baseline``)."""
    return next(impl.name for impl in REGISTRY.values() if impl.baseline)
