"""Nsight Compute: run the validation driver under ``ncu`` and read its raw CSV into pandas.

``read_raw_csv`` is a pure function (file in, DataFrame out). Columns of its result: ``range``
(the innermost NVTX push/pop range, e.g. ``attn:validate/naive/qk_matmul``), ``impl``, ``step``,
``kernel``, ``grid``, ``block``, ``dram_read_bytes``, ``dram_write_bytes``, ``l2_bytes``,
``gpu_time_ns``, ``tensor_inst``, ``hfma2_inst`` (HFMA2.MMA: elementwise half2 FMAs the tensor
pipe executes, not matrix math), ``tensor_ops_fp16`` and ``tensor_ops_bf16`` (math ops in the
tensor path, HMMA and HGMMA alike); and, where the ncu and GPU have them (NaN in CSVs taken
before), the L2's split of ``l2_bytes`` (:data:`L2_SPLIT`): by operation (``l2_read_bytes``,
``l2_write_bytes``, ``l2_atom_bytes``, ``l2_red_bytes``), by who asked (``l2_sm_bytes``: the SMs'
loads, stores and reductions, TMA's included; ``l2_fabric_bytes``: the other L2 partition, which
asks for lines it does not hold, Hopper's L2 being two partitions joined by a fabric), and the reads
through Hopper's L2 Request Coalescer (``l2_sm_read_bytes``: sectors delivered to the SMs;
``l2_lts_read_bytes``: sectors the L2 slices returned for them).
"""

from __future__ import annotations

import functools
import glob
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from profiler.measure.ranges import parse_range

# Metric -> column. Hopper names, found with `ncu --query-metrics --chip gh100`.
METRICS = {
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "lts__t_bytes.sum": "l2_bytes",
    "gpu__time_duration.sum": "gpu_time_ns",
    "sm__inst_executed_pipe_tensor.sum": "tensor_inst",
    "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum": "hfma2_inst",
    "sm__ops_path_tensor_src_fp16.sum": "tensor_ops_fp16",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum": "tensor_ops_bf16",
}
# Optional: the split of lts__t_bytes (32-byte sectors) by operation and by source unit. Asked
# only where `ncu --query-metrics` lists them (:func:`available_metrics`).
L2_SPLIT = {
    "lts__t_sectors_op_read.sum": "l2_read_bytes",
    "lts__t_sectors_op_write.sum": "l2_write_bytes",
    "lts__t_sectors_op_atom.sum": "l2_atom_bytes",
    "lts__t_sectors_op_red.sum": "l2_red_bytes",
    "lts__t_sectors_srcunit_tex.sum": "l2_sm_bytes",
    "lts__t_sectors_srcunit_ltcfabric.sum": "l2_fabric_bytes",
    # Hopper's L2 Request Coalescer sits in front of the L2 slices and merges reads of the same
    # sectors by different SMs: the read sectors it hands to the GPCs (what the SMs asked), and
    # those the L2 slices returned to it (what lts__t saw of them).
    "lrc__xbar2gpc_sectors_op_read.sum": "l2_sm_read_bytes",
    "lrc__lts2lrc_sectors_op_read.sum": "l2_lts_read_bytes",
    # What the SMs' load/store unit moved, by memory space: local memory (register spills: traffic no
    # tile schedule predicts) and global stores (a store from a register layout that covers half of
    # each 32-byte sector per request is two sector writes where a TMA or smem-staged store is one).
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum": "local_load_bytes",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum": "local_store_bytes",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "global_store_requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "global_store_bytes",
}
SECTOR_BYTES = 32  # an L2 sector (Nsight Compute Profiling Guide, "Memory tables": lts sectors are 32 bytes)
NVTX_COLUMN = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
# Start/end ranges are process-wide: they also cover kernels that autograd's own thread launches
# (a backward), which the launching thread's push/pop ranges do not.
NVTX_PROCESS_COLUMN = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
_VALIDATE_IN_CELL = re.compile(r"(?:attn:)?validate/[A-Za-z_][A-Za-z0-9_]*/[a-z_]+")


class NcuError(RuntimeError):
    """ncu is missing, refused, or wrote nothing readable; the message says which and what to do."""


