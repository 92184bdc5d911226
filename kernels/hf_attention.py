"""Our Triton FlashAttention as a Hugging Face transformers attention implementation.

``register()`` adds it to ``transformers.AttentionInterface`` (and the sdpa mask builder to
``AttentionMaskInterface``), after which ``from_pretrained(..., attn_implementation="triton_fa")`` runs
a model's attention on :func:`kernels.flash_attention`. The contract is sdpa's answer: every call is
either one our kernel computes exactly as transformers' sdpa function would (no mask, causal only where
top-left and bottom-right alignment agree, no dropout, a head_dim and dtype the kernel has) or is handed
to that sdpa function and counted in :data:`STATS`, so a caller can report how much ran on our kernel.

The name may not contain "flash": transformers 5 treats any such ``attn_implementation`` as a
flash-attn kernel to load from the Hub (``utils.generic.is_flash_attention_requested``) and refuses
to build the model when that load fails.

transformers is imported only inside the functions that need it: ``import kernels`` stays torch,
triton and attention_core only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from kernels._checks import SUPPORTED_DTYPES, check_triton_device
from kernels.flash_attention import flash_attention
from kernels.flash_bwd import HEAD_DIMS as BACKWARD_HEAD_DIMS
from kernels.flash_bwd import backward_path
from kernels.flash_fwd import HEAD_DIMS as FORWARD_HEAD_DIMS
from kernels.flash_fwd import forward_path

DEFAULT_NAME = "triton_fa"

# Keyword arguments of transformers' sdpa function that change the attention computed (a bias, a
# paged cache, logit soft-capping, attention sinks); a call carrying any of them goes to sdpa.
SDPA_ONLY_KWARGS = ("position_bias", "cache", "softcap", "s_aux")

# Substrings transformers 5.23 dispatches on in an attn_implementation name (modeling_utils.py,
# _check_and_adjust_attn_implementation): "flash" loads a flash-attn kernel, "sdpa" and
# "flex_attention" run those backends' availability checks, "paged|" is the paged-cache prefix and
# "/" a Hub kernel repository (integrations/hub_kernels.py, is_kernel).
RESERVED_IN_NAMES = ("flash", "sdpa", "flex_attention", "paged|", "/")


@dataclass
class DispatchStats:
    """How many attention calls ran on our kernel and how many went to sdpa, by reason; and which
    code path our kernel's calls took (``paths``: 'fwd gluon-ws', 'fwd gluon-ws split-tail 4x32', 'fwd tiled',
    'fwd split-kv x8', and 'bwd ...' for calls that will run a backward, as kernels.flash_fwd.forward_path and
    kernels.flash_bwd.backward_path name them), so a user sees that a model's own tensor layout
    reaches the fast kernels."""

    kernel_calls: int = 0
    fallbacks: Counter = field(default_factory=Counter)
    paths: Counter = field(default_factory=Counter)

    @property
    def fallback_calls(self) -> int:
        return sum(self.fallbacks.values())

    def reset(self) -> None:
        self.kernel_calls = 0
        self.fallbacks.clear()
        self.paths.clear()


STATS = DispatchStats()


def triton_flash_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention call on our kernel where it gives sdpa's answer exactly, else on sdpa.

    Args:
        module: the model's attention layer (``is_causal`` is read from it, as sdpa does).
        query: (batch, heads, q_len, head_dim)
        key, value: (batch, kv_heads, kv_len, head_dim), the cache's keys and values included.
        attention_mask: None, or the mask transformers' sdpa mask builder made (padding, packing,
            sliding windows, a static cache's empty slots); any mask goes to sdpa.
        scaling: the softmax scale (None: 1/sqrt(head_dim)).
        dropout: attention dropout probability; above 0 the call goes to sdpa.
        kwargs: ``is_causal`` overrides ``module.is_causal``; the rest is passed on to sdpa.

    Returns (attn_output: (batch, q_len, heads, head_dim), None): no attention weights, as sdpa.
    """
    is_causal = kwargs.pop("is_causal", None)
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q_len = query.shape[2]
    # The rule of transformers' sdpa_attention_forward (integrations/sdpa_attention.py): causal only for
    # several queries without a mask; one query (a decode step) sees every cached key: non-causal.
    causal = bool(q_len > 1 and attention_mask is None and is_causal)
    reason = _fallback_reason(query, key, value, attention_mask, dropout, causal, kwargs)
    if reason is not None:
        STATS.fallbacks[reason] += 1
        return _sdpa(module, query, key, value, attention_mask, scaling, dropout, is_causal, kwargs)
    STATS.kernel_calls += 1
    STATS.paths[f"fwd {forward_path(query, key, value, causal)}"] += 1
    if _needs_backward(query, key, value):
        STATS.paths[f"bwd {backward_path(query, key, value)}"] += 1
    # transformers hands over (B, q_len, H, D) storage as a BHSD view; our kernels write o in q's memory
    # order, so the transpose back is a view and .contiguous() copies nothing (but where the split-KV path
    # ran with several query rows: it writes o contiguous, and the copy is of that small output).
    out = flash_attention(query, key, value, causal=causal, sm_scale=scaling)  # (B, H, q_len, D)
    return out.transpose(1, 2).contiguous(), None  # (B, q_len, H, D)


