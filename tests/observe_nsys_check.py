"""What an ``observe --trace nsys`` capture of tests/observe_nsys_train.py must hold: shared by the GPU test
that makes one and the CPU test that reads the one shipped in tests/data/observe-nsys-h100. The calls are
checked against Nsight Systems' own report of the same .nsys-rep (``nsys stats --report nvtx_gpu_proj_sum``:
instances and projected time per range name) and each call's time against the export's GPU operations,
summed by a plain SQL join of their launches to the call's range (one stream: their sum is their union)."""

from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from profiler.store import Capture

STEPS = 4  # tests/observe_nsys_train.py

OPS_PER_CALL = """
SELECT COALESCE(e.int64Value, e.uint64Value) AS call, SUM(op.end - op.start) AS gpu_ns
FROM NVTX_EVENTS e
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = e.globalTid AND r.start BETWEEN e.start AND e.end
JOIN ({ops}) op ON op.correlationId = r.correlationId
WHERE COALESCE(e.int64Value, e.uint64Value) IS NOT NULL
GROUP BY call
"""


def ops_per_call(export: Path, scratch: Path) -> dict[int, float]:
    """ms of GPU operations launched inside each numbered call's range, straight from the export."""
    if export.suffix == ".xz":
        plain = scratch / "export.sqlite"
        with lzma.open(export) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        export = plain
    with sqlite3.connect(export) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        ops = " UNION ALL ".join(f"SELECT correlationId, start, end FROM {t}" for t in
                                 ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET",
                                  "CUPTI_ACTIVITY_KIND_MEMCPY") if t in tables)
        return {int(c): ns / 1e6 for c, ns in conn.execute(OPS_PER_CALL.format(ops=ops))}


def check_capture(folder: Path, stats_csv: Path, export: Path, scratch: Path) -> pd.DataFrame:
    """The eager rows' calls are nsys's range instances, their times the sum of the GPU operations their
    calls launched (never more than nsys's projection); the compiled call is counted and left untimed with
    the reason; the summary adds up. Returns the rows."""
    meta, frame = Capture(folder).load()
    stats = pd.read_csv(stats_csv).set_index("Range")
    timed, untimed = frame[frame["status"] == "ok"], frame[frame["status"] == "untimed"]
    assert len(timed) == 4 and sorted(timed["seq_q"].unique()) == [1000, 3000]  # two sites, forward and backward
    assert (timed["calls"] == STEPS).all() and sorted(timed["mode"]) == ["bwd", "bwd", "fwd", "fwd"]
    for row in timed.itertuples():
        nsys = stats.loc[f"attn:observe/{row.impl}/{row.mode}/{row.site}"]
        assert nsys["Range Instances"] == row.calls
        assert 0 < row.total_ms * 1e6 <= nsys["Total Proj Time (ns)"]
        assert row.tflops == pytest.approx(row.flops / (row.time_ms * 1e-3) / 1e12)
    per_call = ops_per_call(export, scratch)
    assert len(per_call) == 4 * STEPS  # every eager call launched GPU work inside its range
    assert timed["total_ms"].sum() == pytest.approx(sum(per_call.values()), rel=1e-9)
    assert len(untimed) == 1 and int(untimed["calls"].iloc[0]) == STEPS
    assert "--trace nsys times whole graphs" in untimed["message"].iloc[0]
    observed = meta["observed"]
    assert observed["clock"] == "nsys" and observed["calls_without_ranges"] == 0 and observed["calls"] == 5 * STEPS
    assert observed["compiled_calls_untimed"] == STEPS
    assert observed["attention_ms"] == pytest.approx(timed["total_ms"].sum())
    assert 0 < observed["attention_ms"] < observed["gpu_busy_ms"] <= observed["gpu_kernel_ms"] + 1e-9
    assert "times_pending" not in observed and observed["nsys_report"] == "profile.nsys-rep"
    return frame
