"""Read any Nsight Systems SQLite export (``nsys export --type sqlite``) into pandas, and join one
into the capture it profiled.

The readers are pure functions, file in, DataFrame out:

- :func:`nvtx_ranges`: one row per NVTX push/pop or start/end range.
  Columns: ``range_id`` (row id in NVTX_EVENTS), ``domain``, ``name``, ``range`` ("domain:name", or
  the name alone in the default domain, as nsys prints it), ``start_ns``, ``end_ns``, ``range_ns``,
  ``global_tid``, ``tid``, ``depth`` (0 = outermost on its thread), ``parent_id``.
- :func:`gpu_ops`: one row per kernel, memset and memcpy, joined by correlationId to the CUDA API
  call that launched it. Columns: ``kind`` (kernel, memset, memcpy), ``name`` (kernel name from
  StringIds), ``start_ns``, ``end_ns``, ``gpu_ns``, ``device``, ``stream``, ``correlation_id``,
  ``global_tid`` and ``launch_ns`` (the launching call's thread and start), ``grid``, ``block``,
  ``registers``, ``static_smem``, ``dynamic_smem``, and ``range_id`` / ``range`` of the innermost
  NVTX range open on the launching thread when it launched ("" when none).
- :func:`range_projection`: per range instance, the GPU time projected the way
  ``nsys stats --report nvtx_gpu_proj_sum`` does: from the start of the first GPU operation launched
  inside the range (on its thread) to the end of the last one. Columns: ``range_id``, ``range``,
  ``gpu_proj_ns``, ``range_ns``, ``gpu_ops``, ``kernels``.
- :func:`summarize`: the per-range table: ``range``, ``instances``, ``gpu_proj_ns`` (total),
  ``gpu_proj_median_ns``, ``range_ns`` (total), ``gpu_ops``, ``kernels``.

:func:`capture_gpu_times` is pure too (DataFrames in, two columns out: ``nsys_gpu_ms`` and
``nsys_match``). :func:`ingest_capture` is the one function here that touches a capture folder: it
reads the folder's export and writes the tables above into it (profiler.store.Capture names them).
"""

from __future__ import annotations

import lzma
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from attention_core.shape import Shape
from profiler.measure.ranges import call_range, legacy_shape_range, qualified, shape_range, step_range
from profiler.store import Capture, CaptureError, write_parquet_atomic

PUSH_POP, START_END, DOMAIN_CREATE = 59, 60, 75  # ENUM_NSYS_EVENT_TYPE ids
TID_MASK = 0xFFFFFF  # globalTid packs (pid, tid); nsys's own reports take the low 24 bits as the tid

REQUIRED = {
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "domainId", "globalTid"),
    "StringIds": ("id", "value"),
}
GPU_TABLES = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
}
GPU_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId")
KERNEL_COLUMNS = ("demangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
                  "staticSharedMemory", "dynamicSharedMemory")
LAUNCH_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
LAUNCH_COLUMNS = ("start", "globalTid", "correlationId")


class NsysExportError(ValueError):
    """The file is not an Nsight Systems SQLite export we can read; the message names why."""


@contextmanager
def open_export(path: Path | str):
    """A read-only sqlite3 connection to an export (``.sqlite``, or ``.sqlite.xz`` unpacked to a
    temporary file), checked for the tables and columns this module needs."""
    path = Path(path)
    if not path.is_file():
        raise NsysExportError(f"'{path}' does not exist or is not a file")
    tmpdir = None
    source = path  # errors name the user's file, never the temporary copy it was unpacked to
    try:
        if path.suffix == ".xz":
            tmpdir = tempfile.mkdtemp(prefix="nsys-")
            plain = Path(tmpdir) / path.stem
            try:
                with lzma.open(path) as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except (lzma.LZMAError, EOFError) as err:
                raise NsysExportError(f"'{source}' is not a readable .xz file (truncated or corrupt: {err})") from None
            path = plain
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            _check_schema(conn, source)
            yield conn
        except sqlite3.DatabaseError as err:
            raise NsysExportError(f"'{source}' could not be read as an Nsight Systems export: {err}") from None
        finally:
            conn.close()
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


