"""One capture over many GPUs, on one host or several: ``torchrun [--nnodes=N] --nproc-per-node=G -m
profiler sweep ...``.

torch.distributed is used only to agree, to wait and to move results: every rank computes the same
plan (the cases not yet in the capture, sorted by the cost model's predicted time, longest first,
each given to the rank with the least predicted work so far: the LPT rule of Graham, "Bounds on
multiprocessing timing anomalies", 1969), checks that the others computed the same, measures its
share on its own GPU (``cuda:<local rank>``) into its own part file (``parts/rank-<r>.parquet``,
written atomically row by row), and waits at a barrier; rank 0 then merges the parts into the one
``results.parquet``.

Hosts need not share the capture folder. Each rank leaves a probe file in the folder as it sees it
and reads which probes it finds: ranks that find the same ones see one folder (a *view*: the ranks
of one host, or every rank on a shared filesystem). With one view the part files meet in it; with
several, rank 0 receives the other views' rows and traces through the process group (gloo object
collectives) at the end and writes them as parts before merging. meta.json says which
(``results_via``) and lists every rank's host, GPU, driver and measured ceilings.

A rank that dies loses nothing it wrote: its rows stay in its view's part file. ``--resume`` (with
torchrun or without, on whatever hosts come back) first brings every view's rows to rank 0, then
measures only what is still missing. Without torchrun none of this runs.

Ranks on different GPUs (an H100 host beside an H200 host) measure one capture only with
``--allow-mixed``: then each kind of GPU measures its own roofs, every row is judged against its own
device's and records it (the ``device`` column), and meta.json's ``devices`` holds each one's roofs.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import shutil
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import torch

from attention_core.shape import Shape
from profiler.measure.folder import FolderError, check_folder, measure_roofs, open_capture
from profiler.measure.meta import run_metadata
from profiler.measure.torch_trace import kernels_of_capture
from profiler.model.cost import cost_of
from profiler.model.roofs import Roofs
from profiler.store import (
    KEY,
    TRACES,
    Capture,
    ResultStore,
    merge_parts,
    read_results,
    to_frame,
    write_bytes_atomic,
    write_parquet_atomic,
)

WARMUP_MS = 25  # do_bench's default warm-up (profiler.measure.timing; --warmup-ms sets another)
# How long a rank waits for the others at a barrier: the end of a sweep waits for the slowest share,
# and shares are balanced by predicted, not measured, time. A rank whose process dies ends the wait
# at once (its connections close; torchrun stops the others); a host that vanishes without closing
# them (power lost, network cut) leaves the others waiting up to this long, their rows safe on disk.
WAIT = timedelta(hours=12)
# What describes a rank in meta.json (of profiler.measure.meta.run_metadata).
RANK_KEYS = ("host", "device", "compute_capability", "driver", "torch", "triton", "cuda")


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    local_rank: int
    # The groups of ranks that see one capture folder (set by open_shared_capture): one group when
    # the folder is shared by every rank, else one per host (or per shared filesystem).
    views: tuple[tuple[int, ...], ...] = ()

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def part(self) -> str:
        return f"rank-{self.rank}"

    @property
    def shared(self) -> bool:
        """Whether every rank writes into the one folder rank 0 merges."""
        return len(self.views) <= 1

    @property
    def view(self) -> tuple[int, ...]:
        return next((v for v in self.views if self.rank in v), (self.rank,))

    @property
    def view_leader(self) -> bool:
        """The lowest rank of its view: the one that speaks for its folder."""
        return self.rank == min(self.view)


def from_env() -> Ranks | None:
    """The ranks torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK); None when
    the process was not started by torchrun (or as a world of one)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or "RANK" not in os.environ:
        return None
    return Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))


def start(ranks: Ranks, device_type: str) -> str:
    """Join the process group and return this rank's device. The group is gloo's even between GPUs:
    the ranks exchange Python objects (plans, rows, files) and wait at barriers, nothing goes from
    GPU to GPU, so NCCL would only put its buffers and streams on the GPUs being timed; gloo also
    runs over plain TCP between hosts."""
    import torch.distributed as dist

    if device_type == "cuda":
        torch.cuda.set_device(ranks.local_rank)
        device = f"cuda:{ranks.local_rank}"
    else:
        device = "cpu"
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=WAIT)
    return device


