"""Per-call GPU times of attention inside compiled graphs, read from real H100 traces.

tests/data/observe-compiled-h100 holds two observed runs on an NVIDIA H100 80GB HBM3 (torch 2.11,
triton 3.6; scripts/perf_experiments/observe_compiled_gpu.sh): nanoGPT compiled (2 layers, B2 N256,
2 steps: SDPA, which Inductor calls as cuDNN's ATen operator) and flex_window compiled (2 layers,
N1024, 2 steps: FlexAttention's Triton templates). Each trace was trimmed to the ``observe/`` ranges,
the kernels launched inside them and the attention operators
(scripts/perf_experiments/trim_chrome_trace.py --inside observe/), and gzipped; the results beside
each are what the run wrote.

The oracle here reads the kernels by name, as one reads the trace in Perfetto: per graph run, the
k-th cuDNN attention kernel group (forward: the fprop kernel; backward: dot(dO, O), the bprop
kernel, dQ's conversion) or FlexAttention template kernel is the k-th layer's call (the last layer
first in the backward).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from attention_core.shape import Shape
from profiler.measure.torch_trace import kernels_from_chrome_trace
from profiler.observer.calls import Call
from profiler.observer.graphs import ATTENTION_OP
from profiler.observer.recorder import Recorder, RowStats

DATA = Path(__file__).resolve().parent / "data" / "observe-compiled-h100"
GRAPH_RUN = re.compile(r"(observe/compiled/(fwd|bwd)/[^>]*#\d+)")


def graph_runs(kernels: pd.DataFrame) -> dict[str, pd.DataFrame]:
    named = kernels.assign(run=kernels.ranges.str.extract(GRAPH_RUN)[0]).dropna(subset=["run"])
    return {run: group.sort_values("start_us") for run, group in named.groupby("run")}


def replay(kernels: pd.DataFrame, sites: list[str]) -> dict[tuple[str, str], RowStats]:
    """A recorder told of each graph run in the trace, as profiler.observer.graphs tells it: the
    forward's rows in layer order, the backward's reversed; then timed from the kernels."""
    recorder = Recorder("trace")
    call = Call("sdpa", Shape(1, 1, 1, 1, 8, "bf16"), "bhsd", "none", 1.0)
    rows = {(site, mode): RowStats(call, site, mode) for site in sites for mode in ("fwd", "bwd")}
    for run in graph_runs(kernels):
        mode = "fwd" if "/fwd/" in run else "bwd"
        order = sites if mode == "fwd" else sites[::-1]
        recorder.graph_started(run, [rows[(site, mode)] for site in order])
    recorder.times_from_kernels(kernels)
    assert recorder.graph_calls_untimed == 0
    return rows


def expected(kernels: pd.DataFrame, sites: list[str], is_call_start, is_part) -> dict[tuple[str, str], list]:
    """Per (site, mode), the summed time of each call's kernels, by the oracle of the module docstring."""
    out: dict[tuple[str, str], list] = {}
    for run, group in graph_runs(kernels).items():
        mode = "fwd" if "/fwd/" in run else "bwd"
        calls: list[float] = []
        for name, gpu_us in zip(group.kernel, group.gpu_us):
            if is_call_start(name, mode):
                calls.append(0.0)
            if is_part(name) and calls:
                calls[-1] += gpu_us
        assert len(calls) == len(sites), run
        for site, us in zip(sites if mode == "fwd" else sites[::-1], calls):
            out.setdefault((site, mode), []).append(us / 1e3)
    return out


def test_compiled_sdpa_calls_are_timed_by_their_cudnn_kernels():
    kernels = kernels_from_chrome_trace(DATA / "nanogpt-small.json.gz", ops=ATTENTION_OP)
    sites = ["blocks.0.attn", "blocks.1.attn"]
    rows = replay(kernels, sites)
    oracle = expected(kernels, sites,
                      lambda name, mode: "fprop" in name if mode == "fwd" else "compute_dot_do_o" in name,
                      lambda name: "cudnn" in name)
    for key, stats in rows.items():
        assert stats.times_ms == pytest.approx(oracle[key], rel=1e-9) and len(stats.times_ms) == 2
    # The same times the GPU run wrote (profiler.observer.run on the H100).
    stored = pd.read_parquet(DATA / "nanogpt-small-results.parquet").set_index(["site", "mode"])
    for (site, mode), stats in rows.items():
        assert stored.loc[(site, mode), "total_ms"] == pytest.approx(sum(stats.times_ms), rel=1e-6)
        assert stored.loc[(site, mode), "status"] == "ok"


