"""The split-KV merge folded into the last split of each (batch, K/V head) against the second
(combine) kernel, beside cuDNN: each timed three times over, interleaved (profiler.measure.timing:
CUDA-graph replays, clean L2 flush). One JSON line per measurement; docs/perf-notes.md reads them.
``--check`` first compares both variants with the fp64 oracle on odd shapes (fp16 and bf16).

    python scripts/perf_experiments/decode_fold.py --check --out decode_fold.jsonl
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
from kernels.reference import TOLERANCE, attention_oracle, relative_error
from profiler.measure.timing import measure
from profiler.model.fused import compulsory_bytes
from profiler.registry import REGISTRY


def check() -> None:
    """Both variants against the fp64 oracle: odd Nkv, Nq 1 and 3, MQA and GQA, causal both."""
    for dtype, (nq, nk, kvh), causal in itertools.product(
            (torch.float16, torch.bfloat16), ((1, 1000, 8), (3, 4097, 1), (1, 33333, 8), (4, 12345, 2)),
            (False, True)):
        q = torch.randn(2, 32, nq, 128, device="cuda", dtype=dtype)
        k = torch.randn(2, kvh, nk, 128, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        ref = attention_oracle(q, k, v, causal=causal)
        plan = split_kv.plan(2, kvh, 32 // kvh, nq, nk)
        for fold in (False, True):
            err = relative_error(flash_decode.flash_decode_forward(q, k, v, causal, 128 ** -0.5, plan, fold=fold)[0],
                                 ref)
            ok = err < TOLERANCE[{torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]]
            print(f"check {str(dtype)[6:]} Nq{nq} Nkv{nk} Hkv{kvh} causal={causal} fold={fold} splits={plan.splits}: "
                  f"err {err:.1e} {'ok' if ok else 'WRONG'}", flush=True)
            assert ok
        assert int(flash_decode._COUNTERS[q.device].abs().sum()) == 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check:
        check()
    with open(args.out, "w") as out:
        shapes = [(h, b, nq, nk) for h in (64,) for b in (1, 8) for nq in (1, 4) for nk in (8192, 32768, 131072)]
        for (heads, b, nq, nk), repeat in itertools.product(shapes, range(3)):
            shape = Shape(b, heads, nq, nk, 128, "bf16", kv_heads=8)
            q = torch.randn(b, heads, nq, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, 8, nk, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            ref = REGISTRY["sdpa_cudnn"].fn(q, k, v)
            plan = split_kv.plan(b, 8, heads // 8, nq, nk)
            ours = functools.partial(flash_decode.flash_decode_forward, q, k, v, False, 128 ** -0.5, plan)
            for name, fn in (("two kernels", functools.partial(ours, fold=False)),
                             ("folded", functools.partial(ours, fold=True)),
                             ("sdpa_cudnn", functools.partial(REGISTRY["sdpa_cudnn"].fn, q, k, v))):
                err = ((fn()[0] if name != "sdpa_cudnn" else fn()).float() - ref.float()).norm() / ref.float().norm()
                ms = measure(fn, "cuda", rep_ms=100, graph=True).median_ms
                rec = {"heads": heads, "batch": b, "seq_q": nq, "seq_kv": nk, "repeat": repeat, "variant": name,
                       "splits": plan.splits, "us": ms * 1e3, "gbps": compulsory_bytes(shape) / ms / 1e6,
                       "err_vs_cudnn": err.item()}
                out.write(json.dumps(rec) + "\n")
                print(f"H{heads} B{b} Nq{nq} Nkv{nk} #{repeat} {name:11s} {rec['us']:8.1f} us {rec['gbps']:6.0f} GB/s "
                      f"err {rec['err_vs_cudnn']:.1e}", flush=True)
            q = k = v = ref = ours = fn = None
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
