"""Sweeps spread over ranks with torchrun (gloo on the CPU here): the plan, the merge of part
files, a 2-rank capture against a serial one, and a rank killed mid-sweep then resumed; the same
over two "hosts" that share no folder (two torchrun launches with --nnodes=2, each in its own
mount namespace), and over ranks that report different devices (--allow-mixed)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import uuid
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


def test_merge_parts_keeps_observed_rows_of_one_shape_at_two_sites(tmp_path):
    """Observed rows differ from each other by site, mask, layout or rank (store.OBSERVED_KEY), not by the row key
    alone: a merge keeps both sites' rows of one shape and still replaces a row of the same site."""
    row = {"impl": "sdpa", "step": "total", "mode": "fwd", "batch": 1, "heads": 1, "seq_q": 8, "seq_kv": 8,
           "head_dim": 16, "dtype": "fp32", "causal": False, "source": "observed", "status": "ok", "layout": "bhsd"}
    ResultStore(tmp_path, {"command": "x"}).append([row | {"site": "a.py:1", "calls": 1}])
    ResultStore(tmp_path, {}, part="rank-0", write_meta=False).append(
        [row | {"site": "a.py:1", "calls": 3}, row | {"site": "b.py:2", "calls": 5}])
    assert merge_parts(tmp_path) == 2
    frame = load_capture(tmp_path)[1]
    assert sorted(zip(frame.site, frame.calls)) == [("a.py:1", 3), ("b.py:2", 5)]


