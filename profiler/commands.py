"""The bodies of the ``python -m profiler`` subcommands (parsing lives in profiler.cli)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from profiler import cost_model as cm
from profiler import hardware, roofline
from profiler.cli import UsageError

# Wide enough for the tables when output goes to a file or a CI log (rich assumes 80 there).
console = Console(width=max(shutil.get_terminal_size((160, 40)).columns, 100))


def _fmt(x, spec=".3g", missing="-"):
    return missing if x is None or x != x else format(x, spec)  # x != x: NaN


# --------------------------------------------------------------------------------------------- model


def model_rows(shape: cm.Shape, device: hardware.Device) -> list[dict]:
    """One row per implementation step: FLOPs, bytes, intensity, bound on ``device``'s datasheet roof."""
    from kernels.registry import REGISTRY

    peak, bw = device.peak_flops(shape.dtype), device.hbm_bytes_per_s
    rows = []
    for impl in REGISTRY.values():
        if impl.name == "naive":
            for step in impl.steps:
                flops, nbytes = cm.naive_step_flops(shape, step), cm.naive_step_bytes(shape, step)
                rows.append(_model_row(impl.name, step, flops, nbytes, nbytes, peak, bw))
        elif impl.name == "sdpa_math":
            # The math backend runs the same unfused steps (its own kernels): sum of the naive steps.
            flops = sum(cm.naive_step_flops(shape, s) for s in cm.NAIVE_STEPS)
            nbytes = sum(cm.naive_step_bytes(shape, s) for s in cm.NAIVE_STEPS)
            rows.append(_model_row(impl.name, "total", flops, nbytes, nbytes, peak, bw))
        elif impl.name == "triton_naive":
            # One program per query row: every row re-reads all of K and V (no reuse across rows).
            if shape.mode != "fwd":
                continue
            flops = cm.fused_flops(shape)
            reread = shape.bh * shape.seq_q * (2 * shape.seq_kv * shape.head_dim * shape.elem_bytes)
            if shape.causal:
                reread //= 2
            rows.append(_model_row(impl.name, "total", flops, cm.compulsory_bytes(shape),
                                   reread + cm.compulsory_bytes(shape), peak, bw))
        else:
            if shape.mode != "fwd" and not impl.supports_backward:
                continue
            flops = cm.fused_flops(shape)
            rows.append(_model_row(impl.name, "total", flops, cm.compulsory_bytes(shape), cm.tile_bytes(shape),
                                   peak, bw))
    return rows


def _model_row(impl, step, flops, compulsory, tile, peak, bw) -> dict:
    ai = cm.arithmetic_intensity(flops, compulsory)
    return {
        "impl": impl, "step": step, "flops": flops, "hbm_bytes": compulsory, "tile_bytes": tile,
        "arithmetic_intensity": ai, "tile_intensity": cm.arithmetic_intensity(flops, tile),
        "attainable_tflops": roofline.attainable_flops(ai, peak, bw) / 1e12,
        "bound": roofline.bound(ai, peak, bw),
    }


