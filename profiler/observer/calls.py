"""What one intercepted attention call computes: its shape, layout and mask, read off its arguments.

Each attention API has its own conventions, and this module turns them into one :class:`Call`:

- ``F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)``:
  BHSD (any leading batch dims), K/V heads = k.shape[-3]; ``is_causal`` is top-left aligned
  (torch.nn.functional docs: "the upper-left causal bias"); an explicit mask is boolean (True
  keeps) or additive (-inf drops).
- FlexAttention ``flex_attention(q, k, v, score_mod, block_mask, scale, enable_gqa, ...)``: BHSD; the
  kernel computes the blocks its ``BlockMask`` lists (full and partial) and skips the rest.
- flash-attn ``flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, ...)`` (FA2)
  and FlashAttention-4's ``flash_attn.cute.flash_attn_func``: BSHD; causal and windows are
  bottom-right aligned (flash-attn README, "causal": "the causal mask is aligned to the bottom right
  corner of the attention matrix"). ``flash_attn_varlen_func`` packs sequences of different lengths
  (total, H, D) with cumulative lengths ``cu_seqlens``.

``density`` is the fraction of the Nq×Nkv score pairs whose FLOPs are counted: 1 without a mask,
0.5 for square causal attention (the convention of the FlashAttention papers, Triton's tutorial and
tritonbench, as our capture rows count it), the exact fraction of visible pairs for causal attention
with Nq != Nkv, sliding windows and explicit masks, and the fraction of blocks a block mask computes.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from attention_core.shape import DTYPE_BYTES, Shape
from profiler.measure.ceilings import TORCH_DTYPES

# The mask kinds a row's ``mask`` column holds.
MASKS = ("none", "causal", "causal-br", "mask", "block", "window")
DTYPES = {str(dtype): name for name, dtype in TORCH_DTYPES.items()}  # torch.float16 -> fp16, ...


class Call(NamedTuple):
    """One attention call: its problem as a :class:`Shape` (BHSD; batch folds any extra leading dims) and
    what only an observed call has: the API called, how q lay in memory, and its mask.

    The shape leaves the mask out (``causal`` False, ``mode`` fwd): ``mask`` and ``density`` say which
    pairs the call computes, and the recorder charges it in each mode it runs (profiler.observer.recorder).
    A call in a dtype ``Shape`` does not take has no shape: ``other_dtype`` names it, and the call is
    counted, not modelled."""

    api: str  # sdpa, flex_attention, flash_attn, flash_attn_varlen, fa4
    shape: Shape | None  # None: a dtype Shape does not take (other_dtype)
    layout: str  # bhsd, bshd (BHSD view of a BSHD tensor, or a BSHD API), packed (varlen) or strided
    mask: str  # one of MASKS
    density: float  # fraction of Nq×Nkv score pairs computed (module docstring)
    mask_bytes: int = 0  # bytes of an explicit mask tensor (what the kernel reads besides Q, K, V)
    value_head_dim: int | None = None  # v's head dim when it differs from q's (rare; not modelled)
    other_dtype: str = ""  # torch's name of a dtype Shape does not take (float64, ...), where shape is None

    @property
    def causal(self) -> bool:
        return self.mask in ("causal", "causal-br")

    @property
    def dtype(self) -> str:
        """fp16, bf16, fp32, fp8, or torch's name of another dtype."""
        return self.shape.dtype if self.shape is not None else self.other_dtype


def dtype_name(dtype) -> str:
    return DTYPES.get(str(dtype), str(dtype).removeprefix("torch."))


@functools.lru_cache(maxsize=4096)
def _unmasked_shape(dtype: str, batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int, kv_heads: int
                    ) -> Shape | None:
    """A call's :class:`Shape` (the mask left out: Call), or None in a dtype Shape does not take. Cached: a
    run repeats a few shapes many times, and a Shape checks its fields when it is made."""
    return Shape(batch, heads, seq_q, seq_kv, head_dim, dtype, kv_heads=kv_heads) if dtype in DTYPE_BYTES else None


