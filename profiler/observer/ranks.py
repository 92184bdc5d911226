"""``observe`` under torchrun: every rank observes its own process, rank 0 writes the one capture.

``torchrun --nproc-per-node=G [--nnodes=N ...] -m profiler observe --out DIR -- train.py`` starts the
observer in every rank's process. Each rank writes its rows (with its ``rank``) to its own part file,
``parts/rank-<r>.parquet``, as sweeps do (profiler.measure.distributed): at every flush (with the CUDA-event
and CPU clocks; the trace clocks time calls only at the end) and when its script ends, so a rank that dies
keeps what it had written. When its script ends, each rank sends rank 0 its rows, its summary and its
kernel table. Rank 0 writes them as part files and merges them into
results.parquet. meta.json's ``observed`` then holds the whole run (calls and times summed over the
ranks, the longest wall time) and each rank's own summary under ``ranks``.

The ranks cannot use a process group of their own: the script calls ``init_process_group`` itself (NCCL,
usually), and a second default group would make that call fail. So they talk through a c10d key-value
store under a prefix of ours, at MASTER_ADDR:MASTER_PORT, the store the script's own ``env://``
rendezvous uses (torch.distributed.rendezvous._create_c10d_store):
- under torchrun, the agent of the first node hosts that store for the whole job
  (TORCHELASTIC_USE_AGENT_STORE=True), and every rank connects as a client;
- under another launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (srun, mpirun), rank 0
  hosts it with ``multi_tenant=True``, as ``env://`` does; the script's later ``init_process_group``
  then shares that server instead of failing to bind its port.
Rows reach rank 0 through the store, so hosts need not share the capture folder: the part files of a
rank on another host are written by rank 0 from what it received, and that host's own copy is removed
once rank 0 has merged. Each rank's Chrome trace stays on its host (``traces/observed-rank-<r>.json``),
and meta.json says where (``ranks[r].trace_file``); its kernels are in the capture's kernels.parquet with
their rank.
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pandas as pd

from profiler.measure.distributed import WAIT, Ranks, from_env
from profiler.store import Capture, read_parquet_snapshot, to_frame, write_parquet_atomic

PREFIX = "profiler-observe"
CHUNK = 4 << 20  # bytes per store value: the store's libuv server refuses values over 8 MiB
# How long rank 0 waits for the others when its own script failed or was stopped (Ctrl-C reaches every
# rank of a torchrun job; torchrun stops the others with SIGTERM when one fails): they send what they saw
# at once, or were stopped before they could, or wait on rank 0 in a collective of their script's.
FAILED_WAIT = timedelta(seconds=20)
# Summary entries that add up over the ranks (the others are per rank, in ``ranks``).
ADDED = ("calls", "rows", "attention_ms", "attention_fwd_ms", "attention_bwd_ms", "gpu_busy_ms", "gpu_kernel_ms",
         "unobserved_attention_kernels", "unobserved_attention_ms", "calls_without_kernels", "compiled_frames",
         "compiled_graphs_observed", "compiled_calls_untimed")


@dataclass
class RankLink:
    """This rank, and the store the ranks of one observation talk through."""

    ranks: Ranks
    store: object  # a torch.distributed PrefixStore

    @property
    def part(self) -> str:
        return self.ranks.part

    @property
    def main(self) -> bool:
        return self.ranks.main

    @property
    def trace_file(self) -> str:
        return f"observed-{self.part}.json"

    def put(self, key: str, value) -> None:
        """``value`` pickled under ``key``, in pieces of at most :data:`CHUNK` bytes (the store refuses a
        value over 8 MiB) and then their count, which readers wait for."""
        data = pickle.dumps(value)
        pieces = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        for i, piece in enumerate(pieces):
            self.store.set(f"{key}/{i}", piece)
        self.store.set(key, str(len(pieces)).encode())

    def take(self, key: str, wait: timedelta = WAIT):
        """The value :meth:`put` stored under ``key``, once it is there (DistStoreError after ``wait``)."""
        self.store.wait([key], wait)
        count = int(self.store.get(key))
        return pickle.loads(b"".join(self.store.get(f"{key}/{i}") for i in range(count)))

    def drop(self, key: str) -> None:
        """Delete what :meth:`put` stored under ``key``."""
        try:
            count = int(self.store.get(key))
        except Exception:  # noqa: BLE001 - nothing there (or the store gone): nothing to drop
            return
        for i in range(count):
            self.store.delete_key(f"{key}/{i}")
        self.store.delete_key(key)

    def share(self, key: str, value=None, wait: timedelta = WAIT):
        """Rank 0's ``value`` on every rank (each other rank waits for it)."""
        if self.main:
            self.put(key, value)
            return value
        return self.take(key, wait)

    def everyones(self, key: str, value, wait: timedelta = WAIT) -> list:
        """Every rank's ``value``, in rank order, on every rank (each waits for all)."""
        self.put(f"{key}/{self.ranks.rank}", value)
        return [self.take(f"{key}/{r}", wait) for r in range(self.ranks.world)]