def gather(value) -> list:
    """Every rank's ``value`` (any picklable object), in rank order, on every rank."""
    import torch.distributed as dist

    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def gather_to_main(value) -> list | None:
    """Every rank's ``value`` in rank order on rank 0 (None on the others): for what only rank 0 keeps."""
    import torch.distributed as dist

    values = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(value, values, dst=0)
    return values


def broadcast(value, source: int = 0):
    """Rank ``source``'s ``value`` on every rank."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=source)
    return box[0]


def barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def stop() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def predicted_seconds(impl, shape: Shape, roofs: Roofs, rep_ms: int, warmup_ms: int = WARMUP_MS) -> float:
    """What one case is expected to cost on the clock: do_bench's warm-up and repetition time for
    the case and for each naive step timed alone, plus three runs (correctness, peak memory,
    first call) at the roofline's time for its FLOPs and bytes (max of FLOPs / peak and bytes /
    bandwidth, against the measured roofs, else the datasheet's)."""
    peak = roofs.measured_peak(shape.dtype) or roofs.datasheet_peak(shape.dtype)
    cost = cost_of(impl.costing, shape)
    kernel = 0.0 if peak is None else max(cost.flops / peak[0], cost.hbm_bytes / peak[1])
    timed = len(impl.row_steps)  # the case, and each naive step on its own
    return timed * (warmup_ms + rep_ms) / 1e3 + 3 * kernel


def plan(costs: list[float], world: int) -> list[list[int]]:
    """Indices of the cases each rank measures: longest first, each to the least loaded rank
    (ties to the lower rank), so the plan is the same on every rank."""
    loads = [(0.0, r) for r in range(world)]
    shares: list[list[int]] = [[] for _ in range(world)]
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load, rank = heapq.heappop(loads)
        shares[rank].append(index)
        heapq.heappush(loads, (load + costs[index], rank))
    return shares


def fingerprint(items: list, shares: list[list[int]]) -> str:
    """A digest of a plan, to check that every rank planned the same items the same way."""
    return hashlib.sha256((repr(items) + repr(shares)).encode()).hexdigest()


@dataclass(frozen=True)
class Share:
    """This rank's part of a plan: the indices it measures, and the whole plan for meta.json."""

    mine: list[int]
    shares: list[list[int]]
    costs: list[float]

    def as_meta(self, sizes: list[int] | None = None) -> list[dict]:
        """Each rank's cases and predicted seconds; ``sizes``: the cases in each item where an item is several (a
        shape's implementations, timed in rounds)."""
        return [{"rank": r, "cases": sum(sizes[i] for i in share) if sizes else len(share),
                 "predicted_s": round(sum(self.costs[i] for i in share), 1)} for r, share in enumerate(self.shares)]


def share(ranks: Ranks, items: list, costs: list[float]) -> Share:
    """This rank's share of ``items`` (each with its predicted cost) by :func:`plan`, after checking
    that every rank planned the same items the same way. The costs are rank 0's: ranks on different
    GPUs (--allow-mixed) predict with their own roofs, and one plan needs one set of predictions."""
    costs = broadcast(costs)
    shares = plan(costs, ranks.world)
    if len(set(gather(fingerprint(items, shares)))) > 1:
        raise RuntimeError("the ranks planned different cases: give every rank the same arguments")
    return Share(shares[ranks.rank], shares, costs)


def describe_rank(device: str) -> dict:
    """What meta.json says of one rank: its host, GPU, driver and software (:data:`RANK_KEYS`)."""
    meta = run_metadata(device)
    return {key: meta.get(key) for key in RANK_KEYS}


def agree(ranks: Ranks, error: str | None) -> None:
    """Raise FolderError on every rank when any rank found an error (so none is left waiting)."""
    errors = [e for e in gather(error) if e]
    if errors:
        raise FolderError(errors[0])


