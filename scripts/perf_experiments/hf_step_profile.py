"""Where a transformers step's time goes, sdpa against ours (issue 39): GPU kernels and host time.

    python scripts/perf_experiments/hf_step_profile.py [context] [phase ...]   # default 4096 train decode

Builds the models of scripts/hf_vs_sdpa.py (Llama-3-8B geometry, 2 layers, bf16, shared weights), runs
each phase twice to warm up, then per implementation: the torch profiler's CUDA kernel time summed by
kernel (the top 12, and the total beside the step's wall time), and for ours cProfile's top host
functions of one step by cumulative time (what our attention call costs on the CPU).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import hf_vs_sdpa  # noqa: E402


def kernel_table(step) -> tuple[float, list[tuple[str, float, int]]]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    total, by_name, count = 0.0, defaultdict(float), defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name.split("(")[0][:90]
            by_name[name] += e.device_time_total / 1e3
            count[name] += 1
            total += e.device_time_total / 1e3
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
    return total, [(n, t, count[n]) for n, t in top]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("context", nargs="?", type=int, default=4096)
    p.add_argument("phases", nargs="*", default=["train", "decode"])
    a = p.parse_args()
    args = hf_vs_sdpa.parse_args(["--out", "/tmp/hf_step_profile", "--context", str(a.context), "--layers", "2"])
    sdpa, ours = hf_vs_sdpa.build_models(args)
    ids = torch.randint(0, sdpa.config.vocab_size, (1, a.context), device="cuda")
    for phase in a.phases:
        for name, model in (("sdpa", sdpa), ("ours", ours)):
            step = hf_vs_sdpa.make_steps(model, ids)[phase]
            step(), step()
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) * 1e3
            total, top = kernel_table(step)
            print(f"== {phase} N={a.context} {name}: wall {wall:.2f} ms, CUDA kernels {total:.2f} ms")
            for kernel, ms, n in top:
                print(f"   {ms:8.3f} ms  x{n:<3d} {kernel}")
            if name == "ours":
                prof = cProfile.Profile()
                prof.enable()
                step()
                torch.cuda.synchronize()
                prof.disable()
                out = io.StringIO()
                pstats.Stats(prof, stream=out).strip_dirs().sort_stats("cumulative").print_stats(
                    r"hf_attention|flash_|hopper_common|_checks|_launch|_layout|split_kv", 25)  # our modules
                print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    main()
