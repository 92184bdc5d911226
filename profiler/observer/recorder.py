"""Observed attention calls, aggregated as they happen: one row per (API, site, mode, shape, layout, mask),
the observed key of the row they make (profiler.store.OBSERVED_KEY; the rank is the process's).

A 1,000-token generate loop makes about 10^5 attention calls, so nothing is kept per call but its
time (a float, for exact medians and percentiles). Calls whose key length grows call after call
(decode with a KV cache: Nq < Nkv) are grouped into Nkv buckets, four per octave
(:func:`kv_bucket`); their FLOPs and bytes are summed exactly over the calls in the bucket, and the
row's ``seq_kv`` is the calls' mean, with ``seq_kv_min`` and ``seq_kv_max`` beside it.

Times come from one of three clocks, the GPU's chosen per run (the recorder's ``clock``):
- for a call on CPU tensors, ``time.perf_counter`` around the call (CPU kernels run synchronously);
- on a GPU with ``trace='none'``, a pair of CUDA events around the call, read back later without a
  sync (:meth:`Recorder.poll`): the window between them, which includes any wait of the GPU for the
  CPU to launch the call's kernels (decode steps of a CPU-bound loop);
- on a GPU with ``trace='torch'``, nothing at the call: each call opens a uniquely named
  ``record_function`` range, and after the run the torch profiler's kernels inside that range are
  summed (:meth:`Recorder.times_from_kernels`): GPU time of the call's own kernels, gaps excluded;
- on a GPU with ``trace='nsys'`` (the run under Nsight Systems), nothing at the call either: each
  call's NVTX range carries the call's number as its payload, and after nsys has written its export
  each call gets its range's GPU time as nsys projects it (profiler.observer.nsys_times).
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from dataclasses import dataclass, field, replace

from attention_core.implementations import FLOAT_DTYPES
from attention_core.shape import Shape
from profiler.model.cost import call_cost
from profiler.observer.calls import Call


def kv_bucket(seq_kv: int) -> int:
    """The upper edge of the Nkv bucket of a growing key length: exact up to 16, then four buckets
    per octave (2^k · {1.25, 1.5, 1.75, 2}), so a bucket's longest call is at most 25% longer than
    its shortest."""
    if seq_kv <= 16:
        return seq_kv
    base = 1 << ((seq_kv - 1).bit_length() - 1)
    step = base // 4
    return base + math.ceil((seq_kv - base) / step) * step


@functools.lru_cache(maxsize=4096)
def bucket_shape(shape: Shape) -> Shape:
    """A decode call's shape with its growing key length at its bucket's upper edge (:func:`kv_bucket`)."""
    return replace(shape, seq_kv=kv_bucket(shape.seq_kv))


@functools.lru_cache(maxsize=8192)
def cached_cost(call: Call, mode: str) -> tuple[float, float, float]:
    """(FLOPs, HBM bytes, FLOPs without the mask) of one call: profiler.model.cost.call_cost of its
    shape (unmasked: the call's ``density`` and mask bytes carry its mask), cached per call, since a
    run repeats a few calls many times."""
    return call_cost(call.shape.with_mode(mode), call.density, call.mask_bytes)


def modelled(call: Call, dtypes=FLOAT_DTYPES) -> bool:
    """Whether the cost model takes the call: a shape it can read, in one of ``dtypes``, those the run measured
    roofs for (fp8 where the GPU has fp8 tensor cores: profiler.observer.run)."""
    return call.shape is not None and call.dtype in dtypes


@dataclass
class RowStats:
    """The calls of one row so far."""

    call: Call  # the first call of the row (its shape; seq_kv of the bucket's first call)
    site: str
    mode: str
    calls: int = 0
    flops: float = 0.0
    hbm_bytes: float = 0.0
    full_flops: float = 0.0  # the FLOPs without the mask: the row's density is flops / full_flops
    seq_kv_sum: int = 0
    seq_kv_min: int = 1 << 62
    seq_kv_max: int = 0
    times_ms: list[float] = field(default_factory=list)

    def add(self, call: Call) -> None:
        flops, nbytes, full = cached_cost(call, self.mode)
        self.calls += 1
        self.flops += flops
        self.hbm_bytes += nbytes
        self.full_flops += full
        seq_kv = call.shape.seq_kv
        self.seq_kv_sum += seq_kv
        self.seq_kv_min = min(self.seq_kv_min, seq_kv)
        self.seq_kv_max = max(self.seq_kv_max, seq_kv)


@dataclass
class Pending:
    stats: RowStats
    start: object  # a CUDA event, a perf_counter reading, None (times from the trace) or the call's number (nsys)
    end: object = None
    name: str = ""  # the call's record_function range, when times come from the trace
    stream: object = None  # events clock: the stream the start was recorded on, where the end goes too
    kind: str = "cpu"  # which clock: cpu (perf_counter), events, trace or nsys


class Recorder:
    """Rows of observed calls and the clock that times them (module docstring)."""

    POLL_EVERY = 64  # CUDA events read back once this many are waiting

    def __init__(self, clock: str, dtypes=FLOAT_DTYPES):
        if clock not in ("cpu", "events", "trace", "nsys"):
            raise ValueError(f"clock '{clock}' is not one of cpu, events, trace, nsys")
        self.clock = clock
        self.dtypes = tuple(dtypes)  # the dtypes the run has roofs for: calls in others are counted, not modelled
        self.rows: dict[tuple, RowStats] = {}
        self.unmodelled: dict[str, int] = {}  # reason -> calls
        self.pending: deque[Pending] = deque()
        self.by_range: dict[str, RowStats] = {}  # trace clock: range name -> its row
        self.by_graph_range: dict[str, list[RowStats]] = {}  # trace clock: a compiled graph's run -> its rows
        self.graph_calls_untimed = 0  # calls inside compiled graphs whose kernels the trace did not tell apart
        # CUDA events free for reuse, per device: an event is recorded only on a stream of the device it was made on
        self._events: dict[int, list] = {}
        self._streams: dict = {}  # torch.cuda.Stream objects by (stream id, device, type)
        self.calls = 0
        self.on_call = None  # called after each call (the run's periodic flush)
        self.compiled_inside = 0  # graphs torch.compile made inside observed calls (eager FlexAttention's own)
        self.nsys_calls: list[RowStats] = []  # nsys clock: each call's row, by the call's number (its NVTX payload)

    # ---------------------------------------------------------------- one call

    def not_understood(self, reason: str) -> None:
        self.unmodelled[reason] = self.unmodelled.get(reason, 0) + 1

    def row_for(self, call: Call, site: str, mode: str) -> RowStats | None:
        if not modelled(call, self.dtypes):
            reason = f"{call.api} in {call.dtype}"
            self.unmodelled[reason] = self.unmodelled.get(reason, 0) + 1
            return None
        shape = call.shape
        if shape.seq_q < shape.seq_kv:  # decode with a growing KV cache: one row per Nkv bucket
            shape = bucket_shape(shape)
        key = (call.api, site, mode, shape, call.layout, call.mask)  # the row's OBSERVED_KEY (module docstring)
        stats = self.rows.get(key)
        if stats is None:
            stats = self.rows[key] = RowStats(call, site, mode)
        stats.add(call)
        self.calls += 1
        return stats

    def start(self, stats: RowStats, name: str = "", on_gpu: bool = True, device: int = -1) -> Pending:
        """Start timing a call; ``on_gpu``: its tensors are on a GPU (else perf_counter, whatever the clock),
        ``device`` (events clock): that GPU's index, -1 for the current one."""
        if not on_gpu or self.clock == "cpu":
            return Pending(stats, time.perf_counter(), kind="cpu")
        if self.clock == "trace":
            self.by_range[name] = stats
            return Pending(stats, None, name=name, kind="trace")
        if self.clock == "nsys":
            self.nsys_calls.append(stats)
            return Pending(stats, len(self.nsys_calls) - 1, kind="nsys")
        stream = self._stream(device)
        event = self._event(stream.device_index)
        event.record(stream)
        return Pending(stats, event, kind="events", stream=stream)

    def stop(self, pending: Pending) -> None:
        if pending.kind == "cpu":
            pending.stats.times_ms.append((time.perf_counter() - pending.start) * 1e3)
        elif pending.kind == "events":
            pending.end = self._event(pending.stream.device_index)
            pending.end.record(pending.stream)
            self.pending.append(pending)
            if len(self.pending) >= self.POLL_EVERY:
                self.poll()
        if self.on_call is not None:
            self.on_call()

    def graph_started(self, name: str, rows: list[RowStats]) -> None:
        """A compiled graph's run (or its backward's) opened the range ``name``; ``rows``: its attention
        calls in the order their kernels run (profiler.observer.graphs)."""
        self.by_graph_range[name] = rows

    # ---------------------------------------------------------------- CUDA events

    def _stream(self, device: int):
        """The current stream of a device, as torch.cuda.current_stream gives it, with its Stream object
        made once per stream (current_stream makes one per call: 5.4 of the 6.8 us of a bare
        ``event.record()`` on an H100 host, scripts/perf_experiments/observe_call_cost.py)."""
        import torch

        raw = torch._C._cuda_getCurrentStream(device if device >= 0 else torch.cuda.current_device())
        stream = self._streams.get(raw)
        if stream is None:
            stream = self._streams[raw] = torch.cuda.Stream(stream_id=raw[0], device_index=raw[1],
                                                            device_type=raw[2])
        return stream

    def _event(self, device: int):
        """A timing event of ``device``: a freed one of that device, else a new one (made on the device when
        first recorded on its stream)."""
        free = self._events.get(device)
        if free:
            return free.pop()
        import torch

        return torch.cuda.Event(enable_timing=True)

    def poll(self, wait: bool = False) -> None:
        """Read back the times of finished calls, oldest first (all of them, waiting, with ``wait``)."""
        while self.pending:
            pending = self.pending[0]
            if wait:
                pending.end.synchronize()
            elif not pending.end.query():
                return
            self.pending.popleft()
            pending.stats.times_ms.append(pending.start.elapsed_time(pending.end))
            self._events.setdefault(pending.stream.device_index, []).extend((pending.start, pending.end))

    # ---------------------------------------------------------------- trace

    def times_from_kernels(self, kernels) -> int:
        """Each traced call's time: the sum of the GPU kernels inside its range (a kernel table of
        profiler.measure.torch_trace, with ``ranges`` listing every enclosing range). Returns how
        many calls had no kernel in the trace (their time is 0)."""
        per_range: dict[str, float] = {}
        if len(kernels):
            for ranges, gpu_us in zip(kernels["ranges"], kernels["gpu_us"]):
                for name in ranges.split(" > "):
                    if name in self.by_range:
                        per_range[name] = per_range.get(name, 0.0) + gpu_us
                        break
        for name, stats in self.by_range.items():
            stats.times_ms.append(per_range.get(name, 0.0) / 1e3)
        self._graph_times(kernels)
        return sum(1 for name in self.by_range if name not in per_range)

    def _graph_times(self, kernels) -> None:
        """Each compiled graph run's attention calls, timed from its attention kernels: those of one
        attention operator (the ``op`` column) are one call's, and so is a FlexAttention template
        kernel with the latest launch of each FlexAttention kernel of another name before it (the
        backward's preprocessing; earlier launches in the same range are the compiler's benchmarks
        on the first run). Calls are taken in launch order (profiler.observer.graphs); a run whose
        count of calls differs from its rows' is left untimed."""
        if not self.by_graph_range:
            return
        from profiler.observer.graphs import FLEX_KERNEL, FLEX_TEMPLATE

        launched: dict[str, list] = {}  # graph range -> [(start, kernel, op, gpu_us)]
        if len(kernels):
            ops = kernels["op"] if "op" in kernels else [""] * len(kernels)
            for ranges, kernel, op, start, gpu_us in zip(kernels["ranges"], kernels["kernel"], ops,
                                                         kernels["start_us"], kernels["gpu_us"]):
                graph = next((n for n in ranges.split(" > ") if n in self.by_graph_range), None)
                if graph is not None and (op or FLEX_KERNEL.search(kernel)):
                    launched.setdefault(graph, []).append((start, kernel, op, gpu_us))
        for graph, rows in self.by_graph_range.items():
            units: dict[str, float] = {}  # in launch order (dicts keep insertion order)
            before: dict[str, float] = {}  # FlexAttention kernels since the last template: latest by name
            for start, kernel, op, gpu_us in sorted(launched.get(graph, [])):
                if op:
                    units[op] = units.get(op, 0.0) + gpu_us
                elif FLEX_TEMPLATE.search(kernel):
                    units[f"{kernel}@{start}"] = gpu_us + sum(before.values())
                    before = {}
                else:
                    before[kernel] = gpu_us
            if len(units) != len(rows):
                self.graph_calls_untimed += len(rows)
                continue
            for stats, gpu_us in zip(rows, units.values()):
                stats.times_ms.append(gpu_us / 1e3)

    # ---------------------------------------------------------------- results

    def finish(self) -> None:
        if self.clock == "events":
            self.poll(wait=True)

    def timed(self) -> list[RowStats]:
        return [s for s in self.rows.values() if s.times_ms]

    def untimed(self) -> list[RowStats]:
        """Rows of calls no clock timed: calls inside compiled graphs (profiler.observer.graphs)."""
        return [s for s in self.rows.values() if s.calls and not s.times_ms]