def find_views(ranks: Ranks, folder: Path) -> tuple[tuple[int, ...], ...]:
    """The groups of ranks that see one folder at ``folder``: each rank leaves a probe file
    ``.view-<token>-<rank>`` there and looks up every rank's."""
    token = broadcast(uuid.uuid4().hex if ranks.main else None)
    probe = folder / f".view-{token}-{ranks.rank}"
    probe.write_bytes(b"")
    barrier()
    # each probe looked up by name: a directory listing may be served stale by a network filesystem
    seen = tuple(r for r in range(ranks.world) if (folder / f".view-{token}-{r}").exists())
    barrier()  # every rank has looked before any probe goes
    probe.unlink()
    return tuple(sorted(set(gather(seen))))


def view_rows(folder: Path) -> list[dict]:
    """Every row a folder holds as this host sees it: results.parquet and the part files."""
    capture = Capture(folder)
    paths = [capture.results_path, *capture.part_files()] if folder.is_dir() else []
    return [r for p in paths if p.exists() for r in read_results(p).to_dict("records")]


def bring_views_to_main(ranks: Ranks, folder: Path) -> int:
    """Before a resumed sweep whose folder is not shared: rank 0 receives each other view's meta.json
    (kept where its own folder has none) and the rows it holds that rank 0's folder lacks, written
    as ``parts/view-<r>.parquet`` for open_capture to merge. Returns how many rows came (rank 0)."""
    capture = Capture(folder)
    state = None
    if ranks.view_leader and not ranks.main and folder.is_dir():
        state = (capture.meta() if capture.meta_path.is_file() else None, view_rows(folder))
    states = gather_to_main(state)
    if not ranks.main:
        return 0
    have = {tuple(r[k] for k in KEY) for r in view_rows(folder) if r.get("status") != "error"}
    came = 0
    for rank, received in enumerate(states):
        if received is None:
            continue
        meta, rows = received
        if meta is not None and not capture.meta_path.exists():
            capture.write_meta(meta)
        new = [r for r in rows if tuple(r[k] for k in KEY) not in have]
        if new:
            capture.parts_dir.mkdir(parents=True, exist_ok=True)
            write_parquet_atomic(capture.part_path(f"view-{rank}"), to_frame(new))
            have |= {tuple(r[k] for k in KEY) for r in new if r.get("status") != "error"}
            came += len(new)
    return came


def open_shared_capture(ranks: Ranks, device: str, folder: Path, label: str, dtypes, meta: dict, *, impls=(),
                        head_dims=(), resume: bool = False, resumable: bool = True, allow_mixed: bool = False,
                        status=None, graph: bool = False) -> tuple[ResultStore, Roofs, Ranks]:
    """The distributed counterpart of profiler.measure.folder.open_capture. Every rank checks the
    folder as its host sees it; the ranks find which of them share it (:func:`find_views`); the
    first rank of each kind of GPU measures that kind's roofs; rank 0 writes meta.json (every rank
    under ``ranks``, how results reach it under ``results_via``); every rank gets its own device's
    roofs and a store of its own part file that skips what the capture already holds. A refusal (a
    bad folder on any host, ranks on different devices without ``allow_mixed``) is raised as
    FolderError on every rank, so none is left waiting. Returns the store, the roofs and ``ranks``
    with its views."""
    described = gather(describe_rank(device) | {"device": label, "local_rank": ranks.local_rank})
    labels = [d["device"] for d in described]
    mixed = len(set(labels)) > 1
    if mixed and not allow_mixed:
        raise FolderError(f"the ranks run on different devices ({', '.join(sorted(set(labels)))}); one capture "
                          "compares like with like: pass --allow-mixed to measure across them anyway")
    folder = Path(broadcast(str(folder)))  # one default name for all ranks
    error = None
    try:
        check_folder(folder, resume=resume, resumable=resumable)
    except FolderError as err:
        error = f"{err} (as rank {ranks.rank} on {described[ranks.rank]['host']} sees it)"
    agree(ranks, error)
    ranks = replace(ranks, views=find_views(ranks, folder))
    if resume and not ranks.shared:
        bring_views_to_main(ranks, folder)
    # Each kind of GPU measures its roofs once, on its first rank, while the others wait.
    first = {name: labels.index(name) for name in labels}
    measured = gather(measure_roofs(device, label, dtypes, status if ranks.main else None, graph)
                      if first[label] == ranks.rank else None)
    roofs_of = {name: measured[rank] for name, rank in first.items()}
    roofs, _ = roofs_of[label]
    error = stored_meta = None
    if ranks.main:
        # each kind of GPU's ceilings, as its first rank measured them (ceilings_measured_by)
        rank_meta = [{"rank": r, **d, "measured_ceilings": roofs_of[d["device"]][0].as_meta()["measured_ceilings"],
                      "ceilings_measured_by": first[d["device"]]} for r, d in enumerate(described)]
        how = {"results_via": "shared folder" if ranks.shared else "process group",
               "folder_views": [list(v) for v in ranks.views]}
        try:
            store, _ = open_capture(device, folder, label, dtypes, meta | {"ranks": rank_meta} | how,
                                    impls=impls, head_dims=head_dims, resume=resume, status=status,
                                    devices=roofs_of, checked=True,
                                    allow_mixed=allow_mixed)
            stored_meta = store.meta
        except FolderError as err:
            error = str(err)
    agree(ranks, error)
    stored_meta = broadcast(stored_meta)
    fields = {"device": label} if stored_meta.get("devices") else {}  # rows of several devices: each names its own
    store = ResultStore(folder, stored_meta, resume=True, part=ranks.part, write_meta=False, fields=fields)
    if not ranks.shared:  # what the capture already holds is in rank 0's folder only
        held = None
        if ranks.main:
            held = [{k: r[k] for k in [*KEY, "status"]} for r in view_rows(folder)]
        store.known = broadcast(held)
    return store, roofs, ranks


