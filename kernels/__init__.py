"""Attention implementations under study, all on BHSD tensors: (batch, heads, seq, head_dim).

- ``naive_attention``: PyTorch, one NVTX range per step (reference.py)
- ``triton_naive_attention``: Triton, one program per query row (triton_naive.py)
- ``online_softmax``: standalone online-softmax row kernel (online_softmax.py)
- ``flash_attention`` / ``flash_attention_with_lse``: our Triton FlashAttention-2, with autograd
- ``sdpa_flash``, ``sdpa_efficient``, ``sdpa_cudnn``, ``sdpa_math``: PyTorch SDPA backends (sdpa.py)
- ``REGISTRY``: every attention implementation by name, with metadata and how the cost model
  counts it (registry.py); ``register`` adds your own

Set ``TRITON_INTERPRET=1`` before importing this package to run the Triton kernels on a CPU.
"""

from kernels.flash_attention import flash_attention, flash_attention_with_lse
from kernels.online_softmax import online_softmax
from kernels.reference import attention_oracle, naive_attention
from kernels.registry import REGISTRY, Impl, get_impl, register
from kernels.sdpa import Unsupported, sdpa_cudnn, sdpa_efficient, sdpa_flash, sdpa_math
from kernels.triton_naive import triton_naive_attention

__all__ = [
    "REGISTRY", "Impl", "Unsupported", "attention_oracle", "flash_attention", "flash_attention_with_lse",
    "get_impl", "naive_attention", "register", "online_softmax", "sdpa_cudnn", "sdpa_efficient", "sdpa_flash",
    "sdpa_math", "triton_naive_attention",
]
