"""The NVTX range names of a capture. Every range the profiler opens is named by a function here
(the runner, naive_steps, the torch-profiler traces of cases, the ncu driver), and what reads them back
uses this module too: :func:`parse_range` (ncu ingestion), or the names built here matched whole (nsys
ingestion). A case's own name, the row key, is spelled and parsed in one place, next to the key:
attention_core.shape (``Shape.range_name``, ``parse_range_name``). Two places outside these spell range
names:

- kernels/reference.py, a leaf library that imports nothing from profiler, opens naive attention's own
  step ranges (NVTX, and torch-profiler ranges while that records), named by the step alone
  (``attn:qk_matmul``), and names the domain (its NVTX_DOMAIN, which :data:`DOMAIN` equals;
  tests/test_nsys.py checks). :func:`parse_range` returns None for them: they say which step ran, not
  which case.
- profiler.views.plots colours a trace's ranges by the first and last parts of their names (the
  implementation, the step) without parsing them whole.

All ranges are in domain ``attn`` (Nsight Systems shows ``attn:<name>``):

    <impl>/<mode>/<tag>                   one case (an implementation at one shape and mode); <tag> is
                                          Shape.tag, the rest of the row key: B4H16N2048D64-fp16,
                                          B1H32KV8N1x32768D128-bf16-causal
    <impl>/<mode>/<tag>/call              each timed repetition of it
    <impl>/<mode>/<tag>/<step>            one naive step timed alone, inside its case
    <impl>/<mode>/<tag>/<step>/call       each repetition of that step
    validate/<impl>/<step>                the one run Nsight Compute profiles (profiler.nsight)
    observe/<api>/<mode>/<site>           one attention call of an observed run (profiler.observer): the
                                          API called (sdpa, flex_attention, ...), fwd or its bwd, and the
                                          call site (model.layers.3.self_attn, or file:line)
    <step>                                qk_matmul, scale_mask, softmax or pv_matmul: opened by naive
                                          attention itself (kernels/reference.py) inside whichever range
                                          runs it, the correctness check's fp32 reference included

Captures made before the case's name held the whole key (tests/data/nsys-h200-n2048,
reports/capture-h100-user) named a case by its lengths alone, ``<impl>/<mode>/seq=<N>`` (``seq=<Nq>x<Nkv>``
when they differ, then ``,kvh=<K/V heads>`` with grouped-query attention: ``seq=1x32768,kvh=8``), with the
same ``/<step>`` and ``/call`` below it. :func:`legacy_case_range` spells those, :func:`parse_range` reads
both, and nsys ingestion falls back to matching them by order.

Implementation names are letters, digits and underscores (attention_core.implementations.NAME), so "/" splits a
name unambiguously.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from attention_core.shape import Shape, parse_range_name

DOMAIN = "attn"  # = kernels.reference.NVTX_DOMAIN, which opens the ranges (kernels/ cannot import this)
CALL = "call"
VALIDATE = "validate"
OBSERVE = "observe"


def shape_range(impl: str, shape: Shape) -> str:
    """The range of one case: ``<impl>/<mode>/<tag>`` (:meth:`Shape.range_name`), the row key whole."""
    return shape.range_name(impl)


def legacy_case_range(impl: str, mode: str, seq_q: int, seq_kv: int | None = None,
                      kv_heads: int | None = None) -> str:
    """A case's range as captures named it before it held the whole key: ``<impl>/<mode>/seq=<N>``."""
    lengths = str(seq_q) if seq_kv is None or seq_kv == seq_q else f"{seq_q}x{seq_kv}"
    return f"{impl}/{mode}/seq={lengths}" + ("" if kv_heads is None else f",kvh={kv_heads}")


def legacy_shape_range(impl: str, shape: Shape) -> str:
    """:func:`legacy_case_range` of a Shape; kv_heads appears only when it differs from heads."""
    return legacy_case_range(impl, shape.mode, shape.seq_q, shape.seq_kv,
                             shape.kv_heads if shape.group > 1 else None)


def step_range(case: str, step: str) -> str:
    """A naive step's range inside its case range (from :func:`shape_range`, or :func:`legacy_case_range`)."""
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
    shape: Shape | None = None  # the whole shape, where the name holds the key (not in a legacy name)


_LEGACY_CASE = re.compile(r"^(?P<impl>\w+)/(?P<mode>fwd|bwd|fwd\+bwd)/seq=(?P<seq>\d+)(?:x(?P<seq_kv>\d+))?"
                          r"(?:,kvh=(?P<kvh>\d+))?(?:/(?P<step>(?!call$)\w+))?(?P<call>/call)?$")
_BELOW_CASE = re.compile(r"^(?:/(?P<step>(?!call$)\w+))?(?P<call>/call)?$")  # what may follow a case's name
_VALIDATE = re.compile(r"^validate/(?P<impl>\w+)/(?P<step>\w+)$")


def parse_range(name: str) -> RangeName | None:
    """What a range name of ours says (with or without the ``attn:`` prefix); None for any other."""
    name = name.removeprefix(f"{DOMAIN}:")
    if match := _VALIDATE.match(name):
        return RangeName(match["impl"], match["step"], validate=True)
    parts = name.split("/", 3)  # the case's three parts, then what nests below it
    if (case := parse_range_name("/".join(parts[:3]))) is not None:
        below = _BELOW_CASE.match("/" + parts[3] if len(parts) > 3 else "")
        if below is None:
            return None
        impl, shape = case
        return RangeName(impl, below["step"] or "total", shape.mode, shape.seq_q,
                         None if shape.seq_kv == shape.seq_q else shape.seq_kv,
                         shape.kv_heads if shape.group > 1 else None, call=below["call"] is not None, shape=shape)
    if match := _LEGACY_CASE.match(name):
        seq = int(match["seq"])
        return RangeName(match["impl"], match["step"] or "total", match["mode"], seq,
                         int(match["seq_kv"]) if match["seq_kv"] else None,
                         int(match["kvh"]) if match["kvh"] else None, call=match["call"] is not None)
    return None
