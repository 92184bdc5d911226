"""Host time of one attention call as a transformers model makes it, on the GPU machine: ours and sdpa.

    PYTHONPATH=. python3 scripts/perf_experiments/host_time_probe.py [--calls 300] [--profile 25]

A small transformers model keeps the GPU waiting on the host (docs/perf-notes.md, "Our kernels inside a
transformers model"), so what our call costs in Python before its launch returns is part of the model's
time. This times, for BSHD views of Llama-3-8B attention (32 query heads, 8 K/V heads, head_dim 128,
bf16), the host side of a prefill call (256 tokens: small enough that the GPU never holds the host back)
and of a decode step (one query, 4096 cached keys):

- sdpa: torch's scaled_dot_product_attention with enable_gqa, the call transformers' sdpa function makes;
- ours through kernels.hf_attention (what a model runs), through kernels.flash_attention, and the
  kernel launch alone (the launch of kernels.flash_fwd_hopper with descriptors built beforehand).

Each figure is the median over rounds of (wall time of ``--calls`` calls) / calls, with a
synchronize before each round only. Then cProfile over the hf_attention calls prints the functions
taking the most cumulative time (``--profile`` rows), so a change can be aimed at what costs most.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F

from kernels import _launch
from kernels.flash_attention import flash_attention
from kernels.hf_attention import STATS, triton_flash_attention_forward


class Layer(torch.nn.Module):
    is_causal = True


def bshd(batch, heads, seq, head_dim):
    """A (batch, heads, seq, head_dim) view of (batch, seq, heads, head_dim) storage, as transformers makes."""
    return torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=torch.bfloat16).transpose(1, 2)


def memo(on: bool) -> None:
    """Every memo of a layout (routes, launch plans, compiled kernels: kernels._launch.ENABLED) on or off."""
    _launch.ENABLED = on


def host_us(fn, calls, rounds=5):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--profile", type=int, default=25)
    args = parser.parse_args()

    layer = Layer()
    cases = {
        "prefill N256": (bshd(1, 32, 256, 128), bshd(1, 8, 256, 128), bshd(1, 8, 256, 128), True),
        "decode Nkv4096": (bshd(1, 32, 1, 128), bshd(1, 8, 4096, 128), bshd(1, 8, 4096, 128), False),
    }
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, host time per call (us), BSHD views, bf16")
    profiles = {}
    with torch.inference_mode():
        for name, (q, k, v, causal) in cases.items():
            sdpa = host_us(partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal, enable_gqa=True),
                           args.calls)
            ours_hf = host_us(partial(triton_flash_attention_forward, layer, q, k, v, None), args.calls)
            ours = host_us(partial(flash_attention, q, k, v, causal=causal), args.calls)
            memo(False)  # the same calls with every check, route and launch done afresh: A/B on one machine
            ours_hf_off = host_us(partial(triton_flash_attention_forward, layer, q, k, v, None), args.calls)
            ours_off = host_us(partial(flash_attention, q, k, v, causal=causal), args.calls)
            memo(True)
            print(f"{name}: sdpa {sdpa:.1f}, ours via hf_attention {ours_hf:.1f} (without the memos "
                  f"{ours_hf_off:.1f}), via flash_attention {ours:.1f} ({ours_off:.1f}); paths {dict(STATS.paths)}")
            STATS.reset()
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.calls):
                triton_flash_attention_forward(layer, q, k, v, None)
            profile.disable()
            torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(profile, stream=text).strip_dirs().sort_stats("cumulative").print_stats(args.profile)
            profiles[name] = text.getvalue()
    for name, text in profiles.items():
        print(f"\n## cProfile, {args.calls} calls of {name} through kernels.hf_attention\n{text}")


if __name__ == "__main__":
    main()
