"""The cost of naive, stepwise attention (kernels/reference.py): FLOPs and HBM bytes of each of its four
steps (QKᵀ, scale/mask, softmax, PV), forward and the autograd backward of each step, and the byte
counts of whole tensors that the fused model (profiler.model.fused) shares.

Conventions, each with its source:
- Matmul FLOPs are 2·M·N·K (one multiply and one add per term).
- ``scale_mask`` counts 1 FLOP per element (the multiply; the causal select is not arithmetic),
  ``softmax`` 5 per element (max, subtract, exp, sum, divide), as in the seed post on arithmetic
  intensity, where that count gives softmax 5 / (2 · 2 bytes) = 1.25 FLOP/byte in fp16/bf16.
- ``torch.utils.flop_counter.FlopCounterMode`` counts only matmuls (2·M·N·K) and ignores
  elementwise work and the causal mask; the tests cross-check our matmul steps against it and
  expect 0 for the elementwise ones.
- Bytes assume every operand read from and every result written to HBM once per kernel, in the
  tensor's dtype. PyTorch's fp16/bf16 softmax computes in fp32 registers but reads and writes
  fp16/bf16, so its bytes are those of the input dtype.
"""

from __future__ import annotations

from attention_core.shape import NAIVE_STEPS, Shape


def tensor_bytes(shape: Shape, rows: int, heads: int | None = None) -> int:
    """Bytes of one (B, heads, rows, D) tensor in the shape's dtype (heads: the query heads unless given)."""
    return shape.batch * (heads or shape.heads) * rows * shape.head_dim * shape.elem_bytes


def kv_bytes(shape: Shape) -> int:
    """Bytes of K (or V): (B, kv_heads, Nk, D). With grouped-query attention each K/V head is read
    once for its whole group of query heads (Ainslie et al., "GQA", 2023, §2: the point of GQA is
    that the K/V cache shrinks by heads / kv_heads)."""
    return tensor_bytes(shape, shape.seq_kv, shape.kv_heads)


def naive_step_flops(shape: Shape, step: str) -> int:
    """FLOPs of one naive step in the shape's mode (fwd, bwd or both)."""
    b, n_q, n_k, d = shape.bh, shape.seq_q, shape.seq_kv, shape.head_dim
    s = shape.score_elems
    fwd = {
        "qk_matmul": 2 * b * n_q * n_k * d,  # S = Q Kᵀ: 2·M·N·K
        "scale_mask": s,  # one multiply per element; the causal select is not arithmetic
        "softmax": 5 * s,  # max, subtract, exp, sum, divide (seed post on arithmetic intensity)
        "pv_matmul": 2 * b * n_q * n_k * d,  # O = P V: 2·M·N·K
    }
    bwd = {
        "qk_matmul": 4 * b * n_q * n_k * d,  # dQ = dS K and dK = dSᵀ Q: two matmuls
        "scale_mask": s,  # dS · scale (the mask's gradient is a select)
        "softmax": 4 * s,  # dS = P ∘ (dP − rowsum(dP ∘ P)): multiply, sum, subtract, multiply
        "pv_matmul": 4 * b * n_q * n_k * d,  # dP = dO Vᵀ and dV = Pᵀ dO: two matmuls
    }
    check_step(step)
    return by_mode(shape, fwd[step], bwd[step])


def mask_zeroed(shape: Shape) -> int:
    """Entries of the Nq×Nk causal mask on or below the diagonal (key j <= query i), which
    ``triu_(1)`` sets to False: sum over rows i of min(i + 1, Nk)."""
    full = max(0, shape.seq_q - shape.seq_kv)  # rows that see every key
    partial = shape.seq_q - full  # rows i < Nk see i + 1 keys
    return partial * (partial + 1) // 2 + full * shape.seq_kv


def fwd_step_io(shape: Shape, step: str) -> tuple[int, int]:
    """(bytes read, bytes written) of one forward naive step, each operand read once and each
    result written once.

    Causal scale_mask is the multiply, then masked_fill_ in place with one Nq×Nk bool mask that
    every batch and head shares. kernels/reference.py builds it each call: a fill writes all of it,
    the in-place triu_ writes only the entries it zeroes (it reads nothing: the counters show
    12 KB). Each operand is read once, so the mask counts once, not once per head; at N = 4096 the
    16 MB mask is partly re-read from DRAM (reports/validate-h200)."""
    s_bytes = shape.score_elems * shape.elem_bytes
    q, kv, o = tensor_bytes(shape, shape.seq_q), kv_bytes(shape), tensor_bytes(shape, shape.seq_q)
    mask = shape.seq_q * shape.seq_kv
    io = {
        "qk_matmul": (q + kv, s_bytes),  # read Q, K; write S
        # read S, write S·scale; causal: masked_fill_ reads it and the mask, writes it; the mask's build
        "scale_mask": (2 * s_bytes + mask, 2 * s_bytes + mask + mask_zeroed(shape)) if shape.causal
        else (s_bytes, s_bytes),
        "softmax": (s_bytes, s_bytes),  # read S, write P
        "pv_matmul": (s_bytes + kv, o),  # read P, V; write O
    }
    check_step(step)
    return io[step]


def naive_step_bytes(shape: Shape, step: str) -> int:
    """HBM bytes of one naive step: each operand read once and each result written once. The
    backward's masked_fill reads the gradient and the causal mask and writes a new gradient; softmax's
    backward is two kernels on the GPU (PyTorch's softmax_backward_cuda_out: tmp = dP * P, then
    host_softmax_backward reads tmp and P and writes dS; the per-kernel Nsight Compute rows of
    reports/validate-h200-issue27/fit-bwd show both, each reading two score-sized matrices)."""
    s_bytes = shape.score_elems * shape.elem_bytes
    q, kv, o = tensor_bytes(shape, shape.seq_q), kv_bytes(shape), tensor_bytes(shape, shape.seq_q)
    mask = shape.seq_q * shape.seq_kv if shape.causal else 0
    bwd = {
        "pv_matmul": 2 * o + 2 * kv + 2 * s_bytes,  # read dO, V, P, dO; write dP, dV (dO read per matmul)
        "softmax": 6 * s_bytes,  # read dP, P, write dP*P; read it and P, write dS
        "scale_mask": 2 * s_bytes + (2 * s_bytes + mask if shape.causal else 0),  # read dS, write dS·scale
        "qk_matmul": s_bytes + kv + q + s_bytes + q + kv,  # dQ = dS K; dK = dSᵀ Q: each reads dS
    }
    return by_mode(shape, sum(fwd_step_io(shape, step)), bwd[step])


def check_step(step: str) -> None:
    if step not in NAIVE_STEPS:
        raise ValueError(f"unknown naive step '{step}'; allowed: {', '.join(NAIVE_STEPS)}")


def by_mode(shape: Shape, fwd: int, bwd: int) -> int:
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[shape.mode]
