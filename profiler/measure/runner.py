"""Run one implementation on one shape: inputs, correctness against an fp32 reference, timing with
CUDA events (``triton.testing.do_bench``), and peak memory. The benchmark and the capture build on it.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch

from attention_core.shape import LAYOUTS, Shape
from kernels.reference import (
    TOLERANCE,
    WrongOutput,
    check_output,
    naive_attention,
    nvtx_range,
    output_dtype,
    relative_error,
)
from kernels.sdpa import Unsupported
from profiler.measure.ceilings import TORCH_DTYPES
from profiler.measure.ranges import call_range, shape_range
from profiler.measure.timing import GraphCaptureError, Timing, measure
from profiler.model.cost import cost_of, kernel_path
from profiler.registry import Impl

CHECK_HEADS = 2  # the correctness check runs on batch 0 and the first heads only, to bound its cost


@dataclass
class CaseResult:
    impl: str
    shape: Shape
    status: str  # ok, wrong, oom, unsupported, error
    message: str = ""
    timing: Timing | None = None
    flops: float = 0.0  # the cost model's FLOPs of the whole case (profiler.model.cost.cost_of)
    peak_mem_bytes: int | None = None
    max_rel_err: float | None = None
    path: str | None = None  # the kernel path it ran (Impl.path_of); None: the shape's (model.cost.kernel_path)

    @property
    def tflops(self) -> float | None:
        """Achieved TFLOP/s; None unless the case ran and passed the correctness check."""
        if self.timing is None or self.status != "ok":
            return None
        return self.flops / (self.timing.median_ms * 1e-3) / 1e12


INPUT_LAYOUTS = LAYOUTS  # the memory layouts make_inputs lays the inputs out in (attention_core.shape)


def make_inputs(shape: Shape, device, seed: int = 0, requires_grad: bool = False, layout: str = "bhsd"):
    """Random q, k, v (and dO) for ``shape``: normal, never zeros; k and v have the shape's kv_heads.
    ``layout`` (:data:`INPUT_LAYOUTS`) is how they lie in memory; the values are the same either way."""
    if layout not in INPUT_LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {', '.join(INPUT_LAYOUTS)}")
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = TORCH_DTYPES[shape.dtype]

    def rand(heads, rows):
        if shape.dtype == "fp8":  # normal values rounded to e4m3 (|x| < 448: a descale of one stands for them)
            t = torch.randn(shape.batch, heads, rows, shape.head_dim, generator=gen, device=device).to(dtype)
            return t.transpose(1, 2).contiguous().transpose(1, 2) if layout == "bshd" else t
        t = torch.randn(shape.batch, heads, rows, shape.head_dim, generator=gen, device=device, dtype=dtype)
        if layout == "bshd":
            t = t.transpose(1, 2).contiguous().transpose(1, 2)
        return t.requires_grad_(requires_grad)

    q, k, v = rand(shape.heads, shape.seq_q), rand(shape.kv_heads, shape.seq_kv), rand(shape.kv_heads, shape.seq_kv)
    if shape.dtype == "fp8":  # V with its keys contiguous, the order fp8 wgmma reads P V's operand in
        from kernels.flash_fwd_fp8 import keys_contiguous_layout

        v = keys_contiguous_layout(v)
    return q, k, v, rand(shape.heads, shape.seq_q).detach()


def _slice_error(impl: Impl, q, k, v, do, shape: Shape) -> float:
    """Max relative error of o (and dq, dk, dv when timing backward) on batch 0, first heads,
    against naive attention in fp32 on the same device. With grouped-query attention: the first
    K/V head and the first query heads of its group. Raises :class:`WrongOutput` when an output
    or gradient has the wrong shape or dtype or is not finite (before comparing: a broadcastable
    shape would otherwise compare)."""
    kv_heads = 1 if shape.group > 1 else min(CHECK_HEADS, shape.heads)
    heads = min(CHECK_HEADS, shape.group) if shape.group > 1 else kv_heads
    parts = [t[:1, :n].detach().clone().requires_grad_(shape.mode != "fwd")
             for t, n in ((q, heads), (k, kv_heads), (v, kv_heads))]
    ref_parts = [t.detach().float().requires_grad_(shape.mode != "fwd") for t in parts]
    with torch.no_grad() if shape.mode == "fwd" else torch.enable_grad():
        out = impl.fn(*parts, causal=shape.causal)
        ref = naive_attention(*ref_parts, causal=shape.causal)
    check_output("the output", out, ref, output_dtype(q.dtype))
    errors = [relative_error(out, ref)]
    if shape.mode != "fwd":
        if not out.requires_grad:
            raise WrongOutput("the output is detached from q, k and v: no backward reaches them")
        grad = do[:1, :heads]
        out.backward(grad)
        ref.backward(grad.float())
        for name, a, b in zip(("dq", "dk", "dv"), parts, ref_parts):
            if a.grad is None:
                raise WrongOutput(f"{name} is None: the backward did not reach {name[1]}")
            check_output(name, a.grad, b.grad, q.dtype)
            errors.append(relative_error(a.grad, b.grad))
    return max(errors)


def tolerance_of(impl: Impl, shape: Shape) -> float:
    """The largest error a correct run may have: the implementation's own where its registry entry
    documents one, else its dtype's (kernels.reference.TOLERANCE)."""
    return impl.tolerance if impl.tolerance is not None else TOLERANCE[shape.dtype]


