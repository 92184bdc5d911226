"""Host time of the Gluon backward's call, on the GPU machine (round 10 of the host time: its stats in one launch).

    PYTHONPATH=. python3 scripts/perf_experiments/bwd_host_probe.py [--calls 300] [--rounds 7]

BSHD views of Llama-3-8B attention (32 query heads, 8 K/V heads, head_dim 128, bf16, causal) at 256 tokens, small
enough that the GPU never holds the host back, so the wall time of many calls over their number is what a call
costs the host. Interleaved rounds, the median per arm:

- "one launch": kernels.flash_bwd_hopper.hopper_backward, which computes delta with the stats (backward_stats,
  through the launch cache). Round 10 timed it against the path before it, delta from kernels.flash_bwd's
  preprocess and the stats from four torch ops (docs/perf-notes.md, "Host time, round 10"); that path has
  since been removed from hopper_backward;
- and, for scale, a whole forward and backward through autograd: ours (flash_attention) and sdpa's; then
  cProfile over ours (``--profile`` rows by cumulative time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kernels.flash_attention import flash_attention
from kernels.flash_bwd_hopper import hopper_backward
from kernels.flash_fwd import flash_attention_forward

ROOT = Path(__file__).resolve().parents[2]


def relative_paths(text: str) -> str:
    """cProfile's file names without this machine's folders: the checkout's relative to its root, installed
    packages' relative to their site-packages, so a committed profile names no path of the GPU machine."""
    text = text.replace(str(ROOT) + os.sep, "")
    return re.sub(r"\S*[/\\]site-packages[/\\]", "site-packages/", text)


def bshd(heads, seq, requires_grad=False):
    x = torch.randn(1, seq, heads, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    return x.requires_grad_(requires_grad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", type=int, default=30, help="cProfile rows of ours fwd+bwd (0: none)")
    args = parser.parse_args()
    seq, scale = 256, 128 ** -0.5
    q, k, v, do = bshd(32, seq), bshd(8, seq), bshd(8, seq), bshd(32, seq)
    o, lse = flash_attention_forward(q, k, v, causal=True)
    qg, kg, vg = bshd(32, seq, True), bshd(8, seq, True), bshd(8, seq, True)

    def ours_autograd():
        flash_attention(qg, kg, vg, causal=True).backward(do)

    def sdpa_autograd():
        F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True).backward(do)

    arms = {
        "one launch": lambda: hopper_backward(do, q, k, v, o, lse, True, scale),
        "ours fwd+bwd (autograd)": ours_autograd,
        "sdpa fwd+bwd (autograd)": sdpa_autograd,
    }
    for call in arms.values():  # compile, fill every cache
        for _ in range(5):
            call()
    times = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, call in arms.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.calls):
                call()
            times[name].append((time.perf_counter() - start) / args.calls * 1e6)
            torch.cuda.synchronize()
    print(json.dumps({"device": torch.cuda.get_device_name(), "calls": args.calls, "rounds": args.rounds,
                      "host_us_median": {n: round(statistics.median(t), 1) for n, t in times.items()},
                      "host_us_rounds": {n: [round(x, 1) for x in t] for n, t in times.items()}}, indent=1))
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            ours_autograd()
        profile.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.profile)
        print(relative_paths(text.getvalue()))


if __name__ == "__main__":
    main()
