"""NVML's two power readings and the SM clock, idle and then under load, every 10 ms for 1.5 s each.

    python3 scripts/perf_experiments/nvml_power_fields.py

``nvmlDeviceGetPowerUsage`` is the board's average over the last second on an H100; NVML's instant field
(``NVML_FI_DEV_POWER_INSTANT``) is the power now. A timing of about 100 ms after an idle moment reads the first mostly
from the idle moment, which is why profiler.measure.gpu_state reads the second where the GPU has it (docs/perf-notes.md,
"Gluon forward, round 21", item 1). The load is a loop of 8192³ bf16 matmuls. Prints four samples of each phase: the
first, a quarter, half way and the last.
"""

import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from profiler.measure.gpu_state import instant_power, nvml, nvml_handle  # noqa: E402


def main() -> None:
    lib = nvml()
    if lib is None:
        raise SystemExit("NVML is not here: install nvidia-ml-py on a machine with an NVIDIA driver")
    handle = nvml_handle(lib, torch.device("cuda"))
    power, _ = instant_power(lib, handle)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for phase in ("idle", "load"):
        start, rows = time.time(), []
        while time.time() - start < 1.5:
            if phase == "load":
                for _ in range(20):
                    a @ a
            rows.append((lib.nvmlDeviceGetClockInfo(handle, lib.NVML_CLOCK_SM), power(),
                         lib.nvmlDeviceGetPowerUsage(handle) / 1e3))
            time.sleep(0.01)
        torch.cuda.synchronize()
        for i in (0, len(rows) // 4, len(rows) // 2, -1):
            clock, now, average = rows[i]
            print(f"{phase} clock MHz {clock}, instant {now:.0f} W, average {average:.0f} W")


if __name__ == "__main__":
    main()
