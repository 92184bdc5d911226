"""One attention problem and the names every layer shares: the row key, step names, dtypes, modes.

Torch-free, so the kernels (``kernels/``), the cost model, the store and the dashboard all read the
same definitions without loading a GPU library. Tensors are BHSD: (batch, heads, seq, head_dim).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import ClassVar

# Bytes per element of each dtype we run (IEEE 754 half and single; bfloat16 is 2 bytes).
# fp8 is e4m3 (OCP 8-bit floating point specification, E4M3; torch.float8_e4m3fn): inputs only, the output
# of an fp8 attention is bf16 (kernels.flash_fwd_fp8).
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp8": 1}
# The dtypes whose matmuls run on tensor cores (fp32 runs as IEEE fp32 on the CUDA cores in our kernels): the
# ones a softmax exponential roof applies to (profiler.model.roofs.exp_ceiling).
TENSOR_DTYPES = ("fp16", "bf16", "fp8")
MODES = ("fwd", "bwd", "fwd+bwd")
# How q, k and v may lie in memory: contiguous BHSD, or (batch, seq, heads, head_dim) storage seen as BHSD,
# as transformers and flash-attn callers hand it over (observe's 'bshd'; a user function's ``layout``).
LAYOUTS = ("bhsd", "bshd")
# The four steps of naive attention, each its own kernel(s) and its own trip through HBM
# (kernels/reference.py runs them under NVTX ranges of these names).
NAIVE_STEPS = ("qk_matmul", "scale_mask", "softmax", "pv_matmul")
LSE_BYTES = 4  # the logsumexp is kept in fp32 (kernels/flash_fwd.py)


def lengths_label(seq_q: int, seq_kv: int) -> str:
    """'N=4096' for a square shape, 'Nq=1 Nkv=4096' otherwise: the lengths as every label writes them."""
    return f"N={int(seq_q)}" if seq_q == seq_kv else f"Nq={int(seq_q)} Nkv={int(seq_kv)}"


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
    def out_elem_bytes(self) -> int:
        """Bytes per element of the output: the input's, except fp8 inputs give a bf16 output."""
        return 2 if self.dtype == "fp8" else DTYPE_BYTES[self.dtype]

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
        lengths = lengths_label(self.seq_q, self.seq_kv)
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

    @property
    def tag(self) -> str:
        """The shape in a file name, all of its key but the mode: 'B1H16N4096D64-fp16',
        'B1H32KV8N1x32768D128-bf16-causal' (``KV`` with fewer K/V heads, ``x<Nkv>`` when the lengths
        differ). Capture traces and ncu's CSVs are named so; :data:`TAG` reads it back (:meth:`from_tag`)."""
        kv = f"KV{self.kv_heads}" if self.group > 1 else ""
        lengths = f"{self.seq_q}" if self.seq_q == self.seq_kv else f"{self.seq_q}x{self.seq_kv}"
        causal = "-causal" if self.causal else ""
        return f"B{self.batch}H{self.heads}{kv}N{lengths}D{self.head_dim}-{self.dtype}{causal}"

    @classmethod
    def from_tag(cls, fields: dict, mode: str = "fwd") -> Shape:
        """The shape of a :data:`TAG` match's ``groupdict()`` (a file name says no mode: ``mode``)."""
        kv_heads, seq_kv = fields["kv_heads"], fields["seq_kv"]
        return cls(int(fields["batch"]), int(fields["heads"]), int(fields["seq_q"]), int(seq_kv or fields["seq_q"]),
                   int(fields["head_dim"]), fields["dtype"], fields["causal"] is not None, mode,
                   int(kv_heads) if kv_heads else None)

    def range_name(self, impl: str) -> str:
        """The NVTX range of one case (an implementation at this shape and mode): '<impl>/<mode>/<tag>',
        'triton_flash/fwd/B4H16N2048D64-fp16', 'naive/fwd+bwd/B1H32KV8N1x32768D128-bf16-causal'. The
        implementation and mode come first, the part a person reads in the Nsight Systems timeline; with
        the tag the name holds the whole :data:`ROW_KEY` but the step, whose ranges nest inside the case's
        (profiler.measure.ranges). :func:`parse_range_name` reads it back; ingestion joins on it
        (profiler.nsight.nsys)."""
        return f"{impl}/{self.mode}/{self.tag}"

    def row_key(self, impl: str, step: str = "total") -> tuple:
        """The :data:`ROW_KEY` values of this shape's row for one implementation and step."""
        return (impl, step, *(getattr(self, name) for name in self.KEY))


# A capture row is one implementation, one step ("total" or a naive step) and one shape: these
# columns identify it (the store de-duplicates on them; views join on them).
ROW_KEY: tuple[str, ...] = ("impl", "step", *Shape.KEY)
# Shape.tag as a pattern, one named group per key column it holds (unanchored: file names put it
# after other parts).
TAG = re.compile(r"B(?P<batch>\d+)H(?P<heads>\d+)(?:KV(?P<kv_heads>\d+))?N(?P<seq_q>\d+)(?:x(?P<seq_kv>\d+))?"
                 r"D(?P<head_dim>\d+)-(?P<dtype>" + "|".join(DTYPE_BYTES) + r")(?P<causal>-causal)?")
# Shape.range_name as a pattern, matched whole. An implementation name has no "/" (NAME in
# attention_core.implementations), a mode is one of MODES and a tag has no "/", so the three parts split
# one way only.
RANGE_NAME = re.compile(r"(?P<impl>[A-Za-z_]\w*)/(?P<mode>" + "|".join(re.escape(m) for m in MODES) + r")/"
                        + TAG.pattern)


def parse_range_name(name: str) -> tuple[str, Shape] | None:
    """(implementation, shape) of a case range from :meth:`Shape.range_name`; None for any other name
    (a step or per-repetition range below it, or a capture's range from before the name held the key)."""
    match = RANGE_NAME.fullmatch(name)
    if match is None:
        return None
    try:
        return match["impl"], Shape.from_tag(match.groupdict(), match["mode"])
    except ValueError:  # spelled like ours but no shape (B0, or K/V heads that do not divide the heads)
        return None
