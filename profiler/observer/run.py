"""An observed run: intercept attention while a script or a block of code runs, then write a capture.

``with observe(out=DIR) as run: ...`` (also ``profiler.observe``) and ``python -m profiler observe
--out DIR -- script.py ARGS`` (profiler.cli.observe) both come here. The capture folder is an
ordinary one (profiler.store.Capture): results.parquet holds one row per (API, call site, mode, shape,
layout, mask: profiler.store.OBSERVED_KEY) with ``source`` = observed (the columns in
:data:`OBSERVED_COLUMNS`), meta.json the run's wall time, the GPU's busy time and attention's share of
it (``observed``), and with the torch profiler on (``trace='torch'``, the default on a GPU)
traces/observed.json and kernels.parquet the run's kernels. Rows are written when the run ends, also
when it raises, and every :data:`FLUSH_S` seconds while it runs (atomically: a killed run keeps its
last flush).
"""

from __future__ import annotations

import re
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from attention_core.implementations import FLOAT_DTYPES
from attention_core.shape import ROW_KEY
from profiler.measure.distributed import from_env
from profiler.measure.folder import FolderError
from profiler.measure.ranges import OBSERVE
from profiler.model.cost import arithmetic_intensity
from profiler.model.roofs import Roofs
from profiler.model.rows import rates
from profiler.observer.graphs import ATTENTION_OP, GraphObserver
from profiler.observer.hooks import Interceptor, compiled_graphs
from profiler.observer.ranks import RankLink, join
from profiler.observer.recorder import Recorder, RowStats
from profiler.store import OBSERVED_ONLY, Capture, to_frame

FLUSH_S = 30.0
# How long the ranks of a torchrun observation wait for each other to start: all start together, so a rank
# missing after this long will not come (a script that observes on some ranks only)
HANDSHAKE = timedelta(minutes=5)
TRACE_FILE = "observed.json"
# Kernel names that are attention whoever launched them (cuDNN's and FlashAttention's fmha kernels,
# FlexAttention's and our Triton kernels): counted when they ran outside any observed call.
ATTENTION_KERNEL = re.compile(r"flash|fmha|attention|attn|flex|sdpa", re.IGNORECASE)
OBSERVED_COLUMNS = ("source", "site", *OBSERVED_ONLY)  # the store's columns only observed rows fill


@dataclass
class ObservedRun:
    """What an observation saw; :func:`observe` yields it and fills it in when the block ends."""

    folder: Path
    trace: str
    device: torch.device
    roofs: Roofs
    recorder: Recorder
    interceptor: Interceptor
    graphs: GraphObserver
    meta: dict | None  # meta.json's contents (None on ranks other than 0 of a torchrun job: rank 0 writes it)
    rows: list[dict] = field(default_factory=list)
    wall_s: float = float("nan")
    summary: dict = field(default_factory=dict)
    link: RankLink | None = None  # the other ranks of a torchrun job (profiler.observer.ranks)
    failure: str | None = None  # how the observed script failed, as its runner tells before the block ends
    merged: bool = True  # a rank other than 0: whether rank 0 merged its rows (else its part file keeps them)

    @property
    def calls(self) -> int:
        return self.recorder.calls

    @property
    def capture(self) -> Capture:
        return Capture(self.folder)

    def results(self) -> pd.DataFrame:
        return to_frame(self.rows)


