"""The results store: one folder per capture, named and read through :class:`Capture`.

    <capture>/meta.json          where and how it was measured (profiler.measure.meta), peaks and ceilings used,
                                 and each user implementation's import spec and costing (``user_impls``)
    <capture>/results.parquet    one row per implementation × shape × mode × step (schema below)
    <capture>/kernels.parquet    torch-profiler kernels: name, GPU time, enclosing range (GPU captures)
    <capture>/traces/*.json      one Chrome trace per implementation at one shape (open in Perfetto)
    <capture>/parts/rank-*.parquet  while a distributed sweep runs: each rank's rows (merged at its end)
    <capture>/profile.sqlite     an Nsight Systems export, or profile.sqlite.xz (scripts/nsys_profile.sh writes it,
                                 beside profile.nsys-rep and stats_*.csv, which nothing here reads)
    <capture>/nsys_ranges.parquet, nsys_gpu_ops.parquet
                                 what ``nsys ingest`` read from the export (profiler.nsight.nsys)
    <capture>/ncu/*.csv          a validation capture's raw Nsight Compute output, one file per shape
    <capture>/ncu_kernels.parquet, validation.parquet
                                 its kernels, and the model beside them (profiler.nsight.validate)
    <capture>/report.html        ``python -m profiler report`` (profiler.views.report)

Rows are appended as they finish and the parquet file is replaced atomically (write a temporary
file, then ``os.replace``), so a sweep killed at any point leaves every finished row readable.
"""

from __future__ import annotations

import io
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attention_core.shape import ROW_KEY

# Every name a capture folder holds (the module docstring says what each is); Capture gives their paths.
RESULTS = "results.parquet"
META = "meta.json"
KERNELS = "kernels.parquet"
PARTS = "parts"  # one parquet file per rank of a distributed sweep, merged into RESULTS at its end
TRACES = "traces"
NSYS_EXPORTS = ("profile.sqlite", "profile.sqlite.xz")  # the plain export first, as nsys writes it
NSYS_RANGES = "nsys_ranges.parquet"
NSYS_GPU_OPS = "nsys_gpu_ops.parquet"
NCU = "ncu"
NCU_KERNELS = "ncu_kernels.parquet"
VALIDATION = "validation.parquet"
REPORT = "report.html"