def model(args) -> int:
    if args.list_devices:
        table = Table("device", "fp16/bf16 TFLOP/s", "fp32 TFLOP/s", "HBM TB/s", "L2 MB", "SMs", "ridge fp16")
        for d in hardware.DEVICES.values():
            table.add_row(d.name, _fmt(d.tensor_tflops["fp16"]), _fmt(d.fp32_tflops), _fmt(d.hbm_tbps),
                          _fmt(d.l2_bytes / 1e6 if d.l2_bytes else None), _fmt(d.sm_count),
                          _fmt(roofline.ridge_point(d.peak_flops("fp16"), d.hbm_bytes_per_s), ".0f"))
        console.print(table)
        return 0
    device = hardware.lookup(args.device_name)
    if device is None:
        raise UsageError(f"unknown --device-name '{args.device_name}'; known: {', '.join(hardware.DEVICES)}")
    try:
        shape = cm.Shape(args.batch, args.heads, args.seq, args.seq, args.dim, args.dtype, args.causal, args.mode)
    except ValueError as err:
        raise UsageError(str(err)) from None
    rows = model_rows(shape, device)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    peak, bw = device.peak_flops(shape.dtype), device.hbm_bytes_per_s
    ridge = roofline.ridge_point(peak, bw)
    table = Table(
        "impl", "step", "GFLOP", "HBM MB (compulsory)", "MB (tile)", "FLOP/B", "FLOP/B (tile)", "roof TFLOP/s",
        "bound",
        title=(f"B={shape.batch} H={shape.heads} N={shape.seq_q} D={shape.head_dim} {shape.dtype} "
               f"{'causal' if shape.causal else 'full'} {shape.mode} on {device.name} (datasheet): "
               f"peak {peak / 1e12:.0f} TFLOP/s, {bw / 1e12:.2f} TB/s, ridge {ridge:.0f} FLOP/B"),
    )
    for r in rows:
        table.add_row(r["impl"], r["step"], f"{r['flops'] / 1e9:,.1f}", f"{r['hbm_bytes'] / 1e6:,.1f}",
                      f"{r['tile_bytes'] / 1e6:,.1f}", f"{r['arithmetic_intensity']:,.2f}",
                      f"{r['tile_intensity']:,.2f}", f"{r['attainable_tflops']:,.1f}", r["bound"])
    console.print(table)
    return 0


# ------------------------------------------------------------------------------------------ ceilings


def ceilings(args) -> int:
    from profiler.ceilings import measure_ceilings

    with console.status(f"timing a large matmul per dtype and a large copy on {args.device} ..."):
        measured = measure_ceilings(args.device, use_cache=not args.no_cache)
    sheet = hardware.lookup(measured.device)
    rows = []
    for dtype, tflops in measured.matmul_tflops.items():
        datasheet = sheet.peak_flops(dtype) / 1e12 if sheet else None
        rows.append({"what": f"matmul {dtype} (n={measured.matmul_n})", "unit": "TFLOP/s", "measured": tflops,
                     "datasheet": datasheet, "ratio": tflops / datasheet if datasheet else None})
    datasheet_bw = sheet.hbm_tbps * 1e3 if sheet else None
    rows.append({"what": f"copy {measured.copy_bytes >> 20} MiB (read+write)", "unit": "GB/s",
                 "measured": measured.copy_gbps, "datasheet": datasheet_bw,
                 "ratio": measured.copy_gbps / datasheet_bw if datasheet_bw else None})
    if args.json:
        print(json.dumps({"device": measured.device, "datasheet_entry": sheet.name if sheet else None,
                          "measured_at": measured.measured_at, "rows": rows}, indent=2))
        return 0
    title = f"{measured.device}: measured {measured.measured_at}"
    if sheet is None:
        title += " (not in the datasheet table: measured ceilings only)"
    table = Table("ceiling", "unit", "measured", "datasheet", "measured / datasheet", title=title)
    for r in rows:
        table.add_row(r["what"], r["unit"], f"{r['measured']:,.1f}", _fmt(r["datasheet"], ",.1f"),
                      _fmt(r["ratio"], ".2f"))
    console.print(table)
    return 0


# --------------------------------------------------------------------------------------------- bench