def mode_call(impl: Impl, shape: Shape, q, k, v, do) -> Callable[[], None]:
    """The work one repetition does in the shape's mode: the forward under no_grad; the backward
    alone, from an output computed once here; or forward and backward together."""
    if shape.mode == "fwd":
        def call():
            with torch.no_grad():
                impl.fn(q, k, v, causal=shape.causal)
    elif shape.mode == "bwd":
        out = impl.fn(q, k, v, causal=shape.causal)

        def call():
            out.backward(do, retain_graph=True)
    else:
        def call():
            impl.fn(q, k, v, causal=shape.causal).backward(do)
    return call


INTERPRETED = ("the Triton interpreter ran it (TRITON_INTERPRET=1): its output passed the check, but "
               "the time is the interpreter's, not a kernel's, so it has no rate and is on no chart")


def run_case(impl: Impl, shape: Shape, device, *, check: bool = True, rep_ms: int = 100, warmup_ms: int = 25,
             annotate: bool = True, graph: bool = False, layout: str = "bhsd") -> CaseResult:
    """Time ``impl`` on ``shape`` in its mode, inside the NVTX range ``<impl>/<mode>/<Shape.tag>``
    (Shape.range_name) unless ``annotate`` is False (the caller opened it); with ``graph``, replays of a CUDA
    graph of the call (profiler.measure.timing), after ``warmup_ms`` of do_bench's warm-up; inputs in ``layout``
    (:func:`make_inputs`); without ``check``, no correctness check (a later round of a checked case). Never raises
    for a failing case: the result's status says ok, wrong (the output failed the correctness check: still timed,
    for the record), interpreted (a Triton kernel the interpreter ran: checked, timed for the record, no
    rate), oom, unsupported or error.
    """
    device = torch.device(device)
    result = CaseResult(impl.name, shape, "ok", flops=cost_of(impl.costing, shape).flops)
    reason = impl.unsupported_reason(device, TORCH_DTYPES[shape.dtype], shape.head_dim,
                                     backward=shape.mode != "fwd", grouped=shape.group > 1)
    if reason:
        result.status, result.message = "unsupported", reason
        return result
    q = k = v = do = None
    try:
        q, k, v, do = make_inputs(shape, device, requires_grad=shape.mode != "fwd", layout=layout)
        if impl.path_of is not None:
            backward = None
            if shape.mode != "fwd" and impl.backward_path_of is not None:
                backward = impl.backward_path_of(q, k, v)
            result.path = kernel_path(impl.costing, shape, forward=impl.path_of(q, k, v, shape.causal),
                                      backward=backward)
        if check:
            try:
                result.max_rel_err = _slice_error(impl, q, k, v, do, shape)
            except WrongOutput as err:
                result.status, result.message = "wrong", str(err)
            else:
                limit = tolerance_of(impl, shape)
                if not result.max_rel_err <= limit:  # NaN fails too
                    whose = "its registered" if impl.tolerance is not None else f"the {shape.dtype}"
                    result.status = "wrong"
                    result.message = (f"max relative error {result.max_rel_err:.2g} against fp32 naive attention is "
                                      f"above {whose} tolerance {limit:.2g}")
        if result.status == "wrong":
            # Timed for the record where it can be; an output that is not attention's may not even take a
            # backward (None, a list, a detached or mis-shaped tensor), and that keeps its verdict.
            try:
                _time(result, impl, shape, q, k, v, do, device, rep_ms, warmup_ms, annotate, graph)
            except Exception as err:  # whatever the user's function raises here: the case is wrong already
                if is_out_of_memory(err):
                    raise
                result.timing = None
                result.message += f"; not timed: {type(err).__name__}: {first_line(err)}"
        else:
            _time(result, impl, shape, q, k, v, do, device, rep_ms, warmup_ms, annotate, graph)
            if impl.is_triton and (device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1"):
                result.status, result.message = "interpreted", INTERPRETED  # also on a GPU: its time is not a kernel's
    except Unsupported as err:
        result.status, result.message = "unsupported", str(err)
    except GraphCaptureError as err:
        result.status, result.message = "error", str(err)
    except (torch.OutOfMemoryError, MemoryError) as err:
        result.status, result.message = "oom", first_line(err)
    except (RuntimeError, ValueError, TypeError) as err:
        if is_out_of_memory(err):
            result.status, result.message = "oom", first_line(err)
        else:
            result.status, result.message = "error", f"{type(err).__name__}: {first_line(err)}"
    finally:
        q = k = v = do = None  # release the inputs before the next case
        free_memory(device)
    return result


def _time(result: CaseResult, impl: Impl, shape: Shape, q, k, v, do, device, rep_ms: int, warmup_ms: int,
          annotate: bool, graph: bool) -> None:
    """Time the case in its mode inside its NVTX range, then its peak memory, into ``result``."""
    range_name = shape_range(impl.name, shape)
    call = mode_call(impl, shape, q, k, v, do)

    def timed_call():
        # One NVTX range per timed call: Nsight Systems then sees each repetition on its own,
        # apart from do_bench's L2 flushes, and its median compares with the CUDA-event median.
        with nvtx_range(call_range(range_name)):
            call()

    with nvtx_range(range_name) if annotate else nullcontext():
        result.timing = measure(timed_call, device, rep_ms=rep_ms, warmup_ms=warmup_ms, graph=graph,
                                grad_to_none=None if shape.mode == "fwd" else [q, k, v])
    result.peak_mem_bytes = _peak_memory(impl, q, k, v, do, shape, device)


def median_round(results: list[CaseResult]) -> CaseResult:
    """One case timed in several rounds (``--rounds``), as one result: the first round's (its correctness
    check, path and peak memory) with the timing of the round whose median time is the rounds' median, and the
    number of rounds and their spread (the slowest round's median over the fastest's, minus one) in it. With an
    odd number of rounds that median is one round's own, so its percentiles, clock and power belong to it. A round
    that did not end ok (out of memory on a later round) stands for the case instead, the first such one."""
    if len(results) == 1:
        return results[0]
    failed = next((r for r in results if r.status != "ok" or r.timing is None), None)
    if failed is not None:
        return failed
    times = sorted(results, key=lambda r: r.timing.median_ms)
    fastest, slowest = times[0].timing.median_ms, times[-1].timing.median_ms
    middle = times[(len(times) - 1) // 2].timing
    return replace(results[0], timing=replace(middle, rounds=len(results), round_spread=slowest / fastest - 1))


def is_out_of_memory(err: BaseException) -> bool:
    """Out of memory on any device: CUDA raises torch.OutOfMemoryError, Python MemoryError, and
    PyTorch's CPU allocator a RuntimeError saying it "can't allocate memory"."""
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in str(err)


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def free_memory(device) -> None:
    """Drop what the last case left (cycles, the CUDA caching allocator's free blocks)."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _peak_memory(impl: Impl, q, k, v, do, shape: Shape, device) -> int | None:
    """Bytes allocated at peak by one run of the case, above what its inputs already hold."""
    if device.type != "cuda":
        return None
    for t in (q, k, v):
        t.grad = None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    if shape.mode == "fwd":
        with torch.no_grad():
            out = impl.fn(q, k, v, causal=shape.causal)
    else:
        out = impl.fn(q, k, v, causal=shape.causal)
        out.backward(do)
    torch.cuda.synchronize(device)
    del out
    return torch.cuda.max_memory_allocated(device) - base
