"""Causal grids of one program per tile: head by head against sections of heads, on an H100/H200.

    python3 scripts/perf_experiments/grid_section_probe.py [all|check|bench]

The causal Gluon kernels with one program per tile (the backward everywhere, the forward from
N 4096 at head_dim 128) went head by head, on the argument that the hardware hands the next tile
to a free SM and so evens out the tail. That holds with many tiles. With few long ones (batch 1
with grouped heads: the backward of Llama-3-8B's 8 K/V heads at N4096 is 256 programs of up to 4 heads
x 64 query tiles on 132 SMs) the last heads' longest tiles start late: kernels.tile_schedule.grid_makespan
puts that run's end at 1.59x the mean work, and sections of 4 heads (longest first within each) at 1.00x.
``kernels.tile_schedule.plan`` now takes the smallest section within 1% of the best model makespan.

``check``: the forward and the backward with forced sections on a grid of one program per tile, against
the fp64 oracle (ragged N, Nq != Nkv, GQA, a short last section). ``bench``: causal shapes of the
issue-42 grid and of Llama-3-8B at batch 1, bf16, each with sections of 1, 2, 4 and 8 heads and the
plan's, and cuDNN, in ROUNDS interleaved rounds (do_bench medians); one JSON line per measurement in
``$OUT/grid_section_probe.jsonl`` with the model's makespan beside each time.
"""
import json
import os
import statistics
import sys
from functools import partial

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import flash_bwd_hopper as HB
from kernels import flash_fwd_hopper as HF
from kernels import tile_schedule
from kernels.reference import attention_oracle, oracle_with_grads, relative_error
from kernels.tile_schedule import Schedule

OUT = os.environ.get("OUT", "/tmp")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
DEVICE = torch.cuda.get_device_name()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print(DEVICE, torch.__version__, triton.__version__, flush=True)
out = open(os.path.join(OUT, "grid_section_probe.jsonl"), "a")


def emit(row):
    row["device"] = DEVICE
    out.write(json.dumps(row) + "\n")
    out.flush()
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "device"}, flush=True)


def per_tile(config):
    return config._replace(persistent=False)