def observed_row(stats: RowStats, roofs: Roofs, untimed_reason: str = "", pending: int = 0) -> dict:
    """One results row of an observed (API, site, mode, shape, layout, mask): FLOPs and bytes per call are
    the means of exact per-call sums; ``time_ms`` is the mean time per timed call, so flops / time_ms
    is the row's rate over its calls (``median_ms`` beside it). A row no clock timed (calls inside
    compiled graphs, profiler.observer.graphs) has status ``untimed`` and ``untimed_reason``. ``pending``
    calls of the row get their times later (from the Nsight Systems export, profiler.observer.nsys_times):
    the row is ``untimed`` until :func:`with_times` gives them."""
    call, calls = stats.call, stats.calls
    seq_kv = round(stats.seq_kv_sum / calls)
    shape = replace(call.shape, seq_kv=seq_kv, causal=call.causal, mode=stats.mode)
    flops, hbm_bytes = stats.flops / calls, stats.hbm_bytes / calls
    timed = len(stats.times_ms)
    will_be = timed + pending  # calls that have, or will have, a time
    nan = float("nan")
    row = {**dict(zip(ROW_KEY, shape.row_key(call.api))), "path": "", "flops": flops, "hbm_bytes": hbm_bytes,
           "tile_bytes": nan, "arithmetic_intensity": arithmetic_intensity(flops, hbm_bytes),
           "time_ms": nan, "time_ms_p10": nan, "time_ms_p90": nan, "status": "ok", "message": "",
           "source": "observed", "site": stats.site, "calls": calls, "total_ms": nan, "median_ms": nan,
           "mask": call.mask,
           "density": stats.flops / stats.full_flops if stats.full_flops else 1.0, "layout": call.layout,
           "seq_kv_min": stats.seq_kv_min, "seq_kv_max": stats.seq_kv_max}
    notes = []
    if will_be < calls:
        notes.append(f"compiled: {untimed_reason or UNTIMED}" if not will_be else
                     f"{will_be} of {calls} calls timed (compiled: {untimed_reason or UNTIMED}); total_ms is theirs")
    if call.mask_bytes and call.mask in ("none", "causal", "causal-br"):
        # calls.explicit_mask: the pattern is causal (or keeps everything), but the kernel was handed a tensor.
        notes.append(f"the {call.mask} mask came as a tensor ({call.mask_bytes} bytes read per call): a kernel given "
                     "a mask computes every block instead of skipping the masked ones")
    row["message"] = "; ".join(notes)
    if not timed:
        return row | {"status": "untimed"}
    return with_times(row, stats.times_ms, roofs)


def with_times(row: dict, times_ms: list[float], roofs: Roofs) -> dict:
    """An observed row (FLOPs and bytes per call) with the times of its timed calls: total, median and
    percentiles, mean time per timed call, and the rate over those calls (their FLOPs and bytes over
    their summed time) against ``roofs``."""
    times = np.asarray(times_ms, dtype=np.float64)
    timed, total = len(times), float(times.sum())
    row = row | {"total_ms": total, "median_ms": float(np.median(times)), "time_ms": total / timed,
                 "time_ms_p10": float(np.percentile(times, 10)), "time_ms_p90": float(np.percentile(times, 90)),
                 "status": "ok"}
    if total <= 0:
        return row | {"status": "error", "message": "no GPU kernel of these calls was found in the trace"}
    return row | rates(row["flops"] * timed, row["hbm_bytes"] * timed, total * 1e-3, row["dtype"], roofs,
                       step_bytes=row["hbm_bytes"])  # the size-aware roof of one call, not of all of them


UNTIMED = ("the trace did not tell this graph's attention kernels apart (CUDA graphs replay kernels without "
           "their operators; a compiler that decomposes attention leaves no attention kernel)")


def busy_ms(kernels: pd.DataFrame) -> float:
    """GPU time with at least one kernel running: the union of the kernels' intervals."""
    from profiler.nsight.nsys import union_length

    start = kernels["start_us"].to_numpy(dtype=np.float64)
    return union_length(start, start + kernels["gpu_us"].to_numpy(dtype=np.float64)) / 1e3


