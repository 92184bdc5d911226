"""Does NVML's sampling thread (profiler.measure.gpu_state) slow what it watches? Host-bound timings, with and without.

    python3 scripts/perf_experiments/nvml_overhead.py

``measure`` (profiler.measure.timing) reads the SM clock and board power from a thread every 2 ms while do_bench runs.
A kernel shorter than Python's launch is timed by the host's loop, where a second thread taking the interpreter's lock
could show. So each case here is timed ``ROUNDS`` times (default 7) with ``ATTN_NVML=0`` and without, interleaved, and
the medians compared. The cases are the shortest calls ``bench`` times: split-KV decode at batch 1
(kernels.flash_fwd routes it to kernels.flash_decode; bf16, 32 query heads over 8 K/V heads, head_dim 128, 4096
cached keys) eagerly and as CUDA-graph replays, and a 128-row forward (kernels.flash_fwd). Prints one line a case
and the clock and power NVML read.
"""

import os
import statistics
import sys
from functools import partial

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from kernels.flash_fwd import flash_attention_forward  # noqa: E402
from profiler.measure.gpu_state import nvml  # noqa: E402
from profiler.measure.timing import measure  # noqa: E402


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "7"))
    print(torch.cuda.get_device_name(), torch.__version__, "pynvml:", "imports" if nvml() else "missing", flush=True)
    dev, bf16 = "cuda", torch.bfloat16
    q = torch.randn(1, 32, 1, 128, device=dev, dtype=bf16)
    k, v = (torch.randn(1, 8, 4096, 128, device=dev, dtype=bf16) for _ in range(2))
    qf, kf, vf = (torch.randn(1, 8, 128, 64, device=dev, dtype=bf16) for _ in range(3))
    cases = {
        "decode eager": (partial(flash_attention_forward, q, k, v, False, 128 ** -0.5), False),
        "decode graph": (partial(flash_attention_forward, q, k, v, False, 128 ** -0.5), True),
        "fwd N128": (partial(flash_attention_forward, qf, kf, vf, True, 64 ** -0.5), False),
    }
    for name, (fn, graph) in cases.items():
        fn()
        times = {"off": [], "on": []}
        clock, power = [], []
        for _ in range(rounds):
            for switch in ("off", "on"):
                os.environ["ATTN_NVML"] = "0" if switch == "off" else "1"
                timing = measure(fn, dev, graph=graph)
                times[switch].append(timing.median_ms)
                if switch == "on":
                    clock.append(timing.sm_clock_mhz)
                    power.append(timing.power_w)
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        read = (f"{statistics.median(clock):.0f} MHz, {statistics.median(power):.0f} W" if None not in clock
                else "nothing read")
        print(f"{name}: {off * 1e3:.2f} us without the sampler, {on * 1e3:.2f} us with it (with/without "
              f"{on / off:.3f}; rounds without {min(times['off']) * 1e3:.2f}-{max(times['off']) * 1e3:.2f} us); "
              f"NVML: {read}", flush=True)


if __name__ == "__main__":
    main()
