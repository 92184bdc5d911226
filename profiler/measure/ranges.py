"""The NVTX range names of a capture. Every range the profiler opens is named by a function here
(the runner, naive_steps, the torch-profiler traces of cases, the ncu driver), and what reads them back
uses this module too: :func:`parse_range` (ncu ingestion), or the names built here matched whole (nsys
ingestion). Two places outside this module spell range names:

- kernels/reference.py, a leaf library that imports nothing from profiler, opens naive attention's own
  step ranges (NVTX, and torch-profiler ranges while that records), named by the step alone
  (``attn:qk_matmul``), and names the domain (its NVTX_DOMAIN, which :data:`DOMAIN` equals;
  tests/test_nsys.py checks). :func:`parse_range` returns None for them: they say which step ran, not
  which case.
- profiler.views.plots colours a trace's ranges by the first and last parts of their names (the
  implementation, the step) without parsing them whole.

All ranges are in domain ``attn`` (Nsight Systems shows ``attn:<name>``):

    <impl>/<mode>/seq=<N>                 one case (an implementation at one shape and mode); when the
                                          lengths differ seq=<Nq>x<Nkv>, and with grouped-query
                                          attention ,kvh=<K/V heads> follows (seq=1x32768,kvh=8)
    <impl>/<mode>/seq=<N>/call            each timed repetition of it
    <impl>/<mode>/seq=<N>/<step>          one naive step timed alone, inside its case
    <impl>/<mode>/seq=<N>/<step>/call     each repetition of that step
    validate/<impl>/<step>                the one run Nsight Compute profiles (profiler.nsight)
    observe/<api>/<mode>/<site>           one attention call of an observed run (profiler.observer): the
                                          API called (sdpa, flex_attention, ...), fwd or its bwd, and the
                                          call site (model.layers.3.self_attn, or file:line)
    <step>                                qk_matmul, scale_mask, softmax or pv_matmul: opened by naive
                                          attention itself (kernels/reference.py) inside whichever range
                                          runs it, the correctness check's fp32 reference included

Implementation names are letters, digits and underscores (profiler.registry.NAME), so "/" splits a
name unambiguously.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOMAIN = "attn"  # = kernels.reference.NVTX_DOMAIN, which opens the ranges (kernels/ cannot import this)
CALL = "call"
VALIDATE = "validate"
OBSERVE = "observe"


def case_range(impl: str, mode: str, seq_q: int, seq_kv: int | None = None, kv_heads: int | None = None) -> str:
    lengths = str(seq_q) if seq_kv is None or seq_kv == seq_q else f"{seq_q}x{seq_kv}"
    return f"{impl}/{mode}/seq={lengths}" + ("" if kv_heads is None else f",kvh={kv_heads}")


def shape_range(impl: str, shape) -> str:
    """The case range of a Shape, or of a stored row (anything with mode, seq_q, seq_kv, heads and
    kv_heads attributes); kv_heads appears only when it differs from heads."""
    kv_heads = getattr(shape, "kv_heads", None)
    grouped = kv_heads is not None and kv_heads == kv_heads and int(kv_heads) != int(shape.heads)
    return case_range(impl, shape.mode, int(shape.seq_q), int(shape.seq_kv), int(kv_heads) if grouped else None)


def step_range(case: str, step: str) -> str:
    """A naive step's range inside its case range (from :func:`case_range` or :func:`shape_range`)."""
    return f"{case}/{step}"


def call_range(parent: str) -> str:
    """The range around each timed repetition inside ``parent`` (a case or a step range)."""
    return f"{parent}/{CALL}"


def validate_range(impl: str, step: str) -> str:
    return f"{VALIDATE}/{impl}/{step}"


def observe_range(api: str, mode: str, site: str) -> str:
    return f"{OBSERVE}/{api}/{mode}/{site}"


def qualified(name: str) -> str:
    """The name as Nsight Systems and Nsight Compute print it: ``attn:<name>``."""
    return f"{DOMAIN}:{name}"


@dataclass(frozen=True)
class RangeName:
    impl: str
    step: str  # "total" for a whole case
    mode: str | None = None  # None for validate ranges
    seq_q: int | None = None
    seq_kv: int | None = None  # None: as long as seq_q
    kv_heads: int | None = None  # None: as many as the query heads
    call: bool = False  # a per-repetition range
    validate: bool = False


_CASE = re.compile(r"^(?P<impl>\w+)/(?P<mode>fwd|bwd|fwd\+bwd)/seq=(?P<seq>\d+)(?:x(?P<seq_kv>\d+))?"
                   r"(?:,kvh=(?P<kvh>\d+))?(?:/(?P<step>(?!call$)\w+))?(?P<call>/call)?$")
_VALIDATE = re.compile(r"^validate/(?P<impl>\w+)/(?P<step>\w+)$")


def parse_range(name: str) -> RangeName | None:
    """What a range name of ours says (with or without the ``attn:`` prefix); None for any other."""
    name = name.removeprefix(f"{DOMAIN}:")
    if match := _VALIDATE.match(name):
        return RangeName(match["impl"], match["step"], validate=True)
    if match := _CASE.match(name):
        seq = int(match["seq"])
        return RangeName(match["impl"], match["step"] or "total", match["mode"], seq,
                         int(match["seq_kv"]) if match["seq_kv"] else None,
                         int(match["kvh"]) if match["kvh"] else None, call=match["call"] is not None)
    return None