@contextmanager
def observe(out: str | Path, trace: str | None = None, device: str | None = None, command: str | None = None,
            meta: dict | None = None, status=None, ranks: bool = False):
    """Observe every attention call made inside the block; write a capture to ``out``.

    ``trace``: 'torch' (the torch profiler records the run: exact kernel times per call, the GPU's
    busy time, traces/observed.json) or 'none' (CUDA events around each call: least overhead);
    default torch on a GPU, none on a CPU; 'nsys' only for a process Nsight Systems runs
    (profiler.observer.nsys_times: ``observe --trace nsys`` arranges it). ``device``: the GPU whose
    roofs judge the rows (default cuda when there is one, else cpu). ``status(text)``: a context manager
    showing long work. ``ranks``: under a launcher of several ranks (torchrun), observe them all into one
    capture, rank 0's ``out`` (profiler.observer.ranks); every rank must then observe, as often as the
    others. Without it each process observes alone (``observe`` on the command line passes it)."""
    if trace not in (None, "torch", "none", "nsys"):
        raise ValueError(f"trace '{trace}' is not one of torch, none, nsys")
    link = join() if ranks else None  # several ranks (torchrun) into one capture: profiler.observer.ranks
    if device is None and torch.cuda.is_available():
        # the rank's GPU on its host; where each task sees only its own GPUs (srun --gpus-per-task), modulo those
        device = f"cuda:{link.ranks.local_rank % torch.cuda.device_count()}" if link is not None else "cuda"
    device = torch.device(device or "cpu")
    cuda = device.type == "cuda"
    trace = trace or ("torch" if cuda else "none")
    if trace == "nsys" and not cuda:
        raise ValueError("trace 'nsys' needs a GPU: Nsight Systems times CUDA kernels")
    dtypes = ("fp16", "bf16", "fp32") if cuda else ("fp32",)
    if cuda and _has_fp8(device):
        dtypes += ("fp8",)  # calls of our fp8 kernel are modelled against the measured fp8 matmul and the exp roof
    run_meta = {"observed": {"command": command, "trace": trace}, **(meta or {})}
    try:
        out, roofs, stored_meta = _open(link, Path(out), device, dtypes, run_meta, status)
    except FolderError as err:
        launched = from_env()
        if link is None and launched is not None:  # ranks of torchrun, each observing alone into one folder
            raise FolderError(f"{err} (rank {launched.rank} of {launched.world}: pass ranks=True on every rank to "
                              "merge the ranks into one capture, or give each rank its own out)") from None
        raise
    # calls on CPU tensors: cpu, whatever the trace
    clock = {"torch": "trace", "nsys": "nsys"}.get(trace, "events") if cuda else "cpu"
    recorder = Recorder(clock, FLOAT_DTYPES + (("fp8",) if "fp8" in dtypes else ()))
    run = ObservedRun(out, trace, device, roofs, recorder, Interceptor(recorder), GraphObserver(recorder),
                      stored_meta, link=link)
    profile = None
    if trace == "torch":
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        profile = torch_profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    compiled_before = compiled_graphs()
    flusher = _Flusher(run)
    recorder.on_call = flusher
    if profile is not None:
        profile.__enter__()
    run.interceptor.install()
    run.graphs.install()
    if trace == "nsys":  # nsys records from here (--capture-range=cudaProfilerApi, profiler.observer.nsys_times)
        torch.cuda.synchronize(device)
        torch.cuda.cudart().cudaProfilerStart()
    started = time.perf_counter()
    try:
        yield run
    finally:
        run.graphs.remove()
        run.interceptor.remove()
        if cuda:
            torch.cuda.synchronize(device)
        run.wall_s = time.perf_counter() - started
        if trace == "nsys":
            torch.cuda.cudart().cudaProfilerStop()
        if profile is not None:
            profile.__exit__(None, None, None)
        _finish(run, profile, compiled_graphs() - compiled_before - recorder.compiled_inside)


def _has_fp8(device: torch.device) -> bool:
    """Whether fp8 attention runs here (kernels.flash_fwd_fp8.unsupported_on): then the run measures the fp8
    matmul too (a second or two more at the start, once per ceilings cache)."""
    from kernels.flash_fwd_fp8 import unsupported_on

    return unsupported_on(device) is None