# Column -> (pandas dtype, meaning). docs/schema.md's table is this list (tests/test_capture.py checks it).
SCHEMA: dict[str, tuple[str, str]] = {
    "impl": ("string", "implementation name from profiler.registry.REGISTRY"),
    "step": ("string", "'total' for a whole implementation, else a naive step (qk_matmul, scale_mask, softmax, ...)"),
    "mode": ("string", "fwd, bwd or fwd+bwd"),
    "batch": ("int64", "B"),
    "heads": ("int64", "H, query heads"),
    "kv_heads": ("int64", "K/V heads (grouped-query attention when below heads, multi-query at 1); captures "
                          "from before this column read as kv_heads = heads"),
    "seq_q": ("int64", "query sequence length"),
    "seq_kv": ("int64", "key/value sequence length"),
    "head_dim": ("int64", "D"),
    "dtype": ("string", "fp16, bf16, fp32 or fp8 (e4m3 inputs, bf16 output)"),
    "causal": ("bool", "top-left causal mask (key j visible to query i when j <= i, as SDPA's is_causal)"),
    "path": ("string", "which code path of the implementation ran, where it has several (triton_flash: 'tiled', "
                       "'gluon-ws' for the sm_90 Gluon kernels, 'gluon-ws split-tail AxS' where that forward cut "
                       "its last wave's A tiles into S chunks of keys each, 'split-kv xS' for decode shapes; "
                       "'X fwd, Y bwd' on fwd+bwd rows and Y alone on bwd rows, Y 'tiled' or 'gluon-ws'; "
                       "triton_flash_fp8: 'gluon-ws' on sm_90, else 'tiled'); empty otherwise"),
    "time_ms": ("float64", "median time (do_bench on a GPU, of CUDA-graph replays with --cuda-graph; "
                           "torch.utils.benchmark on a CPU)"),
    "time_ms_p10": ("float64", "10th percentile time"),
    "time_ms_p90": ("float64", "90th percentile time"),
    "sm_clock_mhz": ("float64", "median SM clock while the row was timed, MHz in NVML's 15 MHz steps (read every 2 ms "
                                "beside the timing loop, do_bench's 25 ms warm-up included; a longer `--warmup-ms` "
                                "runs before the readings); empty without NVML (a CPU, no nvidia-ml-py), with "
                                "`ATTN_NVML=0`, and in captures from before this column"),
    "power_w": ("float64", "mean board power while the row was timed, W (NVML, as sm_clock_mhz; meta.json's nvml_power "
                           "says which reading); both readings lag a load's start, so a short row after an idle moment "
                           "reads mostly that moment (the `average` reading most); empty where sm_clock_mhz is"),
    "rounds": ("float64", "interleaved rounds the row's time is the median of (`--rounds R` of bench, capture, "
                          "sweep: at each shape the implementations take turns, R times, in a rotated order); "
                          "time_ms, its percentiles, sm_clock_mhz and power_w are then the median round's; empty: "
                          "one round"),
    "round_spread": ("float64", "the slowest round's median time over the fastest's, minus one (`--rounds`); "
                                "empty: one round"),
    "flops": ("float64", "cost-model FLOPs: per naive step; for totals 4·B·H·Nq·Nkv·D (x0.5 causal, x2.5 bwd)"),
    "hbm_bytes": ("float64", "cost-model HBM bytes: per naive step; compulsory bytes for fused kernels"),
    "tile_bytes": ("float64", "bytes when each block re-reads what it shares (L2 traffic), by the implementation's "
                              "tiles; = hbm_bytes when unfused; empty where the tiles are not declared"),
    "arithmetic_intensity": ("float64", "flops / hbm_bytes"),
    "issued_flops": ("float64", "tensor FLOPs the row's kernels issue by the model (profiler.model.counters."
                                "issued_flops: whole tiles on the causal diagonal and at ragged ends, decode rows "
                                "padded to a tile, "
                                "unfused attention's full scores); 0 for elementwise steps; empty where not modelled "
                                "or in captures from before this column"),
    "tflops": ("float64", "flops / time_ms, in TFLOP/s"),
    "gbps": ("float64", "hbm_bytes / time_ms, in GB/s"),
    "bound": ("string", "memory or compute, against the datasheet roof (the measured roof when the device is unknown); "
                        "empty unless status is ok"),
    "roof_fraction": ("float64", "achieved over the datasheet roof at this intensity"),
    "roof_fraction_measured": ("float64", "achieved over the measured roof (ceilings) at this intensity"),
    "roof_fraction_size": ("float64", "achieved over the size-aware roof: the measured matmul, and the rate a device "
                                      "copy of the row's own hbm_bytes reached in the same run (meta.json's "
                                      "measured_ceilings.copy_curve); empty where the capture has no curve"),
    "peak_mem_bytes": ("float64", "peak allocated above the inputs during one run (GPU only)"),
    "max_rel_err": ("float64", "the largest norm-wise relative error against naive fp32 attention (output, and "
                               "grads when bwd); above the tolerance (the dtype's, kernels.reference.TOLERANCE, or "
                               "one the implementation registered; both in meta.json) the status is wrong"),
    "device": ("string", "the GPU that measured the row, where the ranks of a distributed sweep ran on different "
                         "GPUs (--allow-mixed: meta.json's devices holds each one's roofs); not stored when one kind "
                         "of device measured every row (meta.json's device; read_results gives it as empty)"),
    "status": ("string", "ok; wrong (the output failed the correctness check: its times are kept for the record, "
                         "it has no rates, bound or roof fractions and is on no chart); interpreted (a Triton "
                         "kernel run by the Triton interpreter on a CPU, TRITON_INTERPRET=1: checked and timed for "
                         "the record, no rates, on no chart); oom, unsupported or error"),
    "message": ("string", "why, when status is not ok (for wrong: the error and the tolerance it exceeded)"),
    # What `observe` adds (profiler.observer): rows of a real run's attention calls, and their replays.
    "source": ("string", "measured (capture, sweep, bench), observed (a real run's calls, `observe`: impl is the API "
                         "called, e.g. sdpa) or replay (an implementation re-run at an observed shape)"),
    "site": ("string", "observed: where the calls were made, the nn.Module path (model.layers.3.self_attn) or "
                       "file:line; empty otherwise"),
    "calls": ("float64", "observed: calls aggregated in the row; time_ms is then their mean time (total_ms / calls) "
                         "and flops, hbm_bytes the means of exact per-call sums"),
    "total_ms": ("float64", "observed: GPU time of all the row's calls (kernels inside each call's range with the "
                            "torch trace, else CUDA events around each call; CPU: wall time)"),
    "median_ms": ("float64", "observed: median time of one call"),
    "mask": ("string", "observed: none, causal (top-left, or square), causal-br (bottom-right, Nq != Nkv), mask "
                       "(explicit attn_mask), block (FlexAttention block mask) or window (sliding window)"),
    "density": ("float64", "observed: fraction of the Nq×Nkv score pairs the FLOPs count (0.5 square causal, the "
                           "convention; exact for other masks; computed blocks for a block mask)"),
    "layout": ("string", "observed: how q lay in memory: bhsd, bshd (a transposed (B, S, H, D) tensor), packed "
                         "(varlen) or strided; on replay rows, the layout the replay's inputs had (the observed "
                         "one where it is bhsd or bshd, else bhsd)"),
    "seq_kv_min": ("float64", "observed: shortest Nkv of the row's calls (decode rows group growing Nkv into "
                              "buckets, four per octave; seq_kv is their mean)"),
    "seq_kv_max": ("float64", "observed: longest Nkv of the row's calls"),
    "rank": ("float64", "observed under torchrun: the rank (torch.distributed's RANK) whose process made the calls; "
                        "each rank's rows are its own (profiler.observer.ranks); not stored for a run of one process"),
}
COLUMNS = list(SCHEMA)
# Meta keys that describe one run; a resumed capture keeps the earlier runs' values in earlier_runs ("shapes": the
# shapes that run was asked for, so a capture filled by several --resume runs lists each run's count).
RUN_KEYS = ("command", "time", "git_revision", "kernels_sha256", "peers", "torch", "triton", "cuda", "cudnn", "driver",
            "nvml_power", "measured_ceilings", "measured_ceilings_source", "rep_ms", "rounds", "warmup_ms", "shapes",
            "env")