def _call(api: str, dtype, sizes: tuple[int, ...], layout: str, mask: str, density: float, mask_bytes: int = 0,
          value_head_dim: int | None = None) -> Call:
    """A :class:`Call` in torch's ``dtype`` of ``sizes``: (batch, heads, seq_q, seq_kv, head_dim, kv_heads)."""
    name = dtype_name(dtype)
    shape = _unmasked_shape(name, *sizes)
    return Call(api, shape, layout, mask, density, mask_bytes, value_head_dim, "" if shape is not None else name)


def layout_of(t) -> str:
    """How a BHSD view lies in memory: 'bhsd' when heads are outside the sequence, 'bshd' when the
    sequence is outside the heads (a (B, S, H, D) tensor transposed, as most models make it)."""
    if t.dim() < 3 or t.shape[-3] == 1 or t.shape[-2] == 1:
        return "bhsd"
    s_heads, s_seq = t.stride(-3), t.stride(-2)
    if t.stride(-1) != 1:
        return "strided"
    return "bhsd" if s_heads >= s_seq else "bshd"


def _batch(t) -> int:
    return math.prod(t.shape[:-3]) if t.dim() > 3 else 1


@functools.lru_cache(maxsize=4096)
def visible_fraction(seq_q: int, seq_kv: int, causal: str = "", left: int = -1, right: int = -1) -> float:
    """Fraction of the Nq×Nkv pairs a causal and/or windowed mask keeps, counted row by row.
    ``causal``: '' (none), 'top-left' (key j visible to query i when j <= i, SDPA) or 'bottom-right'
    (j <= i + Nkv - Nq, flash-attn). ``left``/``right``: flash-attn's window_size around the aligned
    diagonal (bottom-right), -1 for unbounded."""
    rows = np.arange(seq_q, dtype=np.int64)
    diag = rows if causal == "top-left" else rows + (seq_kv - seq_q)
    lo = np.zeros_like(rows) if left < 0 else np.maximum(diag - left, 0)
    hi = np.full_like(rows, seq_kv - 1)
    if causal:
        hi = np.minimum(hi, diag)
    if right >= 0:
        hi = np.minimum(hi, diag + right)
    kept = np.clip(hi - lo + 1, 0, None).sum()
    return float(kept) / (seq_q * seq_kv)


def causal_density(seq_q: int, seq_kv: int, align: str) -> float:
    """0.5 for square causal attention (the FLOP convention our capture rows use), else exact."""
    return 0.5 if seq_q == seq_kv else visible_fraction(seq_q, seq_kv, align)


def _version(t) -> int:
    """A tensor's version counter; -1 for an inference tensor, which keeps none (made under
    torch.inference_mode, it cannot change outside it)."""
    return -1 if t.is_inference() else t._version


class PerTensor:
    """Results cached per live tensor and its version. An entry goes when one of its tensors is freed,
    so a new tensor at a reused address (the caching allocator's normal case) never reads an old result."""

    def __init__(self, limit: int = 256):
        self.limit = limit
        self._entries: dict[tuple, tuple] = {}

    def get(self, tensors, extra: tuple = ()):
        entry = self._entries.get(tuple(id(t) for t in tensors) + extra)
        if entry is None:
            return None
        refs, versions, value = entry
        alive = all(ref() is t for ref, t in zip(refs, tensors))
        return value if alive and versions == tuple(_version(t) for t in tensors) else None

    def put(self, tensors, extra: tuple, value) -> None:
        import weakref

        key = tuple(id(t) for t in tensors) + extra
        entries = self._entries

        def evict(_, key=key):
            entries.pop(key, None)

        if len(entries) >= self.limit:
            entries.clear()
        entries[key] = (tuple(weakref.ref(t, evict) for t in tensors), tuple(_version(t) for t in tensors), value)


_MASKS = PerTensor()
CAUSAL_ROWS = 1024  # rows of the score matrix compared at a time: a 32k mask is not copied whole


