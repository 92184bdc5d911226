"""Attention implementations under study, all on BHSD tensors: (batch, heads, seq, head_dim).

- ``naive_attention``: PyTorch, one NVTX range per step (reference.py)
- ``triton_naive_attention``: Triton, one program per query row (triton_naive.py)
- ``online_softmax``: standalone online-softmax row kernel (online_softmax.py)
- ``flash_attention`` / ``flash_attention_with_lse``: our Triton FlashAttention-2, with autograd
- ``sdpa_flash``, ``sdpa_efficient``, ``sdpa_cudnn``, ``sdpa_math``: PyTorch SDPA backends (sdpa.py)
- ``fa4_attention``: FlashAttention-4 (the optional flash-attn-4 package, imported when called) (fa4.py)
- ``hf_attention.register()``: ``flash_attention`` as a transformers attention implementation
  (imported on its own: ``from kernels.hf_attention import register``; transformers only when called)

Set ``TRITON_INTERPRET=1`` before importing this package to run the Triton kernels on a CPU.

A leaf library, as flash-attn's interface is: it imports torch, triton and the torch-free
``attention_core`` (the split-KV plan its decode path shares with the cost model), never the
profiler. The profiler's registry (profiler.registry) names these functions and says how to cost them.
"""

from kernels.fa4 import fa4_attention
from kernels.flash_attention import flash_attention, flash_attention_with_lse
from kernels.online_softmax import online_softmax
from kernels.reference import attention_oracle, naive_attention
from kernels.sdpa import Unsupported, sdpa_cudnn, sdpa_efficient, sdpa_flash, sdpa_math
from kernels.triton_naive import triton_naive_attention

__all__ = [
    "Unsupported", "attention_oracle", "fa4_attention", "flash_attention", "flash_attention_with_lse",
    "naive_attention", "online_softmax", "sdpa_cudnn", "sdpa_efficient", "sdpa_flash", "sdpa_math",
    "triton_naive_attention",
]