def _open(link: RankLink | None, out: Path, device: torch.device, dtypes, run_meta: dict, status
          ) -> tuple[Path, Roofs, dict | None]:
    """(the capture folder, the roofs this process's rows are judged against, meta.json's contents).
    With several ranks: rank 0's folder for all; every rank checks it as its host sees it, and all
    refuse it if one does, before rank 0 writes meta.json; every other rank measures its own roofs."""
    from torch.distributed import DistError

    from profiler.measure.ceilings import device_name
    from profiler.measure.folder import check_folder, measure_roofs, open_capture

    label = device_name(device)
    if link is None:
        store, roofs = open_capture(str(device), out, label, dtypes, run_meta, resumable=False, status=status)
        return out, roofs, store.meta
    try:  # every rank must come: one that never calls observe would leave the others waiting
        out = Path(link.share("folder", str(out), wait=HANDSHAKE))
    except DistError:
        raise RuntimeError(f"rank {link.ranks.rank}: rank 0 did not start observing within "
                           f"{HANDSHAKE.total_seconds():.0f} s; with ranks=True every rank must observe") from None
    error = None
    try:
        check_folder(out, resumable=False)
    except FolderError as err:
        error = f"{err} (as rank {link.ranks.rank} on {socket.gethostname()} sees it)"
    try:
        errors = [e for e in link.everyones("checked", error, wait=HANDSHAKE) if e]
    except DistError:
        raise RuntimeError(f"rank {link.ranks.rank}: not every rank started observing within "
                           f"{HANDSHAKE.total_seconds():.0f} s; with ranks=True every rank must observe") from None
    if errors:
        raise FolderError(errors[0])
    meta = error = None
    if link.main:
        try:
            store, roofs = open_capture(str(device), out, label, dtypes, run_meta | {"world": link.ranks.world},
                                        checked=True, status=status)
            meta = store.meta
        except FolderError as err:
            error = str(err)
    else:  # while rank 0 measures its own: every rank's roofs in the same few seconds
        roofs, _ = measure_roofs(str(device), label, dtypes)
    error = link.share("opened", error)
    if error:
        raise FolderError(error)
    return out, roofs, meta


class _Flusher:
    """Writes the rows timed so far every FLUSH_S seconds (called after each call)."""

    def __init__(self, run: ObservedRun):
        self.run = run
        self.last = time.monotonic()

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last >= FLUSH_S and self.run.recorder.clock not in ("trace", "nsys"):
            self.last = now
            _collect_rows(self.run)
            _write(self.run, partial=True)


