"""A capture: run implementations over shapes, time them, join the times with the cost model and
the device's roofs, and store one row per implementation × shape × mode × step.

Every measured region is an NVTX range in domain "attn" (``<impl>/<mode>/seq=<N>``, the naive
steps nested inside), and the whole measured part runs between cudaProfilerStart and
cudaProfilerStop, so ``nsys profile --capture-range=cudaProfilerApi`` records just that.
This module imports neither plotly nor streamlit.
"""

from __future__ import annotations

import gc
import itertools
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from kernels import reference
from kernels.reference import nvtx_range
from kernels.registry import Impl
from profiler import cost_model as cm
from profiler import hardware, roofline
from profiler.ceilings import TORCH_DTYPES, Ceilings
from profiler.runner import CaseResult, make_inputs, mode_call, run_case
from profiler.store import ResultStore
from profiler.timing import Timing, measure
from profiler.torch_trace import kernels_of_capture, record_one_iteration, trace_file_name


@dataclass(frozen=True)
class Roofs:
    """The roofs rows are judged against: datasheet (None for an unknown device) and measured."""

    datasheet: hardware.Device | None
    measured: Ceilings | None

    def datasheet_peak(self, dtype: str) -> tuple[float, float] | None:
        if self.datasheet is None:
            return None
        try:
            return self.datasheet.peak_flops(dtype), self.datasheet.hbm_bytes_per_s
        except (KeyError, ValueError):
            return None

    def measured_peak(self, dtype: str) -> tuple[float, float] | None:
        if self.measured is None or dtype not in self.measured.matmul_tflops:
            return None
        return self.measured.peak_flops(dtype), self.measured.bandwidth

    @classmethod
    def from_meta(cls, meta: dict) -> Roofs:
        """The roofs a stored capture was judged against, from its meta.json."""
        sheet = hardware.lookup(meta.get("datasheet_device") or meta.get("device") or "")
        stored = meta.get("measured_ceilings")
        measured = None if not stored else Ceilings(
            device=meta.get("device", ""), matmul_tflops=stored["matmul_tflops"], copy_gbps=stored["copy_gbps"],
            matmul_n=stored.get("matmul_n", 0), copy_bytes=stored.get("copy_bytes", 0),
            torch_version=meta.get("torch", ""), measured_at=stored.get("measured_at", ""))
        return cls(sheet, measured)

    def as_meta(self) -> dict:
        return {
            "datasheet_device": self.datasheet.name if self.datasheet else None,
            "datasheet": None if self.datasheet is None else {
                "tensor_tflops": self.datasheet.tensor_tflops, "fp32_tflops": self.datasheet.fp32_tflops,
                "hbm_tbps": self.datasheet.hbm_tbps, "l2_bytes": self.datasheet.l2_bytes,
                "sources": self.datasheet.sources,
            },
            "measured_ceilings": None if self.measured is None else {
                "matmul_tflops": self.measured.matmul_tflops, "copy_gbps": self.measured.copy_gbps,
                "matmul_n": self.measured.matmul_n, "copy_bytes": self.measured.copy_bytes,
                "measured_at": self.measured.measured_at,
            },
        }


def cost_of(impl: Impl, shape: cm.Shape, step: str) -> tuple[float, float, float]:
    """(flops, hbm_bytes, tile_bytes) of one row, by the conventions of profiler.cost_model."""
    if step != "total":
        nbytes = cm.naive_step_bytes(shape, step)
        return cm.naive_step_flops(shape, step), nbytes, nbytes
    flops = cm.fused_flops(shape)  # totals share the algorithmic convention, so TFLOP/s compare
    if not impl.fused or impl.name == "sdpa_math":
        nbytes = sum(cm.naive_step_bytes(shape, s) for s in cm.NAIVE_STEPS)
        return flops, nbytes, nbytes
    return flops, cm.compulsory_bytes(shape), cm.tile_bytes(shape)


