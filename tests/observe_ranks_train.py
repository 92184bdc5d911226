"""A data-parallel training loop in miniature, for ``observe`` under torchrun (tests/test_observe_ranks.py):
it joins its own gloo process group as a real script does, and each rank attends over its own length
(24 + 8·rank keys, causal, 3 steps of forward and backward), so the merged capture tells the ranks apart."""

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

STEPS = 3


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    n = 24 + 8 * rank
    q, k, v = (torch.randn(1, 2, n, 16, requires_grad=True) for _ in range(3))
    for _ in range(STEPS):
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        loss = q.grad.sum().reshape(1)
        dist.all_reduce(loss)  # the ranks' steps meet, as gradient all-reduces make them
    if "--fail-rank" in sys.argv and rank == int(sys.argv[sys.argv.index("--fail-rank") + 1]):
        raise RuntimeError(f"rank {rank} fails after its steps")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
