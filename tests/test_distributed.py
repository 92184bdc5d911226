"""Sweeps spread over ranks with torchrun (gloo on the CPU here): the plan, the merge of part
files, a 2-rank capture against a serial one, and a rank killed mid-sweep then resumed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from attention_core.shape import Shape
from profiler.measure import distributed
from profiler.model import hardware
from profiler.model.roofs import Roofs
from profiler.registry import REGISTRY
from profiler.store import KEY, ResultStore, load_capture, merge_parts

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["sweep", "--device", "cpu", "--seq", "16,24,40", "--dim", "16", "--heads", "1", "--batch", "1",
         "--impl", "naive,sdpa_math", "--causal", "both", "--mode", "fwd,bwd", "--rep-ms", "5"]


def _run(args: list[str], ranks: int | None = None, kill: tuple[int, int] | None = None) -> subprocess.CompletedProcess:
    """``python -m profiler ARGS``, alone or under torchrun with ``ranks`` processes; ``kill`` (rank,
    rows) runs tests/kill_rank.py instead, which ends that rank abruptly once it has written the rows."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] \
        if ranks else [sys.executable]
    program = ["-m", "profiler"] if kill is None else [str(ROOT / "tests" / "kill_rank.py"), *map(str, kill)]
    return subprocess.run([*launcher, *program, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _cases(folder: Path) -> pd.DataFrame:
    _, frame = load_capture(folder)
    return frame[KEY + ["status"]].sort_values(KEY).reset_index(drop=True)


def test_plan_is_longest_first_to_the_least_loaded_rank():
    shares = distributed.plan([5.0, 1.0, 4.0, 3.0, 3.0, 2.0], world=2)
    assert shares == [[0, 4, 1], [2, 3, 5]]  # longest first, each to the least loaded: 9 and 9
    assert sorted(i for share in distributed.plan([1.0] * 7, 3) for i in share) == list(range(7))
    assert distributed.plan([2.0, 1.0], 4)[2:] == [[], []]


def test_predicted_time_grows_with_the_work():
    roofs = Roofs(hardware.get_device("H200"), None)
    flash, naive = REGISTRY["triton_flash"], REGISTRY["naive"]
    small, big = Shape.square(4, 32, 1024, 64), Shape.square(4, 32, 16384, 64)
    predicted = [distributed.predicted_seconds(flash, s, roofs, 100) for s in (small, big)]
    assert predicted[1] > predicted[0]
    # naive is timed five times (the case and each step alone)
    assert distributed.predicted_seconds(naive, small, roofs, 100) > 5 * 0.125


def test_merge_parts_replaces_by_key_and_removes_the_parts(tmp_path):
    row = {"impl": "naive", "step": "total", "mode": "fwd", "batch": 1, "heads": 1, "seq_kv": 8, "head_dim": 16,
           "dtype": "fp32", "causal": False}
    ResultStore(tmp_path, {"command": "x"}).append([row | {"seq_q": 8, "status": "error", "message": "flaky"}])
    ResultStore(tmp_path, {}, part="rank-0", write_meta=False).append([row | {"seq_q": 8, "status": "ok"}])
    part = ResultStore(tmp_path, {}, resume=True, part="rank-1", write_meta=False)
    assert part.has(row | {"seq_q": 8})  # rank 1 sees what rank 0 measured
    part.append([row | {"seq_q": 16, "status": "ok"}])
    assert merge_parts(tmp_path) == 2 and not (tmp_path / "parts").exists()
    frame = load_capture(tmp_path)[1]
    assert sorted(zip(frame.seq_q, frame.status)) == [(8, "ok"), (16, "ok")]


def test_ranks_on_different_gpus_are_refused_unless_allowed(monkeypatch, tmp_path):
    from profiler.measure.folder import FolderError

    monkeypatch.setattr(distributed, "gather", lambda value: ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
    with pytest.raises(FolderError, match="the ranks run on different devices .*pass --allow-mixed"):
        distributed.open_shared_capture(distributed.Ranks(0, 2, 0), "cuda:0", tmp_path / "x", "NVIDIA H200",
                                        ["fp16"], {})


def test_two_ranks_give_the_serial_capture(tmp_path):
    serial, split = tmp_path / "serial", tmp_path / "split"
    assert _run([*SWEEP, "--out", str(serial)]).returncode == 0
    done = _run([*SWEEP, "--out", str(split)], ranks=2)
    assert done.returncode == 0, done.stderr[-2000:]
    pd.testing.assert_frame_equal(_cases(split), _cases(serial))
    meta, frame = load_capture(split)
    assert [r["rank"] for r in meta["ranks"]] == [0, 1] and meta["finished"]
    assert [p["cases"] for p in meta["plan"]] == [12, 12] and not (split / "parts").exists()
    assert frame.duplicated(KEY).sum() == 0


def test_a_killed_rank_loses_nothing_and_resume_finishes(tmp_path):
    serial, split = tmp_path / "serial", tmp_path / "split"
    assert _run([*SWEEP, "--out", str(serial)]).returncode == 0
    # Rank 1 dies abruptly once it has written 3 rows; torchrun then stops the other rank.
    died = _run([*SWEEP, "--out", str(split)], ranks=2, kill=(1, 3))
    assert died.returncode != 0
    assert re.search(r"rank\s*: 1 .*\n\s*exitcode\s*: 17 ", died.stderr), died.stderr[-2000:]  # killed, as planned
    part = pd.read_parquet(split / "parts" / "rank-1.parquet")
    assert len(part) >= 3  # what rank 1 wrote before it died is on disk
    resumed = _run([*SWEEP, "--out", str(split), "--resume"])  # serially: no torchrun needed
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    pd.testing.assert_frame_equal(_cases(split), _cases(serial))
    assert not (split / "parts").exists()
    for r in part.itertuples():  # rows measured before the kill were kept, not measured again
        kept = load_capture(split)[1]
        match = kept[(kept.impl == r.impl) & (kept.step == r.step) & (kept.seq_q == r.seq_q) & (kept["mode"] == r.mode)
                     & (kept.causal == r.causal)]
        assert match.time_ms.iloc[0] == r.time_ms


def test_shipped_two_gpu_sweep_matches_the_one_gpu_sweep():
    """reports/sweep-h200-2ranks (torchrun, 2 H200s) against reports/sweep-h200-1rank (one of them):
    the same cases and statuses, and case times within noise of each other."""
    two, one = ROOT / "reports" / "sweep-h200-2ranks", ROOT / "reports" / "sweep-h200-1rank"
    pd.testing.assert_frame_equal(_cases(two), _cases(one))
    meta = load_capture(two)[0]
    assert [r["device"] for r in meta["ranks"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert [p["cases"] for p in meta["plan"]] == [64, 64]
    a, b = load_capture(one)[1], load_capture(two)[1]
    joined = a.merge(b, on=KEY, suffixes=("_1", "_2"))
    ratio = joined.time_ms_2 / joined.time_ms_1
    assert abs(ratio.median() - 1) < 0.01 and ((ratio - 1).abs() < 0.05).mean() > 0.95
