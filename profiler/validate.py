"""Validate the cost model against hardware counters: run the implementations under Nsight Compute
and put measured DRAM bytes, L2 bytes and tensor FLOPs next to the model's numbers.

    python -m profiler validate --seq 1024,4096 --dtype fp16,bf16 --dim 64,128 --causal both

The capture folder holds ``ncu/*.csv`` (ncu's raw output per shape), ``ncu_kernels.parquet`` (one
row per kernel, profiler.ncu), ``validation.parquet`` (one row per implementation × shape × step,
measured and model side by side with ratio columns) and, so the dashboard and report read it like
any capture, ``results.parquet`` and ``meta.json`` (times there are ncu's gpu__time_duration of
the single profiled run, not do_bench medians).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from profiler import cost_model as cm
from profiler.ncu import read_raw_csv, run_driver
from profiler.store import write_bytes_atomic

SHAPE_COLUMNS = ["batch", "heads", "seq_q", "seq_kv", "head_dim", "dtype", "causal"]


def driver_args(shape: cm.Shape, impls: list[str]) -> list[str]:
    args = ["--batch", str(shape.batch), "--heads", str(shape.heads), "--seq", str(shape.seq_q), "--dim",
            str(shape.head_dim), "--dtype", shape.dtype, "--impl", ",".join(impls)]
    return args + (["--causal"] if shape.causal else [])


def csv_name(shape: cm.Shape) -> str:
    return (f"B{shape.batch}H{shape.heads}N{shape.seq_q}D{shape.head_dim}-{shape.dtype}"
            f"{'-causal' if shape.causal else ''}.csv")


def measure_counters(shapes: list[cm.Shape], impls: list[str], folder, progress=None) -> pd.DataFrame:
    """Run ncu once per shape; one row per profiled kernel with the shape's columns."""
    (folder / "ncu").mkdir(parents=True, exist_ok=True)
    tables = []
    for shape in shapes:
        if progress:
            progress(f"ncu N={shape.seq_q} D={shape.head_dim} {shape.dtype}{' causal' if shape.causal else ''}")
        path = folder / "ncu" / csv_name(shape)
        run_driver(path, driver_args(shape, impls))
        tables.append(with_shape(read_raw_csv(path), shape))
    return pd.concat(tables, ignore_index=True)


def with_shape(kernels: pd.DataFrame, shape: cm.Shape) -> pd.DataFrame:
    kernels = kernels.copy()
    for column in SHAPE_COLUMNS:
        kernels[column] = getattr(shape, column)
    return kernels


def query_tile(impl: str, kernel: str, grid: str, seq_q: int) -> int:
    """Query rows per tile of the kernel that ran, which sets how much of the causal diagonal it
    computes in vain: ours from its grid (cdiv(N, BLOCK_M) programs along x), FlashAttention-2 from
    the kBlockM in its kernel traits, cuDNN's sm90 fprop kernel 128 (two 64-row consumer
    warpgroups per tile, the 64 in its name; the H200 counters agree)."""
    if impl == "triton_flash":
        programs = int(str(grid).strip("()").split(",")[0])
        return -(-seq_q // programs)
    match = re.search(r"Flash_fwd_kernel_traits<\d+, (\d+), (\d+)", kernel)
    if match:
        return int(match.group(1))
    return 128


def model_tensor_flops(shape: cm.Shape, impl: str, step: str, tile_m: int = 128) -> float:
    """Matrix FLOPs the tensor cores must do: the two matmuls of attention, none for elementwise
    steps; fused kernels compute whole tiles on the causal diagonal, so their count is the
    executed FLOPs for their query tile (the key tile does not matter when it divides it)."""
    if step in ("qk_matmul", "pv_matmul"):
        return cm.naive_step_flops(shape, step)
    if step in ("scale_mask", "softmax"):
        return 0.0
    return cm.executed_flops(shape, fwd_tile=(tile_m, tile_m))


def validation_table(kernels: pd.DataFrame, l2_bytes: float | None) -> pd.DataFrame:
    """Per implementation × shape × step: measured counters summed over the step's kernels, the
    model's DRAM bytes and tensor FLOPs, and measured / model ratios."""
    kernels = kernels[kernels.impl != ""].copy()
    kernels["tensor_ops"] = kernels[["tensor_ops_fp16", "tensor_ops_bf16"]].fillna(0).sum(axis=1)
    grouped = kernels.groupby(["impl", "step", *SHAPE_COLUMNS], sort=False).agg(
        kernels=("kernel", "size"), kernel_names=("kernel", lambda k: " | ".join(dict.fromkeys(k))),
        grid=("grid", "first"),
        dram_read_bytes=("dram_read_bytes", "sum"), dram_write_bytes=("dram_write_bytes", "sum"),
        l2_bytes=("l2_bytes", "sum"), gpu_time_ns=("gpu_time_ns", "sum"), tensor_ops=("tensor_ops", "sum"),
    ).reset_index()
    rows = []
    for r in grouped.itertuples():
        shape = cm.Shape(int(r.batch), int(r.heads), int(r.seq_q), int(r.seq_kv), int(r.head_dim), r.dtype,
                         bool(r.causal))
        model_dram = cm.dram_bytes(shape, r.impl, r.step, l2_bytes)
        model_l2 = cm.tile_bytes(shape) if r.step == "total" else cm.naive_step_bytes(shape, r.step)
        tile_m = query_tile(r.impl, r.kernel_names, r.grid, int(r.seq_q)) if r.step == "total" else 0
        model_flops = model_tensor_flops(shape, r.impl, r.step, tile_m)
        measured_dram = r.dram_read_bytes + r.dram_write_bytes
        rows.append({
            **r._asdict(), "query_tile": tile_m, "dram_bytes": measured_dram, "model_dram_bytes": model_dram,
            "dram_ratio": measured_dram / model_dram if model_dram else float("nan"),
            "model_l2_bytes": model_l2, "l2_ratio": r.l2_bytes / model_l2 if model_l2 else float("nan"),
            "tensor_flops": r.tensor_ops, "model_tensor_flops": model_flops,
            "tensor_flops_ratio": r.tensor_ops / model_flops if model_flops else float("nan"),
        })
    frame = pd.DataFrame(rows)
    return frame.drop(columns=["Index"], errors="ignore")


def rebuild(folder: Path | str, l2_bytes: float | None) -> pd.DataFrame:
    """Re-read a validation capture's raw ncu CSVs and compare them with the current model (the
    measurements never change; the model may). Writes ncu_kernels.parquet and validation.parquet."""
    folder = Path(folder)
    tables = []
    for path in sorted((folder / "ncu").glob("*.csv")):
        match = re.match(r"B(\d+)H(\d+)N(\d+)D(\d+)-(fp16|bf16|fp32)(-causal)?\.csv$", path.name)
        if match is None:
            continue
        b, h, n, d, dtype, causal = match.groups()
        shape = cm.Shape(int(b), int(h), int(n), int(n), int(d), dtype, causal is not None)
        tables.append(with_shape(read_raw_csv(path), shape))
    if not tables:
        raise ValueError(f"'{folder / 'ncu'}' holds no ncu CSV named like B1H16N4096D64-fp16.csv")
    kernels = pd.concat(tables, ignore_index=True)
    write_bytes_atomic(folder / "ncu_kernels.parquet", kernels.to_parquet(index=False))
    table = validation_table(kernels, l2_bytes)
    write_bytes_atomic(folder / "validation.parquet", table.to_parquet(index=False))
    return table
