"""``observe --trace nsys``: the run under Nsight Systems, each call timed from its own NVTX range.

``python -m profiler observe --trace nsys --out DIR -- script.py`` runs itself again under ``nsys
profile`` with the settings of scripts/nsys_profile.sh (CUDA and NVTX traced, no CPU sampling, no
context switches, recording between cudaProfilerStart and cudaProfilerStop, which the observation
calls where it begins and ends). Inside, every observed call pushes its NVTX range
``attn:observe/<api>/<mode>/<site>`` with the call's number as the range's integer payload
(profiler.observer.hooks), and the observation writes its rows without times, and
``nsys_calls.parquet``: each call's number and row. When nsys has finished, ``nsys export --type
sqlite`` writes ``profile.sqlite`` beside ``profile.nsys-rep``, and :func:`fill` joins the two by the
payload, an exact key, not an order: each call's time is the time the GPU operations launched inside
its range kept the GPU busy (profiler.nsight.nsys.range_projection's ``gpu_busy_ns``: the union of
their intervals), the same quantity ``--trace torch`` gives (the call's own kernels, gaps excluded).
nsys's own projection (``nsys stats --report nvtx_gpu_proj_sum``: first operation's start to last
one's end) would also count the gaps between them, which on a first call are the host's setup (a
cuDNN plan, an autotuner) and can be a thousand times the kernels. Each row gets its calls' total,
median, percentiles and rate. The GPU's busy time is the union of the export's kernels.

Attention inside compiled graphs is counted but not timed with this clock (a graph run launches all
its kernels inside one range): ``--trace torch`` times those.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.measure.ranges import DOMAIN, OBSERVE
from profiler.model.roofs import Roofs
from profiler.store import Capture, read_parquet_snapshot, to_frame, write_parquet_atomic

NSYS_CALLS = "nsys_calls.parquet"
REPORT = "profile"  # profile.nsys-rep and profile.sqlite, as scripts/nsys_profile.sh names them
UNDER_NSYS = "ATTENTION_ROOFLINE_UNDER_NSYS"  # set in the process nsys runs: observe there, time here after
# Where Nsight Systems installs itself when it is not on PATH (as scripts/nsys_profile.sh looks).
NSYS_PLACES = ("/opt/nvidia/nsight-systems/*/bin/nsys", "/usr/local/cuda/bin/nsys",
               "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")


def find_nsys() -> str | None:
    """The nsys executable: $NSYS, else on PATH, else the newest in the usual places; None if none."""
    if os.environ.get("NSYS"):
        return os.environ["NSYS"] if os.access(os.environ["NSYS"], os.X_OK) else None
    found = shutil.which("nsys")
    if found:
        return found
    for pattern in NSYS_PLACES:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def profile_command(nsys: str, folder: Path, observe_argv: list[str]) -> list[str]:
    """``nsys profile`` with scripts/nsys_profile.sh's settings around ``observe_argv`` (a python command)."""
    return [nsys, "profile", "-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--force-overwrite=true", "-o", str(folder / REPORT), *observe_argv]


def export_command(nsys: str, folder: Path) -> list[str]:
    return [nsys, "export", "--type", "sqlite", "--force-overwrite=true", "--output",
            str(folder / f"{REPORT}.sqlite"), str(folder / f"{REPORT}.nsys-rep")]


def write_calls(folder: Path, calls: list, rows: list) -> None:
    """Each call's number (its NVTX payload) and the index of its row among ``rows`` (the order
    profiler.observer.run writes them in)."""
    index = {id(stats): i for i, stats in enumerate(rows)}
    frame = pd.DataFrame({"call": np.arange(len(calls), dtype=np.int64),
                          "row": np.array([index[id(s)] for s in calls], dtype=np.int64)})
    write_parquet_atomic(Path(folder) / NSYS_CALLS, frame)


def call_times(ranges: pd.DataFrame, projection: pd.DataFrame) -> pd.Series:
    """GPU ms of each observed call, by its number: the busy time of the range whose payload it is."""
    ours = ranges[ranges["range"].str.startswith(f"{DOMAIN}:{OBSERVE}/") & ranges["payload"].notna()]
    proj = projection.set_index("range_id")["gpu_busy_ns"]
    return pd.Series(proj.reindex(ours["range_id"]).to_numpy() / 1e6, index=ours["payload"].astype(np.int64).to_numpy())


def fill(folder: Path | str) -> dict:
    """Give the rows of an observation run under nsys their times from the export (module docstring);
    writes results.parquet and meta.json's ``observed`` and returns that summary."""
    from profiler.nsight.nsys import NsysExportError, read_export
    from profiler.observer.run import busy_ms, with_times

    capture = Capture(folder)
    meta, frame = capture.load()
    export = capture.nsys_export
    if export is None:
        raise NsysExportError(f"'{capture.path}' has no {REPORT}.sqlite: nsys did not write its report")
    ranges, ops, projection = read_export(export)
    times = call_times(ranges, projection)
    calls = read_parquet_snapshot(capture.path / NSYS_CALLS)
    found = calls[calls["call"].isin(times.index)]
    per_row: dict[int, list[float]] = {}
    for call, row in zip(found["call"], found["row"]):
        per_row.setdefault(int(row), []).append(float(times[call]))
    roofs = Roofs.from_meta(meta)
    rows = frame.to_dict("records")
    rows = [with_times(r, per_row[i], roofs) if i in per_row else r for i, r in enumerate(rows)]
    summary = dict(meta.get("observed", {}))
    summary.pop("times_pending", None)
    timed = [r for r in rows if r["status"] != "untimed"]
    attention_ms = sum(r["total_ms"] for r in timed)
    kernels = ops[ops["kind"] == "kernel"]
    gpu_busy = busy_ms(pd.DataFrame({"start_us": kernels["start_ns"] / 1e3, "gpu_us": kernels["gpu_ns"] / 1e3}))
    wall_ms = (summary.get("wall_s") or 0) * 1e3
    summary.update(clock="nsys", rows=len(rows), calls_without_ranges=int(len(calls) - len(found)),
                   compiled_calls_untimed=int(sum(r["calls"] for r in rows) - len(calls)),
                   attention_ms=attention_ms,
                   attention_fwd_ms=sum(r["total_ms"] for r in timed if r["mode"] == "fwd"),
                   attention_bwd_ms=sum(r["total_ms"] for r in timed if r["mode"] == "bwd"),
                   attention_share_of_wall=attention_ms / wall_ms if wall_ms > 0 else None,
                   gpu_busy_ms=gpu_busy, gpu_kernel_ms=float(kernels["gpu_ns"].sum() / 1e6),
                   gpu_busy_share_of_wall=gpu_busy / wall_ms if wall_ms > 0 else None,
                   attention_share_of_gpu=attention_ms / gpu_busy if gpu_busy > 0 else None,
                   nsys_report=f"{REPORT}.nsys-rep", nsys_export=export.name)
    capture.write_results(to_frame(rows))
    capture.write_meta(meta | {"observed": summary})
    return summary