def collect_files(ranks: Ranks, folder: Path, pattern: str) -> int:
    """Files matching ``pattern`` (e.g. traces/*.json) in other views' folders copied into rank 0's,
    where it lacks them; a no-op when the folder is shared. Returns how many came (rank 0)."""
    if ranks.shared:
        return 0
    files = None
    if ranks.view_leader and not ranks.main:
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.glob(pattern))}
    received = gather_to_main(files)
    if not ranks.main:
        return 0
    came = 0
    for files in filter(None, received):
        for name, data in files.items():
            path = folder / name
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                write_bytes_atomic(path, data)
                came += 1
    return came


def release_view(ranks: Ranks, folder: Path, patterns: tuple[str, ...] = ()) -> None:
    """After rank 0 merged everything: another view's copies of what rank 0 now holds (its part
    files, and files matching ``patterns``) are removed, and the subfolders that empties (not the
    capture folder itself, which may be a mount point), so a later sweep into the same path on that
    host is not refused as unfinished or as holding other files."""
    if ranks.shared or not ranks.view_leader or 0 in ranks.view:
        return
    capture = Capture(folder)
    if capture.parts_dir.is_dir():
        shutil.rmtree(capture.parts_dir)
    for pattern in patterns:
        for path in folder.glob(pattern):
            path.unlink()
    for directory in sorted({p.parent for pattern in patterns for p in [folder / pattern]}, reverse=True):
        if directory.is_dir() and directory != folder and not any(directory.iterdir()):
            directory.rmdir()


def finish_capture(ranks: Ranks, store: ResultStore, plan_meta: list[dict]) -> list[dict]:
    """Wait for every rank; rank 0 then receives the rows and traces of other views (a folder not
    shared), merges the parts into results.parquet, rebuilds the kernel table from the traces,
    records the plan and marks the capture finished; other views then drop their copies. Rank 0
    returns every row of the capture (and keeps them in ``store.rows``), the others their own."""
    barrier()  # every part is complete
    rows = store.rows
    if not ranks.shared:  # each rank sends what it measured now: what --resume found is in rank 0's capture
        received = gather_to_main(store.appended)
        collect_files(ranks, store.folder, f"{TRACES}/*.json")
        if ranks.main:
            for rank, theirs in enumerate(received):
                if rank not in ranks.view and theirs:
                    store.capture.parts_dir.mkdir(exist_ok=True)
                    write_parquet_atomic(store.capture.part_path(f"rank-{rank}"), to_frame(theirs))
    if ranks.main:
        merge_parts(store.folder)
        if store.capture.traces_dir.is_dir():
            store.write_kernels(kernels_of_capture(store.folder))
        store.update_meta(finished=True, plan=plan_meta)
        rows = store.rows = store.capture.results().to_dict("records")
    barrier()  # rank 0 holds every row
    release_view(ranks, store.folder, (f"{TRACES}/*.json",))
    return rows
