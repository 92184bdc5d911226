"""FlashAttention-4 (``flash_attn.cute``, PyPI ``flash-attn-4``) on our BHSD tensors, a peer of our kernels.

FA4 is the CuTe-DSL FlashAttention of Dao-AILab for Hopper (sm_90) and Blackwell (sm_100). What this
wrapper relies on, read in flash_attn/cute/interface.py of flash-attn-4 4.0.0b36 (the PyPI wheel) and
of Dao-AILab/flash-attention at 0251105a (tag fa4-v4.0.0.beta27), where they agree:

- ``flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False, ...)``
  takes BSHD tensors (batch, seq, heads, head_dim), K and V with fewer heads than Q (grouped-query:
  heads % kv_heads == 0), and returns ``FlashAttnFunc.apply(...)``, i.e. ``(out, lse)``, ``lse``
  None unless a gradient or ``return_lse`` needs it. A bare ``out`` is taken as well.
- fp16 and bf16 (fp8 forward-only, sm_100 only); ``_validate_head_dims``: head_dim 8 to 256 on sm_90,
  8 to 128 or 256 on sm_100/sm_110, a multiple of 16 bytes / element size (8 for fp16, bf16).
- The backward (sm_90, sm_100, sm_110, sm_120): FA4's tests (tests/cute/test_flash_attn.py) check it
  with head_dim == head_dim_v at head_dim <= 128, and 256 on sm_100; "hdim > 192 backward: SM90 not
  supported yet". We offer it at head_dim <= 128 (:data:`BACKWARD_HEAD_DIMS`).
- Inputs go through ``maybe_contiguous`` (cute_dsl_utils.py), which keeps a tensor whose last stride
  is 1 and whose pointer and other strides are 16-byte aligned: the BSHD view of a contiguous BHSD
  tensor passes uncopied. The output is allocated BSHD; we return its BHSD view.
- Causal masking is bottom-right aligned: key j is visible to query i when j <= i + Nkv - Nq
  (mask.py, block_info.py ``get_n_block_min_max``). Ours is top-left, SDPA's ``is_causal``: the two
  agree only when Nq == Nkv, so a causal call with Nq != Nkv raises :class:`Unsupported` instead of
  computing another mask.

``flash_attn_func`` is looked up on ``flash_attn.cute`` at each call, not bound at import: the
package is an optional extra that may be missing, and ``profiler.observe`` re-binds that attribute,
so an observed call of ours is recorded once, as an FA4 call.
"""

from __future__ import annotations

import importlib

import torch

from kernels._checks import check_qkv, resolve_scale
from kernels.sdpa import Unsupported

DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = tuple(range(8, 257, 8))  # sm_90's range (_validate_head_dims); sm_100 takes fewer
BACKWARD_HEAD_DIMS = tuple(range(8, 129, 8))
# By compute capability major: the head_dims FA4 validates there (sm_100 and sm_110 share a path).
ARCH_HEAD_DIMS = {9: HEAD_DIMS, 10: (*range(8, 129, 8), 256), 11: (*range(8, 129, 8), 256)}
INSTALL = "pip install 'attention-roofline[fa4]'"


def _flash_attn_func():
    """FA4's ``flash_attn_func`` as bound now, or :class:`Unsupported` saying why it cannot be imported."""
    try:
        return importlib.import_module("flash_attn.cute").flash_attn_func
    except Exception as err:  # ImportError, or whatever the CUTLASS DSL raises while loading
        detail = str(err).splitlines()[0] if str(err) else ""
        raise Unsupported(f"fa4 needs the flash-attn-4 package ({INSTALL}): {type(err).__name__}: {detail}") from err


def import_error() -> str | None:
    """Why ``flash_attn.cute`` cannot be imported here, or None when it can."""
    try:
        _flash_attn_func()
    except Unsupported as err:
        return str(err)
    return None


def unsupported_reason(device: torch.device | str, head_dim: int) -> str | None:
    """Why FA4 cannot run on ``device`` at ``head_dim``: the package is missing, or the GPU is not
    sm_90 or sm_100/sm_110 (or that one's head_dims). None for a CPU device: the registry's
    ``needs_cuda`` says that."""
    reason = import_error()
    if reason is not None or torch.device(device).type != "cuda":
        return reason
    major, minor = torch.cuda.get_device_capability(device)
    if major not in ARCH_HEAD_DIMS:
        return f"fa4 runs on sm_90 (Hopper) and sm_100/sm_110 (Blackwell) GPUs; this one is sm_{major}{minor}"
    if head_dim not in ARCH_HEAD_DIMS[major]:
        return f"fa4 on sm_{major}{minor} takes head_dim 8 to 128 in steps of 8 or 256, not {head_dim}"
    return None


def fa4_attention(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """FA4's attention (its backward through autograd) on BHSD tensors, passed as BSHD strided views.

    q: (batch, heads, seq_q, head_dim); k, v: (batch, kv_heads, seq_kv, head_dim) with kv_heads
    dividing heads; fp16 or bf16; ``sm_scale=None`` means 1/sqrt(head_dim). Returns
    o: (batch, heads, seq_q, head_dim), a view of FA4's BSHD output. Raises :class:`Unsupported`
    without the flash-attn-4 package, or for causal attention with seq_q != seq_kv."""
    _, _, seq_q, seq_kv, head_dim = check_qkv(q, k, v, dtypes=DTYPES, head_dims=HEAD_DIMS)
    scale = resolve_scale(sm_scale, head_dim)
    if causal and seq_q != seq_kv:
        raise Unsupported(f"fa4 aligns a causal mask bottom-right (key j visible to query i when j <= i + Nkv - Nq), "
                          f"ours top-left (j <= i): they differ at Nq {seq_q} != Nkv {seq_kv}")
    result = _flash_attn_func()(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale,
                                causal=causal)
    out = result[0] if isinstance(result, tuple) else result  # (out, lse) in every release so far
    return out.transpose(1, 2)
