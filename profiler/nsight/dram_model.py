"""The DRAM bytes Nsight Compute should see during a kernel: the compulsory traffic less what the
write-back L2 still holds when the kernel ends. Only ``validate`` compares against it; the roofline
uses the cost model's bytes (profiler.model.cost)."""

from __future__ import annotations

from attention_core.shape import LSE_BYTES, Shape
from profiler.model.fused import compulsory_bytes
from profiler.model.naive import fwd_step_io, kv_bytes, tensor_bytes

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
