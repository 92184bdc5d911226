"""Per-call GPU times of eager attention calls, read from a real H100 trace taken with observe's lightweight
profiler ranges (torch's _RecordFunctionFast, which the Chrome trace lists as ``cpu_op`` events named
``observe/<api>/<mode>/<site>#<n>``, profiler.observer.hooks.RECORD_RANGE).

tests/data/observe-eager-h100 holds ``observe --trace torch`` of tests/observe_nsys_train.py on an NVIDIA
H100 80GB HBM3 (torch 2.11, scripts/perf_experiments/observe_overhead_gpu.sh): two eager sites, forward and
backward, 4 steps, and one compiled function. The trace is trimmed to the ``observe/`` ranges and the kernels
launched inside them (scripts/perf_experiments/trim_chrome_trace.py --inside observe/); the results beside it
are what the run wrote. The oracle sums each range's kernels from the raw events: a kernel belongs to the
range on its launching thread that holds its launch's timestamp."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from profiler.measure.torch_trace import kernels_from_chrome_trace
from profiler.observer.calls import Call
from profiler.observer.recorder import Recorder, RowStats

DATA = Path(__file__).resolve().parent / "data" / "observe-eager-h100"
EAGER = re.compile(r"^observe/(?P<api>\w+)/(?P<mode>fwd|bwd)/(?P<site>.+)#\d+$")


def oracle() -> dict[tuple[str, str], list[float]]:
    """Per (site, mode), each call's kernel time in ms, straight from the events."""
    events = json.load(gzip.open(DATA / "trace.json.gz", "rt"))["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "cpu_op" and EAGER.match(e["name"])]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    per_range: dict[str, float] = {}
    for kernel in (e for e in events if e.get("cat") == "kernel"):
        launch = launches[kernel["args"]["correlation"]]
        for r in ranges:
            if r["tid"] == launch["tid"] and r["ts"] <= launch["ts"] <= r["ts"] + r["dur"]:
                per_range[r["name"]] = per_range.get(r["name"], 0.0) + kernel["dur"] / 1e3
    calls: dict[tuple[str, str], list[float]] = {}
    for r in ranges:
        found = EAGER.match(r["name"])
        calls.setdefault((found["site"], found["mode"]), []).append(per_range.get(r["name"], 0.0))
    return calls


def test_lightweight_ranges_are_read_as_ranges():
    kernels = kernels_from_chrome_trace(DATA / "trace.json.gz")
    inside = kernels[kernels["ranges"].str.contains(r"observe/sdpa/", regex=True)]
    assert len(inside) and set(inside["range"].str.extract(EAGER)["mode"]) == {"fwd", "bwd"}


def test_each_eager_calls_time_is_its_own_kernels():
    rows = pd.read_parquet(DATA / "results.parquet")
    expected = oracle()
    eager = rows[rows["site"].isin({site for site, _ in expected})]
    assert len(eager) == 4 and (eager["calls"] == 4).all() and (eager["status"] == "ok").all()
    for row in eager.itertuples():
        times = expected[(row.site, row.mode)]
        assert len(times) == row.calls and min(times) > 0
        assert row.total_ms == pytest.approx(sum(times), rel=1e-9)
        assert row.median_ms == pytest.approx(pd.Series(times).median(), rel=1e-9)


def test_the_recorder_times_each_call_from_the_trace():
    """The recorder, told each call's range as the interceptor tells it, times them as the oracle does."""
    events = json.load(gzip.open(DATA / "trace.json.gz", "rt"))["traceEvents"]
    names = sorted({e["name"] for e in events if e.get("cat") == "cpu_op" and EAGER.match(e["name"])})
    recorder = Recorder("trace")
    call = Call("sdpa", 1, 1, 1, 1, 1, 8, "bf16", "bhsd", "none", 1.0)
    rows: dict[tuple[str, str], RowStats] = {}
    for name in sorted(names, key=lambda n: int(n.rsplit("#", 1)[1])):
        found = EAGER.match(name)
        key = (found["site"], found["mode"])
        stats = rows.setdefault(key, RowStats(call, found["site"], found["mode"]))
        recorder.start(stats, name)
    assert recorder.times_from_kernels(kernels_from_chrome_trace(DATA / "trace.json.gz")) == 0
    for key, times in oracle().items():
        assert sorted(rows[key].times_ms) == pytest.approx(sorted(times), rel=1e-9)
