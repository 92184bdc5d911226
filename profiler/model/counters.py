"""What the hardware counters of one kernel should read, by the model: the tensor-core FLOPs it issues,
and the DRAM bytes Nsight Compute sees during an unfused step (the compulsory traffic less what the
write-back L2 still holds when it ends); a fused kernel's L2 and DRAM traffic is profiler.model.l2's. ``validate``
(profiler.nsight.validate) compares these with the counters; the roofline uses the cost model's FLOPs and
bytes (profiler.model.cost), and its issued-work view :func:`issued_flops`. The kernel readers here
(:func:`packs_gqa`, :func:`backward_tile`, :func:`cublas_padding`) take the names Nsight Compute reports
and ask the implementation's registry entry (attention_core.implementations.Impl) first.
Pure functions: no torch, no files."""

from __future__ import annotations

import re
from dataclasses import replace

from attention_core import split_kv
from attention_core.costing import Costing, Tiles
from attention_core.implementations import REGISTRY, registered_costing
from attention_core.shape import LSE_BYTES, Shape
from profiler.model.fused import compulsory_bytes, executed_flops, split_kv_executed_flops
from profiler.model.naive import fwd_step_io, kv_bytes, naive_step_flops, tensor_bytes

# What the write-back L2 still holds of a kernel's output when the kernel ends, so that Nsight
# Compute does not see it reach DRAM during the kernel, as a fraction of the L2. Measured on an H200
# (62.9 MB L2) by reports/validate-h200, per kernel class, at N = 1024 and 4096 (the N×N outputs are
# 34 and 537 MB), where each class kept a nearly constant amount:
# - cuBLAS matmuls writing S: 26.9 to 27.4 MB in all 16 runs (0.43 of the L2);
# - elementwise and softmax kernels, which read as much as they write: 18.7 to 24.7 MB (0.35);
# - fused attention kernels, whose L2 also serves the K and V re-reads: 5 to 9 MB (1/8).
# These are measured fractions of one GPU, not datasheet figures; at N >= 4096 they change the
# total by under 5%, at N = 1024 by up to three quarters (qk_matmul at D64), which is why the
# classes are kept apart. reports/validate-h200-n2048 checks them on shapes they were not fitted on.
# A fused kernel's rows take profiler.model.l2's derived retention (an eighth of the L2 for a plain forward,
# this constant); FUSED_L2_RETENTION stays for a fused row whose tiles are not known.
MATMUL_L2_RETENTION = 0.43
STREAMING_L2_RETENTION = 0.35
FUSED_L2_RETENTION = 0.125


def dram_bytes(shape: Shape, impl: str, step: str, l2_bytes: float | None = None, kv_splits: int = 1) -> float:
    """DRAM traffic Nsight Compute sees during a kernel (or a naive step's kernels): every input
    read once (fused kernels: Q, K and V; the L2 serves their re-reads), every output written
    once, less what the write-back L2 still holds at the end of each writing kernel (see the
    retention fractions above; none when ``l2_bytes`` is None). ``kv_splits`` > 1 is
    FlashAttention-2's split-KV path: each split writes an fp32 partial output and logsumexp per
    query row, and a combine kernel reads them back (Dao, flash-attention, flash_fwd_splitkv_kernel)."""
    if shape.mode == "bwd":
        return backward_dram_bytes(shape)
    q, kv = tensor_bytes(shape, shape.seq_q), kv_bytes(shape)
    if step == "total":
        partials = kv_splits * shape.bh * shape.seq_q * (shape.head_dim + 1) * 4 if kv_splits > 1 else 0
        reads, writes = q + 2 * kv + partials, q + shape.bh * shape.seq_q * LSE_BYTES + partials
        writers, retention = (2 if partials else 1), FUSED_L2_RETENTION  # split-KV: the splits, then the combine
    else:
        reads, writes = fwd_step_io(shape, step)
        writers = 2 if step == "scale_mask" and shape.causal else 1  # the multiply and masked_fill_
        retention = MATMUL_L2_RETENTION if step in ("qk_matmul", "pv_matmul") else STREAMING_L2_RETENTION
    retained = 0.0 if l2_bytes is None else min(writes, writers * retention * l2_bytes)
    return reads + writes - retained


