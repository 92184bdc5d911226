"""Tune the split-KV decode forward (kernels/flash_decode.py) on a GPU, beside SDPA's backends.

    python scripts/perf_experiments/decode_sweep.py --out decode_sweep.jsonl

For each decode shape of issue 15 (Llama-3 GQA heads, bf16, B in {1, 8, 64}, Nq in {1, 4}, Nkv in
{4k, 32k, 128k}) it times our kernel under each variant (keys per tile, warps and stages, how many
programs the split aims for) and each SDPA backend with enable_gqa, with do_bench (median, L2
flushed, replaying a CUDA graph of each call so Python's launch cost stays out), and writes one
JSON line per measurement: achieved GB/s at the model's compulsory bytes
and that over the measured copy bandwidth. docs/perf-notes.md ("Decode") reads the file.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json

import torch
import triton

from attention_core import split_kv
from attention_core.shape import Shape
from kernels import flash_decode
from profiler.measure.ceilings import measure_ceilings
from profiler.measure.timing import graphed
from profiler.model.fused import compulsory_bytes
from profiler.registry import REGISTRY

PRESETS = {"llama3-8b": (32, 8), "llama3-70b": (64, 8)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", default="1,8,64")
    parser.add_argument("--seq-q", default="1,4")
    parser.add_argument("--seq-kv", default="4096,32768,131072")
    parser.add_argument("--presets", default="llama3-8b")
    args = parser.parse_args()
    copy_gbps = measure_ceilings("cuda", ("bf16",)).copy_gbps
    print(f"measured copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    variants = [dict(block_n=bn, launch=launch, target=target)
                for bn, launch, target in itertools.product((64, 128), ((4, 2), (4, 3), (8, 3)),
                                                            (256, 512, 1024, 2048))]
    with open(args.out, "w") as out:
        for preset, b, nq, nk in itertools.product(args.presets.split(","), *(
                [int(x) for x in v.split(",")] for v in (args.batch, args.seq_q, args.seq_kv))):
            heads, kv_heads = PRESETS[preset]
            shape = Shape(b, heads, nq, nk, 128, "bf16", kv_heads=kv_heads)
            nbytes = compulsory_bytes(shape)
            q = torch.randn(b, heads, nq, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, kv_heads, nk, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            best = None
            for var in variants:
                split_kv.BLOCK_N, split_kv.TARGET_PROGRAMS = var["block_n"], var["target"]
                plan = split_kv.plan(b, kv_heads, heads // kv_heads, nq, nk)
                fn = functools.partial(flash_decode.flash_decode_forward, q, k, v, False, 128 ** -0.5, plan,
                                       var["launch"])
                err = ((fn()[0].float() - ref.float()).norm() / ref.float().norm()).item()
                ms = triton.testing.do_bench(graphed(fn), warmup=10, rep=50, return_mode="median")
                gbps = nbytes / ms / 1e6
                rec = {"preset": preset, "batch": b, "seq_q": nq, "seq_kv": nk, "impl": "triton_flash",
                       **var, "splits": plan.splits, "ms": ms, "gbps": gbps, "copy_fraction": gbps / copy_gbps,
                       "rel_err": err}
                out.write(json.dumps(rec) + "\n")
                if best is None or ms < best["ms"]:
                    best = rec
            for name in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"):
                try:
                    fn = functools.partial(REGISTRY[name].fn, q, k, v)
                    ms = triton.testing.do_bench(graphed(fn), warmup=10, rep=50, return_mode="median")
                    rec = {"preset": preset, "batch": b, "seq_q": nq, "seq_kv": nk, "impl": name, "ms": ms,
                           "gbps": nbytes / ms / 1e6, "copy_fraction": nbytes / ms / 1e6 / copy_gbps}
                except Exception as err:  # noqa: BLE001 - a backend that declines GQA: record why
                    rec = {"preset": preset, "batch": b, "seq_q": nq, "seq_kv": nk, "impl": name,
                           "error": str(err).splitlines()[0][:200]}
                out.write(json.dumps(rec) + "\n")
                print(f"  {name}: {rec.get('gbps', float('nan')):.0f} GB/s {rec.get('error', '')}", flush=True)
            print(f"{preset} B{b} Nq{nq} Nkv{nk}: best {best['gbps']:.0f} GB/s ({best['copy_fraction']:.2f} of copy) "
                  f"bn{best['block_n']} {best['launch']} target {best['target']} splits {best['splits']} "
                  f"err {best['rel_err']:.1e}", flush=True)
            q = k = v = ref = fn = None
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
