"""A data-parallel training loop in miniature, for ``observe`` under torchrun (tests/test_observe_ranks.py):
it joins its own gloo process group as a real script does, and each rank attends over its own length
(24 + 8·rank keys, causal, 3 steps of forward and backward), so the merged capture tells the ranks apart.
On GPUs each rank takes its own (LOCAL_RANK) with NCCL, in bf16."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

STEPS = 3


def main() -> None:
    cuda = torch.cuda.is_available()  # on GPUs: NCCL, each rank on its own, bf16
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    n = 24 + 8 * rank
    q, k, v = (torch.randn(1, 2, n, 16, device="cuda" if cuda else "cpu", dtype=torch.bfloat16 if cuda else None,
                           requires_grad=True) for _ in range(3))
    fail = int(sys.argv[sys.argv.index("--fail-rank") + 1]) if "--fail-rank" in sys.argv else None
    for step in range(STEPS):
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        if step == STEPS - 1 and fail == rank and "--fail-before-collectives" in sys.argv:
            raise RuntimeError(f"rank {rank} fails before its last all-reduce")
        loss = q.grad.sum().reshape(1)
        dist.all_reduce(loss)  # the ranks' steps meet, as gradient all-reduces make them
    if fail == rank:
        raise RuntimeError(f"rank {rank} fails after its steps")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
