"""The fp8 forward's tile and V layout on the GPU (docs/perf-notes.md, "FP8 forward"): TFLOP/s of
kernels.flash_fwd_fp8 per variant, medians of do_bench over interleaved rounds, and the bf16 Gluon forward
of the same shape for scale; one JSON line per (variant, shape) on stdout.

    python scripts/perf_experiments/fp8_probe.py [ROUNDS] [tiles|loop]

tiles (round 1): the tile (BLOCK_M, BLOCK_N, num_warps, num_stages) and V's memory order: "bhsd" (head_dim
contiguous, as Q and K) or "vt" (keys contiguous: the order fp8 wgmma reads its B operand in, K-major).
Round 2's loop options (a split loop, kept; Triton's warp specialization and a sum over the rounded weights,
dropped) were measured at commit 863d343 with its `loop` mode: reports/perf-h100/fp8_probe_round2_loop.jsonl.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys

import torch
import triton

from kernels import flash_attention
from kernels.flash_fwd_fp8 import flash_attention_fp8, keys_contiguous_layout, quantize_fp8

TILES = [(128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 4, 3), (128, 64, 4, 3), (128, 128, 8, 2), (64, 128, 4, 3)]
SHAPES = [(4, 16, 8192, 128), (8, 32, 4096, 64)]  # B, H, N, D: 32768 tokens


def variants(x, causal):
    """Each variant's call on one shape: the bf16 Gluon forward, then the fp8 one per tile and V order."""
    (q8, dq), (k8, dk), (v8, dv) = (quantize_fp8(t) for t in x)
    vt = keys_contiguous_layout(v8)  # same values, keys contiguous
    calls = {"bf16 gluon": functools.partial(flash_attention, *x, causal=causal)}
    for tile in TILES:
        for name, v in (("bhsd", v8), ("vt", vt)):
            calls[f"fp8 {tile} {name}"] = functools.partial(flash_attention_fp8, q8, k8, v, dq, dk, dv,
                                                            causal=causal, tile=tile)
    return calls


def main(rounds: int = 3, which: str = "tiles") -> None:
    if which != "tiles":
        raise SystemExit("fp8_probe.py: only 'tiles' is left; round 2's loop options were measured at commit "
                         "863d343 (reports/perf-h100/fp8_probe_round2_loop.jsonl) and removed")
    errors = {}
    for batch, heads, seq, dim in SHAPES:
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(0)
            x = [torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, generator=g)
                 for _ in range(3)]
            flops = 4 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
            calls = variants(x, causal)
            times = {name: [] for name in calls}
            for _ in range(rounds):
                for name, call in calls.items():
                    try:
                        times[name].append(triton.testing.do_bench(call, warmup=25, rep=100))
                    except Exception as err:  # a tile that does not compile or fit: say so, go on
                        times[name].append(float("nan"))
                        print(json.dumps({"variant": name, "error": str(err).splitlines()[0][:200]}), flush=True)
            for name, ms in times.items():
                med = statistics.median(ms)
                err = errors.get((name.removeprefix("fp8 "), causal))
                print(json.dumps({"variant": name, "B": batch, "H": heads, "N": seq, "D": dim, "causal": causal,
                                  "ms": med, "tflops": flops / (med * 1e-3) / 1e12, "rel_err_vs_oracle": err}),
                      flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2] if len(sys.argv) > 2 else "tiles")