def make_row(impl: Impl, shape: cm.Shape, step: str, roofs: Roofs, *, timing: Timing | None, status: str,
             message: str = "", peak_mem_bytes=None, max_rel_err=None) -> dict:
    flops, hbm_bytes, tile = cost_of(impl, shape, step)
    ai = cm.arithmetic_intensity(flops, hbm_bytes)
    row = {
        "impl": impl.name, "step": step, "mode": shape.mode, "batch": shape.batch, "heads": shape.heads,
        "seq_q": shape.seq_q, "seq_kv": shape.seq_kv, "head_dim": shape.head_dim, "dtype": shape.dtype,
        "causal": shape.causal, "flops": flops, "hbm_bytes": hbm_bytes, "tile_bytes": tile,
        "arithmetic_intensity": ai, "status": status, "message": message,
        "peak_mem_bytes": peak_mem_bytes, "max_rel_err": max_rel_err,
    }
    if timing is not None:
        seconds = timing.median_ms * 1e-3
        achieved = flops / seconds
        row.update(time_ms=timing.median_ms, time_ms_p10=timing.p10_ms, time_ms_p90=timing.p90_ms,
                   tflops=achieved / 1e12, gbps=hbm_bytes / seconds / 1e9)
        sheet, measured = roofs.datasheet_peak(shape.dtype), roofs.measured_peak(shape.dtype)
        if sheet:
            row["roof_fraction"] = roofline.roof_fraction(achieved, ai, *sheet)
        if measured:
            row["roof_fraction_measured"] = roofline.roof_fraction(achieved, ai, *measured)
        judge = sheet or measured
        if judge:
            row["bound"] = roofline.bound(ai, *judge)
    elif (judge := roofs.datasheet_peak(shape.dtype) or roofs.measured_peak(shape.dtype)) is not None:
        row["bound"] = roofline.bound(ai, *judge)  # the model's class, even where nothing ran
    return row


# ----------------------------------------------------------------------------- naive steps, timed


def naive_step_calls(shape: cm.Shape, q, k, v):
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


