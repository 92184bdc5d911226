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

import torch

from profiler.model import cost_model as cm
from profiler.model.roofs import Roofs

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


def predicted_seconds(impl, shape: cm.Shape, roofs: Roofs, rep_ms: int) -> float:
    """What one case is expected to cost on the clock: do_bench's warm-up and repetition time for
    the case and for each naive step timed alone, plus three runs (correctness, peak memory,
    first call) at the roofline's time for its FLOPs and bytes (max of FLOPs / peak and bytes /
    bandwidth, against the measured roofs, else the datasheet's)."""
    peak = roofs.measured_peak(shape.dtype) or roofs.datasheet_peak(shape.dtype)
    cost = cm.cost_of(impl.costing, shape)
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


def fingerprint(cases: list[tuple[cm.Shape, str]], shares: list[list[int]]) -> str:
    """A digest of the plan, to check that every rank planned the same cases the same way."""
    text = repr([(shape, name) for shape, name in cases]) + repr(shares)
    return hashlib.sha256(text.encode()).hexdigest()