def test_compiled_flex_attention_calls_are_timed_by_their_template_kernels():
    """flex_window compiles flex_attention itself: each layer's call is one run of a one-call graph."""
    kernels = kernels_from_chrome_trace(DATA / "flex-small.json.gz", ops=ATTENTION_OP)
    runs = graph_runs(kernels)
    # The first backward compiled itself inside its range: Inductor benchmarked the preprocessing
    # kernel there; those launches are not the call's.
    first_backward = next(group for run, group in runs.items() if "/bwd/" in run)
    assert (first_backward.kernel.str.startswith("triton_per_fused_flex_attention_backward")).sum() > 10
    rows = replay(kernels, ["WindowAttentionLayer"])

    def oracle(group) -> list[float]:
        """Forward: the template kernel. Backward: with the last preprocessing launch before it."""
        calls, last_pre = [], 0.0
        for name, gpu_us in zip(group.kernel, group.gpu_us):
            if name.startswith("triton_tem_fused_flex_attention"):
                calls.append((gpu_us + last_pre) / 1e3)
                last_pre = 0.0
            elif "flex_attention" in name:
                last_pre = gpu_us
        return calls

    for mode in ("fwd", "bwd"):
        expect = [t for run, group in sorted(runs.items(), key=lambda item: item[1].start_us.min())
                  if f"/{mode}/" in run for t in oracle(group)]
        assert rows[("WindowAttentionLayer", mode)].times_ms == pytest.approx(expect, rel=1e-9)
        assert len(expect) == 4  # 2 layers x 2 steps
    # The run wrote these totals.
    stored = pd.read_parquet(DATA / "flex-small-results.parquet").set_index("mode")
    for mode in ("fwd", "bwd"):
        assert stored.loc[mode, "total_ms"] == pytest.approx(sum(rows[("WindowAttentionLayer", mode)].times_ms),
                                                             rel=1e-6)
    # A backward call costs a few forward calls, not the thousand launches of the first run.
    bwd, fwd = rows[("WindowAttentionLayer", "bwd")].times_ms, rows[("WindowAttentionLayer", "fwd")].times_ms
    assert 1.5 < max(bwd) / min(fwd) < 6


def test_a_graph_run_whose_kernels_do_not_match_its_rows_stays_untimed():
    kernels = kernels_from_chrome_trace(DATA / "nanogpt-small.json.gz", ops=ATTENTION_OP)
    recorder = Recorder("trace")
    call = Call("sdpa", Shape(1, 1, 1, 1, 8, "bf16"), "bhsd", "none", 1.0)
    one = RowStats(call, "blocks.0.attn", "fwd")
    run = next(run for run in graph_runs(kernels) if "/fwd/" in run)
    recorder.graph_started(run, [one])  # the graph holds two attention calls; one row cannot take them
    recorder.times_from_kernels(kernels)
    assert one.times_ms == [] and recorder.graph_calls_untimed == 1


def test_kernels_read_a_gzipped_trace_and_name_their_attention_operator():
    kernels = kernels_from_chrome_trace(DATA / "nanogpt-small.json.gz", ops=ATTENTION_OP)
    attention = kernels[kernels.op != ""]
    assert set(attention.op.str.split("@").str[0]) == {"aten::_scaled_dot_product_cudnn_attention",
                                                      "aten::_scaled_dot_product_cudnn_attention_backward"}
    assert attention.kernel.str.contains("cudnn").all()
    assert "op" not in kernels_from_chrome_trace(DATA / "nanogpt-small.json.gz").columns
