"""Check the Gluon Hopper forward and time its variants against cuDNN and our portable kernel.

Issue 16 (docs/perf-notes.md, "Gluon forward"). Run on an H100/H200:

    python scripts/perf_experiments/gluon_fwd_variants.py --check          # fp64 oracle, odd shapes
    python scripts/perf_experiments/gluon_fwd_variants.py --out variants.jsonl [--seq 8192]
    ... --dim 64 --causal true --seq 2048 4096 --variants "128,2,0,0,2,0;64,2,0,1,2,0"

Each variant is a kernels.flash_fwd_hopper.HopperConfig for hopper_forward; its rows are named
gluon(block_n, stages, overlap, pingpong, consumers, persistent), as in reports/perf-h100.
Timing: median of triton.testing.do_bench (L2 flushed between calls); TFLOP/s at 4·B·H·N²·D
(halved when causal), the cost model's forward FLOPs (profiler/model/fused.py).
One JSON line per (shape, variant), written as it is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import sys

import torch
import torch.nn.functional as F
import triton

from kernels.flash_fwd import flash_attention_forward
from kernels.flash_fwd_hopper import HopperConfig, hopper_forward
from kernels.reference import attention_oracle

SHAPES = [  # (batch, heads, seq, head_dim): the bench grid's shapes at a fixed token count
    (4, 32, 8192, 64),
    (2, 16, 8192, 128),
]
VARIANTS = {  # by head_dim
    64: [HopperConfig(block_n=128, stages=2, overlap=False, pingpong=False, consumers=3, persistent=False),
         HopperConfig(block_n=128, stages=2, overlap=False, pingpong=False, consumers=3, persistent=True),
         HopperConfig(block_n=128, stages=2, overlap=False, pingpong=True, consumers=3, persistent=True)],
    128: [HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=2, persistent=False),
          HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=2, persistent=True),
          HopperConfig(block_n=128, stages=2, overlap=True, pingpong=False, consumers=2, persistent=True)],
}


def check() -> int:
    """Gluon forward against the fp64 oracle on odd shapes (every variant on a few); returns the
    number of failures."""
    failures = 0
    torch.manual_seed(0)
    cases = [(d, t, c, n, g, None) for d, t, c, n, g in itertools.product(
        (64, 128), (torch.float16, torch.bfloat16), (False, True),
        [(1, 1), (77, 77), (128, 128), (1000, 1000), (300, 1000), (1000, 300)], (1, 2))]
    cases += [(d, torch.float16, c, n, 2, variant) for d in VARIANTS for variant in VARIANTS[d]
              for c, n in [(True, (77, 77)), (True, (1000, 300)), (False, (1000, 1000))]]
    for head_dim, dtype, causal, (seq_q, seq_kv), group, variant in cases:
        heads = 4
        q = torch.randn(2, heads, seq_q, head_dim, device="cuda", dtype=dtype)
        k = torch.randn(2, heads // group, seq_kv, head_dim, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        scale = head_dim ** -0.5
        o, lse = hopper_forward(q, k, v, causal, scale, variant)
        ref, ref_lse = attention_oracle(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                        causal=causal, sm_scale=scale, return_lse=True)
        err = (o.double().cpu() - ref).abs().max().item()
        lse_err = (lse.double().cpu() - ref_lse).abs().max().item()
        tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
        ok = err < tol and lse_err < 1e-3
        failures += not ok
        label = tuple(variant) if variant else "default"
        print(f"{'ok  ' if ok else 'FAIL'} D{head_dim} {str(dtype)[6:]} causal={causal} Nq={seq_q} Nkv={seq_kv} "
              f"group={group} {label}: max|o-ref|={err:.2e} max|lse-ref|={lse_err:.2e}", flush=True)
    print(f"{failures} failures", flush=True)
    return failures


def parse_variants(text: str) -> list[HopperConfig]:
    """'block_n,stages,overlap,pingpong,consumers,persistent;...' (0/1 flags) as HopperConfigs."""
    return [HopperConfig(*(int(x) if i < 2 or i == 4 else bool(int(x)) for i, x in enumerate(v.split(","))))
            for v in text.split(";") if v]


def time_variants(out: str, seqs: list[int], dtypes: list[str], dims: list[int], causals=(False, True)) -> None:
    with open(out, "a") as f:
        shapes = [shape for shape in SHAPES if shape[3] in dims]
        for (batch, heads, _, head_dim), seq, dtype, causal in itertools.product(
                shapes, seqs, [getattr(torch, d) for d in dtypes], causals):
            batch = max(1, batch * 8192 // seq)
            q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=dtype) for _ in range(3))
            flops = 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
            scale = head_dim ** -0.5
            runs = {
                "cudnn": functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
                "triton": functools.partial(flash_attention_forward, q, k, v, causal=causal, sm_scale=scale,
                                            gluon=False),
            }
            for variant in VARIANTS[head_dim]:
                runs[f"gluon{tuple(variant)}"] = functools.partial(hopper_forward, q, k, v, causal, scale, variant)
            for name, fn in runs.items():
                cudnn = torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.CUDNN_ATTENTION])
                with cudnn if name == "cudnn" else contextlib.nullcontext():
                    ms = triton.testing.do_bench(fn, warmup=50, rep=300)
                row = dict(batch=batch, heads=heads, seq=seq, head_dim=head_dim, dtype=str(dtype)[6:],
                           causal=causal, impl=name, ms=ms, tflops=flops / ms / 1e9)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{name:>28} B{batch} H{heads} N{seq} D{head_dim} {row['dtype']} causal={causal}: "
                      f"{row['tflops']:.0f} TFLOP/s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--seq", type=int, nargs="+", default=[8192])
    parser.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--dim", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--causal", choices=["true", "false", "both"], default="both")
    parser.add_argument("--variants", help="replace each --dim's variants: 'block_n,stages,overlap,pingpong,"
                        "consumers,persistent;...' with 0/1 flags")
    args = parser.parse_args()
    if args.variants:
        for dim in args.dim:
            VARIANTS[dim] = parse_variants(args.variants)
    if args.check:
        return 1 if check() else 0
    time_variants(args.out, args.seq, args.dtype, args.dim,
                  {"true": (True,), "false": (False,), "both": (False, True)}[args.causal])
    return 0


if __name__ == "__main__":
    sys.exit(main())
