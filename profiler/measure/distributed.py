"""One capture over every GPU of a host: ``torchrun --nproc-per-node=G -m profiler sweep ...``.

torch.distributed is used only to agree and to wait: every rank computes the same plan (cases
sorted by the cost model's predicted time, longest first, each given to the rank with the least
predicted work so far: the LPT rule of Graham, "Bounds on multiprocessing timing anomalies", 1969),
checks that the others computed the same, measures its share on its own GPU (``cuda:<local
rank>``) into its own part file (``parts/rank-<r>.parquet``, written atomically row by row), and
waits at a barrier; rank 0 then merges the parts into the one ``results.parquet``. A rank that
dies loses nothing the others wrote: ``--resume`` (with torchrun or without) merges every part
left behind and measures only what is missing. Without torchrun none of this runs.
"""

from __future__ import annotations

import hashlib
import heapq
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from attention_core.shape import Shape
from profiler.measure.folder import FolderError, open_capture
from profiler.measure.torch_trace import kernels_of_capture
from profiler.model.cost import cost_of
from profiler.model.roofs import Roofs
from profiler.store import ResultStore, merge_parts

WARMUP_MS = 25  # do_bench's warm-up (profiler.measure.timing)


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    local_rank: int

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def part(self) -> str:
        return f"rank-{self.rank}"


def from_env() -> Ranks | None:
    """The ranks torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK); None when
    the process was not started by torchrun (or as a world of one)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or "RANK" not in os.environ:
        return None
    return Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))


def start(ranks: Ranks, device_type: str) -> str:
    """Join the process group (NCCL between GPUs, gloo on CPUs) and return this rank's device."""
    import torch.distributed as dist

    if device_type == "cuda":
        torch.cuda.set_device(ranks.local_rank)
        device = f"cuda:{ranks.local_rank}"
    else:
        device = "cpu"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                                device_id=torch.device(device) if device_type == "cuda" else None)
    return device


def gather(value) -> list:
    """Every rank's ``value`` (any picklable object), in rank order, on every rank."""
    import torch.distributed as dist

    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
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


def predicted_seconds(impl, shape: Shape, roofs: Roofs, rep_ms: int) -> float:
    """What one case is expected to cost on the clock: do_bench's warm-up and repetition time for
    the case and for each naive step timed alone, plus three runs (correctness, peak memory,
    first call) at the roofline's time for its FLOPs and bytes (max of FLOPs / peak and bytes /
    bandwidth, against the measured roofs, else the datasheet's)."""
    peak = roofs.measured_peak(shape.dtype) or roofs.datasheet_peak(shape.dtype)
    cost = cost_of(impl.costing, shape)
    kernel = 0.0 if peak is None else max(cost.flops / peak[0], cost.hbm_bytes / peak[1])
    timed = len(impl.row_steps)  # the case, and each naive step on its own
    return timed * (WARMUP_MS + rep_ms) / 1e3 + 3 * kernel


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

    def as_meta(self) -> list[dict]:
        return [{"rank": r, "cases": len(share), "predicted_s": round(sum(self.costs[i] for i in share), 1)}
                for r, share in enumerate(self.shares)]


def share(ranks: Ranks, items: list, costs: list[float]) -> Share:
    """This rank's share of ``items`` (each with its predicted cost) by :func:`plan`, after checking
    that every rank planned the same items the same way."""
    shares = plan(costs, ranks.world)
    if len(set(gather(fingerprint(items, shares)))) > 1:
        raise RuntimeError("the ranks planned different cases: give every rank the same arguments")
    return Share(shares[ranks.rank], shares, costs)


def open_shared_capture(ranks: Ranks, device: str, folder: Path, label: str, dtypes, meta: dict, *, impls=(),
                        head_dims=(), resume: bool = False, resumable: bool = True, allow_mixed: bool = False,
                        status=None) -> tuple[ResultStore, Roofs]:
    """The distributed counterpart of profiler.measure.folder.open_capture: rank 0 checks the
    folder, measures the roofs and writes meta.json (every rank's device under ``ranks``); every
    rank gets the same roofs and a store of its own part file that skips what the folder already
    holds. A refusal (a bad folder, ranks on different devices without ``allow_mixed``) is raised
    as FolderError on every rank, so none is left waiting."""
    devices = gather(label)
    if len(set(devices)) > 1 and not allow_mixed:
        raise FolderError(f"the ranks run on different devices ({', '.join(sorted(set(devices)))}); one capture "
                          "compares like with like: pass --allow-mixed to measure across them anyway")
    folder = Path(broadcast(str(folder)))  # one default name for all ranks
    error = roofs = stored_meta = None
    if ranks.main:
        try:
            store, roofs = open_capture(device, folder, label, dtypes,
                                        meta | {"ranks": [{"rank": r, "device": d} for r, d in enumerate(devices)]},
                                        impls=impls, head_dims=head_dims, resume=resume, resumable=resumable,
                                        status=status)
            stored_meta = store.meta
        except FolderError as err:
            error = str(err)
    error, roofs, stored_meta = broadcast((error, roofs, stored_meta))
    if error:
        raise FolderError(error)
    return ResultStore(folder, stored_meta, resume=True, part=ranks.part, write_meta=False), roofs


def finish_capture(ranks: Ranks, store: ResultStore, plan_meta: list[dict]) -> list[dict]:
    """Wait for every rank; rank 0 then merges the parts into results.parquet, rebuilds the kernel
    table from the traces, records the plan and marks the capture finished. Rank 0 returns every
    row of the capture (and keeps them in ``store.rows``), the others their own."""
    barrier()  # every part is complete
    rows = store.rows
    if ranks.main:
        merge_parts(store.folder)
        if store.capture.traces_dir.is_dir():
            store.write_kernels(kernels_of_capture(store.folder))
        store.update_meta(finished=True, plan=plan_meta)
        rows = store.rows = store.capture.results().to_dict("records")
    barrier()
    return rows