def test_ranks_on_different_gpus_are_refused_unless_allowed(monkeypatch, tmp_path):
    from profiler.measure.folder import FolderError

    monkeypatch.setattr(distributed, "gather", lambda value: [value | {"device": "NVIDIA H200"},
                                                              value | {"device": "NVIDIA H100 80GB HBM3"}])
    with pytest.raises(FolderError, match="the ranks run on different devices .*pass --allow-mixed"):
        distributed.open_shared_capture(distributed.Ranks(0, 2, 0), "cpu", tmp_path / "x", "NVIDIA H200",
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


def test_rounds_under_torchrun_keep_a_shapes_implementations_on_one_rank(tmp_path):
    """--rounds 3 on two ranks, rank 1 reporting another device (tests/fake_device.py, --allow-mixed) so that each row
    names the rank that measured it: a share is whole shapes (a shape's implementations take turns on one GPU, or
    their ratio would compare two GPUs), so both implementations of every shape name one device; every row a median
    of three rounds."""
    fake = [str(ROOT / "tests" / "fake_device.py"), "1", "NVIDIA H100 80GB HBM3"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = {**os.environ, "ATTN_ROOFLINE_CACHE": str(tmp_path / "cache")}
    split = tmp_path / "split"
    done = subprocess.run([*launcher, *fake, *SWEEP, "--rounds", "3", "--allow-mixed", "--out", str(split)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    meta, frame = load_capture(split)
    assert meta["rounds"] == 3 and meta["finished"] and sum(p["cases"] for p in meta["plan"]) == 24
    totals = frame[frame.step == "total"]
    assert len(totals) == 24 and (totals.rounds == 3).all() and frame.duplicated(KEY).sum() == 0
    shape = [c for c in KEY if c not in ("impl", "step")]
    assert (totals.groupby(shape).device.nunique() == 1).all() and totals.device.nunique() == 2


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


# -- two hosts that share no folder ------------------------------------------------------------------

UNSHARE = ["unshare", "-m", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["-r"])
# In its own mount namespace each "host" binds its own folder over the common --out path, so the
# two see different folders at one path, as two machines without a shared filesystem do.
BIND_THEN_RUN = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def _two_hosts(args: list[str], out: Path, homes: list[Path], program: list[str] | None = None, per_host: int = 1
               ) -> list[subprocess.CompletedProcess]:
    """Two torchrun launches (--nnodes=2, ``per_host`` ranks each, c10d rendezvous on localhost),
    each seeing its own folder of ``homes`` at ``out``; rank 0 lands on either. Returns both results."""
    out.mkdir(exist_ok=True)
    port, run_id = _free_port(), uuid.uuid4().hex[:8]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--nproc-per-node={per_host}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{port}", f"--rdzv-id={run_id}"]
    launches = []
    for home in homes:
        home.mkdir(exist_ok=True)
        command = [*UNSHARE, "sh", "-c", BIND_THEN_RUN, "sh", str(home), str(out), *torchrun,
                   *(program or ["-m", "profiler"]), *args]
        launches.append(subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True))
    done = []
    for launch in launches:
        stdout, stderr = launch.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(launch.args, launch.returncode, stdout, stderr))
    return done


def _where_the_capture_is(homes: list[Path]) -> tuple[Path, Path]:
    """(the folder rank 0 wrote the capture into, the other host's folder)."""
    holding = [h for h in homes if (h / "results.parquet").exists()]
    assert len(holding) == 1, [sorted(p.name for p in h.rglob("*")) for h in homes]
    return holding[0], next(h for h in homes if h != holding[0])


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("serial") / "capture"
    done = _run([*SWEEP, "--out", str(folder)])
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def test_mount_namespaces_are_available():
    """The two-host tests need `unshare -m`; say so plainly where a machine refuses it."""
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True)
    assert probe.returncode == 0, f"unshare -m is refused here: {probe.stderr.strip()}"


def test_two_hosts_without_a_shared_folder_give_the_serial_capture(serial, tmp_path):
    out, homes = tmp_path / "out", [tmp_path / "host-a", tmp_path / "host-b"]
    done = _two_hosts([*SWEEP, "--out", str(out), "--trace", "torch"], out, homes)
    assert [d.returncode for d in done] == [0, 0], "\n".join(d.stderr[-2000:] for d in done)
    capture, other = _where_the_capture_is(homes)
    pd.testing.assert_frame_equal(_cases(capture), _cases(serial))
    # a sweep traces its middle length's first setting, once per implementation, on whichever rank ran it
    assert sorted(p.name for p in (capture / "traces").iterdir()) == ["naive-fwd-B1H1N24D16-fp32.json",
                                                                       "sdpa_math-fwd-B1H1N24D16-fp32.json"]
    meta, frame = load_capture(capture)
    assert frame.duplicated(KEY).sum() == 0 and meta["finished"]
    assert meta["results_via"] == "process group" and meta["folder_views"] == [[0], [1]]
    assert [r["rank"] for r in meta["ranks"]] == [0, 1]
    assert all(r["host"] and r["device"] and r["measured_ceilings"]["copy_gbps"] > 0 for r in meta["ranks"])
    assert sum(p["cases"] for p in meta["plan"]) == 24 and all(p["cases"] for p in meta["plan"])
    # The other host keeps no copy of what rank 0 now holds; nothing was written at the common path.
    assert list(other.iterdir()) == [] and list(out.iterdir()) == []
    said = next(d.stdout for d in done if "Capture written" in d.stdout)
    assert "saw 2 different folders" in said and "through the process group" in said


def test_two_hosts_of_two_ranks_each_share_a_folder_within_a_host_only(serial, tmp_path):
    out, homes = tmp_path / "out", [tmp_path / "host-a", tmp_path / "host-b"]
    done = _two_hosts([*SWEEP, "--out", str(out)], out, homes, per_host=2)
    assert [d.returncode for d in done] == [0, 0], "\n".join(d.stderr[-2000:] for d in done)
    capture, other = _where_the_capture_is(homes)
    pd.testing.assert_frame_equal(_cases(capture), _cases(serial))
    meta, frame = load_capture(capture)
    assert meta["folder_views"] == [[0, 1], [2, 3]] and meta["results_via"] == "process group"
    assert [r["local_rank"] for r in meta["ranks"]] == [0, 1, 0, 1] and frame.duplicated(KEY).sum() == 0
    assert list(other.iterdir()) == []


def test_files_of_another_view_come_to_rank_0_and_leave_their_host(monkeypatch, tmp_path):
    main, other = tmp_path / "main", tmp_path / "other"
    (other / "traces").mkdir(parents=True)
    (other / "parts").mkdir()
    (other / "traces" / "t.json").write_text("{}")
    (other / "parts" / "rank-1.parquet").write_bytes(b"rows")
    views = ((0,), (1,))
    # rank 1, the only rank of its view, sends what it has and keeps it until rank 0 has merged
    sent = []
    monkeypatch.setattr(distributed, "gather_to_main", lambda value: sent.append(value))
    assert distributed.collect_files(distributed.Ranks(1, 2, 0, views), other, "traces/*.json") == 0
    assert sent == [{"traces/t.json": b"{}"}] and (other / "traces" / "t.json").exists()
    # rank 0 writes what it lacks, and only that
    main.mkdir()
    monkeypatch.setattr(distributed, "gather_to_main", lambda value: [value, *sent])
    assert distributed.collect_files(distributed.Ranks(0, 2, 0, views), main, "traces/*.json") == 1
    assert (main / "traces" / "t.json").read_text() == "{}"
    assert distributed.collect_files(distributed.Ranks(0, 2, 0, views), main, "traces/*.json") == 0
    # then rank 1's host drops its copies (parts and traces), keeping the folder itself
    distributed.release_view(distributed.Ranks(1, 2, 0, views), other, ("traces/*.json",))
    assert other.is_dir() and list(other.iterdir()) == []
    # one shared folder: nothing moves, nothing is removed
    distributed.release_view(distributed.Ranks(1, 2, 0, ((0, 1),)), main, ("traces/*.json",))
    assert (main / "traces" / "t.json").exists()


def test_a_killed_host_loses_nothing_and_both_resume_it(serial, tmp_path):
    out, homes = tmp_path / "out", [tmp_path / "host-a", tmp_path / "host-b"]
    # Rank 1 dies abruptly once it has written 3 rows; its host's torchrun fails, and rank 0 with it.
    died = _two_hosts([*SWEEP, "--out", str(out)], out, homes,
                      program=[str(ROOT / "tests" / "kill_rank.py"), "1", "3"])
    assert all(d.returncode != 0 for d in died)
    assert any(re.search(r"rank\s*: 1 .*\n\s*exitcode\s*: 17 ", d.stderr) for d in died)
    parts = [p for h in homes for p in (h / "parts").glob("*.parquet")]
    # One case rank 1 finished is marked as an error, as a case that failed would be: resume measures it again.
    dead = next(p for p in parts if p.name == "rank-1.parquet")
    rows = pd.read_parquet(dead)
    assert len(rows) >= 3
    case = [k for k in KEY if k != "step"]  # every step of its case
    again = (rows[case] == rows.iloc[0][case]).all(axis=1)
    rows.loc[again, "status"] = "error"
    rows.to_parquet(dead, index=False)
    before = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    # Both hosts come back (ranks may swap): every row either wrote is kept, only the rest is measured.
    resumed = _two_hosts([*SWEEP, "--out", str(out), "--resume"], out, homes)
    assert [d.returncode for d in resumed] == [0, 0], "\n".join(d.stderr[-2000:] for d in resumed)
    capture, other = _where_the_capture_is(homes)
    pd.testing.assert_frame_equal(_cases(capture), _cases(serial))
    meta, kept = load_capture(capture)
    assert meta["finished"] and kept.duplicated(KEY).sum() == 0 and list(other.iterdir()) == []
    joined = before.merge(kept, on=KEY, suffixes=("_before", ""))
    assert len(joined) == len(before)
    kept_as_were = joined.status_before != "error"  # the failed case's steps were measured again too
    assert (joined.time_ms_before == joined.time_ms)[kept_as_were].all()
    assert (joined.status[~kept_as_were] == "ok").all() and (~kept_as_were).sum() >= 1  # the error was measured again
    planned = sum(p["cases"] for p in meta["plan"])
    done = before[(before.step == "total") & (before.status != "error")].shape[0]
    assert planned == 24 - done  # the resumed plan holds what was missing, and the failed case


def test_a_host_with_another_gpu_is_refused_unless_allowed_then_judged_by_its_own_roofs(tmp_path):
    """Rank 1 reports an H100 (tests/fake_device.py): refused without --allow-mixed; with it, rank 1's
    rows carry the H100 and are judged against its datasheet roofs, rank 0's against none (a CPU),
    and remodel, which reads each row's device, changes nothing."""
    from profiler.remodel import remodel_capture

    fake = [str(ROOT / "tests" / "fake_device.py"), "1", "NVIDIA H100 80GB HBM3"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = {**os.environ, "ATTN_ROOFLINE_CACHE": str(tmp_path / "cache")}  # ceilings stored under the fake name

    def sweep(*extra):
        return subprocess.run([*launcher, *fake, *SWEEP, "--impl", "sdpa_math", "--mode", "fwd", *extra], cwd=ROOT,
                              capture_output=True, text=True, timeout=600, env=env)

    refused = sweep("--out", str(tmp_path / "refused"))
    assert refused.returncode != 0
    assert "the ranks run on different devices (CPU" in refused.stderr and "pass --allow-mixed" in refused.stderr
    assert not (tmp_path / "refused" / "results.parquet").exists()
    mixed = tmp_path / "mixed"
    done = sweep("--out", str(mixed), "--allow-mixed")
    assert done.returncode == 0, done.stderr[-2000:]
    meta, frame = load_capture(mixed)
    h100 = "NVIDIA H100 80GB HBM3"
    assert set(meta["devices"]) == {h100, meta["device"]} and meta["devices"][h100]["datasheet_device"]
    assert [r["device"] for r in meta["ranks"]] == [meta["device"], h100]
    on_h100 = frame.device == h100
    assert on_h100.any() and (frame.loc[~on_h100, "device"] == meta["device"]).all()
    assert frame.loc[on_h100, "roof_fraction"].notna().all() and frame.loc[~on_h100, "roof_fraction"].isna().all()
    _, changed = remodel_capture(mixed, write=False)
    assert not changed.any()
    assert json.loads((mixed / "meta.json").read_text())["finished"]


def test_shipped_two_host_sweep_matches_the_one_gpu_sweep():
    """reports/sweep-h200-2nodes: two torchrun nodes (--nnodes=2, one H200 each) that shared no folder
    (scripts/hosts_on_one_machine.sh): its rows came to rank 0 through the process group, and it
    holds the one-GPU sweep's cases with their statuses."""
    two, one = ROOT / "reports" / "sweep-h200-2nodes", ROOT / "reports" / "sweep-h200-1rank"
    pd.testing.assert_frame_equal(_cases(two), _cases(one))
    meta, frame = load_capture(two)
    assert meta["results_via"] == "process group" and meta["folder_views"] == [[0], [1]]
    assert [(r["rank"], r["device"]) for r in meta["ranks"]] == [(0, "NVIDIA H200"), (1, "NVIDIA H200")]
    assert all(r["driver"] and r["measured_ceilings"]["copy_gbps"] > 0 for r in meta["ranks"])
    assert [p["cases"] for p in meta["plan"]] == [64, 64] and frame.duplicated(KEY).sum() == 0


def test_a_rank_whose_peer_died_says_what_is_kept_in_one_line(monkeypatch, capsys):
    """gloo raises in a rank waiting on a peer that died (when torchrun has not stopped it first):
    one line on what is kept and how to finish, not a traceback; any other error still raises."""
    from profiler import cli
    from profiler.cli import sweep

    def dies(error):
        def run(args):
            args.ranks = distributed.Ranks(0, 2, 0)
            raise error
        return run

    lost = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:2946. This is "
                        "typically caused by a remote worker crashing.")
    monkeypatch.setattr(sweep, "run", dies(lost))
    monkeypatch.setattr(distributed, "stop", lambda: None)
    assert cli.main(["sweep"]) == cli.EXIT_PEER_LOST
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "rank 0: another rank stopped" in said and "--resume" in said
    monkeypatch.setattr(sweep, "run", dies(RuntimeError("something else")))
    with pytest.raises(RuntimeError, match="something else"):
        cli.main(["sweep"])


def test_resume_adds_another_device_only_when_allowed_and_names_every_row(tmp_path):
    """A one-device capture resumed with rows of another device (--allow-mixed): refused without it;
    with it, the stored rows get their device, meta.json's devices holds both, new rows name theirs."""
    from profiler.measure.folder import FolderError, open_capture

    folder = tmp_path / "capture"
    h200 = Roofs(hardware.get_device("H200"), None)
    store, _ = open_capture("cpu", folder, "NVIDIA H200", ["fp32"], {"command": "first", "device": "NVIDIA H200"},
                            devices={"NVIDIA H200": (h200, "test")})
    row = {"impl": "naive", "step": "total", "mode": "fwd", "batch": 1, "heads": 1, "seq_q": 8, "seq_kv": 8,
           "head_dim": 16, "dtype": "fp32", "causal": False, "status": "ok"}
    store.append([row])
    assert "device" not in pd.read_parquet(folder / "results.parquet")  # one device: not stored
    here = {"CPU test": (Roofs(None, None), "test")}
    with pytest.raises(FolderError, match="was captured on 'NVIDIA H200', this is 'CPU test'.*--allow-mixed"):
        open_capture("cpu", folder, "CPU test", ["fp32"], {"command": "second", "device": "CPU test"}, resume=True,
                     devices=here)
    second = {"command": "second", "device": "CPU test"}
    store, _ = open_capture("cpu", folder, "CPU test", ["fp32"], second, resume=True, devices=here, allow_mixed=True)
    store.append([row | {"seq_q": 16, "seq_kv": 16}])
    meta, frame = load_capture(folder)
    assert set(meta["devices"]) == {"NVIDIA H200", "CPU test"} and meta["devices"]["NVIDIA H200"]["datasheet_device"]
    assert dict(zip(frame.seq_q, frame.device)) == {8: "NVIDIA H200", 16: "CPU test"}
    # the capture now holds both: resuming on either needs no --allow-mixed
    open_capture("cpu", folder, "NVIDIA H200", ["fp32"], {"command": "third", "device": "NVIDIA H200"}, resume=True,
                 devices={"NVIDIA H200": (h200, "test")})