# One row per implementation, step and shape (attention_core.shape.ROW_KEY): resumes de-duplicate on it (merge_parts
# on OBSERVED_KEY, which is this key for every row but an observed one).
KEY = list(ROW_KEY)
# Columns added after captures were shipped, and how an older file's rows read without them.
ADDED_COLUMNS = {"kv_heads": lambda frame: frame["heads"], "path": lambda frame: "",
                 "source": lambda frame: "measured", "site": lambda frame: "", "device": lambda frame: ""}
# Columns only observed rows fill (profiler.observer): empty in rows of other sources and older files.
OBSERVED_ONLY = ("calls", "total_ms", "median_ms", "mask", "density", "layout", "seq_kv_min", "seq_kv_max", "rank")
# What makes two observed rows of a capture one call: the row key (its impl the API called) at one site, in one mask
# and memory layout, on one rank of a torchrun job. profiler.observer.recorder keeps a row per value; the rest of
# OBSERVED_ONLY is what the row measured.
OBSERVED_KEY = (*ROW_KEY, "site", "mask", "layout", "rank")
# Columns added later that older files have no values for: they read as empty.
LATER_EMPTY = ("roof_fraction_size", "issued_flops", "sm_clock_mhz", "power_w", "rounds", "round_spread")


class CaptureError(ValueError):
    """A folder that is not a readable capture; the message names what is wrong."""


def write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # writers on one filesystem do not share it
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json_atomic(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, json.dumps(payload, indent=2, default=str).encode())


