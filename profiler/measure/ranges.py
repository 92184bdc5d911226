"""The NVTX range names of a capture: built here, parsed here, nowhere else.

All ranges are in domain ``attn`` (Nsight Systems shows ``attn:<name>``):

    <impl>/<mode>/seq=<N>                 one case (an implementation at one shape and mode)
    <impl>/<mode>/seq=<N>/call            each timed repetition of it
    <impl>/<mode>/seq=<N>/<step>          one naive step timed alone, inside its case
    <impl>/<mode>/seq=<N>/<step>/call     each repetition of that step
    validate/<impl>/<step>                the one run Nsight Compute profiles (profiler.nsight)

Implementation names are letters, digits and underscores (kernels.registry.NAME), so "/" splits a
name unambiguously.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOMAIN = "attn"
CALL = "call"
VALIDATE = "validate"


def case_range(impl: str, mode: str, seq_q: int) -> str:
    return f"{impl}/{mode}/seq={seq_q}"


def step_range(impl: str, mode: str, seq_q: int, step: str) -> str:
    return f"{case_range(impl, mode, seq_q)}/{step}"


def call_range(parent: str) -> str:
    """The range around each timed repetition inside ``parent`` (a case or a step range)."""
    return f"{parent}/{CALL}"


def validate_range(impl: str, step: str) -> str:
    return f"{VALIDATE}/{impl}/{step}"


def qualified(name: str) -> str:
    """The name as Nsight Systems and Nsight Compute print it: ``attn:<name>``."""
    return f"{DOMAIN}:{name}"


@dataclass(frozen=True)
class RangeName:
    impl: str
    step: str  # "total" for a whole case
    mode: str | None = None  # None for validate ranges
    seq_q: int | None = None
    call: bool = False  # a per-repetition range
    validate: bool = False


_CASE = re.compile(r"^(?P<impl>\w+)/(?P<mode>fwd|bwd|fwd\+bwd)/seq=(?P<seq>\d+)(?:/(?P<step>(?!call$)\w+))?"
                   r"(?P<call>/call)?$")
_VALIDATE = re.compile(r"^validate/(?P<impl>\w+)/(?P<step>\w+)$")


def parse_range(name: str) -> RangeName | None:
    """What a range name of ours says (with or without the ``attn:`` prefix); None for any other."""
    name = name.removeprefix(f"{DOMAIN}:")
    if match := _VALIDATE.match(name):
        return RangeName(match["impl"], match["step"], validate=True)
    if match := _CASE.match(name):
        return RangeName(match["impl"], match["step"] or "total", match["mode"], int(match["seq"]),
                         call=match["call"] is not None)
    return None