def _finish(run: ObservedRun, profile, compiled_frames: int) -> None:
    recorder = run.recorder
    kernels = None
    summary = {"wall_s": run.wall_s, "calls": recorder.calls, "rows": 0, "trace": run.trace,
               "clock": recorder.clock, "compiled_frames": compiled_frames,
               "unmodelled_calls": dict(recorder.unmodelled), "installed": run.interceptor.installed}
    if profile is not None:
        from profiler.measure.torch_trace import kernels_from_chrome_trace

        trace_file = run.link.trace_file if run.link is not None else TRACE_FILE
        path = run.capture.trace_path(trace_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.export_chrome_trace(str(path))
        kernels = kernels_from_chrome_trace(path, ops=ATTENTION_OP)
        if recorder.clock == "trace":
            summary["calls_without_kernels"] = recorder.times_from_kernels(kernels)
        kernels = kernels.assign(trace=trace_file)
        if run.link is None:
            run.capture.write_kernels(kernels)
    recorder.finish()
    _collect_rows(run)
    timed = [r for r in run.rows if r["status"] != "untimed"]
    attention_ms = sum(r["total_ms"] for r in timed)
    summary.update(rows=len(run.rows), attention_ms=attention_ms,
                   attention_fwd_ms=sum(r["total_ms"] for r in timed if r["mode"] == "fwd"),
                   attention_bwd_ms=sum(r["total_ms"] for r in timed if r["mode"] == "bwd"),
                   compiled_graphs_observed=run.graphs.graphs,
                   compiled_calls_untimed=sum(s.calls - len(s.times_ms) for s in recorder.rows.values())
                   - len(recorder.nsys_calls),  # those the Nsight Systems export will time
                   compiled_untimed_reason=run.graphs.untimed_reason
                   or (UNTIMED if recorder.graph_calls_untimed else ""),
                   attention_share_of_wall=attention_ms / (run.wall_s * 1e3) if run.wall_s > 0 else None)
    if kernels is not None and len(kernels):
        gpu_busy = busy_ms(kernels)
        inside = kernels["ranges"].str.contains(f"{OBSERVE}/", regex=False)
        outside = kernels[~inside & kernels["kernel"].str.contains(ATTENTION_KERNEL)]
        # The attention window: from the first observed call's first kernel to the last one's end (the loop
        # the user profiles, without imports and model construction); how busy the GPU was inside it.
        ours = kernels[inside]
        if len(ours):
            lo, hi = ours["start_us"].min(), (ours["start_us"] + ours["gpu_us"]).max()
            clipped = kernels.assign(start_us=kernels["start_us"].clip(lo, hi),
                                     gpu_us=(kernels["start_us"] + kernels["gpu_us"]).clip(lo, hi)
                                     - kernels["start_us"].clip(lo, hi))
            window_busy = busy_ms(clipped[clipped["gpu_us"] > 0])
            summary.update(window_ms=(hi - lo) / 1e3, gpu_busy_in_window_ms=window_busy,
                           gpu_busy_share_of_window=window_busy / ((hi - lo) / 1e3) if hi > lo else None)
        summary.update(gpu_busy_ms=gpu_busy, gpu_kernel_ms=float(kernels["gpu_us"].sum() / 1e3),
                       gpu_busy_share_of_wall=gpu_busy / (run.wall_s * 1e3) if run.wall_s > 0 else None,
                       attention_share_of_gpu=attention_ms / gpu_busy if gpu_busy > 0 else None,
                       unobserved_attention_kernels=int(len(outside)),
                       unobserved_attention_ms=float(outside["gpu_us"].sum() / 1e3))
    if run.failure:
        summary["script_failed"] = run.failure
    if recorder.clock == "nsys":
        from profiler.observer.nsys_times import write_calls

        write_calls(run.folder, recorder.nsys_calls, [*recorder.timed(), *recorder.untimed()])
        summary["times_pending"] = "nsys"  # profiler.observer.nsys_times.fill reads them from the export
    run.summary = summary
    if run.link is None:
        _write(run, partial=False)
    else:
        _finish_ranks(run, kernels)


def _finish_ranks(run: ObservedRun, kernels) -> None:
    """A rank of a torchrun job: its rows into its part file, then to rank 0, which merges every rank's
    (profiler.observer.ranks); the others wait for that and drop a copy rank 0 does not see."""
    from torch.distributed import DistError

    from profiler.observer import ranks

    link = run.link
    _write(run, partial=True)  # on disk first: a rank 0 that never merges leaves this rank's rows
    trace = run.capture.trace_path(link.trace_file) if kernels is not None else None
    try:
        ranks.send(link, ranks.Sent.of(link, str(run.device), run.rows, run.summary, kernels, trace,
                                       run.roofs.as_meta().get("measured_ceilings") or {}))
    except DistError:  # the store is gone (rank 0 hosted it under srun or mpirun, and ended): the part file stays
        run.merged = False
        return
    if not link.main:
        if run.failure is None:
            run.merged = ranks.wait_merged(link, run.folder)
        else:  # a rank whose script failed ends at once, as python would (others may wait on it): rank 0 need not
            link.store.set(f"ack/{link.ranks.rank}", b"1")  # wait for it to read the merge (ranks.done)
        return
    # A rank 0 whose script failed waits briefly: the others may be stopped, or waiting on it in a collective.
    sent, missing = ranks.receive(link, run.failure is not None)
    run.rows = ranks.merge(link, run.folder, sent)
    run.summary = ranks.merged_summary(sent, missing, link.ranks.world)
    run.meta["observed"] = {**run.meta.get("observed", {}), **run.summary, "finished": not missing}
    run.capture.write_meta(run.meta)
    ranks.done(link, [s.rank for s in sent])


def _collect_rows(run: ObservedRun) -> None:
    """The rows so far, timed ones first (profiler.observer.nsys_times numbers them in this order)."""
    reason = run.graphs.untimed_reason
    rank = {"rank": run.link.ranks.rank} if run.link is not None else {}
    pending: dict[int, int] = {}  # row -> its calls that the Nsight Systems export will time
    for stats in run.recorder.nsys_calls:
        pending[id(stats)] = pending.get(id(stats), 0) + 1
    run.rows = [observed_row(s, run.roofs, reason, pending=pending.get(id(s), 0)) | rank
                for s in (*run.recorder.timed(), *run.recorder.untimed())]


def _write(run: ObservedRun, partial: bool) -> None:
    """The rows so far (``partial``) or all of them, with meta.json; a rank of a torchrun job writes
    only its own part file (rank 0 merges them and writes meta.json, :func:`_finish_ranks`)."""
    capture = run.capture
    if run.link is not None:
        from profiler.observer.ranks import write_part

        write_part(run.link, run.folder, run.rows)
        return
    run.meta["observed"] = {**run.meta.get("observed", {}), **run.summary, "finished": not partial}
    capture.write_results(to_frame(run.rows))
    capture.write_meta(run.meta)
