"""Decode at batch 1 (issue 26): split counts that fill one wave, and the combine under PDL.

    python scripts/perf_experiments/decode_b1_probe.py            # writes $OUT/decode_b1_probe.jsonl
    python scripts/perf_experiments/decode_b1_probe.py check      # fp64 oracle, PDL on and off, eager and graphed
    compute-sanitizer --tool memcheck python scripts/perf_experiments/decode_b1_probe.py check
    python scripts/perf_experiments/decode_b1_probe.py trace      # each kernel's device time (torch profiler)
    ROUNDS=3 SPLITS=32,48,64,96 STAGES=2,3 python scripts/perf_experiments/decode_b1_probe.py

At B1 Nkv 32768 the split kernel runs 512 programs (64 splits x 8 K/V heads) of 8 key tiles each;
with two 32 KB K/V stages a program holds about 64 KB of shared memory, so an SM keeps three and
the grid runs as 396 programs then a tail of 116, one per SM. The probe times, beside cuDNN:
- split counts that make the grid one wave (e.g. 48 x 8 = 384 programs) or more, even waves;
- num_stages 2 and 3 (more bytes in flight per program, fewer programs per SM);
- the combine kernel launched with programmatic dependent launch (``pdl``), so its launch and
  start overlap the split kernel's last programs instead of following them.
Timing is the profiler's (CUDA-graph replays, L2 flushed by a read between them), in ROUNDS
interleaved rounds; the JSON lines keep every round and the median. GB/s are at the model's
compulsory bytes (profiler/model/fused.py), as in the bench.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import statistics
import sys

import torch

from attention_core import split_kv
from attention_core.shape import Shape
from kernels import flash_decode
from profiler.measure.ceilings import measure_ceilings
from profiler.measure.timing import graphed, measure
from profiler.model.fused import compulsory_bytes
from profiler.registry import REGISTRY

PRESETS = {"llama3-8b": (32, 8), "llama3-70b": (64, 8)}


def env_list(name: str, default: str) -> list[int]:
    return [int(x) for x in os.environ.get(name, default).split(",")]


def check() -> int:
    """Our decode with the combine under PDL and without, eager and replayed from a CUDA graph, against
    the fp64 oracle on odd shapes; returns the number of failures."""
    failures = 0
    torch.manual_seed(0)
    for (heads, kv_heads), nq, nk, causal, dtype in itertools.product(
            [(32, 8), (8, 1), (64, 8)], (1, 3), (1, 77, 1000, 33000), (False, True), (torch.float16, torch.bfloat16)):
        q = torch.randn(2, heads, nq, 128, device="cuda", dtype=dtype)
        k = torch.randn(2, kv_heads, nk, 128, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal,
                                                               enable_gqa=True)
        plan = split_kv.plan(2, kv_heads, heads // kv_heads, nq, nk)
        outs = {}
        for pdl in (False, True):
            fn = functools.partial(flash_decode.flash_decode_forward, q, k, v, causal, 128 ** -0.5, plan, None, None,
                                   pdl)
            outs[pdl] = fn()[0]
            static = {}
            replay = graphed(lambda fn=fn, static=static: static.update(o=fn()[0]))  # the captured output
            replay()
            torch.cuda.synchronize()
            outs[f"graph-{pdl}"] = static["o"].clone()
        errs = {name: ((o.double() - ref).norm() / ref.norm()).item() for name, o in outs.items()}
        same = all(torch.equal(outs[False], o) for o in outs.values())
        ok = same and max(errs.values()) < 1e-2
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} H{heads}/{kv_heads} Nq{nq} Nkv{nk} causal={causal} {str(dtype)[6:]} "
              f"splits {plan.splits if plan else '-'}: rel err {max(errs.values()):.1e}, "
              f"PDL/graph outputs {'identical' if same else 'DIFFER'}", flush=True)
    print(f"oracle checks failed: {failures}", flush=True)
    return failures


def trace() -> None:
    """Device time of the split and the combine kernel, and the gap between them, from the torch
    profiler over 20 eager calls (Llama-3-70B heads, B1 Nq1, the L2 flushed by a read before each)."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for nk in env_list("SEQ_KV", "8192,32768,131072"):
        q = torch.randn(1, 64, 1, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 8, nk, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        plan = split_kv.plan(1, 8, 8, 1, nk)
        for _ in range(5):
            flash_decode.flash_decode_forward(q, k, v, False, 128 ** -0.5, plan)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                flush.sum()
                flash_decode.flash_decode_forward(q, k, v, False, 128 ** -0.5, plan)
            torch.cuda.synchronize()
        events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                        key=lambda e: e.time_range.start)
        pairs = [(a, b) for a, b in zip(events, events[1:])
                 if "_decode_split" in a.name and "_decode_combine" in b.name]
        split = statistics.median(a.time_range.end - a.time_range.start for a, _ in pairs)
        combine = statistics.median(b.time_range.end - b.time_range.start for _, b in pairs)
        gap = statistics.median(b.time_range.start - a.time_range.end for a, b in pairs)
        span = statistics.median(b.time_range.end - a.time_range.start for a, b in pairs)
        print(f"Nkv {nk} ({plan.splits} splits, {len(pairs)} calls): split kernel {split:.1f} us, combine "
              f"{combine:.1f} us, gap {gap:.1f} us, split start to combine end {span:.1f} us", flush=True)


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "3"))
    out_path = os.path.join(os.environ.get("OUT", "."), "decode_b1_probe.jsonl")
    copy_gbps = measure_ceilings("cuda", ("bf16",)).copy_gbps
    device = torch.cuda.get_device_name()
    print(f"{device}: measured copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    splits_set = env_list("SPLITS", "0,33,48,64,96,128")  # 0: the plan's own
    stages_set = env_list("STAGES", "2,3")
    seq_kv_set = env_list("SEQ_KV", "8192,16384,32768,131072")
    presets = os.environ.get("PRESETS", "llama3-70b,llama3-8b").split(",")
    seq_q_set = env_list("SEQ_Q", "1")
    with open(out_path, "w") as out:
        for preset, nq, nk in itertools.product(presets, seq_q_set, seq_kv_set):
            heads, kv_heads = PRESETS[preset]
            shape = Shape(1, heads, nq, nk, 128, "bf16", kv_heads=kv_heads)
            nbytes = compulsory_bytes(shape)
            q = torch.randn(1, heads, nq, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, kv_heads, nk, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
            base = split_kv.plan(1, kv_heads, heads // kv_heads, nq, nk)
            fns = {}
            for splits, stages, pdl in itertools.product(splits_set, stages_set, (False, True)):
                if splits:
                    chunk = -(-nk // splits // split_kv.BLOCK_N) * split_kv.BLOCK_N
                    plan = split_kv.SplitPlan(-(-nk // chunk), chunk, base.block_m)
                else:
                    plan = base
                name = f"s{plan.splits}/st{stages}/{'pdl' if pdl else 'two'}"
                if name in fns:
                    continue
                fn = functools.partial(flash_decode.flash_decode_forward, q, k, v, False, 128 ** -0.5, plan,
                                       (4, stages), None, pdl)
                err = ((fn()[0].double() - ref).norm() / ref.norm()).item()
                fns[name] = (fn, dict(splits=plan.splits, stages=stages, pdl=pdl, plan_default=plan == base,
                                      rel_err=err))
            fns["sdpa_cudnn"] = (functools.partial(REGISTRY["sdpa_cudnn"].fn, q, k, v), {})
            # The copy bandwidth at this size: a device copy of as many bytes as the step must move,
            # half read and half written, timed like the rest (the copy roof is a 2 GiB copy's rate).
            src = torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8)
            dst = torch.empty_like(src)
            fns["copy_same_bytes"] = (functools.partial(dst.copy_, src), {})
            times = {name: [] for name in fns}
            for _ in range(rounds):
                for name, (fn, _) in fns.items():
                    times[name].append(measure(fn, "cuda", graph=True).median_ms)
            line = []
            for name, (_, info) in fns.items():
                ms = statistics.median(times[name])
                rec = {"device": device, "preset": preset, "batch": 1, "seq_q": nq, "seq_kv": nk, "variant": name,
                       **info, "ms_rounds": times[name], "ms": ms, "gbps": nbytes / ms / 1e6,
                       "copy_fraction": nbytes / ms / 1e6 / copy_gbps, "copy_gbps": copy_gbps}
                out.write(json.dumps(rec) + "\n")
                line.append((ms, name, rec["copy_fraction"]))
            out.flush()
            line.sort()
            cudnn = statistics.median(times["sdpa_cudnn"])
            print(f"{preset} Nq{nq} Nkv{nk}: cuDNN {cudnn * 1e3:.1f} us; " + "; ".join(
                f"{n} {ms * 1e3:.1f} us {f:.2f}" for ms, n, f in line[:6]), flush=True)
            print("   plan default: " + "; ".join(f"{n} {ms * 1e3:.1f} us {f:.2f}" for ms, n, f in line
                                                    if fns[n][1].get("plan_default")), flush=True)
            errs = [info["rel_err"] for _, info in fns.values() if info]
            print(f"   worst rel err vs fp64 {max(errs):.1e}", flush=True)
            q = k = v = ref = None
            fns = None
            torch.cuda.empty_cache()


if __name__ == "__main__":
    if sys.argv[1:] == ["check"]:
        sys.exit(1 if check() else 0)
    if sys.argv[1:] == ["trace"]:
        sys.exit(trace())
    main()
