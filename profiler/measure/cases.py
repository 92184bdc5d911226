"""Measure implementations over shapes into a capture folder: time each case, join it with the
cost model and the device's roofs, and store one row per implementation × shape × mode × step.

Every measured region is an NVTX range in domain "attn" (profiler.measure.ranges), and the whole
measured part runs between cudaProfilerStart and cudaProfilerStop, so
``nsys profile --capture-range=cudaProfilerApi`` records just that. This module imports neither
plotly nor streamlit.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

from attention_core.shape import ROW_KEY, Shape
from kernels.reference import nvtx_range
from profiler.measure.ceilings import TORCH_DTYPES
from profiler.measure.naive_steps import time_naive_steps
from profiler.measure.ranges import shape_range
from profiler.measure.runner import CaseResult, free_memory, make_inputs, median_round, mode_call, run_case
from profiler.measure.torch_trace import kernels_of_capture, record_one_iteration, trace_file_name
from profiler.model.roofs import Roofs
from profiler.model.rows import capture_row
from profiler.registry import Impl
from profiler.store import Capture, ResultStore


@contextmanager
def cuda_profiler_range(enabled: bool):
    """cudaProfilerStart/Stop around the measured part (for nsys --capture-range=cudaProfilerApi)."""
    if enabled:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    try:
        yield
    finally:
        if enabled:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


def case_rows(result: CaseResult, impl: Impl, roofs: Roofs) -> list[dict]:
    return [capture_row(impl.name, impl.costing, result.shape, "total", roofs, timing=result.timing,
                         status=result.status, message=result.message, peak_mem_bytes=result.peak_mem_bytes,
                         max_rel_err=result.max_rel_err, path=result.path)]


def trace_case(impl: Impl, shape: Shape, device, folder: Path) -> bool:
    """One iteration of ``impl`` under the torch profiler, saved as a Chrome trace in
    ``folder/traces``; False when it could not run."""
    if impl.unsupported_reason(device, TORCH_DTYPES[shape.dtype], shape.head_dim, backward=shape.mode != "fwd",
                                    grouped=shape.group > 1):
        return False
    name = trace_file_name(impl.name, shape)
    q = k = v = do = once = None
    try:
        q, k, v, do = make_inputs(shape, device, requires_grad=shape.mode != "fwd")
        once = mode_call(impl, shape, q, k, v, do)
        once()  # warm-up: compilation and autotuning stay out of the trace
        record_one_iteration(once, shape_range(impl.name, shape), Capture(folder).trace_path(name),
                             cuda=torch.device(device).type == "cuda")
        return True
    except RuntimeError:  # OOM included: the timing row already says what happened
        return False
    finally:
        q = k = v = do = once = None
        free_memory(device)


def measure_cases(store: ResultStore, cases: list[tuple[Shape, Impl]], device, roofs: Roofs, *, rep_ms: int,
                  progress=None, finished: Callable[[str, list[dict] | None], None] | None = None,
                  trace_filter: Callable[[Shape], bool] | None = None,
                  write_kernels: bool = True, graph: bool = False,
                  layouts: dict | None = None, rounds: int = 1, warmup_ms: int = 25) -> list[dict]:
    """Measure every (shape, impl) case, appending rows to ``store`` as each finishes. ``progress``
    hears each case's description before it runs (with ``rounds``, each round's, and ``steps=rounds``
    for a case --resume skips), ``finished`` the description and the rows it
    wrote after (None when --resume found it already measured). Shapes that
    ``trace_filter`` accepts also get a torch-profiler trace per implementation (and, with
    ``write_kernels``, the capture's kernel table is rebuilt from its traces). ``graph`` times
    replays of a CUDA graph of each call (forward only; profiler.measure.timing). ``layouts`` maps a
    shape to the memory layout its inputs take (profiler.measure.runner.INPUT_LAYOUTS; default BHSD),
    recorded in the rows' ``layout`` (observe's replays, in the layout the run's calls had).

    ``rounds`` above one interleaves: at each shape the implementations take turns, ``rounds`` times, each round in
    an order rotated by one (with as many rounds as implementations, each goes first once), and each row is the
    median round (profiler.measure.runner.median_round); only the first round checks correctness, and a case that
    did not pass it is not timed again. A GPU's state (clock, power, temperature) drifts over seconds, so two cases
    timed a minute apart differ by that much without either changing; turns within a shape put the drift on every
    implementation alike. A shape's rows are written once its rounds are done; --resume times a shape's missing
    implementations in turns among themselves. ``warmup_ms`` is do_bench's warm-up before each timing."""
    device = torch.device(device)
    new_rows = []
    with cuda_profiler_range(device.type == "cuda"):
        # One round: each case alone, its rows written as it finishes; several: a shape's cases together.
        for shape, impls in by_shape(cases) if rounds > 1 else [(shape, [impl]) for shape, impl in cases]:
            todo = []
            for impl in impls:
                description = case_words(impl, shape)
                if store.has(dict(zip(ROW_KEY, shape.row_key(impl.name)))):
                    if progress is not None:
                        progress(description, **({"steps": rounds} if rounds > 1 else {}))
                    if finished is not None:
                        finished(description, None)
                    continue  # --resume: already measured
                todo.append(impl)
            layout = (layouts or {}).get(shape, "bhsd")
            timed, steps = _time_in_rounds(shape, todo, device, rounds, progress, roofs, rep_ms=rep_ms,
                                           warmup_ms=warmup_ms, graph=graph, layout=layout)
            for impl in todo:
                description = case_words(impl, shape)
                result = median_round(timed[impl.name])
                rows = case_rows(result, impl, roofs) + steps[impl.name]
                if layouts is not None:
                    rows = [row | {"layout": layout} for row in rows]
                store.append(rows)
                new_rows += rows
                if finished is not None:
                    finished(description, rows)
                if trace_filter is not None and trace_filter(shape) and result.status == "ok":
                    if trace_case(impl, shape, device, store.folder) and write_kernels:
                        store.write_kernels(kernels_of_capture(store.folder))
    return new_rows


def case_words(impl: Impl, shape: Shape) -> str:
    """A case as the progress bar and the per-case lines name it: ``triton_flash fwd B4 H32 N=4096 D64 fp16``."""
    return f"{impl.name} {shape.mode} {shape.label}"


def by_shape(cases: list[tuple[Shape, Impl]]) -> list[tuple[Shape, list[Impl]]]:
    """Consecutive cases at one shape, as (shape, their implementations in order)."""
    groups: list[tuple[Shape, list[Impl]]] = []
    for shape, impl in cases:
        if groups and groups[-1][0] == shape:
            groups[-1][1].append(impl)
        else:
            groups.append((shape, [impl]))
    return groups


def _time_in_rounds(shape: Shape, impls: list[Impl], device, rounds: int, progress, roofs: Roofs,
                    **how) -> tuple[dict[str, list[CaseResult]], dict[str, list[dict]]]:
    """Each implementation's results at ``shape``, one per round (:func:`measure_cases`), and its naive steps' rows.
    Each case runs inside its NVTX range (profiler.measure.ranges.shape_range), once a round; the first round checks
    correctness and, in the same range, times a stepwise implementation's steps (profiler.measure.naive_steps), as a
    capture of one round always has: Nsight Systems ingestion finds a case's steps inside its first range. Later
    rounds time again the cases that passed, the implementations' order rotated by one each round."""
    timed: dict[str, list[CaseResult]] = {impl.name: [] for impl in impls}
    steps: dict[str, list[dict]] = {impl.name: [] for impl in impls}
    for turn in range(rounds):
        order = impls[turn % len(impls):] + impls[:turn % len(impls)] if impls else []
        for impl in order:
            label = case_words(impl, shape)
            if turn and timed[impl.name][-1].status != "ok":
                if progress is not None:  # the progress bar counts the rounds it is not timed in
                    progress(f"{label}: {timed[impl.name][-1].status}, not timed again")
                continue  # failed its check or a round: that failure stands
            if progress is not None:
                progress(label if rounds == 1 else f"{label}, round {turn + 1} of {rounds}")
            with nvtx_range(shape_range(impl.name, shape)):
                result = run_case(impl, shape, device, check=turn == 0, annotate=False, **how)
                timed[impl.name].append(result)
                if turn == 0 and impl.costing.kind == "stepwise":
                    steps[impl.name] = _step_rows(impl, shape, result, device, roofs, **how)
    return timed, steps


def _step_rows(impl: Impl, shape: Shape, result: CaseResult, device, roofs: Roofs, *, rep_ms: int, warmup_ms: int,
               graph: bool, layout: str) -> list[dict]:
    """A stepwise implementation's rows per step after its case ran: each step timed alone where the case is ok,
    out of memory where the case was, none otherwise."""
    if result.status == "ok":
        return time_naive_steps(impl, shape, device, roofs, rep_ms, graph=graph, layout=layout, warmup_ms=warmup_ms)
    if result.status == "oom":
        return [capture_row(impl.name, impl.costing, shape, step, roofs, timing=None, status="oom",
                            message=result.message) for step in impl.steps]
    return []


def cases_of(shapes: list[Shape], impls: list[Impl]) -> list[tuple[Shape, Impl]]:
    """Every implementation at every shape, shape-major (the order a serial capture measures)."""
    return [(shape, impl) for shape in shapes for impl in impls]
