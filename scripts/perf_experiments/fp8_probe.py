"""The fp8 forward's tile and V layout on the GPU (docs/perf-notes.md, "FP8 forward"): TFLOP/s of
kernels.flash_fwd_fp8 per variant, medians of do_bench over interleaved rounds, and the bf16 Gluon forward
of the same shape for scale; one JSON line per (variant, shape) on stdout.

    python scripts/perf_experiments/fp8_probe.py [ROUNDS] [tiles|gluon|gluon3b]

tiles (round 1): the tile (BLOCK_M, BLOCK_N, num_warps, num_stages) and V's memory order: "bhsd" (head_dim
contiguous, as Q and K) or "vt" (keys contiguous: the order fp8 wgmma reads its B operand in, K-major).
gluon (round 3): the Gluon fp8 forward of kernels/flash_fwd_hopper.py per configuration (GLUON_VARIANTS),
beside the Triton fp8 kernel, our bf16 Gluon forward and cuDNN's bf16 forward on the same values; each
variant's relative error against the Triton fp8 kernel's output (itself checked against the fp64 oracle by
tests/gpu/test_fp8_gpu.py) is in its line.
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
from kernels.flash_fwd_hopper import HopperConfig, hopper_forward
from kernels.reference import relative_error
from kernels.sdpa import sdpa_cudnn

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


# Round 3's Gluon configurations, (block_n, stages, overlap, pingpong, consumers, persistent): FlashAttention-3's
# fp8 structure (ping-pong and intra-warpgroup overlap) first, then each of its parts alone, deeper rings,
# wider key tiles, a third consumer, one program per tile. With overlap, 256-key tiles or a third consumer
# spill 1.2-4.4 KB (ptxas -v for sm_90a, scripts/perf_experiments/gluon_compile_cpu.py's stand-in), so those
# run without it.
GLUON_VARIANTS = {
    "pp+ov": HopperConfig(128, 2, True, True, 2, True),
    "ov": HopperConfig(128, 2, True, False, 2, True),
    "pp": HopperConfig(128, 2, False, True, 2, True),
    "pp+ov st3": HopperConfig(128, 3, True, True, 2, True),
    "pp n256": HopperConfig(256, 2, False, True, 2, True),
    "pp+ov tiles": HopperConfig(128, 2, True, True, 2, False),
    "pp 3wg": HopperConfig(128, 2, False, True, 3, True),
    "pp st3": HopperConfig(128, 3, False, True, 2, True),
}
# Compiled, not timed (gluon_compile_cpu.py fp8 shows why): with overlap, 256-key tiles or a third consumer spill;
# three consumers with 256-key tiles need more registers than a thread of theirs has and do not compile.
NOT_TIMED = {
    "pp+ov n256": HopperConfig(256, 2, True, True, 2, True),
    "pp+ov 3wg": HopperConfig(128, 2, True, True, 3, True),
    "pp 3wg n256": HopperConfig(256, 2, False, True, 3, True),
}
# Round 3b, after round 3a's file (reports/perf-h100/fp8_probe_round3_gluon.jsonl): around its two best, three
# consumers taking turns and 256-key tiles, with one program per tile, deeper rings, and no turns (three
# consumers with 256-key tiles need more than their 160 registers: ptxas refuses them).
GLUON_VARIANTS_3B = {
    "pp 3wg": HopperConfig(128, 2, False, True, 3, True),
    "pp n256": HopperConfig(256, 2, False, True, 2, True),
    "3wg": HopperConfig(128, 2, False, False, 3, True),
    "pp 3wg st3": HopperConfig(128, 3, False, True, 3, True),
    "pp 3wg tiles": HopperConfig(128, 2, False, True, 3, False),
    "pp n256 tiles": HopperConfig(256, 2, False, True, 2, False),
    "n256": HopperConfig(256, 2, False, False, 2, True),
    "pp n256 st3": HopperConfig(256, 3, False, True, 2, True),
}


def gluon_variants(x, causal, configs=GLUON_VARIANTS):
    """Round 3: each Gluon fp8 configuration, the Triton fp8 kernel, and bf16 ours and cuDNN's; the values and
    a reference output (the Triton fp8 kernel's) for the error column."""
    (q8, dq), (k8, dk), (v8, dv) = (quantize_fp8(t) for t in x)
    v8 = keys_contiguous_layout(v8)
    scale = x[0].shape[-1] ** -0.5
    calls = {"bf16 gluon": functools.partial(flash_attention, *x, causal=causal),
             "bf16 cudnn": functools.partial(sdpa_cudnn, *x, causal=causal),
             "fp8 triton": functools.partial(flash_attention_fp8, q8, k8, v8, dq, dk, dv, causal=causal, gluon=False),
             "fp8 gluon default": functools.partial(flash_attention_fp8, q8, k8, v8, dq, dk, dv, causal=causal)}
    for name, config in configs.items():
        calls[f"fp8 gluon {name}"] = functools.partial(hopper_forward, q8, k8, v8, causal, scale, config,
                                                       descales=(dq, dk, dv), out_dtype=torch.bfloat16)
    return calls, calls["fp8 triton"]()


def main(rounds: int = 3, which: str = "tiles") -> None:
    if which not in ("tiles", "gluon", "gluon3b"):
        raise SystemExit("fp8_probe.py: 'tiles', 'gluon' or 'gluon3b'; round 2's loop options were measured at commit "
                         "863d343 (reports/perf-h100/fp8_probe_round2_loop.jsonl) and removed")
    errors = {}
    for batch, heads, seq, dim in SHAPES:
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(0)
            x = [torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, generator=g)
                 for _ in range(3)]
            flops = 4 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
            if which.startswith("gluon"):
                configs = GLUON_VARIANTS_3B if which == "gluon3b" else GLUON_VARIANTS
                calls, reference = gluon_variants(x, causal, configs)
                for name, call in calls.items():
                    try:
                        out = call()
                        out = out[0] if isinstance(out, tuple) else out
                        errors[(name.removeprefix("fp8 "), causal)] = relative_error(out, reference)
                    except Exception as err:  # a configuration that does not compile or fit: say so, go on
                        print(json.dumps({"variant": name, "error": str(err).splitlines()[0][:200]}), flush=True)
            else:
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
                # gluon modes: the error against the Triton fp8 kernel's output, fp8 rows only (bf16 ones would
                # compare bf16 attention with fp8); round 3a's file, from commit 8f60f0a, has it as
                # rel_err_vs_oracle, a bare number for the Triton line and {"vs_fp8_triton": ...} for the others
                error = ({"rel_err_vs_fp8_triton": err if name.startswith("fp8") else None} if which.startswith("gluon")
                         else {"rel_err_vs_oracle": err})
                print(json.dumps({"variant": name, "B": batch, "H": heads, "N": seq, "D": dim, "causal": causal,
                                  "ms": med, "tflops": flops / (med * 1e-3) / 1e12, **error}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2] if len(sys.argv) > 2 else "tiles")
