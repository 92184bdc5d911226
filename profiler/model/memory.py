"""Peak memory a run allocates beyond its inputs, by the model: the dashboard draws it against the
peaks a capture measured (torch.cuda.max_memory_allocated)."""

from __future__ import annotations

from attention_core.shape import LSE_BYTES, Shape
from profiler.model.naive import kv_bytes, tensor_bytes


def predicted_peak_bytes(shape: Shape, fused: bool) -> int:
    """Memory a run allocates beyond its inputs, by the model (the dashboard draws it against
    measured peaks). Unfused attention keeps two N×N matrices alive in the forward (the scaled S
    while P is computed from it) and about four with the backward (S and P saved, dP and dS);
    a fused kernel keeps O(N): the output, the fp32 logsumexp, and in the backward dQ, dK, dV and
    the fp32 delta."""
    o = tensor_bytes(shape, shape.seq_q)
    grads = tensor_bytes(shape, shape.seq_q) + 2 * kv_bytes(shape)  # dQ, dK, dV
    rows = shape.bh * shape.seq_q * LSE_BYTES  # one fp32 per query row
    s_bytes = shape.score_elems * shape.elem_bytes
    if fused:
        return o + rows if shape.mode == "fwd" else o + rows + grads + rows
    return 2 * s_bytes + o if shape.mode == "fwd" else 4 * s_bytes + o + grads