def read_results(path: Path) -> pd.DataFrame:
    """A results parquet file, with the columns added since it was written filled in
    (:data:`ADDED_COLUMNS`: a capture from before grouped-query attention has kv_heads = heads).
    A bound is a judgement of a measured point: files written before that rule gave rows that did
    not run the model's bound, which reads as empty here."""
    frame = read_parquet_snapshot(path)
    for column, fill in ADDED_COLUMNS.items():
        if column not in frame.columns and "heads" in frame.columns:
            frame[column] = fill(frame)
            if SCHEMA[column][0] == "string":
                frame[column] = frame[column].astype("string")
    for column in (*OBSERVED_ONLY, *LATER_EMPTY):
        if column not in frame.columns and "heads" in frame.columns:
            frame[column] = pd.Series(None, index=frame.index, dtype=SCHEMA[column][0])
    if {"status", "bound"} <= set(frame.columns):
        frame.loc[frame["status"] != "ok", "bound"] = None
    return frame[[c for c in COLUMNS if c in frame.columns] + [c for c in frame.columns if c not in SCHEMA]]


def to_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a DataFrame with exactly the schema's columns and dtypes (extra keys are kept after)."""
    frame = pd.DataFrame(rows)
    if len(frame) and "heads" in frame:
        for column, fill in ADDED_COLUMNS.items():
            if column not in frame:
                frame[column] = fill(frame)
            elif column == "kv_heads":
                frame[column] = frame[column].fillna(frame["heads"])
            elif column in ("source", "site", "device"):
                frame[column] = frame[column].fillna(fill(frame))
    for column, (dtype, _) in SCHEMA.items():
        if column not in frame:
            frame[column] = None
        if dtype == "float64":  # None and pd.NA become NaN
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
        else:
            frame[column] = frame[column].astype(dtype)
    extra = [c for c in frame.columns if c not in SCHEMA]
    columns = COLUMNS
    if len(frame) == 0 or (frame["source"] == "measured").all():
        # A capture of measured rows only is stored as before observe existed (read_results fills these in).
        columns = [c for c in COLUMNS if c not in ("source", "site", *OBSERVED_ONLY)]
    if len(frame) == 0 or (frame["device"].fillna("") == "").all():
        columns = [c for c in columns if c != "device"]  # one kind of device: meta.json names it
    if "rank" in columns and frame["rank"].isna().all():
        columns = [c for c in columns if c != "rank"]  # one process observed
    # a column added later and empty in every row (a capture without a copy curve) is stored as before it
    columns = [c for c in columns if c not in LATER_EMPTY or frame[c].notna().any()]
    return frame[columns + extra]


def write_parquet_atomic(path: Path, frame: pd.DataFrame) -> None:
    write_bytes_atomic(path, frame.to_parquet(index=False))


def read_parquet_snapshot(path: Path) -> pd.DataFrame:
    """A parquet file read from one open: pyarrow opens a path more than once (footer, then pages), so
    a writer's ``os.replace`` in between (a sweep adding a row while the dashboard or a poll reads)
    would mix two files; the bytes of one file are always whole (:func:`write_bytes_atomic`)."""
    return pd.read_parquet(io.BytesIO(Path(path).read_bytes()))


def _read_parquet_or_none(path: Path) -> pd.DataFrame | None:
    return read_parquet_snapshot(path) if path.is_file() else None


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


