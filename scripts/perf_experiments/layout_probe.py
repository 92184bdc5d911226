"""Our kernels and cuDNN (through SDPA) on each memory layout a model hands them (issue 39).

    python scripts/perf_experiments/layout_probe.py        # writes $OUT/layout_probe.jsonl (or ./layout_probe.jsonl)
    ROUNDS=3 python scripts/perf_experiments/layout_probe.py

Per shape, layout (contiguous BHSD, BSHD as transformers views it, a packed QKV projection's slices) and
pass (forward; backward alone, from saved forward outputs), the path our kernel takes
(kernels.flash_fwd.forward_path / kernels.flash_bwd.backward_path) and the median time of
``triton.testing.do_bench`` for ours and for SDPA's cuDNN backend on the very same tensors, in ROUNDS
interleaved rounds; ``ours_over_cudnn`` is a speed ratio (cuDNN's time over ours: above 1, ours is
faster). TFLOP/s count 4·B·H·Nq·Nkv·D forward (x0.5 causal, x2.5 backward), as the bench.
"""

from __future__ import annotations

import json
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from kernels.flash_attention import flash_attention_with_lse
from kernels.flash_bwd import backward_path, flash_attention_backward
from kernels.flash_fwd import forward_path

# (batch, heads, kv_heads, seq, head_dim, causal): the Llama-3-8B rows of issue 39 and the D64 grid's.
SHAPES = [(1, 32, 8, 4096, 128, True), (1, 32, 8, 16384, 128, True), (1, 32, 8, 32768, 128, True),
          (4, 32, 32, 8192, 64, False), (4, 32, 32, 8192, 64, True), (2, 16, 16, 8192, 128, False)]
LAYOUTS = ("bhsd", "bshd", "packed")


def make(layout, batch, heads, kv_heads, seq, head_dim):
    g = torch.Generator(device="cuda").manual_seed(seq)
    if layout == "packed":
        qkv = torch.randn(batch, seq, heads + 2 * kv_heads, head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
        return (qkv[:, :, :heads].transpose(1, 2), qkv[:, :, heads:heads + kv_heads].transpose(1, 2),
                qkv[:, :, heads + kv_heads:].transpose(1, 2))
    shapes = [(batch, heads, seq, head_dim), (batch, kv_heads, seq, head_dim), (batch, kv_heads, seq, head_dim)]
    if layout == "bhsd":
        return tuple(torch.randn(s, device="cuda", dtype=torch.bfloat16, generator=g) for s in shapes)
    return tuple(torch.randn(s[0], s[2], s[1], s[3], device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
                 for s in shapes)


def cudnn_fns(q, k, v, causal):
    gqa = q.shape[1] != k.shape[1]
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]

    def fwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=gqa)

    with torch.no_grad():
        fwd()  # may raise: cuDNN does not take every layout
    o = fwd()
    do = torch.randn_like(o)

    def bwd():
        torch.autograd.grad(o, leaves, do, retain_graph=True)

    return lambda: fwd().detach(), bwd


def ours_fns(q, k, v, causal):
    scale = q.shape[-1] ** -0.5
    o, lse = flash_attention_with_lse(q, k, v, causal=causal, sm_scale=scale)
    do = torch.randn_like(o)
    return (lambda: flash_attention_with_lse(q, k, v, causal=causal, sm_scale=scale),
            lambda: flash_attention_backward(do, q, k, v, o, lse, causal, scale))


def main():
    rounds = int(os.environ.get("ROUNDS", "3"))
    out = os.path.join(os.environ.get("OUT", "."), "layout_probe.jsonl")
    rows = []
    for batch, heads, kv_heads, seq, head_dim, causal in SHAPES:
        flops = 4 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
        for layout in LAYOUTS:
            q, k, v = make(layout, batch, heads, kv_heads, seq, head_dim)
            fns = {"ours": ours_fns(q, k, v, causal)}
            try:
                fns["cudnn"] = cudnn_fns(q, k, v, causal)
            except RuntimeError as error:
                print(f"cudnn unavailable for {layout}: {str(error).splitlines()[0][:120]}")
            paths = {"fwd": forward_path(q, k, v, causal), "bwd": backward_path(q, k, v)}
            for p, pass_ in enumerate(("fwd", "bwd")):
                times = {name: [] for name in fns}
                for _ in range(rounds):
                    for name, f in fns.items():
                        times[name].append(do_bench(f[p], warmup=25, rep=100))
                med = {name: statistics.median(t) for name, t in times.items()}
                work = flops * (2.5 if pass_ == "bwd" else 1.0)
                row = dict(batch=batch, heads=heads, kv_heads=kv_heads, seq=seq, head_dim=head_dim, causal=causal,
                           layout=layout, pass_=pass_, path=paths[pass_], ms=med, times_ms=times,
                           tflops={n: work / (m * 1e-3) / 1e12 for n, m in med.items()},
                           ours_over_cudnn=(med["cudnn"] / med["ours"]) if "cudnn" in med else None,
                           device=torch.cuda.get_device_name())
                rows.append(row)
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                speed = " ".join(f"{n} {t:.0f}" for n, t in row["tflops"].items())
                ratio = f"{row['ours_over_cudnn']:.3f}x cuDNN" if row["ours_over_cudnn"] else ""
                print(f"B{batch} H{heads}/{kv_heads} N{seq} D{head_dim} {'causal' if causal else 'full'} {layout} "
                      f"{pass_} [{paths[pass_]}]: TFLOP/s {speed} {ratio}", flush=True)


if __name__ == "__main__":
    main()
