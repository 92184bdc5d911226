"""torch.profiler traces: record one iteration, and read a Chrome trace back as a kernel table.

``kernels_from_chrome_trace`` is a pure function (file in, DataFrame out) that works on any Chrome
trace the torch profiler (Kineto) writes. Each GPU kernel is attributed to the innermost
``record_function`` range that was open on the launching CPU thread when it was launched,
following the launch's correlation id, the same join Nsight Systems makes for NVTX ranges.

Columns: ``kernel`` (name), ``gpu_us`` (duration on the GPU), ``start_us`` (GPU timestamp),
``stream``, ``range`` (innermost enclosing range, or "" when none), ``ranges`` (all enclosing
ranges, outermost first, joined by " > ").
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from attention_core.shape import TAG, Shape
from profiler.measure.ranges import OBSERVE
from profiler.store import Capture

OBSERVED = f"{OBSERVE}/"  # the ranges observe opens (profiler.observer.hooks)
KERNEL_COLUMNS = ["kernel", "gpu_us", "start_us", "stream", "range", "ranges"]
# <impl>-<mode>-<Shape.tag>.json, "+" of a mode written "_": triton_flash-fwd_bwd-B4H32N8192D64-fp16.json
TRACE_NAME = re.compile(rf"^(?P<impl>\w+?)-(?P<mode>fwd|bwd|fwd_bwd)-{TAG.pattern}\.json$")
# The kernel table of a capture's traces (profiler.store.KERNELS): the kernels, then the row key but its step.
CAPTURE_KERNEL_COLUMNS = ["trace", *KERNEL_COLUMNS, "impl", *Shape.KEY]


def record_one_iteration(fn: Callable[[], object], range_name: str, path: Path, cuda: bool) -> None:
    """Run ``fn`` once under the torch profiler inside ``record_function(range_name)`` and save a
    Chrome trace to ``path`` (opens in Perfetto or chrome://tracing)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        with record_function(range_name):
            fn()
        if cuda:
            torch.cuda.synchronize()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))


def kernels_from_chrome_trace(path: Path | str, ops: re.Pattern | None = None) -> pd.DataFrame:
    """One row per GPU kernel in the trace, with its enclosing ranges (see module docstring). With
    ``ops``, a column ``op`` names the outermost CPU operator matching it that launched the kernel, as
    ``name@timestamp`` (one per operator call; "" for none): profiler.observer.graphs tells the
    attention calls of a compiled graph apart by their ATen operators."""
    try:
        opened = gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)  # Kineto writes .json.gz too
        with opened as handle:
            events = json.load(handle)
    except (OSError, ValueError) as err:
        raise ValueError(f"'{path}' is not a readable Chrome trace: {err}") from None
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    if not isinstance(events, list):
        raise ValueError(f"'{path}' has no traceEvents list")
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]

    # Launches on the CPU, by correlation id: (thread, timestamp).
    launches = {}
    for e in complete:
        # cudaLaunchKernel (runtime API) or cuLaunchKernelEx (driver API: Triton, cuBLASLt's nvjet).
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = (e.get("tid"), e["ts"])

    # CPU ranges per thread, sorted by start, for the containment lookup.
    ranges_by_tid: dict[object, list[tuple[float, float, str]]] = {}
    for e in complete:
        # record_function ranges, and observe's lightweight ones (profiler.observer.hooks.RECORD_RANGE), which
        # the trace lists as operators
        if e.get("cat") == "user_annotation" or (e.get("cat") == "cpu_op" and e.get("name", "").startswith(OBSERVED)):
            ranges_by_tid.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    for spans in ranges_by_tid.values():
        spans.sort()
    ops_by_tid: dict[object, list[tuple[float, float, str]]] = {}
    if ops is not None:
        for e in complete:
            if e.get("cat") == "cpu_op" and ops.search(e.get("name", "")):
                ops_by_tid.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
        for spans in ops_by_tid.values():
            spans.sort()

    kernels = [e for e in complete if e.get("cat") == "kernel"]
    launched = [launches.get(e.get("args", {}).get("correlation")) for e in kernels]
    holding = enclosing_spans(ranges_by_tid, launched)
    holding_ops = enclosing_spans(ops_by_tid, launched) if ops is not None else None
    rows = []
    for i, e in enumerate(kernels):
        enclosing = [name for _, _, name in holding[i]]  # outermost (earliest) first
        row = {
            "kernel": e["name"], "gpu_us": float(e.get("dur", 0.0)), "start_us": float(e["ts"]),
            "stream": e.get("args", {}).get("stream", e.get("tid")),
            "range": enclosing[-1] if enclosing else "", "ranges": " > ".join(enclosing),
        }
        if holding_ops is not None:  # the outermost operator around the launch, as name@start
            row["op"] = f"{holding_ops[i][0][2]}@{holding_ops[i][0][0]}" if holding_ops[i] else ""
        rows.append(row)
    return pd.DataFrame(rows, columns=KERNEL_COLUMNS + (["op"] if ops is not None else []))


def enclosing_spans(spans_by_tid: dict, launches: list) -> list[list[tuple]]:
    """For each launch (thread, timestamp), or None, the spans (start, end, name) of its thread that hold it
    (start <= timestamp <= end), in the order the thread's sorted span list has them: outermost (earliest)
    first. One sweep per thread over its spans and launches in time order, so a long run's trace (10^5
    ranges, more kernels) is read in N log N, not N x ranges: spans that started are kept on a stack, and
    those that ended are dropped from its top (ranges of one thread nest, so the innermost ends first)."""
    out: list[list[tuple]] = [[] for _ in launches]
    queries: dict[object, list[tuple[float, int]]] = {}
    for i, launch in enumerate(launches):
        if launch is not None and launch[0] in spans_by_tid:
            queries.setdefault(launch[0], []).append((launch[1], i))
    for tid, asked in queries.items():
        spans = spans_by_tid[tid]
        asked.sort()
        started: list[tuple] = []
        j = 0
        for ts, i in asked:
            while j < len(spans) and spans[j][0] <= ts:
                while started and started[-1][1] < spans[j][0]:  # ended before this one began: gone for good
                    started.pop()
                started.append(spans[j])
                j += 1
            while started and started[-1][1] < ts:
                started.pop()
            # an ended span under a longer one that is still open (ranges that overlap without nesting) stays on
            # the stack until that one ends: filtered here
            out[i] = [span for span in started if span[1] >= ts]
    return out


def trace_file_name(impl: str, shape: Shape) -> str:
    """The name a capture gives the trace of one implementation at one shape (parsed by TRACE_NAME):
    the implementation, the mode and :attr:`Shape.tag`."""
    return f"{impl}-{shape.mode.replace('+', '_')}-{shape.tag}.json"


def kernels_of_capture(folder: Path | str) -> pd.DataFrame:
    """The kernel table of every trace in ``<capture>/traces``, with the implementation and shape
    read from each trace's file name."""
    tables = []
    for path in Capture(folder).trace_files():
        match = TRACE_NAME.match(path.name)
        if match is None:
            continue
        table = kernels_from_chrome_trace(path)
        fields = match.groupdict()
        table.insert(0, "trace", path.name)
        table["impl"] = fields["impl"]
        for column, value in Shape.from_tag(fields, fields["mode"].replace("_", "+")).to_row().items():
            table[column] = value
        tables.append(table)
    if not tables:
        return pd.DataFrame(columns=CAPTURE_KERNEL_COLUMNS)
    return pd.concat(tables, ignore_index=True)[CAPTURE_KERNEL_COLUMNS]