def time_naive_steps(impl: Impl, shape: cm.Shape, device, roofs: Roofs, rep_ms: int) -> list[dict]:
    """One row per naive step, each timed alone; a step that runs out of memory says so."""
    rows = []
    done = set()
    try:
        q, k, v, _ = make_inputs(shape, device, requires_grad=shape.mode != "fwd")
        for step, call in naive_step_calls(shape, q, k, v):
            name = f"{impl.name}/{shape.mode}/seq={shape.seq_q}/{step}"

            def timed_call(call=call, name=name):
                with nvtx_range(f"{name}/call"):  # one range per repetition, as in runner.run_case
                    call()

            with nvtx_range(name):
                timing = measure(timed_call, device, rep_ms=rep_ms)
            rows.append(make_row(impl, shape, step, roofs, timing=timing, status="ok"))
            done.add(step)
            call = None
    except torch.OutOfMemoryError as err:
        rows += [make_row(impl, shape, step, roofs, timing=None, status="oom", message=_first_line(err))
                 for step in impl.steps if step not in done]
    finally:
        q = k = v = None
        _free(device)
    return rows


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _free(device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------- the capture


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
    return [make_row(impl, result.shape, "total", roofs, timing=result.timing, status=result.status,
                     message=result.message, peak_mem_bytes=result.peak_mem_bytes,
                     max_rel_err=result.max_rel_err)]


def trace_case(impl: Impl, shape: cm.Shape, device, folder: Path) -> bool:
    """One iteration of ``impl`` under the torch profiler, saved as a Chrome trace in
    ``folder/traces``; False when it could not run."""
    if impl.unsupported_reason(device, TORCH_DTYPES[shape.dtype], shape.head_dim, backward=shape.mode != "fwd"):
        return False
    name = trace_file_name(impl.name, shape.mode, shape.batch, shape.heads, shape.seq_q, shape.head_dim,
                           shape.dtype, shape.causal)
    q = k = v = do = once = None
    try:
        q, k, v, do = make_inputs(shape, device, requires_grad=shape.mode != "fwd")
        once = mode_call(impl, shape, q, k, v, do)
        once()  # warm-up: compilation and autotuning stay out of the trace
        record_one_iteration(once, f"{impl.name}/{shape.mode}/seq={shape.seq_q}", folder / "traces" / name,
                             cuda=torch.device(device).type == "cuda")
        return True
    except RuntimeError:  # OOM included: the timing row already says what happened
        return False
    finally:
        q = k = v = do = once = None
        _free(device)


def shapes_of(batches, heads, seqs, dims, dtypes, causals, modes) -> list[cm.Shape]:
    return [cm.Shape(b, h, n, n, d, dt, c, m)
            for m, dt, d, c, n, b, h in itertools.product(modes, dtypes, dims, causals, seqs, batches, heads)]


def run_capture(store: ResultStore, shapes: list[cm.Shape], impls: list[Impl], device, roofs: Roofs, *,
                rep_ms: int, progress=None, trace_filter: Callable[[cm.Shape], bool] | None = None) -> list[dict]:
    """Measure every (shape, impl), appending rows to ``store`` as each finishes; shapes that
    ``trace_filter`` accepts also get a torch-profiler trace per implementation."""
    device = torch.device(device)
    new_rows = []
    with cuda_profiler_range(device.type == "cuda"):
        for shape in shapes:
            for impl in impls:
                key = {"impl": impl.name, "step": "total", "mode": shape.mode, "batch": shape.batch,
                       "heads": shape.heads, "seq_q": shape.seq_q, "head_dim": shape.head_dim,
                       "dtype": shape.dtype, "causal": shape.causal}
                if progress is not None:
                    progress(f"{impl.name} {shape.mode} N={shape.seq_q} D={shape.head_dim} {shape.dtype}"
                             f"{' causal' if shape.causal else ''}")
                if store.has(key):
                    continue  # --resume: already measured
                range_name = f"{impl.name}/{shape.mode}/seq={shape.seq_q}"
                with nvtx_range(range_name):
                    result = run_case(impl, shape, device, rep_ms=rep_ms, annotate=False)
                    rows = case_rows(result, impl, roofs)
                    if not impl.fused and impl.name == "naive" and result.status in ("ok", "oom"):
                        if result.status == "ok":
                            rows += time_naive_steps(impl, shape, device, roofs, rep_ms)
                        else:
                            rows += [make_row(impl, shape, step, roofs, timing=None, status="oom",
                                              message=result.message) for step in impl.steps]
                store.append(rows)
                new_rows += rows
                if trace_filter is not None and trace_filter(shape) and result.status == "ok":
                    if trace_case(impl, shape, device, store.folder):
                        store.write_kernels(kernels_of_capture(store.folder))
    return new_rows


MEASURED = ("time_ms", "time_ms_p10", "time_ms_p90", "status", "message", "peak_mem_bytes", "max_rel_err")
MODEL = ("flops", "hbm_bytes", "tile_bytes")


def remodel(frame: pd.DataFrame, roofs: Roofs) -> tuple[pd.DataFrame, pd.Series]:
    """Stored rows joined again with the current cost model, for captures stored before a change of
    the model. A row whose FLOPs and bytes the model still gives is kept as it is; a row where they
    changed gets its intensity, rates, bound and roof fractions recomputed against ``roofs``, and
    keeps its measured columns (times, status, peak memory, error). Returns the new frame and a
    mask of the rows that changed."""
    from kernels.registry import REGISTRY
    from profiler.store import COLUMNS, to_frame

    rows, changed = [], []
    for record in frame.to_dict("records"):
        shape = cm.Shape(int(record["batch"]), int(record["heads"]), int(record["seq_q"]), int(record["seq_kv"]),
                         int(record["head_dim"]), record["dtype"], bool(record["causal"]), record["mode"])
        new = dict(zip(MODEL, cost_of(REGISTRY[record["impl"]], shape, record["step"])))
        if all(math.isclose(new[k], record[k], rel_tol=1e-12) for k in MODEL):
            rows.append(record)
            changed.append(False)
            continue
        ok = record["status"] == "ok" and not pd.isna(record["time_ms"])
        timing = Timing(record["time_ms"], record["time_ms_p10"], record["time_ms_p90"]) if ok else None
        measured = {k: (None if pd.isna(record[k]) else record[k]) for k in MEASURED}
        row = make_row(REGISTRY[record["impl"]], shape, record["step"], roofs, timing=timing,
                       status=measured["status"], message=measured["message"] or "",
                       peak_mem_bytes=measured["peak_mem_bytes"], max_rel_err=measured["max_rel_err"])
        rows.append(row | {k: v for k, v in record.items() if k not in COLUMNS})  # e.g. nsys_gpu_ms
        changed.append(True)
    return to_frame(rows), pd.Series(changed, index=frame.index)


def summary_frame(rows: list[dict]) -> pd.DataFrame:
    """The seed posts' benchmark table: per shape, each implementation's ms, TFLOP/s, speedup over
    naive, peak memory and bound."""
    frame = pd.DataFrame([r for r in rows if r["step"] == "total"])
    if frame.empty:
        return frame
    shape_cols = ["mode", "dtype", "head_dim", "causal", "batch", "heads", "seq_q"]
    naive = frame[frame.impl == "naive"].set_index(shape_cols)["time_ms"]
    speedups = []
    for _, r in frame.iterrows():
        key = tuple(r[c] for c in shape_cols)
        base = naive.get(key) if key in naive.index else None
        ok = r.get("time_ms") is not None and not pd.isna(r.get("time_ms")) and base is not None and not pd.isna(base)
        speedups.append(base / r["time_ms"] if ok else None)
    frame["speedup_vs_naive"] = speedups
    return frame
