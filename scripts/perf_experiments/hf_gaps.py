"""Where the GPU waits in one transformers prefill, sdpa against ours (issue 39): idle gaps between kernels.

    PYTHONPATH=. python3 scripts/perf_experiments/hf_gaps.py [context] [rounds]     # default 4096 9

The models of scripts/hf_vs_sdpa.py (Llama-3-8B geometry, 2 layers, bf16, shared weights). First the
prefill's time by CUDA events, interleaved over ``rounds`` rounds: sdpa, ours, and ours with the forward's
memos off (kernels._launch.ENABLED), medians. Then one prefill of each under the
torch profiler: the span from the first kernel's start to the last one's end, the time some kernel ran
(the union of their intervals), the idle rest, and the largest gaps with the kernels on either side.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import hf_vs_sdpa  # noqa: E402

from kernels import _launch  # noqa: E402


def memo(on: bool) -> None:
    _launch.ENABLED = on


def gaps(step) -> tuple[float, float, list[tuple[float, str, str]]]:
    """(span µs, busy µs, the 6 largest gaps as (µs, kernel before, kernel after))."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sorted(((e.time_range.start, e.time_range.end, e.name[:60]) for e in prof.events()
                      if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda k: k[0])
    busy, end, found = 0.0, kernels[0][0], []
    previous = ""
    for start, stop, name in kernels:
        if start > end:
            found.append((start - end, previous, name))
        busy += max(0.0, stop - max(start, end))
        if stop > end:
            end, previous = stop, name
    return end - kernels[0][0], busy, sorted(found, reverse=True)[:6]


def main():
    context = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    args = SimpleNamespace(tiny=False, layers=2, context=[context], batch=1)
    sdpa, ours = hf_vs_sdpa.build_models(args)
    ids = torch.randint(0, sdpa.config.vocab_size, (1, context), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(context))
    steps = {"sdpa": hf_vs_sdpa.make_steps(sdpa, ids)["prefill"], "ours": hf_vs_sdpa.make_steps(ours, ids)["prefill"]}
    for step in steps.values():
        step(), step()
    times = {"sdpa": [], "ours": [], "ours, memos off": []}
    for r in range(rounds):
        order = list(times) if r % 2 == 0 else list(times)[::-1]
        for name in order:
            memo(name != "ours, memos off")
            times[name].append(hf_vs_sdpa.timed(steps["sdpa" if name == "sdpa" else "ours"], torch.device("cuda")))
    memo(True)
    print(f"{torch.cuda.get_device_name()}, prefill N={context}, {rounds} rounds, CUDA events, median ms:")
    for name, values in times.items():
        print(f"  {name}: {statistics.median(values):.3f} (min {min(values):.3f})")
    for name, step in steps.items():
        span, busy, largest = gaps(step)
        print(f"{name}: span {span:.0f} µs, kernels running {busy:.0f} µs, idle {span - busy:.0f} µs; largest gaps:")
        for gap, before, after in largest:
            print(f"  {gap:7.1f} µs  after {before}  before {after}")


if __name__ == "__main__":
    main()
