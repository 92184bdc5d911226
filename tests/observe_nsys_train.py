"""A small GPU training loop for ``observe --trace nsys`` (tests/gpu/test_observe_nsys_gpu.py, and the
capture behind tests/data/observe-nsys-h100): two attention sites of different lengths, causal, bf16,
forward and backward for a few steps, and one compiled function whose attention is counted but, with
this clock, not timed."""

import torch
import torch.nn.functional as F

STEPS = 4


def attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def attend_compiled(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main() -> None:
    torch.manual_seed(0)
    device, dtype = "cuda", torch.bfloat16
    short = [torch.randn(2, 8, 1000, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3)]
    long = [torch.randn(1, 8, 3000, 128, device=device, dtype=dtype, requires_grad=True) for _ in range(3)]
    compiled = torch.compile(attend_compiled)
    for _ in range(STEPS):
        attend(*short).sum().backward()
        F.scaled_dot_product_attention(*long).float().sum().backward()
        with torch.no_grad():
            compiled(*short)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
