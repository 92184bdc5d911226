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

from attention_core.shape import Shape
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
    call = Call("sdpa", Shape(1, 1, 1, 1, 8, "bf16"), "bhsd", "none", 1.0)
    rows: dict[tuple[str, str], RowStats] = {}
    for name in sorted(names, key=lambda n: int(n.rsplit("#", 1)[1])):
        found = EAGER.match(name)
        key = (found["site"], found["mode"])
        stats = rows.setdefault(key, RowStats(call, found["site"], found["mode"]))
        recorder.start(stats, name)
    assert recorder.times_from_kernels(kernels_from_chrome_trace(DATA / "trace.json.gz")) == 0
    for key, times in oracle().items():
        assert sorted(rows[key].times_ms) == pytest.approx(sorted(times), rel=1e-9)


def _brute_force(spans_by_tid: dict, launches: list) -> list[list[tuple]]:
    """The definition: every span of the launch's thread with start <= ts <= end, in the thread's sorted order."""
    return [[] if launch is None or launch[0] not in spans_by_tid else
            [s for s in spans_by_tid[launch[0]] if s[0] <= launch[1] <= s[1]] for launch in launches]


TRACES = sorted(str(p.relative_to(DATA.parent)) for pattern in ("*/*.json.gz", "torch-traces/*.json")
                for p in DATA.parent.glob(pattern))


@pytest.mark.parametrize("trace", TRACES)
def test_the_sweep_finds_what_the_definition_finds(trace):
    """profiler.measure.torch_trace.enclosing_spans (one sweep per thread) against the definition, on every real
    trace under tests/data: each kernel launch's enclosing ranges and operators."""
    from profiler.measure.torch_trace import enclosing_spans

    opened = gzip.open if trace.endswith(".gz") else open
    events = json.load(opened(DATA.parent / trace, "rt"))
    events = events["traceEvents"] if isinstance(events, dict) else events
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    spans: dict = {}
    for e in complete:
        if e.get("cat") in ("user_annotation", "cpu_op"):
            spans.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    for listed in spans.values():
        listed.sort()
    launches = [(e.get("tid"), e["ts"]) for e in complete if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    launches += [None, ("no such thread", 0.0)]
    assert len(launches) > 2 and enclosing_spans(spans, launches) == _brute_force(spans, launches)


def test_the_sweep_keeps_ranges_that_overlap_without_nesting():
    from profiler.measure.torch_trace import enclosing_spans

    spans = {1: sorted([(0, 10, "a"), (5, 100, "b"), (20, 30, "c"), (20, 25, "d"), (40, 40, "e")])}
    launches = [(1, t) for t in (7, 12, 22, 27, 40, 101, 5, 0)]
    assert enclosing_spans(spans, launches) == _brute_force(spans, launches)
    assert [name for *_, name in enclosing_spans(spans, [(1, 22)])[0]] == ["b", "d", "c"]
