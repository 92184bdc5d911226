"""Naive attention's four steps timed one by one (QKᵀ, scale/mask, softmax, PV), each in its own
NVTX range, in the shape's mode. Nsight Compute's driver profiles the same calls."""

from __future__ import annotations

import math

import torch

from attention_core.shape import Shape
from kernels import reference
from kernels.reference import nvtx_range
from profiler.measure.ranges import call_range, shape_range, step_range
from profiler.measure.runner import first_line, free_memory, is_out_of_memory, make_inputs
from profiler.measure.timing import measure
from profiler.model.roofs import Roofs
from profiler.model.rows import capture_row
from profiler.registry import Impl


def naive_step_calls(shape: Shape, q, k, v):
    """Yield (step, callable) timing one naive step alone in the shape's mode. S, the scaled S and
    P are computed once up front; a backward step differentiates that step's output with respect
    to its own inputs. One step's extra tensors live only while it is timed."""
    scale = 1.0 / math.sqrt(shape.head_dim)
    grad = shape.mode != "fwd"
    with torch.no_grad():
        s = reference.qk_matmul(q, k)
        s_scaled = reference.scale_mask(s, scale, shape.causal)
        p = reference.softmax(s_scaled)
    steps = {
        "qk_matmul": (reference.qk_matmul, (q, k)),
        "scale_mask": (lambda x: reference.scale_mask(x, scale, shape.causal), (s.requires_grad_(grad),)),
        "softmax": (reference.softmax, (s_scaled.requires_grad_(grad),)),
        "pv_matmul": (reference.pv_matmul, (p.requires_grad_(grad), v)),
    }
    for step, (fn, args) in steps.items():
        if shape.mode == "fwd":
            yield step, lambda fn=fn, args=args: _no_grad_call(fn, args)
            continue
        out = fn(*args)
        dout = torch.randn_like(out)
        if shape.mode == "bwd":
            yield step, lambda out=out, args=args, dout=dout: torch.autograd.grad(out, args, dout, retain_graph=True)
        else:
            yield step, lambda fn=fn, args=args, dout=dout: torch.autograd.grad(fn(*args), args, dout)
        out = dout = None


def _no_grad_call(fn, args):
    with torch.no_grad():
        return fn(*args)


def time_naive_steps(impl: Impl, shape: Shape, device, roofs: Roofs, rep_ms: int, graph: bool = False,
                     layout: str = "bhsd", warmup_ms: int = 25) -> list[dict]:
    """One row per naive step, each timed alone on inputs in ``layout``; a step that runs out of memory says so."""
    rows = []
    done = set()
    try:
        q, k, v, _ = make_inputs(shape, device, requires_grad=shape.mode != "fwd", layout=layout)
        for step, call in naive_step_calls(shape, q, k, v):
            name = step_range(shape_range(impl.name, shape), step)

            def timed_call(call=call, name=name):
                with nvtx_range(call_range(name)):  # one range per repetition, as in runner.run_case
                    call()

            with nvtx_range(name):
                timing = measure(timed_call, device, rep_ms=rep_ms, warmup_ms=warmup_ms, graph=graph)
            rows.append(capture_row(impl.name, impl.costing, shape, step, roofs, timing=timing, status="ok"))
            done.add(step)
            call = None
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as err:
        if not is_out_of_memory(err):
            raise
        rows += [capture_row(impl.name, impl.costing, shape, step, roofs, timing=None, status="oom",
                              message=first_line(err)) for step in impl.steps if step not in done]
    finally:
        q = k = v = None
        free_memory(device)
    return rows