def find_ncu() -> str:
    candidates = [os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu",
                  *sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise NcuError("Nsight Compute (ncu) not found in $NCU, PATH, /usr/local/cuda/bin or /opt/nvidia/nsight-compute/*; "
                   "install it or set NCU=/path/to/ncu")


@functools.cache
def _listed_metrics(ncu: str, gpu: int | None) -> frozenset[str]:
    """The words of ``ncu --query-metrics`` for the GPU here (empty when the query fails)."""
    env = None if gpu is None else {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    try:
        proc = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(proc.stdout.split()) if proc.returncode == 0 else frozenset()


def available_metrics(ncu: str, names, gpu: int | None = None) -> list[str]:
    """Those of ``names`` whose base metric ``ncu --query-metrics`` lists for the GPU here (all of
    them when the query itself fails: ncu then says which one it lacks)."""
    listed = _listed_metrics(ncu, gpu)
    return [name for name in names if not listed or name.rsplit(".", 1)[0] in listed]


def run_driver(out_csv: Path, driver_args: list[str], ncu: str | None = None, timeout: int = 900,
               gpu: int | None = None, metrics: list[str] | None = None) -> str:
    """Profile ``python -m profiler.nsight.ncu_driver <driver_args>`` with the validation metrics (clocks
    left as they are: --clock-control none) and write ncu's raw CSV to ``out_csv``, on GPU ``gpu``
    (CUDA_VISIBLE_DEVICES) when given; ``metrics``: what to ask (default :data:`METRICS` and the
    :data:`L2_SPLIT` ones ncu lists here). Returns the driver's own output."""
    ncu = ncu or find_ncu()
    metrics = metrics or [*METRICS, *available_metrics(ncu, L2_SPLIT, gpu)]
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--nvtx", "--metrics", ",".join(metrics),
           "--csv", "--page", "raw", "--log-file", str(out_csv), sys.executable, "-m", "profiler.nsight.ncu_driver",
           *driver_args]
    env = None if gpu is None else {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    text = proc.stdout + proc.stderr
    if "ERR_NVGPUCTRPERM" in text or "permission" in text.lower() and "counter" in text.lower():
        raise NcuError("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as root or "
                       "allow non-admin profiling (NVreg_RestrictProfilingToAdminUsers=0)")
    if proc.returncode != 0 or not out_csv.exists():
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise NcuError(f"ncu exited with {proc.returncode}: {tail}")
    return text


def _number(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).replace(",", "").strip()
    return float(text) if text not in ("", "n/a", "nan") else float("nan")


def _range_name(cell: str, process_cell: str = "") -> str:
    """The outermost open push/pop range of ncu's NVTX column, which reads
    `<tid>  "domain:name:PL_Type:...:Msg"  "domain:name:..."`, outermost first; where that is none of
    ours, the validate range open process-wide (start/end) when the kernel ran."""
    entries = [e for e in str(cell).split('"') if ":" in e]
    name = entries[0].split(":none:")[0] if entries else ""
    if parse_range(name) is None and (found := _VALIDATE_IN_CELL.search(str(process_cell))):
        name = found.group(0) if found.group(0).startswith("attn:") else f"attn:{found.group(0)}"
    return name


def read_raw_csv(path: Path | str) -> pd.DataFrame:
    """One row per profiled kernel (see module docstring), from ``ncu --csv --page raw``."""
    text = Path(path).read_text()
    start = text.find('"ID"')
    if start < 0:
        raise NcuError(f"'{path}' holds no ncu CSV table (did the profiled program launch any kernel?)")
    frame = pd.read_csv(io.StringIO(text[start:]), dtype=str, index_col=False)
    frame = frame.iloc[1:]  # the second line holds the units
    missing = [m for m in METRICS if m not in frame.columns]
    if missing:
        raise NcuError(f"'{path}' lacks metric column(s) {', '.join(missing)}")
    out = pd.DataFrame({
        "range": [_range_name(c, p) for c, p in zip(frame.get(NVTX_COLUMN, [""] * len(frame)),
                                                     frame.get(NVTX_PROCESS_COLUMN, [""] * len(frame)))],
        "kernel": frame["Kernel Name"].to_numpy(),
        "grid": frame["Grid Size"].to_numpy(),
        "block": frame["Block Size"].to_numpy(),
    })
    for metric, column in METRICS.items():
        out[column] = [_number(v) for v in frame[metric]]
    for metric, column in L2_SPLIT.items():  # sectors (requests: a count); NaN where the CSV lacks the metric
        unit = 1 if column.endswith("_requests") else SECTOR_BYTES
        out[column] = [_number(v) * unit for v in frame[metric]] if metric in frame.columns else float("nan")
    parsed = [parse_range(r) for r in out["range"]]
    out["impl"] = [p.impl if p is not None and p.validate else "" for p in parsed]
    out["step"] = [p.step if p is not None and p.validate else "" for p in parsed]
    return out.reset_index(drop=True)