def _needs_backward(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _fallback_reason(query, key, value, attention_mask, dropout, causal, kwargs) -> str | None:
    """Why our kernel cannot give sdpa's answer for this call, or None when it can."""
    if attention_mask is not None:
        return "attention_mask"
    if dropout > 0:
        return "dropout"
    if causal and key.shape[2] != query.shape[2]:
        # Our causal mask is top-left aligned; queries that follow cached keys need bottom-right. Without a
        # mask this is a prefill into an empty static cache, which sdpa handles by cutting the keys short.
        return "causal_kv_len"
    for name in SDPA_ONLY_KWARGS:
        if kwargs.get(name) is not None:
            return name
    return _kernel_lacks(query, key, value)


def _kernel_lacks(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> str | None:
    """What of these inputs our kernel does not cover (dtype, head_dim, K/V heads, device), or None."""
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in SUPPORTED_DTYPES:
        return "dtype"
    head_dims = BACKWARD_HEAD_DIMS if _needs_backward(query, key, value) else FORWARD_HEAD_DIMS
    if not (query.shape[-1] == key.shape[-1] == value.shape[-1]) or query.shape[-1] not in head_dims:
        return "head_dim"
    if query.shape[1] % key.shape[1] or key.shape[1] != value.shape[1]:
        return "kv_heads"
    try:
        check_triton_device(query)
    except ValueError:
        return "device"
    return None


def _sdpa(module, query, key, value, attention_mask, scaling, dropout, is_causal, kwargs):
    """transformers' own sdpa function, called as the model would have called it."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


def register(name: str = DEFAULT_NAME) -> str:
    """Make ``attn_implementation=name`` run attention on :func:`triton_flash_attention_forward`, with
    the masks built as for sdpa (without a mask builder transformers builds no mask at all, and a
    padded batch would attend to its padding). Idempotent; returns ``name``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    _check_name(name, AttentionInterface._global_mapping.get(name))
    AttentionInterface.register(name, triton_flash_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def _check_name(name, registered) -> None:
    """A name transformers will dispatch to us, not taken by another attention function."""
    if not isinstance(name, str) or not name or name == "eager":
        raise ValueError(f"attention implementation name {name!r} must be a non-empty string other than 'eager'")
    reserved = [part for part in RESERVED_IN_NAMES if part in name]
    if reserved:
        raise ValueError(f"attention implementation name {name!r} contains {reserved[0]!r}, which transformers "
                         f"dispatches on itself; choose another, e.g. {DEFAULT_NAME!r}")
    if registered is not None and registered is not triton_flash_attention_forward:
        raise ValueError(f"attention implementation name {name!r} is taken by {registered.__qualname__}")