def backward_dram_bytes(shape: Shape) -> float:
    """DRAM traffic of a fused one-pass backward (ours on sm_90, FlashAttention-2 and -4, cuDNN): its
    compulsory bytes (profiler.model.fused.compulsory_bytes) plus the fp32 dQ accumulator
    (B·H·Nq·D·4 bytes), read twice from DRAM: by the main kernel's reductions and by the conversion
    to dQ's dtype (the per-kernel counters of reports/validate-h200-issue27's fit-bwd show both
    reads). Grouped-query heads are not modelled further: the peers expand dK and dV per query head
    and sum them, which this omits."""
    accumulator = shape.bh * shape.seq_q * shape.head_dim * 4
    return float(compulsory_bytes(shape) + 2 * accumulator)


def cublas_padding(kernel: str, rows: int, cols: int) -> float:
    """Executed over needed tensor work of a cuBLAS nvjet GEMM writing a (rows × cols) matrix per
    head. Its name carries the CTA tile (``_64x80_``) and the cluster shape (``_1x4_``); cuBLAS is
    column-major, so its M runs along PyTorch's last dimension (cols) and N along the rows; clusters
    launch whole, so a tile count is rounded up to a multiple of the cluster's extent and the tiles
    past the edge multiply TMA's zero fill. 1.0 for any other kernel. (H200, B1 H4 N2048 D64: tile
    64×80, cluster 1×4: 28 tiles of 80 rows for 2048 rows, 1.094, as measured.)"""
    match = re.search(r"nvjet_sm\d+_[a-z]+_(\d+)x(\d+)_\d+x\d+_(\d+)x(\d+)_", kernel)
    if match is None:
        return 1.0
    tile_m, tile_n, cluster_m, cluster_n = (int(g) for g in match.groups())

    def padded(extent: int, tile: int, cluster: int) -> int:
        tiles = -(-extent // tile)
        return -(-tiles // cluster) * cluster * tile

    return padded(cols, tile_m, cluster_m) / cols * padded(rows, tile_n, cluster_n) / rows


def packs_gqa(impl: str, kernel: str, shape: Shape) -> bool:
    """Whether the forward kernel that ran stacks a K/V head's query heads into one tile's rows,
    so a decode step (Nq = 1) fills group rows of its tile, not one: what the implementation's registry
    entry declares (profiler.registry.Impl.packs_gqa: FlashAttention-4 whenever heads > kv_heads), else
    what the kernel's name says:
    - FlashAttention-2 (PyTorch's copy, flash_api.cpp ``seqlenq_ngroups_swapped``) swaps the group's
      heads into the query rows when Nq = 1 and heads > kv_heads;
    - cuDNN's sm80 decode kernel (``..._wmma_..._16x128x128_...``, 16-row tiles) packs the group too:
      on the H200 it issued 16 rows' tensor work per K/V head at groups 4 and 8 (reports/validate-h200-issue27)."""
    if shape.group == 1:
        return False
    entry = REGISTRY.get(impl)
    if entry is not None and entry.packs_gqa is not None:
        return entry.packs_gqa
    if "flash_fwd" in kernel and "pytorch_flash" in kernel:
        return shape.seq_q == 1
    return "sdpa_sm80" in kernel and "wmma" in kernel


def backward_tile(impl: str, kernel: str, shape: Shape) -> tuple[int, int] | None:
    """(query rows, keys) per step of the one-pass backward that ran (dK, dV per key block, dQ added
    in fp32), which sets the diagonal and ragged-edge work it issues: what the implementation's registry
    entry reads from the kernel (profiler.registry.Impl.backward_tile: ours on sm_90, ``_attn_bwd_hopper``,
    its Gluon tile; FlashAttention-4's ``_tile_size_bwd_sm90``), else what the kernel's name says:
    - FlashAttention-2: Flash_bwd_kernel_traits<head_dim, kBlockM, kBlockN, ...> in the kernel's name;
    - cuDNN's sm90 backward: 64 × 128, what its issued tensor work at N = 3000 fits (ragged rows padded
      to 64, keys to 128) and its name does not say.
    None: not known (our portable two-kernel backward is :attr:`Tiles.dkdv`/:attr:`Tiles.dq`)."""
    entry = REGISTRY.get(impl)
    tile = entry.backward_tile(kernel, shape) if entry is not None and entry.backward_tile is not None else None
    if tile is not None:
        return tile
    if match := re.search(r"Flash_bwd_kernel_traits<\d+, (\d+), (\d+)", kernel):
        return int(match.group(1)), int(match.group(2))
    if "sdpa_sm90_flash_bprop" in kernel:
        return 64, 128
    return None


def model_tensor_flops(shape: Shape, impl: str, step: str, tile: tuple[int, int] = (128, 128),
                       kernel: str = "", costing: Costing | None = None) -> float:
    """Matrix FLOPs the tensor cores must issue: the two matmuls of attention (as the cuBLAS kernel
    that ran tiles them), none for elementwise steps; fused kernels compute whole tiles on the
    causal diagonal and at ragged ends, and pad a decode step's rows to a tile (packed GQA rows
    where the kernel packs them: :func:`packs_gqa`), so their count is the executed FLOPs of the
    tile that ran. Backward: unfused attention's autograd runs four matmuls of 2·Nq·Nk·D
    (dP, dV, dQ, dK); a one-pass fused backward five per visited tile (:func:`backward_tile`).
    ``costing``: the implementation's (default: its registry entry's)."""
    if step in ("qk_matmul", "pv_matmul"):
        cols = shape.seq_kv if step == "qk_matmul" else shape.head_dim
        return naive_step_flops(shape, step) * cublas_padding(kernel, shape.seq_q, cols)
    if step in ("scale_mask", "softmax"):
        return 0.0
    if shape.mode == "bwd":
        costing = costing or registered_costing(impl)
        if not costing.fused:
            return 4 * 2 * shape.bh * shape.seq_q * shape.seq_kv * shape.head_dim
        onepass = backward_tile(impl, kernel, shape)
        tiles = Tiles(None, onepass=onepass) if onepass else costing.tiles_for(shape.head_dim, shape.dtype)
        return executed_flops(shape, tiles) if tiles is not None else float("nan")
    return executed_flops(shape, Tiles(tile), packed=packs_gqa(impl, kernel, shape))


def issued_flops(impl: str, shape: Shape, step: str, path: str = "", kernel: str = "",
                 costing: Costing | None = None) -> float:
    """Tensor FLOPs a stored row's kernels issue, for the issued-work roofline: what the cost model's
    convention counts (4·B·H·Nq·Nkv·D, half of it causal) plus what the kernel computes in vain: whole
    tiles on the causal diagonal and at ragged ends, a decode step's rows padded to a tile (a K/V head's
    group stacked where the kernel packs it), the full score matrix of unfused attention under a causal
    mask. The row's ``path`` says which of an implementation's kernels ran (our split-KV decode, the
    Gluon tiles on sm_90); ``kernel``, where a trace names it, what its name tells (:func:`packs_gqa`,
    :func:`backward_tile`, cuBLAS's padding). 0 for elementwise steps; NaN where the tiles are not
    declared, or where a decode step's packing depends on a kernel choice no trace recorded (cuDNN picks
    a 16-row kernel for short Nq). ``validate`` checks the same rules against Nsight Compute's
    ``sm__ops_path_tensor`` counters (docs/validation.md: 1.000 on every fused row)."""
    costing = costing or registered_costing(impl)
    if step != "total" or not costing.fused:
        if step != "total":
            return model_tensor_flops(shape, impl, step, kernel=kernel, costing=costing)
        # unfused attention, whole: its two matmuls forward (the full Nq × Nkv scores, masked afterwards) and
        # autograd's four backward (profiler.model.naive's matmul steps)
        return float(sum(naive_step_flops(shape, s) for s in ("qk_matmul", "pv_matmul")))
    split = 0.0
    if path.startswith("split-kv") and shape.mode != "bwd":  # the forward ran split-KV (kernels.flash_decode)
        decode = split_kv.plan(shape.batch, shape.kv_heads, shape.group, shape.seq_q, shape.seq_kv)
        split = split_kv_executed_flops(shape, decode) if decode is not None else float("nan")
        if shape.mode == "fwd":
            return split
        shape = replace(shape, mode="bwd")  # fwd+bwd: the backward's tiles below, then the split forward added
    tiles = costing.tiles_of(shape, path)
    onepass = backward_tile(impl, kernel, shape) if shape.mode != "fwd" else None
    if onepass is not None:  # a one-pass backward the registry or the kernel's name declares (FA4, FA2, cuDNN)
        tiles = replace(tiles or Tiles(None), onepass=onepass)
    entry = REGISTRY.get(impl)
    if tiles is None:
        return float("nan")
    # PyTorch's FlashAttention-2 (sdpa_flash always runs it) stacks a decode step's group into a tile's rows
    # (flash_api.cpp, seqlenq_ngroups_swapped); FA4 declares its packing; other kernels' names tell.
    packed = packs_gqa(impl, kernel or ("pytorch_flash::flash_fwd" if impl == "sdpa_flash" else ""), shape)
    unknown = (shape.group > 1 and not kernel and tiles.fwd is not None and shape.seq_q < tiles.fwd[0]
               and shape.mode != "bwd" and impl != "sdpa_flash" and (entry is None or entry.packs_gqa is None))
    return float("nan") if unknown else split + executed_flops(shape, tiles, packed=packed)