def _tables(conn) -> dict[str, set[str]]:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {n: {r[1] for r in conn.execute(f'PRAGMA table_info("{n}")')} for n in names}


def _check_schema(conn, path: Path) -> None:
    try:
        tables = _tables(conn)
    except sqlite3.DatabaseError as err:
        raise NsysExportError(f"'{path}' is not an Nsight Systems SQLite export: {err}") from None
    missing = [t for t in REQUIRED if t not in tables]
    if missing:
        raise NsysExportError(
            f"'{path}' is not an Nsight Systems SQLite export with NVTX data: missing table(s) {', '.join(missing)}"
            " (was it exported with `nsys export --type sqlite` from a capture with `-t nvtx`?)"
        )
    for table, columns in REQUIRED.items():
        absent = [c for c in columns if c not in tables[table]]
        if absent:
            raise NsysExportError(f"'{path}': table {table} lacks column(s) {', '.join(absent)}; "
                                  "this export comes from an nsys version with another schema")


# ------------------------------------------------------------------------------------------ ranges


def nvtx_ranges(conn) -> pd.DataFrame:
    """Every NVTX range (push/pop and start/end) with its name, domain, thread and nesting."""
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    domains = dict(conn.execute("SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = ?", (DOMAIN_CREATE,)))
    # payload: the integer an NVTX event attribute carried, where one did (observe --trace nsys numbers calls so)
    have = {r[1] for r in conn.execute('PRAGMA table_info("NVTX_EVENTS")')}
    values = [c for c in ("int64Value", "uint64Value") if c in have]
    payload = f"COALESCE({', '.join(values)}, NULL)" if values else "NULL"
    frame = pd.read_sql_query(
        "SELECT rowid AS range_id, start AS start_ns, end AS end_ns, text, textId, domainId, globalTid AS global_tid, "
        f"{payload} AS payload "
        "FROM NVTX_EVENTS WHERE eventType IN (?, ?) AND end IS NOT NULL ORDER BY global_tid, start_ns, end_ns DESC",
        conn, params=(PUSH_POP, START_END),
    )
    columns = ["range_id", "domain", "name", "range", "start_ns", "end_ns", "range_ns", "global_tid", "tid", "depth",
               "parent_id", "payload"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    # Registered strings (nvtxDomainRegisterString, as the nvtx package does) sit in StringIds.
    frame["name"] = [t if isinstance(t, str) else strings.get(i, "") for t, i in zip(frame.text, frame.textId)]
    frame["domain"] = [domains.get(d, "") if pd.notna(d) else "" for d in frame.domainId]
    frame["range"] = [f"{d}:{n}" if d else n for d, n in zip(frame.domain, frame.name)]
    frame["range_ns"] = frame.end_ns - frame.start_ns
    frame["tid"] = frame.global_tid & TID_MASK
    depth, parent = _nesting(frame)
    frame["depth"], frame["parent_id"] = depth, parent
    return frame[columns].reset_index(drop=True)


def _nesting(frame: pd.DataFrame) -> tuple[list[int], list[int]]:
    """Depth and parent of each range on its thread (ranges sorted by thread, start, longest first)."""
    depth, parent = [], []
    stack: list[tuple[int, int]] = []  # (end_ns, range_id)
    last_tid = None
    for rid, tid, end in zip(frame.range_id, frame.global_tid, frame.end_ns):
        if tid != last_tid:
            stack, last_tid = [], tid
        while stack and stack[-1][0] < end:  # the top closed before this range ends: not a parent
            stack.pop()
        depth.append(len(stack))
        parent.append(stack[-1][1] if stack else -1)
        stack.append((end, rid))
    return depth, parent


# --------------------------------------------------------------------------------------------- GPU


def gpu_ops(conn, ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """Kernels, memsets and memcpys with their launching thread and innermost enclosing NVTX range."""
    tables = _tables(conn)
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    parts = []
    for kind, table in GPU_TABLES.items():
        if table not in tables:
            continue
        absent = [c for c in GPU_COLUMNS if c not in tables[table]]
        if absent:
            raise NsysExportError(f"table {table} lacks column(s) {', '.join(absent)}")
        extra = [c for c in KERNEL_COLUMNS if kind == "kernel" and c in tables[table]]
        part = pd.read_sql_query(f"SELECT {', '.join(GPU_COLUMNS + tuple(extra))} FROM {table}", conn)
        part.insert(0, "kind", kind)
        parts.append(part)
    columns = ["kind", "name", "start_ns", "end_ns", "gpu_ns", "device", "stream", "correlation_id", "global_tid",
               "launch_ns", "grid", "block", "registers", "static_smem", "dynamic_smem", "range_id", "range"]
    if not parts:
        return pd.DataFrame(columns=columns)
    ops = pd.concat(parts, ignore_index=True)
    launches = [pd.read_sql_query(f"SELECT {', '.join(LAUNCH_COLUMNS)} FROM {t}", conn)
                for t in LAUNCH_TABLES if t in tables and set(LAUNCH_COLUMNS) <= tables[t]]
    if not launches:
        raise NsysExportError("no CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME) to join GPU work to its launches; "
                              "capture with `-t cuda`")
    launch = pd.concat(launches).rename(columns={"start": "launch_ns", "globalTid": "global_tid"})
    ops = ops.merge(launch.drop_duplicates("correlationId"), on="correlationId", how="left")
    names = ops["demangledName"] if "demangledName" in ops else pd.Series([None] * len(ops))
    ops["name"] = [strings.get(n, "") if k == "kernel" else k for k, n in zip(ops.kind, names)]
    ops = ops.rename(columns={"start": "start_ns", "end": "end_ns", "deviceId": "device", "streamId": "stream",
                              "correlationId": "correlation_id", "registersPerThread": "registers",
                              "staticSharedMemory": "static_smem", "dynamicSharedMemory": "dynamic_smem"})
    ops["gpu_ns"] = ops.end_ns - ops.start_ns
    if {"gridX", "blockX"} <= set(ops.columns):
        ops["grid"] = _triples(ops, "grid")
        ops["block"] = _triples(ops, "block")
    for column in columns:
        if column not in ops:
            ops[column] = None
    ranges = ranges if ranges is not None else nvtx_ranges(conn)
    ops["range_id"], ops["range"] = _innermost_range(ops, ranges)
    return ops[columns].sort_values("start_ns", kind="stable").reset_index(drop=True)


def _triples(ops: pd.DataFrame, prefix: str) -> list[str | None]:
    return [None if pd.isna(x) else f"{int(x)}x{int(y)}x{int(z)}"
            for x, y, z in zip(ops[f"{prefix}X"], ops[f"{prefix}Y"], ops[f"{prefix}Z"])]


def _innermost_range(ops: pd.DataFrame, ranges: pd.DataFrame) -> tuple[list[int], list[str]]:
    """For each op, the innermost range open on its launching thread at its launch time (bounds
    inclusive, as nsys counts them): one sweep per thread over range opens, launches and closes."""
    ids = [-1] * len(ops)
    names = [""] * len(ops)
    if ranges.empty:
        return ids, names
    range_name = dict(zip(ranges.range_id, ranges.range))
    events: dict[int, list[tuple[int, int, int]]] = {}
    for rid, tid, start, end in zip(ranges.range_id, ranges.global_tid, ranges.start_ns, ranges.end_ns):
        events.setdefault(tid, []).extend([(start, 0, rid), (end, 2, rid)])  # open < launch < close
    for i, (tid, t) in enumerate(zip(ops.global_tid, ops.launch_ns)):
        if tid in events and not pd.isna(t):
            events[tid].append((int(t), 1, i))
    for timeline in events.values():
        timeline.sort()
        open_ranges: list[int] = []
        for _, what, ref in timeline:
            if what == 0:
                open_ranges.append(ref)
            elif what == 2:
                open_ranges.remove(ref)  # start/end ranges need not close in order
            elif open_ranges:
                ids[ref], names[ref] = open_ranges[-1], range_name[open_ranges[-1]]
    return ids, names


def union_length(start, end) -> float:
    """The time covered by the intervals [start, end), in their unit: their union's length (gaps not
    counted, overlaps counted once). The GPU's busy time of a set of kernels (profiler.observer.run.busy_ms)
    and of a range's GPU work (:func:`range_projection`)."""
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    order = np.argsort(start, kind="stable")
    total, reach = 0.0, -np.inf
    for lo, hi in zip(start[order], end[order]):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """:func:`union_length` of nanosecond intervals, in whole nanoseconds (as the export's columns are)."""
    return int(union_length(start, end))


def range_projection(ranges: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Per range instance: GPU work launched inside it (on its thread), projected onto the GPU as
    nsys's nvtx_gpu_proj_sum does (first op start to last op end), the time that work kept the GPU
    busy (the union of its ops' intervals: the projection without the gaps between them), with op
    and kernel counts."""
    rows = []
    by_tid = {}
    for tid, group in ops.dropna(subset=["launch_ns"]).groupby("global_tid"):
        group = group.sort_values("launch_ns")
        by_tid[tid] = (group.launch_ns.to_numpy(), group.start_ns.to_numpy(), group.end_ns.to_numpy(),
                       (group.kind == "kernel").to_numpy())
    for r in ranges.itertuples():
        proj, busy, n_ops, n_kernels = 0, 0, 0, 0
        if r.global_tid in by_tid:
            launch, start, end, is_kernel = by_tid[r.global_tid]
            lo, hi = np.searchsorted(launch, r.start_ns, "left"), np.searchsorted(launch, r.end_ns, "right")
            if hi > lo:
                proj = int(end[lo:hi].max() - start[lo:hi].min())
                busy = busy_ns(start[lo:hi], end[lo:hi])
                n_ops, n_kernels = int(hi - lo), int(is_kernel[lo:hi].sum())
        rows.append((r.range_id, r.range, proj, busy, int(r.range_ns), n_ops, n_kernels))
    return pd.DataFrame(rows, columns=["range_id", "range", "gpu_proj_ns", "gpu_busy_ns", "range_ns", "gpu_ops",
                                       "kernels"])


def summarize(projection: pd.DataFrame) -> pd.DataFrame:
    """One row per range name, as nsys's nvtx_gpu_proj_sum: totals over instances, plus the median."""
    columns = ["range", "instances", "gpu_proj_ns", "gpu_proj_median_ns", "range_ns", "gpu_ops", "kernels"]
    if projection.empty:
        return pd.DataFrame(columns=columns)
    table = projection.groupby("range", sort=False).agg(
        instances=("range_id", "size"), gpu_proj_ns=("gpu_proj_ns", "sum"),
        gpu_proj_median_ns=("gpu_proj_ns", "median"), range_ns=("range_ns", "sum"),
        gpu_ops=("gpu_ops", "sum"), kernels=("kernels", "sum"),
    ).reset_index()
    return table.sort_values("gpu_proj_ns", ascending=False, kind="stable")[columns].reset_index(drop=True)


def read_export(path: Path | str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(ranges, gpu ops, per-instance projection) of one export."""
    with open_export(path) as conn:
        ranges = nvtx_ranges(conn)
        ops = gpu_ops(conn, ranges)
    return ranges, ops, range_projection(ranges, ops)


# ------------------------------------------------------------------------------- our own captures


# How capture_gpu_times found a row's case range (its ``nsys_match`` column).
MATCH_KEY = "key"  # the range's name holds the row's whole key (Shape.range_name): an exact join
MATCH_ORDER = "order"  # a capture from before that: the k-th range of its name to the k-th row of that name
MATCH_NONE = "none"  # no range of either name: nsys_gpu_ms is empty


def timed_calls(ranges: pd.DataFrame, ops: pd.DataFrame) -> dict[int, bool]:
    """For each per-repetition range (``<parent>/call`` directly inside ``<parent>``) that launched GPU work: whether
    the op launched just before its first one (on its thread) was launched in that parent and in no repetition.

    do_bench (triton.testing) calls the function once; then 5 times, each after an L2 flush, to estimate its
    time; then n_warmup times back to back; then n_repeat times, each after a flush, timed by CUDA events.
    The flush is such an op (and, before the first call, the correctness check's copy). The CUDA events time
    the last n_repeat calls alone, and the calls before them ran earlier, at the clock of the board's first
    milliseconds: in docs/perf-notes.md's round 23 (an H100 at its power limit) ours ran 3,010 to 3,035 µs in
    the first 20 calls and about 3,340 µs from then on. :func:`capture_gpu_times` keeps, of a range's calls,
    those after such an op that come after the last one that is not (:func:`_timed`): the timed repetitions."""
    name = dict(zip(ranges.range_id, ranges.range))
    parent = dict(zip(ranges.range_id, ranges.parent_id))
    is_call = {rid: parent[rid] in name and name[rid] == call_range(name[parent[rid]]) for rid in name}
    nearest: dict[int, int | None] = {}

    def call_of(rid: int) -> int | None:
        """The repetition a range belongs to (itself, or the nearest call around it), or None."""
        if rid not in nearest:
            up = rid
            while up in parent and not is_call[up]:
                up = parent[up]
            nearest[rid] = up if up in parent else None
        return nearest[rid]

    after_flush: dict[int, bool] = {}
    launched = ops.dropna(subset=["launch_ns"]).sort_values("launch_ns", kind="stable")
    for _, group in launched.groupby("global_tid", sort=False):
        before = None  # the innermost range of the op launched before this one
        for rid in group.range_id:
            call = call_of(rid)
            if call is not None and call not in after_flush:
                after_flush[call] = before is not None and before == parent[call]
            before = rid
    return after_flush


def _timed(calls: list[int], after_flush: dict[int, bool]) -> list[int]:
    """Of one range's repetitions in order, those after a flush that come after its last one without (a call that
    launched no GPU work, absent from ``after_flush``, counts neither way): the timed repetitions
    (:func:`timed_calls`); all of them where none qualifies (a capture without GPU ops, or without a flush)."""
    flags = [after_flush.get(rid) for rid in calls]
    last_untimed = max((i for i, flag in enumerate(flags) if flag is False), default=-1)
    timed = [rid for rid, flag in zip(calls[last_untimed + 1:], flags[last_untimed + 1:]) if flag]
    return timed or calls


def capture_gpu_times(projection: pd.DataFrame, ranges: pd.DataFrame, results: pd.DataFrame,
                      ops: pd.DataFrame | None = None) -> pd.DataFrame:
    """``nsys_gpu_ms`` for each row of a capture's results (same index): the median projected GPU time
    of the per-repetition ranges ``<case>/call`` (steps: ``<case>/<step>/call``) inside the case's own
    range that do_bench timed (with ``ops``, the export's GPU ops: :func:`timed_calls`; without, every
    repetition, warm-up included), and ``nsys_match``, how that case range was found.

    A case's range is named by the row's whole key (``<impl>/<mode>/<Shape.tag>``), so a total row
    joins the outermost range of its own name: ``nsys_match`` "key". A capture made before the names held
    the key named its cases by implementation, mode and lengths alone (``<impl>/<mode>/seq=<N>``), which
    rows of other batch, heads, head_dim, dtype or causal share; only where no range carries the row's
    key is that name looked up, and then by order (a capture measures its cases in row order, so the
    k-th range of that name belongs to the k-th total row of that name): "order". A naive step's row
    takes the case its total row found (its steps are timed in its first range). A case timed in rounds
    (``--rounds``) has one range a round, all named by its key: its ``nsys_gpu_ms`` is the median of every round's
    calls. "none": neither name is in the export.

    ``nsys_idle_ms``: over the same repetitions, the median time inside a repetition's projection that none of its
    GPU ops ran (the projection less the union of its ops: gaps between the kernels of one call, such as a launch
    the host issued late, or a kernel waiting on its predecessor's end); 0 for a call of one GPU op."""
    by_id = projection.set_index("range_id")
    proj, idle = by_id["gpu_proj_ns"], by_id["gpu_proj_ns"] - by_id["gpu_busy_ns"]
    children: dict[int, list[tuple[str, int]]] = {}
    for rid, parent, name in zip(ranges.range_id, ranges.parent_id, ranges.range):
        children.setdefault(parent, []).append((name, rid))
    outer = ranges[ranges.depth == 0].sort_values("start_ns")
    instances: dict[str, list[int]] = {}
    for name, rid in zip(outer.range, outer.range_id):
        instances.setdefault(name, []).append(rid)

    after_flush = timed_calls(ranges, ops) if ops is not None else {}

    def median_ms(parents: list[int], call_name: str) -> tuple[float | None, float | None]:
        """(median projected GPU time, median idle time) of the timed calls named ``call_name`` in ``parents``."""
        calls = [rid for parent in parents
                 for rid in _timed([rid for name, rid in children.get(parent, []) if name == call_name], after_flush)]
        if not calls:
            return None, None
        return (float(np.median([proj[rid] for rid in calls])) / 1e6,
                float(np.median([idle[rid] for rid in calls])) / 1e6)

    seen: dict[str, int] = {}  # total rows so far per case name: the order match's k
    case_of_total: dict[tuple, tuple[int | None, str, str]] = {}  # row key -> (case range id, its name, match)
    times: list[tuple[float | None, float | None]] = []
    matches: list[str] = []
    for row in results.itertuples():
        shape = Shape.from_row(row)
        key = shape.row_key(row.impl)  # the case: its total row's key, which its steps' rows share
        if row.step == "total":
            base, match = shape_range(row.impl, shape), MATCH_KEY
            if qualified(base) not in instances:
                base, match = legacy_shape_range(row.impl, shape), MATCH_ORDER
            k = seen.get(base, 0)
            seen[base] = k + 1
            found = instances.get(qualified(base), [])
            case = found[k] if k < len(found) else None
            case_of_total[key] = (case, base, match if case is not None else MATCH_NONE)
            # Timed in rounds (--rounds), a case has a range a round, all of its key: their calls together
            rounds = found if match == MATCH_KEY else [case]
            times.append((None, None) if case is None else median_ms(rounds, qualified(call_range(base))))
            matches.append(case_of_total[key][2])
        else:
            case, base, match = case_of_total.get(key, (None, "", MATCH_NONE))
            step = step_range(base, row.step)
            step_id = next((rid for name, rid in children.get(case, []) if name == qualified(step)), None)
            times.append((None, None) if step_id is None else median_ms([step_id], qualified(call_range(step))))
            matches.append(match if step_id is not None else MATCH_NONE)
    return pd.DataFrame({"nsys_gpu_ms": pd.Series([t[0] for t in times], index=results.index, dtype="float64"),
                         "nsys_idle_ms": pd.Series([t[1] for t in times], index=results.index, dtype="float64"),
                         "nsys_match": pd.Series(matches, index=results.index, dtype="object")})


def ingest_capture(folder: Path | str) -> pd.DataFrame:
    """Join a capture folder's ``profile.sqlite`` (or ``.sqlite.xz``) into it: writes
    ``nsys_ranges.parquet`` (:func:`summarize`), ``nsys_gpu_ops.parquet`` (:func:`gpu_ops`) and the
    ``nsys_gpu_ms``, ``nsys_idle_ms`` and ``nsys_match`` columns of results.parquet (:func:`capture_gpu_times`), and in
    meta.json's ``nsys`` how many rows each match found; returns the results."""
    capture = Capture(folder)
    meta, results = capture.load()
    export = capture.nsys_export
    if export is None:
        raise CaptureError(f"'{capture.path}' has no profile.sqlite; make one with scripts/nsys_profile.sh")
    ranges, ops, projection = read_export(export)
    summary = summarize(projection)
    write_parquet_atomic(capture.nsys_ranges_path, summary)
    write_parquet_atomic(capture.nsys_gpu_ops_path, ops)
    joined = capture_gpu_times(projection, ranges, results, ops)
    results["nsys_gpu_ms"] = joined.nsys_gpu_ms
    results["nsys_idle_ms"] = joined.nsys_idle_ms
    results["nsys_match"] = joined.nsys_match
    capture.write_results(results)
    meta["nsys"] = {"export": export.name, "ranges": len(summary), "gpu_ops": len(ops),
                    "match": {m: int((joined.nsys_match == m).sum()) for m in (MATCH_KEY, MATCH_ORDER, MATCH_NONE)}}
    capture.write_meta(meta)
    return results