def bench(args) -> int:
    """Our kernels beside PyTorch's, over a grid of shapes, into a capture folder; prints TFLOP/s
    and the ratio of the baseline (ours) to each peer."""
    from kernels.registry import REGISTRY
    from profiler.capture import Roofs, run_capture
    from profiler.ceilings import device_name, measure_ceilings
    from profiler.meta import run_metadata
    from profiler.store import ResultStore, to_frame

    if args.baseline not in args.impl:
        raise UsageError(f"--baseline '{args.baseline}' must be one of --impl ({', '.join(args.impl)})")
    if args.tokens is not None and args.tokens < max(args.seq):
        raise UsageError(f"--tokens {args.tokens} is below the longest --seq ({max(args.seq)}): "
                         "batch = tokens // seq must be at least 1")
    try:
        shapes = [
            cm.Shape(b, h, n, n, d, dt, c, m)
            for m, dt, d, c, n in itertools.product(args.mode, args.dtype, args.dim, args.causal, args.seq)
            for b in ([args.tokens // n] if args.tokens else args.batch)
            for h in args.heads
        ]
    except ValueError as err:
        raise UsageError(str(err)) from None
    label = device_name(args.device)
    folder = Path(args.out) if args.out else _capture_folder(args, f"bench-{label}")
    if (folder / "results.parquet").exists() and not args.resume:
        raise UsageError(f"--out '{folder}' already holds results; pass --resume to add to it or choose another")
    with console.status("measuring the roofs (matmul per dtype, device copy) ..."):
        measured = measure_ceilings(args.device, dtypes=tuple(sorted(set(args.dtype))))
    roofs = Roofs(hardware.lookup(label), measured)
    meta = run_metadata(args.device) | roofs.as_meta() | {
        "kind": "bench", "shapes": len(shapes), "impls": args.impl, "baseline": args.baseline, "trace": "none",
        "rep_ms": args.rep_ms,
        "flops_convention": "totals: 4·B·H·Nq·Nk·D, x0.5 causal, x2.5 bwd",
    }
    store = ResultStore(folder, meta, resume=args.resume)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmark", total=len(shapes) * len(args.impl))

        def advance(description):
            progress.update(task, description=description)
            progress.advance(task)

        run_capture(store, shapes, [REGISTRY[n] for n in args.impl], args.device, roofs, rep_ms=args.rep_ms,
                    progress=advance)
    store.update_meta(finished=True)
    table = bench_table(to_frame(store.rows), args.impl, args.baseline)
    timer = "do_bench" if args.device == "cuda" else "torch.utils.benchmark"
    _print_bench(table, args.impl, args.baseline,
                 f"{label}: median {timer}, FLOPs = 4·B·H·N²·D (x0.5 causal, x2.5 bwd)")
    for r in store.rows:
        if r["status"] != "ok" and r["impl"] in args.impl:
            console.print(f"[yellow]{r['impl']} {r['mode']} N={r['seq_q']} D={r['head_dim']}: {r['status']}: "
                          f"{r['message']}")
    if args.json:
        from profiler.store import write_json_atomic

        write_json_atomic(Path(args.json), {"device": label, "meta": store.meta,
                                            "rows": table.to_dict("records")})
    console.print(f"Results written to {folder}/ (results.parquet, meta.json).")
    return 0


BENCH_SHAPE = ["mode", "dtype", "head_dim", "causal", "seq_q", "batch", "heads"]


def bench_table(frame, impls: list[str], baseline: str):
    """One row per shape: each implementation's TFLOP/s and, for each peer, baseline / peer
    (above 1 means the baseline is faster). A peer that did not run has no ratio."""
    import pandas as pd

    totals = frame[(frame.step == "total") & frame.impl.isin(impls)]
    rows = []
    for key, group in totals.groupby(BENCH_SHAPE, sort=False):
        by_impl = {r.impl: r for r in group.itertuples()}
        row = dict(zip(BENCH_SHAPE, key))
        for name in impls:
            r = by_impl.get(name)
            row[f"{name}_tflops"] = r.tflops if r is not None and r.status == "ok" else None
            row[f"{name}_status"] = r.status if r is not None else "missing"
            row[f"{name}_max_rel_err"] = r.max_rel_err if r is not None else None
        base = row[f"{baseline}_tflops"]
        for name in impls:
            if name != baseline:
                peer = row[f"{name}_tflops"]
                row[f"{baseline}/{name}"] = base / peer if base and peer else None
        rows.append(row)
    return pd.DataFrame(rows)


def _print_bench(table, impls: list[str], baseline: str, title: str) -> None:
    if table.empty:
        return
    peers = [n for n in impls if n != baseline]
    out = Table("mode", "dtype", "D", "causal", "N", "B×H", *[f"{n} TFLOP/s" for n in impls],
                *[f"{baseline}/{n}" for n in peers], title=title)
    for r in table.to_dict("records"):
        out.add_row(r["mode"], r["dtype"], str(r["head_dim"]), "yes" if r["causal"] else "no", str(r["seq_q"]),
                    f"{r['batch']}×{r['heads']}",
                    *[_fmt(r[f"{n}_tflops"], ".4g", r[f"{n}_status"]) for n in impls],
                    *[_fmt(r[f"{baseline}/{n}"], ".2f") for n in peers])
    console.print(out)
    for n in peers:
        ratios = table[f"{baseline}/{n}"].dropna()
        if len(ratios):
            worst = table.loc[ratios.idxmin()]
            console.print(f"{baseline}/{n}: lowest {ratios.min():.2f} ({worst['mode']} {worst['dtype']} "
                          f"D{worst['head_dim']} N{worst['seq_q']}{' causal' if worst['causal'] else ''}), "
                          f"highest {ratios.max():.2f}, {int((ratios >= 1).sum())} of {len(ratios)} at or above 1.0")


# ---------------------------------------------------------------------------------------------- demo


def demo(args) -> int:
    """Every implementation once at a size that suits the machine, with its error and speed."""
    from kernels.registry import REGISTRY
    from profiler.runner import run_case

    on_gpu = args.device == "cuda"
    # The seed posts' benchmark shape on a GPU; on a CPU a size that runs in seconds.
    shape = cm.Shape(4, 32, 4096, 4096, 64, "fp16") if on_gpu else cm.Shape(1, 4, 512, 512, 64, "fp32")
    results = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("demo", total=len(REGISTRY))
        for impl in REGISTRY.values():
            progress.update(task, description=f"running {impl.name}")
            results.append(run_case(impl, shape, args.device, rep_ms=50 if on_gpu else 200))
            progress.advance(task)
    naive_ms = next((r.timing.median_ms for r in results if r.impl == "naive" and r.timing), None)
    table = Table("impl", "ms", "TFLOP/s", "speedup vs naive", "max rel err vs fp32", "peak MiB", "status",
                  title=f"B={shape.batch} H={shape.heads} N={shape.seq_q} D={shape.head_dim} {shape.dtype} "
                        f"forward on {args.device}")
    for r in results:
        ms = r.timing.median_ms if r.timing else None
        table.add_row(r.impl, _fmt(ms, ".3f"), _fmt(r.tflops, ".2f"),
                      _fmt(naive_ms / ms if ms and naive_ms else None, ".1f"), _fmt(r.max_rel_err, ".1e"),
                      _fmt(r.peak_mem_bytes / 2**20 if r.peak_mem_bytes else None, ".0f"),
                      r.status if r.status == "ok" else f"{r.status}: {r.message}")
    console.print(table)
    if not on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
        console.print("Triton kernels need a GPU; set TRITON_INTERPRET=1 to run them (slowly) on the CPU.")
    return 0


# ------------------------------------------------------------------------------------ capture, sweep


def _resolve_capture_args(args, lists: bool) -> tuple[dict, list[str]]:
    """Fill defaults: the seed benchmark (B4 H32 D64 fp16) on a GPU; on a CPU, sizes that fit and
    finish in minutes (B1 H2 fp32). Returns the values and notes on what was shrunk."""
    on_gpu = args.device == "cuda"
    notes = []

    def pick(value, gpu_default: list, cpu_default: list, name: str) -> list:
        if value is not None:
            return value if isinstance(value, list) else [value]  # sweep gives lists, capture one value
        if not on_gpu and cpu_default != gpu_default:
            notes.append(f"{name}={','.join(map(str, cpu_default))} (GPU default {','.join(map(str, gpu_default))})")
        return gpu_default if on_gpu else cpu_default

    values = {
        "seqs": pick(args.seq, [512, 1024, 2048, 4096, 8192, 16384] if lists else [8192],
                     [256, 512, 1024] if lists else [8192], "seq"),
        "batches": pick(args.batch, [4], [1], "batch"),
        "heads": pick(args.heads, [32], [2], "heads"),
        "dims": pick(args.dim, [64], [64], "head_dim"),
        "dtypes": pick(args.dtype, ["fp16"], ["fp32"], "dtype"),
        "causals": args.causal if lists else [args.causal],
        "modes": args.mode if lists else [args.mode],
    }
    return values, notes


def _capture_folder(args, device_label: str) -> Path:
    if args.out:
        return Path(args.out)
    slug = "".join(ch if ch.isalnum() else "-" for ch in device_label.lower()).strip("-")
    import time

    return Path("reports") / f"{slug[:40]}-{time.strftime('%Y%m%d-%H%M%S')}"


def _run_capture_command(args, lists: bool) -> int:
    from kernels.registry import REGISTRY
    from profiler.capture import Roofs, run_capture, shapes_of, summary_frame
    from profiler.ceilings import device_name, measure_ceilings
    from profiler.meta import run_metadata
    from profiler.store import ResultStore

    values, notes = _resolve_capture_args(args, lists)
    try:
        shapes = shapes_of(values["batches"], values["heads"], values["seqs"], values["dims"], values["dtypes"],
                           values["causals"], values["modes"])
    except ValueError as err:
        raise UsageError(str(err)) from None
    impls = [REGISTRY[n] for n in (args.impl or list(REGISTRY))]
    label = device_name(args.device)
    folder = _capture_folder(args, label)
    if (folder / "results.parquet").exists() and not args.resume:
        raise UsageError(f"--out '{folder}' already holds a capture; pass --resume to add to it or choose another")
    if notes:
        console.print(f"No GPU: defaults shrunk to fit this machine: {', '.join(notes)}.")
    with console.status("measuring the roofs (matmul per dtype, device copy) ..."):
        measured = measure_ceilings(args.device, dtypes=tuple(sorted(set(values["dtypes"]))))
    roofs = Roofs(hardware.lookup(label), measured)
    if roofs.datasheet is None:
        console.print(f"'{label}' is not in the datasheet table: rows are judged against measured ceilings only.")
    trace = args.trace or ("torch" if args.device == "cuda" else "none")
    seqs = values["seqs"]
    # A capture traces each implementation at its shape; a sweep only at its middle sequence length
    # and its first dtype, head_dim, causal setting and mode, so the folder stays a few MB.
    traced = None
    if trace == "torch":
        traced = (seqs[len(seqs) // 2], values["dtypes"][0], values["dims"][0], values["causals"][0],
                  values["modes"][0])
    meta = run_metadata(args.device) | roofs.as_meta() | {
        "kind": "sweep" if lists else "capture", "shapes": len(shapes), "impls": [i.name for i in impls],
        "trace": trace, "defaults_shrunk": notes, "rep_ms": args.rep_ms,
        "flops_convention": "totals: 4·B·H·Nq·Nk·D, x0.5 causal, x2.5 bwd; naive steps: profiler.cost_model",
    }
    store = ResultStore(folder, meta, resume=args.resume)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("capture", total=len(shapes) * len(impls))

        def advance(description):
            progress.update(task, description=description)
            progress.advance(task)

        rows = run_capture(store, shapes, impls, args.device, roofs, rep_ms=args.rep_ms, progress=advance,
                           trace_filter=None if traced is None else
                           (lambda s: (s.seq_q, s.dtype, s.head_dim, s.causal, s.mode) == traced))
    store.update_meta(finished=True)
    _print_summary(summary_frame(store.rows if args.resume else rows))
    console.print(f"Capture written to {folder}/ (results.parquet, meta.json"
                  f"{', kernels.parquet, traces/' if traced else ''}).")
    if Path("dashboards/roofline.py").exists():
        console.print(f"Explore it: streamlit run dashboards/roofline.py -- --reports {folder.parent}")
    return 0


def _print_summary(frame) -> None:
    if frame.empty:
        return
    shape_cols = ["mode", "dtype", "head_dim", "causal", "batch", "heads", "seq_q"]
    for key, group in frame.groupby(shape_cols, sort=False):
        mode, dtype, d, causal, b, h, n = key
        table = Table("impl", "ms", "TFLOP/s", "speedup vs naive", "peak MiB", "bound", "status",
                      title=f"B={b} H={h} N={n} D={d} {dtype} {'causal' if causal else 'full'} {mode}")
        for _, r in group.iterrows():
            ok = r["status"] == "ok"
            table.add_row(
                r["impl"], _fmt(r["time_ms"] if ok else None, ".3f"), _fmt(r["tflops"] if ok else None, ".4g"),
                _fmt(r["speedup_vs_naive"], ".1f"),
                _fmt(r["peak_mem_bytes"] / 2**20 if ok and r["peak_mem_bytes"] is not None else None, ",.0f"),
                r.get("bound") or "-", r["status"] if ok else f"{r['status']}: {str(r['message'])[:60]}",
            )
        console.print(table)


def capture(args) -> int:
    return _run_capture_command(args, lists=False)


def sweep(args) -> int:
    return _run_capture_command(args, lists=True)


# ---------------------------------------------------------------------------------------------- nsys


def nsys(args) -> int:
    from profiler import nsys as nsys_export

    if args.nsys_command == "summarize":
        try:
            _, _, projection = nsys_export.read_export(args.export)
        except nsys_export.NsysExportError as err:
            raise UsageError(str(err)) from None
        table = nsys_export.summarize(projection)
        if args.json:
            print(json.dumps(table.to_dict("records"), indent=2, default=int))
            return 0
        if table.empty:
            console.print(f"{args.export}: no NVTX ranges in this export (was it captured with `-t nvtx`?)")
            return 0
        out = Table("range", "instances", "GPU proj ns (total)", "GPU proj median ns", "range ns (total)",
                    "GPU ops", "kernels", title=f"{args.export}: GPU time projected onto NVTX ranges")
        for r in table.itertuples():
            out.add_row(r.range, f"{r.instances:,}", f"{r.gpu_proj_ns:,}", f"{r.gpu_proj_median_ns:,.0f}",
                        f"{r.range_ns:,}", f"{r.gpu_ops:,}", f"{r.kernels:,}")
        console.print(out)
        return 0
    return _nsys_ingest(Path(args.capture))


def _nsys_ingest(folder: Path) -> int:
    from profiler import nsys as nsys_export
    from profiler.store import CaptureError, load_capture, write_bytes_atomic, write_json_atomic

    try:
        meta, results = load_capture(folder)
    except CaptureError as err:
        raise UsageError(str(err)) from None
    export = next((p for p in (folder / "profile.sqlite", folder / "profile.sqlite.xz") if p.exists()), None)
    if export is None:
        raise UsageError(f"'{folder}' has no profile.sqlite; make one with scripts/nsys_profile.sh")
    try:
        ranges, ops, projection = nsys_export.read_export(export)
    except nsys_export.NsysExportError as err:
        raise UsageError(str(err)) from None
    summary = nsys_export.summarize(projection)
    summary.to_parquet(folder / "nsys_ranges.parquet", index=False)
    ops.to_parquet(folder / "nsys_gpu_ops.parquet", index=False)
    results["nsys_gpu_ms"] = nsys_export.capture_gpu_times(projection, ranges, results)
    write_bytes_atomic(folder / "results.parquet", results.to_parquet(index=False))
    meta["nsys"] = {"export": export.name, "ranges": len(summary), "gpu_ops": len(ops)}
    write_json_atomic(folder / "meta.json", meta)
    joined = results[results.nsys_gpu_ms.notna()]
    table = Table("impl", "step", "mode", "N", "CUDA events ms", "nsys GPU ms", "nsys / events",
                  title=f"{folder}: CUDA-event median vs Nsight Systems median projected GPU time per repetition")
    for r in joined.itertuples():
        table.add_row(r.impl, r.step, r.mode, str(r.seq_q), f"{r.time_ms:.4f}", f"{r.nsys_gpu_ms:.4f}",
                      f"{r.nsys_gpu_ms / r.time_ms:.3f}")
    console.print(table)
    console.print(f"Wrote nsys_ranges.parquet, nsys_gpu_ops.parquet and results.parquet's nsys_gpu_ms in {folder}/")
    return 0


# -------------------------------------------------------------------------------------------- report


def report(args) -> int:
    from profiler.report import write_report
    from profiler.store import CaptureError

    try:
        out = write_report(args.capture, args.out)
    except CaptureError as err:
        raise UsageError(str(err)) from None
    console.print(f"Wrote {out} ({out.stat().st_size / 1e6:.1f} MB, opens offline)")
    return 0


# ------------------------------------------------------------------------------------------ validate


def validate(args) -> int:
    import torch

    if args.rebuild:
        return _validate_rebuild(Path(args.rebuild))
    from profiler.capture import Roofs
    from profiler.ceilings import device_name, measure_ceilings
    from profiler.meta import run_metadata
    from profiler.ncu import NcuError, find_ncu
    from profiler.store import ResultStore, write_bytes_atomic
    from profiler.validate import measure_counters, validation_table

    if not torch.cuda.is_available():
        raise UsageError("validate needs a CUDA GPU: Nsight Compute reads its hardware counters")
    try:
        find_ncu()
    except NcuError as err:
        raise UsageError(str(err)) from None
    shapes = [cm.Shape(args.batch, args.heads, n, n, d, dt, c) for dt in args.dtype for d in args.dim
              for c in args.causal for n in args.seq]
    label = device_name("cuda")
    folder = _capture_folder(args, "validate-" + label)
    if (folder / "results.parquet").exists():
        raise UsageError(f"--out '{folder}' already holds a capture; choose another folder")
    roofs = Roofs(hardware.lookup(label), measure_ceilings("cuda"))
    meta = run_metadata("cuda") | roofs.as_meta() | {"kind": "validate", "impls": args.impl}
    l2 = meta.get("l2_bytes")
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("ncu", total=len(shapes))

        def advance(description):
            progress.update(task, description=description)
            progress.advance(task)

        try:
            kernels = measure_counters(shapes, args.impl, folder, progress=advance)
        except NcuError as err:
            raise UsageError(str(err)) from None
    write_bytes_atomic(folder / "ncu_kernels.parquet", kernels.to_parquet(index=False))
    table = validation_table(kernels, l2)
    write_bytes_atomic(folder / "validation.parquet", table.to_parquet(index=False))
    store = ResultStore(folder, meta)
    store.append(_validation_rows(table, roofs))
    _print_validation(table)
    console.print(f"Wrote {folder}/ (validation.parquet, ncu_kernels.parquet, ncu/*.csv, results.parquet)")
    return 0


def remodel(args) -> int:
    """Re-join a capture's stored times with the current cost model, after the model changed."""
    import time

    from profiler.capture import Roofs
    from profiler.capture import remodel as remodel_frame
    from profiler.store import RESULTS, CaptureError, load_capture, write_bytes_atomic, write_json_atomic

    folder = Path(args.capture)
    try:
        meta, frame = load_capture(folder)
    except CaptureError as err:
        raise UsageError(str(err)) from None
    new, changed = remodel_frame(frame, Roofs.from_meta(meta))
    if not changed.any():
        console.print(f"{folder}: every row already matches the current model.")
        return 0
    console.print(f"{folder}: the model gives other FLOPs or bytes for {int(changed.sum())} of {len(frame)} rows:")
    for (impl, step, mode, causal), count in frame[changed].groupby(["impl", "step", "mode", "causal"]).size().items():
        console.print(f"  {impl} {step} {mode}{' causal' if causal else ''}: {count}")
    if args.dry_run:
        return 0
    write_bytes_atomic(folder / RESULTS, new.to_parquet(index=False))
    meta.setdefault("remodelled", []).append({
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows_changed": int(changed.sum()),
        "note": "FLOPs, bytes, intensity, rates, bound and roof fractions of these rows recomputed from their "
                "stored times with the cost model of this time, against this meta's roofs"})
    write_json_atomic(folder / "meta.json", meta)
    console.print(f"Wrote {folder / RESULTS}; meta.json records the remodel.")
    return 0


def _validation_rows(table, roofs) -> list[dict]:
    """Capture rows for a validation table, so the dashboard reads it like any capture; the time
    is ncu's gpu__time_duration of the one profiled run."""
    from kernels.registry import REGISTRY
    from profiler.capture import make_row
    from profiler.timing import Timing

    rows = []
    for r in table.itertuples():
        shape = cm.Shape(int(r.batch), int(r.heads), int(r.seq_q), int(r.seq_kv), int(r.head_dim), r.dtype,
                         bool(r.causal))
        ms = r.gpu_time_ns / 1e6
        rows.append(make_row(REGISTRY[r.impl], shape, r.step, roofs, timing=Timing(ms, ms, ms), status="ok",
                             message="time: ncu gpu__time_duration of one run"))
    return rows


def _validate_rebuild(folder: Path) -> int:
    """Re-read the ncu CSVs of a validation capture and rewrite its tables with the current model."""
    import time

    from profiler.capture import Roofs
    from profiler.ncu import NcuError
    from profiler.store import RESULTS, CaptureError, to_frame, write_bytes_atomic, write_json_atomic
    from profiler.validate import rebuild

    meta_path = folder / "meta.json"
    if not meta_path.exists():
        raise UsageError(f"'{folder}' is not a validation capture: missing meta.json")
    try:
        meta = json.loads(meta_path.read_text())
        table = rebuild(folder, meta.get("l2_bytes"))
    except (CaptureError, NcuError, ValueError) as err:
        raise UsageError(str(err)) from None
    rows = to_frame(_validation_rows(table, Roofs.from_meta(meta)))
    write_bytes_atomic(folder / RESULTS, rows.to_parquet(index=False))
    meta["validation_rebuilt_with_model_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json_atomic(meta_path, meta)
    _print_validation(table)
    return 0


def _print_validation(table) -> None:
    out = Table("impl", "step", "N", "D", "dtype", "causal", "DRAM MB (ncu)", "model", "ratio", "L2 MB (ncu)",
                "L2 model", "ratio", "tensor GFLOP (ncu)", "model", "ratio",
                title="Nsight Compute vs the cost model (DRAM and L2 bytes, tensor-core FLOPs)")
    for r in table.itertuples():
        out.add_row(r.impl, r.step, str(r.seq_q), str(r.head_dim), r.dtype, str(r.causal),
                    f"{r.dram_bytes / 1e6:,.1f}", f"{r.model_dram_bytes / 1e6:,.1f}", _fmt(r.dram_ratio, ".3f"),
                    f"{r.l2_bytes / 1e6:,.1f}", f"{r.model_l2_bytes / 1e6:,.1f}", _fmt(r.l2_ratio, ".3f"),
                    f"{r.tensor_flops / 1e9:,.2f}", f"{r.model_tensor_flops / 1e9:,.2f}",
                    _fmt(r.tensor_flops_ratio, ".3f"))
    console.print(out)