@dataclass(frozen=True)
class Capture:
    """One capture folder: the path of every artefact it can hold (properties) and its loaders (methods).

    ``meta``, ``results`` and ``load`` read what every capture has and raise CaptureError, naming what is
    missing or malformed, where it is not there; the loaders of optional artefacts (kernels, Nsight Systems
    and Nsight Compute tables, validation) return None where the file is absent. Nothing is read when the
    object is made, so ``Capture(folder)`` also names the files of a capture not yet written."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def name(self) -> str:
        return self.path.name

    # ------------------------------------------------------------------ paths

    @property
    def meta_path(self) -> Path:
        return self.path / META

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS

    @property
    def kernels_path(self) -> Path:
        """The torch-profiler kernel table (profiler.measure.torch_trace.kernels_of_capture)."""
        return self.path / KERNELS

    @property
    def traces_dir(self) -> Path:
        return self.path / TRACES

    def trace_path(self, file_name: str) -> Path:
        """Where the Chrome trace ``file_name`` (profiler.measure.torch_trace.trace_file_name) goes."""
        return self.traces_dir / file_name

    @property
    def parts_dir(self) -> Path:
        return self.path / PARTS

    def part_path(self, part: str) -> Path:
        """The rows of one rank of a distributed sweep (``part`` is e.g. rank-1)."""
        return self.parts_dir / f"{part}.parquet"

    @property
    def nsys_export(self) -> Path | None:
        """The Nsight Systems export that ``nsys ingest`` reads (profile.sqlite, else profile.sqlite.xz);
        None when there is none."""
        return next((p for p in (self.path / name for name in NSYS_EXPORTS) if p.is_file()), None)

    @property
    def nsys_ranges_path(self) -> Path:
        return self.path / NSYS_RANGES

    @property
    def nsys_gpu_ops_path(self) -> Path:
        return self.path / NSYS_GPU_OPS

    @property
    def ncu_dir(self) -> Path:
        return self.path / NCU

    def ncu_csv_path(self, file_name: str) -> Path:
        """Where ncu's raw CSV of one shape (profiler.nsight.validate.csv_name) goes."""
        return self.ncu_dir / file_name

    @property
    def ncu_kernels_path(self) -> Path:
        return self.path / NCU_KERNELS

    @property
    def validation_path(self) -> Path:
        return self.path / VALIDATION

    @property
    def report_path(self) -> Path:
        """Where ``python -m profiler report`` writes by default (git ignores it)."""
        return self.path / REPORT

    # ------------------------------------------------------------ what is there

    @property
    def started(self) -> bool:
        """Whether a capture was begun here: meta.json or results.parquet exists (readable or not)."""
        return self.meta_path.exists() or self.results_path.exists()

    @property
    def has_meta_and_results(self) -> bool:
        return self.meta_path.is_file() and self.results_path.is_file()

    @property
    def stamp(self) -> tuple[int, int]:
        """When meta.json and results.parquet were last written (ns; 0 where missing): a cache key that
        changes when the capture is resumed, remodelled or ingested into."""
        return _mtime_ns(self.meta_path), _mtime_ns(self.results_path)

    def stamp_of(self, *paths: Path) -> tuple[int, ...]:
        """The modification times (ns; 0 where missing) of some of this capture's files."""
        return tuple(_mtime_ns(p) for p in paths)

    def trace_files(self) -> list[Path]:
        return sorted(self.traces_dir.glob("*.json"))

    def part_files(self) -> list[Path]:
        return sorted(self.parts_dir.glob("*.parquet"))

    def ncu_csvs(self) -> list[Path]:
        return sorted(self.ncu_dir.glob("*.csv"))

    # ---------------------------------------------------------------- loaders

    def meta(self) -> dict:
        if not self.meta_path.exists():
            raise CaptureError(f"'{self.path}' is not a capture folder: missing {META}")
        try:
            return json.loads(self.meta_path.read_text())
        except ValueError as err:
            raise CaptureError(f"'{self.meta_path}' is not valid JSON: {err}") from None

    def results(self) -> pd.DataFrame:
        """results.parquet read by :func:`read_results` (columns added since it was written filled in),
        checked for every column of the schema."""
        if not self.results_path.exists():
            raise CaptureError(f"'{self.path}' is not a capture folder: missing {RESULTS}")
        try:
            frame = read_results(self.results_path)
        except Exception as err:  # pyarrow raises several types for a corrupt file
            raise CaptureError(f"'{self.results_path}' is not a readable parquet file: {err}") from None
        absent = [c for c in COLUMNS if c not in frame.columns]
        if absent:
            raise CaptureError(f"'{self.results_path}' lacks columns: {', '.join(absent)}")
        return frame

    def load(self) -> tuple[dict, pd.DataFrame]:
        """(meta, results); CaptureError names what is missing or malformed."""
        if not self.path.is_dir():
            raise CaptureError(f"'{self.path}' is not a capture folder (expected a directory with {META} and "
                               f"{RESULTS})")
        missing = [p.name for p in (self.meta_path, self.results_path) if not p.exists()]
        if missing:
            raise CaptureError(f"'{self.path}' is not a capture folder: missing {', '.join(missing)}")
        return self.meta(), self.results()

    def kernels(self) -> pd.DataFrame | None:
        """The torch-profiler kernel table (kernels.parquet), or None."""
        return _read_parquet_or_none(self.kernels_path)

    def nsys_gpu_ops(self) -> pd.DataFrame | None:
        """Every kernel, memset and memcpy of the Nsight Systems export (profiler.nsight.nsys.gpu_ops), or None."""
        return _read_parquet_or_none(self.nsys_gpu_ops_path)

    def nsys_ranges(self) -> pd.DataFrame | None:
        """The per-range table of the Nsight Systems export (profiler.nsight.nsys.summarize), or None."""
        return _read_parquet_or_none(self.nsys_ranges_path)

    def gpu_kernels(self) -> tuple[str, pd.DataFrame] | None:
        """(where they come from, one row per GPU kernel) for the Trace views: the Nsight Systems
        export's kernels when it was ingested, else the torch profiler's; None when neither is here."""
        for source, load in (("Nsight Systems export", self.nsys_gpu_ops), ("torch profiler", self.kernels)):
            frame = load()
            if frame is not None:
                return source, frame[frame.kind == "kernel"] if "kind" in frame else frame  # no memsets, memcpys
        return None

    def ncu_kernels(self) -> pd.DataFrame | None:
        """One row per kernel Nsight Compute profiled (profiler.nsight.ncu), or None."""
        return _read_parquet_or_none(self.ncu_kernels_path)

    def validation(self) -> pd.DataFrame | None:
        """The model against Nsight Compute's counters (profiler.nsight.validate.validation_table), or None."""
        return _read_parquet_or_none(self.validation_path)

    # ---------------------------------------------------------------- writers (atomic)

    def write_meta(self, meta: dict) -> None:
        write_json_atomic(self.meta_path, meta)

    def write_results(self, frame: pd.DataFrame) -> None:
        write_parquet_atomic(self.results_path, frame)

    def write_kernels(self, frame: pd.DataFrame) -> None:
        write_parquet_atomic(self.kernels_path, frame)


