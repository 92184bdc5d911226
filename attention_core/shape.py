"""One attention problem and the names every layer shares: the row key, step names, dtypes, modes.

Torch-free, so the kernels (``kernels/``), the cost model, the store and the dashboard all read the
same definitions without loading a GPU library. Tensors are BHSD: (batch, heads, seq, head_dim).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

# Bytes per element of each dtype we run (IEEE 754 half and single; bfloat16 is 2 bytes).
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
MODES = ("fwd", "bwd", "fwd+bwd")
# The four steps of naive attention, each its own kernel(s) and its own trip through HBM
# (kernels/reference.py runs them under NVTX ranges of these names).
NAIVE_STEPS = ("qk_matmul", "scale_mask", "softmax", "pv_matmul")
LSE_BYTES = 4  # the logsumexp is kept in fp32 (kernels/flash_fwd.py)


@dataclass(frozen=True)
class Shape:
    """One attention problem. Tensors are BHSD: (batch, heads, seq, head_dim).

    ``KEY`` names the columns that identify a shape in a stored row; a row is one implementation,
    one step and one shape, so the store's row key is :data:`ROW_KEY`. :meth:`to_row` and
    :meth:`from_row` go between the two; every table, join and file name derives from them."""

    KEY: ClassVar[tuple[str, ...]] = ("mode", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "dtype",
                                      "causal")

    batch: int
    heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    dtype: str = "fp16"
    causal: bool = False
    mode: str = "fwd"
    # Heads of K and V (grouped-query attention: query head h reads K/V head h // (heads // kv_heads),
    # as SDPA's enable_gqa and repeat_interleave do). None means heads (multi-head attention).
    kv_heads: int | None = None

    def __post_init__(self):
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for name in ("batch", "heads", "seq_q", "seq_kv", "head_dim", "kv_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads {self.kv_heads} must divide heads {self.heads} (each K/V head serves "
                             "an equal group of query heads)")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype '{self.dtype}' is not supported; allowed: {', '.join(DTYPE_BYTES)}")
        if self.mode not in MODES:
            raise ValueError(f"mode '{self.mode}' is not supported; allowed: {', '.join(MODES)}")

    @classmethod
    def square(cls, batch: int, heads: int, seq: int, head_dim: int, **kw) -> Shape:
        return cls(batch, heads, seq, seq, head_dim, **kw)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def bh(self) -> int:
        return self.batch * self.heads

    @property
    def group(self) -> int:
        """Query heads per K/V head: 1 for multi-head, heads for multi-query attention."""
        return self.heads // self.kv_heads

    @property
    def score_elems(self) -> int:
        """Elements of the N×N matrix S (or P) over all batches and heads."""
        return self.bh * self.seq_q * self.seq_kv

    @property
    def label(self) -> str:
        """'B4 H32 N=8192 D64 fp16', 'B1 H32/8 Nq=1 Nkv=32768 D128 bf16 causal': for titles and progress."""
        heads = f"H{self.heads}" + (f"/{self.kv_heads}" if self.group > 1 else "")
        lengths = f"N={self.seq_q}" if self.seq_q == self.seq_kv else f"Nq={self.seq_q} Nkv={self.seq_kv}"
        return f"B{self.batch} {heads} {lengths} D{self.head_dim} {self.dtype}{' causal' if self.causal else ''}"

    def with_mode(self, mode: str) -> Shape:
        return replace(self, mode=mode)

    @classmethod
    def from_row(cls, row) -> Shape:
        """The shape of a stored row (a dict, a pandas row or a namedtuple with the store's shape
        columns); a row without ``mode`` (validation tables: forward only) reads as fwd."""
        get = row.get if hasattr(row, "get") else lambda k, default=None: getattr(row, k, default)
        kv_heads = get("kv_heads")
        return cls(int(get("batch")), int(get("heads")), int(get("seq_q")), int(get("seq_kv")),
                   int(get("head_dim")), str(get("dtype")), bool(get("causal")), str(get("mode", "fwd") or "fwd"),
                   None if kv_heads is None or kv_heads != kv_heads else int(kv_heads))  # NaN: a capture before GQA

    def to_row(self) -> dict:
        """The shape's key columns, as a stored row holds them."""
        return {name: getattr(self, name) for name in self.KEY}

    def row_key(self, impl: str, step: str = "total") -> tuple:
        """The :data:`ROW_KEY` values of this shape's row for one implementation and step."""
        return (impl, step, *(getattr(self, name) for name in self.KEY))


# A capture row is one implementation, one step ("total" or a naive step) and one shape: these
# columns identify it (the store de-duplicates on them; views join on them).
ROW_KEY: tuple[str, ...] = ("impl", "step", *Shape.KEY)
