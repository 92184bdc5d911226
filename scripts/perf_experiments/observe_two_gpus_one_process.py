"""A model split over two GPUs in one process (as device_map="auto" makes it), observed with CUDA events:
each layer's attention on its own GPU, 100 steps of forward and backward. Before events were pooled per
device, a freed event of cuda:0 was recorded on a cuda:1 stream and the user's call raised."""

import sys
import tempfile

import torch
import torch.nn.functional as F

import profiler

out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp() + "/run"
tensors = [[torch.randn(1, 4, 256, 64, device=f"cuda:{d}", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)] for d in (0, 1)]
with profiler.observe(out=out, trace="none") as run:
    for _ in range(100):
        for q, k, v in tensors:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).float().sum().backward()
rows = run.results()
print(rows[["mode", "calls", "median_ms", "status"]].to_string())
print("calls", run.calls)