class ResultStore:
    """Append-only rows of one capture folder, each append persisted atomically. With ``part`` the
    rows go to ``parts/<part>.parquet`` (one rank of a distributed sweep, profiler.measure.distributed)
    and ``has`` also sees what the merged results and the other parts hold; ``write_meta`` False
    leaves meta.json to another process (rank 0). ``fields`` are set in every row appended (the
    device of a rank whose GPU differs from the others')."""

    def __init__(self, folder: Path | str, meta: dict, resume: bool = False, part: str | None = None,
                 write_meta: bool = True, fields: dict | None = None):
        self.capture = Capture(folder)
        self.fields = dict(fields or {})
        self.appended: list[dict] = []  # the rows this process measured (not those --resume found)
        self.folder = self.capture.path
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.capture.results_path if part is None else self.capture.part_path(part)
        self.rows: list[dict] = []
        self.known: list[dict] = []  # rows measured by other processes: for has() only
        if resume and self.path.exists():
            self.rows = read_results(self.path).to_dict("records")
        if resume and part is not None:
            others = [self.capture.results_path, *(p for p in self.capture.part_files() if p != self.path)]
            self.known = [r for p in others if p.exists() for r in read_results(p).to_dict("records")]
        if not write_meta:
            self.meta = meta
            return
        if resume and self.capture.meta_path.exists():
            # A resumed capture keeps the history of the commands that filled it.
            # Keys only the earlier runs wrote (e.g. corrections) stay; what this run measures anew
            # (time, versions, ceilings) is replaced, and the earlier values move to earlier_runs.
            earlier = self.capture.meta()
            previous = {k: earlier[k] for k in RUN_KEYS if k in earlier}
            kept = {k: v for k, v in earlier.items() if k not in RUN_KEYS and k != "finished"}
            meta = {**kept, **meta,
                    "commands": [*earlier.get("commands", [earlier.get("command")]), meta.get("command")],
                    "earlier_runs": [*earlier.get("earlier_runs", []), previous]}
            if earlier.get("user_impls"):  # implementations of earlier runs keep their description
                meta["user_impls"] = {**earlier["user_impls"], **meta.get("user_impls", {})}
        self.meta = meta
        self.capture.write_meta(meta)

    def has(self, key: dict) -> bool:
        """Whether a row with these key values (and status ok, wrong, oom or unsupported) is stored:
        a resumed capture measures again only the cases that raised an error."""
        for row in itertools.chain(self.rows, self.known):
            if all(row.get(k) == v for k, v in key.items()) and row.get("status") != "error":
                return True
        return False

    def append(self, rows: list[dict]) -> None:
        """Add rows; a stored row with the same key (a case measured again on --resume, e.g. after
        an error) is replaced, so every key stays unique. A row without kv_heads has as many as heads."""
        rows = [r if r.get("kv_heads") is not None or "heads" not in r else {**r, "kv_heads": r["heads"]} for r in rows]
        rows = [{**r, **self.fields} for r in rows]
        new_keys = {tuple(r.get(k) for k in KEY) for r in rows}
        self.appended = [r for r in self.appended if tuple(r.get(k) for k in KEY) not in new_keys] + rows
        self.rows = [r for r in self.rows if tuple(r.get(k) for k in KEY) not in new_keys]
        self.rows.extend(rows)
        frame = to_frame(self.rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(self.path, frame)

    def update_meta(self, **fields) -> None:
        self.meta.update(fields)
        self.capture.write_meta(self.meta)

    def write_kernels(self, frame: pd.DataFrame) -> None:
        self.capture.write_kernels(frame)


def merge_parts(folder: Path | str) -> int:
    """Fold the part files of a distributed sweep (parts/*.parquet) into results.parquet: a part's
    row replaces a stored row with the same key (:data:`OBSERVED_KEY`). The merged file is written atomically before the
    parts are removed, so a kill at any point loses no row (merging again gives the same result).
    Returns how many part rows were merged."""
    capture = Capture(folder)
    parts = capture.part_files()
    if not parts:
        return 0
    frames = [read_results(capture.results_path)] if capture.results_path.exists() else []
    from_parts = [read_results(p) for p in parts]
    merged = pd.concat([*frames, *from_parts], ignore_index=True)
    # The observed key: rows of other sources leave its extra columns empty, so for them it is the row key, and
    # two observed rows of one shape at different sites, masks, layouts or ranks stay two rows.
    merged = merged.drop_duplicates(subset=list(OBSERVED_KEY), keep="last")
    capture.write_results(to_frame(merged.to_dict("records")))
    for p in parts:
        p.unlink()
    # A rank stopped during a write leaves its temporary file (write_bytes_atomic): never a committed
    # row, since the part file it would have replaced holds every row written before.
    for tmp in capture.parts_dir.glob(".*.tmp"):
        tmp.unlink()
    capture.parts_dir.rmdir()
    return sum(len(f) for f in from_parts)


def load_capture(folder: Path | str) -> tuple[dict, pd.DataFrame]:
    """(meta, results) of a capture folder (:meth:`Capture.load`); CaptureError names what is missing or
    malformed."""
    return Capture(folder).load()


# The rows scripts/hf_vs_sdpa.py writes beside its own meta.json: a folder holding them and no results is that
# script's run (reports/hf-llama3-8b-h100), not a capture to warn about.
OTHER_RUN_ROWS = "rows.jsonl"


def discover_captures(root: Path | str) -> tuple[dict[str, tuple[dict, pd.DataFrame]], list[str]]:
    """Every capture folder directly under ``root`` (name -> (meta, results)), and one warning per
    folder that looks like a capture but cannot be read (it is skipped, the others load)."""
    root = Path(root)
    captures: dict[str, tuple[dict, pd.DataFrame]] = {}
    warnings: list[str] = []
    if not root.is_dir():
        return captures, [f"'{root}' is not a directory"]
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        capture = Capture(folder)
        if not capture.started:
            continue  # not meant as a capture (e.g. a folder of notes)
        if not capture.results_path.exists() and (folder / OTHER_RUN_ROWS).is_file():
            continue  # another tool's run with a meta.json of its own (scripts/hf_vs_sdpa.py's rows.jsonl)
        try:
            captures[capture.name] = capture.load()
        except CaptureError as err:
            warnings.append(f"skipped {capture.name}: {err}")
    return captures, warnings
