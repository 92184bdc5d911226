"""Time the Gluon backward's last pass (kernels.flash_bwd_hopper._dq_convert) alone, per buffer order.

    python3 scripts/perf_experiments/dq_convert_probe.py

The fp32 dQ buffer is read once and dq written in bf16: 6 bytes per element. FRAG False reads (rows,
columns) tiles, True the fragment-ordered tiles of BackwardConfig.dq_frag in 32-byte pieces (docs/perf-notes.md,
"Gluon backward", round 11). Prints microseconds (triton.testing.do_bench median) and the bandwidth that is.
(Round 11 also timed reading each tile in its own order and permuting it in registers: 1.5% slower at D64, 6% at
D128.)
"""
import os
import sys
from functools import partial

sys.path.insert(0, os.getcwd())
import torch
import triton

from kernels import flash_bwd_hopper as HB

print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
for B, H, N, D in ((8, 16, 4096, 128), (4, 16, 8192, 128), (2, 16, 16384, 128), (4, 32, 8192, 64)):
    block = 64
    q_pad = triton.cdiv(N, block) * block
    acc = torch.randn(B, H, q_pad, D, device="cuda")
    dq = torch.empty(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    line = []
    for frag in (False, True):
        run = partial(HB._dq_convert[(q_pad // block, B * H)], acc, dq, *dq.stride()[:3], 0.5, H, N, q_pad,
                      HEAD_DIM=D, BLOCK=block, FRAG=frag)
        us = triton.testing.do_bench(run, warmup=50, rep=300) * 1e3
        line.append(f"frag {frag}: {us:7.1f} us {6 * acc.numel() / us / 1e3:6.0f} GB/s")
    print(f"B{B} H{H} N{N} D{D}  " + "  ".join(line), flush=True)