def explicit_mask(mask, scores_shape: tuple[int, ...]) -> tuple[str, float, int]:
    """(kind, fraction of pairs an SDPA attn_mask keeps, bytes it occupies). Boolean masks keep True;
    additive float masks keep every entry above half the dtype's lowest value (-inf, and the
    ``finfo.min`` older transformers fill masked entries with). A mask that keeps every pair is kind
    ``none``, one that keeps exactly the causal pairs ``causal`` (top-left, as ``is_causal``) or
    ``causal-br`` (bottom-right), so its FLOPs follow the convention ``is_causal`` rows use
    (:func:`causal_density`): transformers passes ``is_causal=True`` eagerly and the same causal mask
    as a tensor under ``torch.compile``. Any other is kind ``mask``. Broadcast dims (stride 0, or size
    1) are read once, so they count once in the bytes; the kept fraction is over the broadcast scores
    (a mean, which broadcasting leaves as it is). Cached per live tensor and version, so a mask shared
    by every layer of a forward is counted once (one sync)."""
    found = _MASKS.get([mask], (tuple(scores_shape),))
    if found is None:
        found = classify_mask(mask, scores_shape)
        _MASKS.put([mask], (tuple(scores_shape),), found)
    return found


def classify_mask(mask, scores_shape: tuple[int, ...]) -> tuple[str, float, int]:
    """:func:`explicit_mask` without its cache (a mask made for this call alone)."""
    import torch

    kept = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    seq_q, seq_kv = scores_shape[-2], scores_shape[-1]
    nbytes = math.prod(size for size, stride in zip(mask.shape, mask.stride()) if stride != 0 and size != 1) \
        * mask.element_size()
    if not kept.numel():
        return "mask", 1.0, nbytes
    count = int(kept.sum().item())
    if count == kept.numel():
        return "none", 1.0, nbytes
    slices = kept.numel() // (kept.shape[-2] * kept.shape[-1]) if kept.dim() >= 2 else 1
    if kept.dim() >= 2 and tuple(kept.shape[-2:]) == (seq_q, seq_kv):
        aligns = [("causal", "top-left", 0)] + ([("causal-br", "bottom-right", seq_kv - seq_q)]
                                                if seq_q != seq_kv else [])
        for kind, align, diagonal in aligns:
            pairs = round(visible_fraction(seq_q, seq_kv, align) * seq_q * seq_kv)
            if count == slices * pairs and _is_causal(kept, diagonal):
                return kind, causal_density(seq_q, seq_kv, align), nbytes
    return "mask", count / kept.numel(), nbytes


def _is_causal(kept, diagonal: int) -> bool:
    """Whether key j is kept for query i exactly when j <= i + diagonal, in every broadcast slice."""
    import torch

    seq_q, seq_kv = kept.shape[-2], kept.shape[-1]
    keys = torch.arange(seq_kv, device=kept.device)
    for start in range(0, seq_q, CAUSAL_ROWS):
        rows = torch.arange(start, min(start + CAUSAL_ROWS, seq_q), device=kept.device)
        if not bool((kept[..., start:start + len(rows), :] == (keys[None, :] <= rows[:, None] + diagonal)).all()):
            return False
    return True


def sdpa_call(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
              ) -> Call:
    q, k, v = query, key, value
    batch, heads, seq_q, head_dim = _batch(q), q.shape[-3], q.shape[-2], q.shape[-1]
    kv_heads, seq_kv = k.shape[-3], k.shape[-2]
    if attn_mask is not None:
        mask, density, extra = explicit_mask(attn_mask, (*q.shape[:-1], seq_kv))
    elif is_causal:
        mask, density, extra = "causal", causal_density(seq_q, seq_kv, "top-left"), 0
    else:
        mask, density, extra = "none", 1.0, 0
    return _call("sdpa", q.dtype, (batch, heads, seq_q, seq_kv, head_dim, kv_heads), layout_of(q), mask, density,
                 extra, _value_dim(v, head_dim))


def flex_call(query, key, value, score_mod=None, block_mask=None, *args, **kwargs) -> Call:
    q, k, v = query, key, value
    batch, heads, seq_q, head_dim = _batch(q), q.shape[-3], q.shape[-2], q.shape[-1]
    kv_heads, seq_kv = k.shape[-3], k.shape[-2]
    if block_mask is None:
        mask, density = "none", 1.0
    else:
        mask, density = "block", block_density(block_mask)
    return _call("flex_attention", q.dtype, (batch, heads, seq_q, seq_kv, head_dim, kv_heads), layout_of(q), mask,
                 density, 0, _value_dim(v, head_dim))