def check():
    fails = 0
    for head_dim in (64, 128):
        for (batch, heads, nq, nkv, group) in [(2, 5, 1000, 1000, 1), (1, 8, 777, 777, 4), (2, 5, 300, 1000, 5),
                                               (1, 8, 1000, 300, 2), (3, 2, 1, 1, 1)]:
            for section in (2, 3, 4):
                dtype = torch.bfloat16
                g = torch.Generator(device="cuda").manual_seed(nq + head_dim + section)
                q = torch.randn(batch, heads, nq, head_dim, device="cuda", dtype=dtype, generator=g)
                k = torch.randn(batch, heads // group, nkv, head_dim, device="cuda", dtype=dtype, generator=g)
                v = torch.randn_like(k)
                do = torch.randn_like(q)
                scale = head_dim ** -0.5
                schedule = Schedule(section, False)
                o, lse = HF.hopper_forward(q, k, v, True, scale, per_tile(HF.CONFIGS[head_dim, True]), schedule)
                ref = attention_oracle(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                       causal=True, sm_scale=scale)
                fwd_err = (o.double().cpu() - ref).abs().max().item()
                dq, dk, dv = HB.hopper_backward(do, q, k, v, o, lse, True, scale,
                                                per_tile(HB.CONFIGS[head_dim, True]), schedule)
                refs = oracle_with_grads(q, k, v, do, causal=True)
                errs = [relative_error(a, b) for a, b in zip((dq, dk, dv), refs[1:])]
                ok = fwd_err < 2e-2 and all(e < 3e-2 for e in errs)
                fails += not ok
                print("ok  " if ok else "FAIL", head_dim, (batch, heads, nq, nkv, group), section,
                      f"fwd {fwd_err:.1e}", "bwd", [f"{e:.1e}" for e in errs], flush=True)
    print("grid section checks failed:", fails, flush=True)
    emit({"what": "check", "fails": fails})
    return fails


def gluon_bwd(args, config, schedule):
    """The Gluon backward with its delta preprocess, as flash_attention_backward times it."""
    do, q, k, v, o, lse, scale = args
    return HB.hopper_backward(do, q, k, v, o, lse, True, scale, config, schedule)


# (pass, batch, heads, kv_heads, N, head_dim): causal, bf16.
SHAPES = [
    ("bwd", 1, 32, 8, 4096, 128), ("bwd", 1, 32, 8, 16384, 128), ("bwd", 4, 32, 8, 4096, 128),
    ("bwd", 8, 16, 16, 4096, 128), ("bwd", 2, 16, 16, 8192, 128), ("bwd", 16, 16, 16, 2048, 128),
    ("bwd", 8, 32, 32, 4096, 64), ("bwd", 16, 32, 32, 2048, 64),
    ("fwd", 1, 32, 8, 4096, 128), ("fwd", 1, 32, 8, 8192, 128), ("fwd", 8, 16, 16, 4096, 128),
    ("fwd", 4, 16, 16, 8192, 128), ("fwd", 4, 32, 32, 8192, 64),
]


def bench():
    rows = {}
    for mode, batch, heads, kv_heads, seq, head_dim in SHAPES:
        dtype = torch.bfloat16
        q, do = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=dtype) for _ in range(2))
        k, v = (torch.randn(batch, kv_heads, seq, head_dim, device="cuda", dtype=dtype) for _ in range(2))
        scale = head_dim ** -0.5
        flops = 4 * batch * heads * seq * seq * head_dim / 2 * (2.5 if mode == "bwd" else 1)
        shape = dict(mode=mode, B=batch, H=heads, Hkv=kv_heads, N=seq, D=head_dim)
        if mode == "fwd":
            config = per_tile(HF.CONFIGS[head_dim, True])
            n_blocks, bh, repeat = triton.cdiv(seq, config.block_m), batch * heads, 1.0
            run = partial(partial, HF.hopper_forward, q, k, v, True, scale, config)
        else:
            config = per_tile(HB.CONFIGS[head_dim, True])
            o, lse = HF.hopper_forward(q, k, v, True, scale)
            n_blocks, bh = triton.cdiv(seq, config.block_n), batch * kv_heads
            repeat = heads // kv_heads * config.block_n / config.block_m
            run = partial(partial, gluon_bwd, (do, q, k, v, o, lse, scale), config)
        planned = tile_schedule.plan(n_blocks, bh, 1, 1, 1.0, n_blocks * bh, True, False, SMS, repeat)
        variants = {f"section {s}": Schedule(s, False) for s in (1, 2, 4, 8) if s <= bh}
        variants[f"plan (section {planned.section})"] = planned
        fns = {name: run(s) for name, s in variants.items()}
        qs, ks, vs = (t.detach().clone().requires_grad_(mode == "bwd") for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            if mode == "fwd":
                fns["cudnn"] = partial(F.scaled_dot_product_attention, qs, ks, vs, is_causal=True, enable_gqa=True)
            else:
                res = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
                fns["cudnn"] = partial(torch.autograd.grad, res, (qs, ks, vs), do, retain_graph=True)
            for _round in range(ROUNDS):
                for name, fn in fns.items():
                    rows.setdefault((tuple(shape.values()), name), []).append(triton.testing.do_bench(fn, rep=100))
        for name in fns:
            ms = statistics.median(rows[tuple(shape.values()), name])
            span = (tile_schedule.grid_makespan(n_blocks, bh, SMS, variants[name], repeat)
                    if name in variants else None)
            emit({**shape, "impl": name, "ms": ms, "tflops": flops / ms / 1e9, "model_makespan": span,
                  "rounds_ms": rows[tuple(shape.values()), name]})


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if which in ("all", "check"):
        check()
    if which in ("all", "bench"):
        bench()
