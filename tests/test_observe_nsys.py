"""``observe --trace nsys`` read back on the CPU: a real capture of tests/observe_nsys_train.py made on an
H100 (scripts/perf_experiments/observe_nsys_gpu.sh) with its Nsight Systems export and nsys's own
nvtx_gpu_proj_sum report, in tests/data/observe-nsys-h100. Its rows are stripped of their times and timed
again from the export (profiler.observer.nsys_times.fill), as observe does once nsys has written it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from observe_nsys_check import check_capture

from profiler.nsight.nsys import busy_ns
from profiler.observer import nsys_times
from profiler.store import Capture, to_frame

DATA = Path(__file__).resolve().parent / "data" / "observe-nsys-h100"


@pytest.fixture
def untimed(tmp_path) -> Path:
    """The shipped capture as the observation under nsys left it: rows without times, times pending."""
    folder = tmp_path / "run"
    shutil.copytree(DATA, folder)
    capture = Capture(folder)
    meta, frame = capture.load()
    cleared = {c: np.nan for c in ("time_ms", "time_ms_p10", "time_ms_p90", "total_ms", "median_ms", "tflops",
                                   "gbps", "roof_fraction", "roof_fraction_measured")}
    frame = frame.assign(**cleared, status="untimed", bound=None)
    capture.write_results(to_frame(frame.to_dict("records")))
    observed = {k: v for k, v in meta["observed"].items() if k not in ("attention_ms", "gpu_busy_ms", "clock")}
    capture.write_meta(meta | {"observed": observed | {"times_pending": "nsys", "clock": "nsys"}})
    return folder


def test_each_call_is_timed_from_its_own_range(untimed, tmp_path):
    summary = nsys_times.fill(untimed)
    frame = check_capture(untimed, untimed / "stats_nvtx_gpu_proj_sum.csv", untimed / "profile.sqlite.xz", tmp_path)
    # the GPU machine's own fill gave the same rows
    _, shipped = Capture(DATA).load()
    pd.testing.assert_frame_equal(frame.reset_index(drop=True), shipped.reset_index(drop=True))
    assert summary["attention_ms"] == pytest.approx(json.loads((DATA / "meta.json").read_text())["observed"]
                                                    ["attention_ms"])


def test_a_call_without_its_range_is_counted_and_left_out(untimed, tmp_path):
    calls = pd.read_parquet(untimed / nsys_times.NSYS_CALLS)
    extra = pd.DataFrame({"call": [calls["call"].max() + 1], "row": [calls["row"].iloc[0]]})
    pd.concat([calls, extra]).to_parquet(untimed / nsys_times.NSYS_CALLS, index=False)
    summary = nsys_times.fill(untimed)
    assert summary["calls_without_ranges"] == 1


def test_busy_time_counts_overlaps_once_and_gaps_never():
    start, end = np.array([0, 5, 20, 22]), np.array([10, 8, 25, 30])
    assert busy_ns(start, end) == 10 + 10  # [0, 10) holds [5, 8); [20, 30) joins two; the gap 10-20 is idle
    assert busy_ns(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0


def test_nsys_ingest_times_an_observation_whose_export_came_later(untimed, tmp_path, capsys):
    """An observation under nsys interrupted before its calls were timed: `nsys ingest` times them."""
    from profiler.cli import main

    assert main(["nsys", "ingest", str(untimed)]) == 0
    assert "Timed the 16 observed calls" in " ".join(capsys.readouterr().out.split())
    check_capture(untimed, untimed / "stats_nvtx_gpu_proj_sum.csv", untimed / "profile.sqlite.xz", tmp_path)