def join() -> RankLink | None:
    """The link of this rank when a launcher started several (RANK and WORLD_SIZE > 1 in the
    environment), else None. Raises ValueError when the environment lacks the store's address. Every
    rank must observe as often as the others: the n-th observation of each process meets the others'
    n-th under a prefix of its own."""
    global _observations
    ranks = from_env()
    if ranks is None:
        return None
    ranks = replace(ranks, local_rank=local_rank(ranks))
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise ValueError(f"RANK and WORLD_SIZE are set but {' and '.join(missing)} is not: start the ranks with "
                         "torchrun, or set MASTER_ADDR and MASTER_PORT as init_process_group's env:// needs")
    from torch.distributed import PrefixStore, TCPStore

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store = TCPStore(host, port, is_master=False, timeout=WAIT)
    else:
        store = TCPStore(host, port, ranks.world, is_master=ranks.main, timeout=WAIT, wait_for_workers=False,
                         multi_tenant=True)
    # One prefix per job, restart (torchrun reuses its store when it restarts failed workers) and observation.
    job = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'job')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    _observations += 1
    return RankLink(ranks, PrefixStore(f"{PREFIX}/{job}/{_observations}", store))


_observations = 0  # observations this process has joined (profiler.observe may run several)


def local_rank(ranks: Ranks) -> int:
    """This rank's index on its host: LOCAL_RANK (torchrun), SLURM_LOCALID (srun), OMPI_COMM_WORLD_LOCAL_RANK
    (mpirun), else the global rank modulo the host's GPUs (a launcher that sets none of them)."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    import torch

    return ranks.rank % max(1, torch.cuda.device_count() if torch.cuda.is_available() else 1)


def write_part(link: RankLink, folder: Path, rows: list[dict]) -> None:
    capture = Capture(folder)
    capture.parts_dir.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(capture.part_path(link.part), to_frame(rows))


@dataclass
class Sent:
    """What one rank sends rank 0 when its script ends."""

    rank: int
    host: str
    device: str
    rows: list[dict]
    summary: dict
    kernels: bytes | None  # kernels.parquet's rows of this rank, as parquet
    trace: str | None  # where this rank's Chrome trace is, on its host
    ceilings: dict  # the measured ceilings its rows were judged against

    @staticmethod
    def of(link: RankLink, device: str, rows: list[dict], summary: dict, kernels: pd.DataFrame | None,
           trace: Path | None, ceilings: dict) -> Sent:
        data = None
        if kernels is not None:
            data = kernels.assign(rank=link.ranks.rank).to_parquet(index=False)
        return Sent(link.ranks.rank, socket.gethostname(), device, rows, summary, data,
                    str(trace) if trace is not None else None, ceilings)


def send(link: RankLink, sent: Sent) -> None:
    link.put(f"sent/{link.ranks.rank}", sent)


def receive(link: RankLink, failed: bool) -> tuple[list[Sent], list[int]]:
    """On rank 0: what every rank sent, in rank order, and the ranks that sent nothing in time
    (:data:`FAILED_WAIT` when rank 0's own script ``failed``)."""
    from torch.distributed import DistError

    came, missing = [], []
    deadline = time.monotonic() + (FAILED_WAIT if failed else WAIT).total_seconds()
    for rank in range(link.ranks.world):
        try:
            came.append(link.take(f"sent/{rank}", timedelta(seconds=max(0.01, deadline - time.monotonic()))))
        except DistError:
            missing.append(rank)
    return came, missing


def merged_summary(sent: list[Sent], missing: list[int], world: int) -> dict:
    """The run's summary over its ranks: counts and times summed, the longest wall time, shares of the
    ranks' summed wall and busy times; each rank's own summary under ``ranks``."""
    sums = {key: sum(s.summary.get(key) or 0 for s in sent) for key in ADDED if any(key in s.summary for s in sent)}
    wall = [s.summary.get("wall_s") or 0.0 for s in sent]
    unmodelled: dict[str, int] = {}
    for s in sent:
        for reason, calls in (s.summary.get("unmodelled_calls") or {}).items():
            unmodelled[reason] = unmodelled.get(reason, 0) + calls
    first = sent[0].summary if sent else {}
    summary = {**sums, "world": world, "wall_s": max(wall, default=float("nan")), "trace": first.get("trace"),
               "clock": first.get("clock"), "unmodelled_calls": unmodelled,
               "installed": first.get("installed"), "ranks_missing": missing,
               "compiled_untimed_reason": next((s.summary["compiled_untimed_reason"] for s in sent
                                                if s.summary.get("compiled_untimed_reason")), ""),
               "attention_share_of_wall": sums.get("attention_ms", 0) / (sum(wall) * 1e3) if sum(wall) > 0 else None}
    failures = [f"rank {s.rank} {s.summary['script_failed']}" for s in sent if s.summary.get("script_failed")]
    if failures:
        summary["script_failed"] = "; ".join(failures)
    if any(s.summary.get("attention_ms") is None for s in sent):
        summary["attention_ms"] = None  # a rank that did not finish: no share (summary.share_line)
    if sums.get("gpu_busy_ms"):
        summary.update(gpu_busy_share_of_wall=sums["gpu_busy_ms"] / (sum(wall) * 1e3),
                       attention_share_of_gpu=sums["attention_ms"] / sums["gpu_busy_ms"])
    # trace_file: where the rank's Chrome trace is, on its host (the summary's own "trace" is the clock's kind)
    summary["ranks"] = [{"rank": s.rank, "host": s.host, "device": s.device, "measured_ceilings": s.ceilings,
                         **s.summary, "trace_file": s.trace} for s in sent]
    return summary


def merge(link: RankLink, folder: Path, sent: list[Sent]) -> list[dict]:
    """On rank 0: every received rank's rows written as its part file, then every part file in the
    folder (those of ranks that sent nothing but share the folder too) folded into results.parquet,
    in rank order; the kernels of every rank into kernels.parquet. Returns the merged rows."""
    capture = Capture(folder)
    capture.parts_dir.mkdir(parents=True, exist_ok=True)
    for s in sent:
        write_parquet_atomic(capture.part_path(f"rank-{s.rank}"), to_frame(s.rows))
    parts = sorted(capture.part_files(), key=lambda p: int(p.stem.rsplit("-", 1)[-1]))
    frames = [read_parquet_snapshot(p) for p in parts]
    rows = pd.concat(frames, ignore_index=True).to_dict("records") if frames else []
    capture.write_results(to_frame(rows))  # written before the parts go: a kill in between loses nothing
    for p in parts:
        p.unlink()
    try:  # a rank that comes late may be writing its part here still: it keeps it (wait_merged)
        capture.parts_dir.rmdir()
    except OSError:
        pass
    kernels = [pd.read_parquet(io.BytesIO(s.kernels)) for s in sent if s.kernels is not None]
    if kernels:
        capture.write_kernels(pd.concat(kernels, ignore_index=True))
    return rows


ACK_WAIT = timedelta(seconds=30)  # how long rank 0, which may host the store, waits for the others to read it


def done(link: RankLink, merged: list[int]) -> None:
    """Rank 0 has merged the rows of the ranks ``merged``: it says so, waits (briefly) until each of them has
    read it, since under srun or mpirun the store lives in rank 0's process, then drops what the ranks sent
    (torchrun's agent would keep it for the whole job)."""
    from torch.distributed import DistError

    link.put("merged", merged)
    try:
        link.store.wait([f"ack/{r}" for r in merged if r != link.ranks.rank], ACK_WAIT)
    except DistError:
        pass
    for r in merged:
        link.drop(f"sent/{r}")


def wait_merged(link: RankLink, folder: Path) -> bool:
    """On another rank: wait for rank 0's merge. When it holds this rank's rows, a copy of its part file
    still here is one rank 0 did not see (another host's folder) and goes; when rank 0 merged without them
    (its script ended first and it stopped waiting), the part file stays, and False says so."""
    from torch.distributed import DistError

    try:
        merged = link.take("merged")
    except DistError:  # rank 0 gone (it hosted the store: srun, mpirun) or never merging
        return False
    link.store.set(f"ack/{link.ranks.rank}", b"1")
    if link.ranks.rank not in merged:
        return False
    capture = Capture(folder)
    capture.part_path(link.part).unlink(missing_ok=True)
    try:  # the other ranks of this host may empty and remove it at the same time
        if not any(capture.parts_dir.iterdir()):
            capture.parts_dir.rmdir()
    except OSError:
        pass
    return True