def block_density(block_mask) -> float:
    """Fraction of (query block, key block) pairs a FlexAttention BlockMask computes (partial and
    full blocks: FlexAttention runs each listed block whole): :func:`block_fraction` of its block
    counts. Cached on the mask object, which models build once and pass to every layer."""
    cached = getattr(block_mask, "_attention_roofline_density", None)
    if cached is None:
        cached = block_fraction([block_mask.kv_num_blocks, block_mask.full_kv_num_blocks],
                                block_mask.seq_lengths[1], block_mask.BLOCK_SIZE[1])
        try:
            block_mask._attention_roofline_density = cached
        except AttributeError:  # a BlockMask with __slots__: counted again next call
            pass
    return cached


def block_fraction(num_blocks, seq_kv: int, block_kv: int) -> float:
    """The computed blocks (``kv_num_blocks`` partial and ``full_kv_num_blocks`` full ones, summed over
    batch, heads and query blocks: torch.nn.attention.flex_attention.BlockMask) over all the blocks of
    the mask: (entries of kv_num_blocks, one per query block) x ceil(Nkv / block). Counted in blocks,
    not in the block area ``BlockMask.sparsity()`` uses, which exceeds the scores when a block is
    larger than the sequence (a 64-token mask in 128 x 128 blocks is 400% dense by that count)."""
    counts = [t for t in num_blocks if t is not None]
    computed = sum(int(t.sum().item()) for t in counts)
    total = counts[0].numel() * -(-int(seq_kv) // int(block_kv))
    return computed / total if total else 1.0


def flash_attn_call(api: str, q, k, v, *args, causal=False, window_size=(-1, -1), **kwargs) -> Call:
    """flash-attn (FA2) and FA4: q (B, Sq, H, D), k and v (B, Skv, H_kv, D)."""
    batch, seq_q, heads, head_dim = q.shape
    seq_kv, kv_heads = k.shape[1], k.shape[2]
    left, right = (window_size if window_size is not None else (-1, -1))
    left, right = (-1 if left is None else int(left)), (-1 if right is None else int(right))
    if left >= 0 or right >= 0:
        mask = "window"
        density = visible_fraction(seq_q, seq_kv, "bottom-right" if causal else "", left, 0 if causal else right)
    elif causal:
        mask = "causal" if seq_q == seq_kv else "causal-br"
        density = causal_density(seq_q, seq_kv, "bottom-right")
    else:
        mask, density = "none", 1.0
    return _call(api, q.dtype, (batch, heads, seq_q, seq_kv, head_dim, kv_heads), "bshd", mask, density, 0,
                 _value_dim(v, head_dim, -1))


def _value_dim(v, head_dim: int, axis: int = -1) -> int | None:
    return None if v.shape[axis] == head_dim else int(v.shape[axis])


def flash_attn_varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *args,
                           causal=False, window_size=(-1, -1), **kwargs) -> Call:
    """flash-attn's packed sequences: q (total_q, H, D), k and v (total_kv, H_kv, D), sequence i owning
    rows cu_seqlens[i]:cu_seqlens[i + 1]. Recorded as one batch of the packed tokens (B1, Nq = total_q,
    Nkv = total_kv), so Q, K, V and O bytes are exact, with the density that makes the FLOPs exactly
    the sum over the sequences' own (bottom-right causal, windowed) attention: every pair across two
    sequences is masked. Reading the lengths costs one device-to-host copy per call."""
    lengths_q = np.diff(np.asarray(cu_seqlens_q.tolist(), dtype=np.int64))
    lengths_k = np.diff(np.asarray(cu_seqlens_k.tolist(), dtype=np.int64))
    total_q, heads, head_dim = q.shape
    total_kv, kv_heads = k.shape[0], k.shape[1]
    left, right = (window_size if window_size is not None else (-1, -1))
    windowed = left >= 0 or right >= 0
    kept = 0.0
    for n_q, n_k in zip(lengths_q.tolist(), lengths_k.tolist()):
        if n_q and n_k:
            align = "bottom-right" if causal else ""
            kept += n_q * n_k * visible_fraction(n_q, n_k, align, left, 0 if causal and windowed else right)
    mask = "window" if windowed else ("causal-br" if causal else "none")
    return _call("flash_attn_varlen", q.dtype, (1, heads, total_q, total_kv, head_dim, kv_heads), "packed", mask,
                 kept / (total_q * total_kv) if total_q and total_kv else 1.0, 0, _value_dim(v, head_dim))
