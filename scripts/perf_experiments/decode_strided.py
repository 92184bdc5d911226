"""Split-KV tile assignment on a GPU: contiguous chunks against strided tiles (split s takes tiles
s, s + splits, ...), each timed three times over (profiler.measure.timing: CUDA-graph replays, clean
L2 flush), beside cuDNN. One JSON line per measurement; docs/perf-notes.md ("Decode") reads them.

    python scripts/perf_experiments/decode_strided.py --out decode_strided.jsonl
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json

import torch

from attention_core import split_kv
from attention_core.shape import Shape
from kernels import flash_decode
from profiler.measure.timing import measure
from profiler.model.fused import compulsory_bytes
from profiler.registry import REGISTRY


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.out, "w") as out:
        shapes = [(h, b, nq, nk) for h in (32, 64) for b in (1, 8) for nq in (1, 4) for nk in (32768, 131072)]
        for (heads, b, nq, nk), repeat in itertools.product(shapes, range(3)):
            shape = Shape(b, heads, nq, nk, 128, "bf16", kv_heads=8)
            q = torch.randn(b, heads, nq, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, 8, nk, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            ref = REGISTRY["sdpa_cudnn"].fn(q, k, v)
            plan = split_kv.plan(b, 8, heads // 8, nq, nk)
            ours = functools.partial(flash_decode.flash_decode_forward, q, k, v, False, 128 ** -0.5, plan)
            for name, fn in (("chunks", functools.partial(ours, strided=False)),
                             ("strided", functools.partial(ours, strided=True)),
                             ("sdpa_cudnn", functools.partial(REGISTRY["sdpa_cudnn"].fn, q, k, v))):
                err = ((fn()[0] if name != "sdpa_cudnn" else fn()).float() - ref.float()).norm() / ref.float().norm()
                ms = measure(fn, "cuda", rep_ms=100, graph=True).median_ms
                rec = {"heads": heads, "batch": b, "seq_q": nq, "seq_kv": nk, "repeat": repeat, "variant": name,
                       "splits": plan.splits, "us": ms * 1e3, "gbps": compulsory_bytes(shape) / ms / 1e6,
                       "err_vs_cudnn": err.item()}
                out.write(json.dumps(rec) + "\n")
                print(f"H{heads} B{b} Nq{nq} Nkv{nk} #{repeat} {name:10s} {rec['us']:8.1f} us {rec['gbps']:6.0f} GB/s "
                      f"err {rec['err_vs_cudnn']:.1e}", flush=True)
            q = k = v = ref = ours = fn = None
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
