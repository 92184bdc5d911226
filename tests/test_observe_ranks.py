"""``observe`` under torchrun on two CPU ranks (gloo): one capture whose rows carry their rank, merged
by rank 0 from part files, in a shared folder and across two "hosts" that share none; and under a
launcher other than torchrun, where rank 0 hosts the store that the script's own
``init_process_group`` then shares (profiler.observer.ranks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_distributed import UNSHARE, _free_port, _two_hosts

from profiler.observer import ranks
from profiler.observer.summary import rank_sites, run_summary_lines
from profiler.store import Capture

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "observe_ranks_train.py")
# the call site observe names: the line of the script's attention call
SITE = "observe_ranks_train.py:" + str(next(i for i, line in enumerate(Path(SCRIPT).read_text().splitlines(), 1)
                                            if "scaled_dot_product_attention(" in line))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def _observe(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TORCHRUN, "-m", "profiler", "observe", "--out", str(out), "--", SCRIPT, *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)


def _expected(rank: int) -> pd.DataFrame:
    """The rows each rank of the script makes: its length, 3 calls each way, FLOPs 4·B·H·N²·D/2 forward
    (causal) and 2.5 times that backward (FlashAttention-2 paper §4)."""
    n = 24 + 8 * rank
    fwd = 4 * 1 * 2 * n * n * 16 / 2
    return pd.DataFrame({"rank": [float(rank)] * 2, "mode": ["fwd", "bwd"], "seq_q": [n, n], "seq_kv": [n, n],
                         "calls": [3.0, 3.0], "flops": [fwd, 2.5 * fwd]})


def _check_merged(folder: Path, world: int = 2) -> dict:
    meta, frame = Capture(folder).load()
    got = frame.sort_values(["rank", "mode"], ascending=[True, False])[
        ["rank", "mode", "seq_q", "seq_kv", "calls", "flops"]].reset_index(drop=True)
    want = pd.concat([_expected(r) for r in range(world)], ignore_index=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert (frame["status"] == "ok").all() and (frame["total_ms"] > 0).all()
    assert (frame["source"] == "observed").all() and set(frame["site"]) == {SITE}
    observed = meta["observed"]
    assert observed["finished"] and observed["world"] == world and observed["ranks_missing"] == []
    assert observed["calls"] == 6 * world and observed["rows"] == 2 * world
    assert [r["rank"] for r in observed["ranks"]] == list(range(world))
    assert [r["calls"] for r in observed["ranks"]] == [6] * world
    per_rank = sum(r["attention_ms"] for r in observed["ranks"])
    assert observed["attention_ms"] == pytest.approx(per_rank) == pytest.approx(frame["total_ms"].sum())
    assert observed["wall_s"] == max(r["wall_s"] for r in observed["ranks"])
    assert not (folder / "parts").exists()
    return meta


def test_two_ranks_in_one_folder_merge_into_one_capture(tmp_path):
    done = _observe(tmp_path / "run")
    assert done.returncode == 0, done.stderr[-3000:]
    _check_merged(tmp_path / "run")
    assert "Observed 12 attention calls on 2 ranks" in done.stdout
    assert "rank 1 observed 6 attention calls; rank 0 merged them" in done.stdout
    assert "of the ranks' summed wall time" in done.stdout and "summed over 2 ranks" in done.stdout
    meta = Capture(tmp_path / "run").meta()
    assert meta["command"].startswith("torchrun --nproc-per-node=2 -m profiler observe --out ")
    # the views keep the ranks apart: each site named with its rank
    _, frame = Capture(tmp_path / "run").load()
    assert sorted(set(rank_sites(frame)["site"])) == [f"rank 0 · {SITE}", f"rank 1 · {SITE}"]


def test_two_hosts_without_a_shared_folder_merge_on_rank_0s(tmp_path):
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True)
    assert probe.returncode == 0, f"unshare -m is refused here: {probe.stderr.strip()}"
    out, homes = tmp_path / "out", [tmp_path / "host-a", tmp_path / "host-b"]
    # two ranks per host: the ranks of the host without rank 0 drop their copies together
    done = _two_hosts(["observe", "--out", str(out), "--", SCRIPT], out, homes, per_host=2)
    assert [d.returncode for d in done] == [0, 0], "\n".join(d.stderr[-2000:] for d in done)
    holding = [h for h in homes if (h / "results.parquet").exists()]
    assert len(holding) == 1, [sorted(p.name for p in h.rglob("*")) for h in homes]
    _check_merged(holding[0], world=4)
    other = next(h for h in homes if h != holding[0])
    assert list(other.rglob("*.parquet")) == []  # its part file went once rank 0 had merged it


def test_a_launcher_other_than_torchrun_shares_rank_0s_store_with_the_script(tmp_path):
    """srun or mpirun set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT and no agent store: rank 0's
    observer hosts the store first, and the script's init_process_group (env://) shares it."""
    port = _free_port()
    launches = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        launches.append(subprocess.Popen([sys.executable, "-m", "profiler", "observe", "--out", str(tmp_path / "run"),
                                          "--", SCRIPT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True))
    outputs = [launch.communicate(timeout=240) for launch in launches]
    assert [launch.returncode for launch in launches] == [0, 0], "\n".join(err[-2000:] for _, err in outputs)
    _check_merged(tmp_path / "run")


def test_a_failing_rank_is_named_in_the_summary(tmp_path):
    """Rank 1 raises after its steps: it sends its rows, exits 1 with its traceback, as python would, and
    does not wait. Rank 0, at its barrier, then fails too (gloo's connection closed) or is stopped by
    torchrun's SIGTERM; either way it merges what both observed and says how each ended."""
    done = _observe(tmp_path / "run", "--fail-rank", "1")
    assert done.returncode != 0
    assert "RuntimeError: rank 1 fails after its steps" in done.stderr
    meta, frame = Capture(tmp_path / "run").load()
    assert meta["observed"]["calls"] == 12 and sorted(set(frame["rank"])) == [0.0, 1.0]
    failed = meta["observed"]["script_failed"]
    assert failed.startswith("rank 0 ") and "rank 1 raised RuntimeError: rank 1 fails after its steps" in failed


def test_a_folder_one_rank_refuses_is_refused_by_all(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    done = _observe(tmp_path / "run")
    assert done.returncode != 0
    # a rank says why in one line (on stderr) and exits 2; torchrun then stops the other, which may or may not
    # have said it too by then
    assert "holds other files and is not a capture; choose a new or empty folder" in done.stderr
    assert "exitcode  : 2" in done.stderr
    assert f'File "{ROOT / "profiler"}' not in done.stderr  # no traceback of ours (torchrun prints its own)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


def test_the_merged_summary_adds_counts_and_keeps_each_ranks():
    def sent(rank, **summary):
        return ranks.Sent(rank, "host", "cpu", [], summary, None, None, {})

    merged = ranks.merged_summary([sent(0, calls=6, attention_ms=2.0, attention_fwd_ms=1.5, attention_bwd_ms=0.5,
                                        wall_s=1.0, gpu_busy_ms=10.0, clock="trace"),
                                   sent(1, calls=4, attention_ms=1.0, attention_fwd_ms=0.5, attention_bwd_ms=0.5,
                                        wall_s=3.0, gpu_busy_ms=20.0, clock="trace", script_failed="raised X: y")],
                                  missing=[2], world=3)
    assert merged["calls"] == 10 and merged["attention_ms"] == 3.0 and merged["wall_s"] == 3.0
    assert merged["attention_share_of_gpu"] == pytest.approx(3.0 / 30.0)
    assert merged["gpu_busy_share_of_wall"] == pytest.approx(30.0 / 4000.0)
    assert merged["script_failed"] == "rank 1 raised X: y" and merged["ranks_missing"] == [2]
    assert [r["rank"] for r in merged["ranks"]] == [0, 1]
    assert [r["trace_file"] for r in merged["ranks"]] == [None, None]
    assert "summed over 3 ranks (ranks 2 sent nothing" in run_summary_lines(merged)[0]


def test_rank_0_ending_first_leaves_the_others_rows_in_their_part_files(tmp_path):
    """Rank 0's script raises while rank 1 waits on it in a collective: rank 0 waits a short while for rank 1,
    merges what it has and says who is missing; rank 1, stopped by then, keeps its rows in its part file."""
    done = _observe(tmp_path / "run", "--fail-rank", "0", "--fail-before-collectives")
    assert done.returncode != 0 and "RuntimeError: rank 0 fails" in done.stderr
    meta, frame = Capture(tmp_path / "run").load()
    assert meta["observed"]["ranks_missing"] == [1] and not meta["observed"]["finished"]
    assert sorted(set(frame["rank"])) == [0.0]
    kept = pd.read_parquet(tmp_path / "run" / "parts" / "rank-1.parquet")
    assert kept["calls"].sum() == 6 and set(kept["rank"]) == {1.0}


OBSERVE_TWICE = """
import sys
import torch
import torch.distributed as dist
import torch.nn.functional as F
import profiler

dist.init_process_group("gloo")
rank = dist.get_rank()
for phase, n in (("a", 16), ("b", 32)):
    q = torch.randn(1, 1, n + 8 * rank, 8)
    with profiler.observe(out=sys.argv[1] + "-" + phase, ranks=True):
        for _ in range(2 if phase == "a" else 3):
            F.scaled_dot_product_attention(q, q, q)
    dist.barrier()
if rank == 0:
    with profiler.observe(out=sys.argv[1] + "-alone"):  # on one rank only, without ranks=True: it alone
        F.scaled_dot_product_attention(q, q, q)
dist.barrier()
dist.destroy_process_group()
"""


def test_two_observations_in_one_run_and_one_on_a_single_rank(tmp_path):
    script = tmp_path / "twice.py"
    script.write_text(OBSERVE_TWICE)
    done = subprocess.run([*TORCHRUN, str(script), str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for phase, n, calls in (("a", 16, 2), ("b", 32, 3)):
        meta, frame = Capture(tmp_path / f"run-{phase}").load()
        assert meta["observed"]["calls"] == 2 * calls
        assert sorted(zip(frame["rank"], frame["seq_q"], frame["calls"])) == [(0.0, n, calls), (1.0, n + 8, calls)]
    _, alone = Capture(tmp_path / "run-alone").load()
    assert alone["calls"].tolist() == [1.0] and alone["rank"].isna().all()  # one process: no rank stored


def test_a_value_over_the_stores_8_mib_goes_in_pieces():
    """The store's libuv server refuses a value over 8 MiB; a rank's rows and kernel table can be more."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from profiler.measure.distributed import Ranks

    store = TCPStore("127.0.0.1", _free_port(), 1, is_master=True, timeout=timedelta(seconds=30))
    link = ranks.RankLink(Ranks(0, 1, 0), store)
    value = {"kernels": bytes(range(256)) * (9 << 12)}  # 9 MiB
    link.put("sent/0", value)
    assert link.take("sent/0") == value and int(store.get("sent/0")) == 3


OBSERVE_WITHOUT_RANKS = """
import sys
import torch
import torch.distributed as dist
import torch.nn.functional as F
import profiler

dist.init_process_group("gloo")
dist.barrier() if dist.get_rank() == 1 else None
q = torch.randn(1, 1, 16, 8)
with profiler.observe(out=sys.argv[1]):  # every rank into one folder, without ranks=True
    F.scaled_dot_product_attention(q, q, q)
dist.barrier() if dist.get_rank() == 0 else None
"""


def test_ranks_observing_into_one_folder_without_ranks_true_are_told_how(tmp_path):
    script = tmp_path / "same.py"
    script.write_text(OBSERVE_WITHOUT_RANKS)
    done = subprocess.run([*TORCHRUN, str(script), str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode != 0
    assert "of 2: pass ranks=True on every rank to merge the ranks into one capture, or give each rank its own out" \
        in done.stderr
