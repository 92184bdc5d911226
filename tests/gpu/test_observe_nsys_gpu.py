"""``observe --trace nsys`` on the GPU: the run under Nsight Systems, each call's time from its NVTX range,
checked against nsys's own report of the same file and the export's operations (tests/observe_nsys_check.py),
and against ``--trace torch`` on the same script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from observe_nsys_check import check_capture

from profiler.observer.nsys_times import find_nsys
from profiler.store import Capture

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "tests" / "observe_nsys_train.py")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(find_nsys() is None, reason="needs Nsight Systems (source .device/gpu-env.sh)"),
]


def _observe(out: Path, trace: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler", "observe", "--trace", trace, "--out", str(out), "--",
                           SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_trace_nsys_times_each_call_from_its_range(tmp_path):
    out = tmp_path / "run"
    done = _observe(out, "nsys")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "profile.nsys-rep").is_file() and (out / "profile.sqlite").is_file()
    assert "Observed 20 attention calls" in " ".join(done.stdout.split())
    stats = subprocess.run([find_nsys(), "stats", "--report", "nvtx_gpu_proj_sum", "--format", "csv",
                            "--force-export=false", "--output", str(out / "stats"), str(out / "profile.nsys-rep")],
                           capture_output=True, text=True, timeout=300)
    assert stats.returncode == 0, stats.stderr[-2000:]
    frame = check_capture(out, out / "stats_nvtx_gpu_proj_sum.csv", out / "profile.sqlite", tmp_path)
    # The same calls under the torch profiler: the same rows, and per-call kernel times that agree.
    torch_run = _observe(tmp_path / "torch", "torch")
    assert torch_run.returncode == 0, torch_run.stderr[-3000:]
    _, other = Capture(tmp_path / "torch").load()
    key = ["site", "mode", "seq_q", "calls", "flops"]
    both = frame.merge(other, on=key, suffixes=("_nsys", "_torch"))
    assert len(both) == len(frame) == len(other)
    timed = both[both["status_nsys"] == "ok"]
    ratio = timed["median_ms_nsys"] / timed["median_ms_torch"]
    print(timed[["site", "mode", "median_ms_nsys", "median_ms_torch"]].assign(ratio=ratio).to_string())
    assert ratio.between(0.8, 1.25).all()
