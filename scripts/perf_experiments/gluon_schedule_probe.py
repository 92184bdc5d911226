"""The Gluon kernels' causal tile order on an H100/H200: head sections against the old all-heads order.

    python3 scripts/perf_experiments/gluon_schedule_probe.py [all|check|bench|sections]

``check``: the forward (persistent, causal) and the backward under forced small sections, snaked and
not, with a short last section, against the fp64 oracle (kernels.reference): the order the kernels
compute must visit every tile once. ``bench``: bf16 and fp16, 32768 tokens a shape (D64 H32, D128
H16), causal, N 2048-16384. Forward: the portable kernel, the Gluon one with one program per tile
(head by head) and persistent (:func:`kernels.tile_schedule.plan`), cuDNN. Backward (bf16): the
portable kernels, the Gluon one persistent (the plan) and with one program per key block (head by
head), cuDNN. ``sections``: persistent programs with sections of 1-16 heads, straight and snaked.
(The first runs, in reports/perf-h100/gluon_schedule_*.jsonl, also timed the old order, every head's
longest block first: ``Schedule(bh, False)``.) TFLOP/s by the convention of docs/perf-notes.md
(forward 4·B·H·N²·D, backward 2.5x that, halved causal); times by triton.testing.do_bench. One JSON
line per measurement in ``$OUT/schedule_probe.jsonl``.
"""
import json
import os
import sys
from functools import partial

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import flash_bwd_hopper as HB
from kernels import flash_fwd_hopper as HF
from kernels.flash_bwd import flash_attention_backward
from kernels.flash_fwd import flash_attention_forward
from kernels.reference import attention_oracle, oracle_with_grads, relative_error
from kernels.tile_schedule import Schedule

OUT = os.environ.get("OUT", "/tmp")
DEVICE = torch.cuda.get_device_name()
print(DEVICE, torch.__version__, triton.__version__, flush=True)
out = open(os.path.join(OUT, "schedule_probe.jsonl"), "a")


def emit(row):
    row["device"] = DEVICE
    out.write(json.dumps(row) + "\n")
    out.flush()
    print({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items() if k != "device"}, flush=True)


def fwd_config(head_dim, persistent):
    return HF.CONFIGS[head_dim, True]._replace(persistent=persistent)


def bwd_config(head_dim, persistent):
    return HB.CONFIGS[head_dim, True]._replace(persistent=persistent)


def check():
    fails = 0
    # bh = 2·5 = 10 heads in sections of 4 (a short last one of 2), Nq ≠ Nkv, odd lengths, GQA.
    for head_dim in (64, 128):
        for (nq, nkv, group) in [(1000, 1000, 1), (777, 777, 5), (300, 1000, 1), (1000, 300, 5), (1, 1, 1)]:
            for dtype in (torch.float16, torch.bfloat16):
                for schedule in (Schedule(4, False), Schedule(4, True), Schedule(3, True)):
                    g = torch.Generator(device="cuda").manual_seed(nq + head_dim)
                    q = torch.randn(2, 5, nq, head_dim, device="cuda", dtype=dtype, generator=g)
                    k = torch.randn(2, 5 // group, nkv, head_dim, device="cuda", dtype=dtype, generator=g)
                    v = torch.randn_like(k)
                    do = torch.randn_like(q)
                    scale = head_dim ** -0.5
                    o, lse = HF.hopper_forward(q, k, v, True, scale, fwd_config(head_dim, True), schedule)
                    ref = attention_oracle(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                           causal=True, sm_scale=scale)
                    fwd_err = (o.double().cpu() - ref).abs().max().item()
                    ok_f = fwd_err < (2e-2 if dtype == torch.bfloat16 else 4e-3)
                    dq, dk, dv = HB.hopper_backward(do, q, k, v, o, lse, True, scale,
                                                    bwd_config(head_dim, True), schedule)
                    refs = oracle_with_grads(q, k, v, do, causal=True)
                    errs = [relative_error(a, b) for a, b in zip((dq, dk, dv), refs[1:])]
                    ok_b = all(e < (3e-2 if dtype == torch.bfloat16 else 5e-3) for e in errs)
                    fails += (not ok_f) + (not ok_b)
                    print(("ok  " if ok_f and ok_b else "FAIL"), head_dim, str(dtype)[6:], (nq, nkv, group),
                          tuple(schedule), f"fwd {fwd_err:.1e}", "bwd", [f"{e:.1e}" for e in errs], flush=True)
    print("schedule checks failed:", fails, flush=True)
    emit({"what": "check", "fails": fails})
    return fails


def gluon_bwd(args, config, schedule=None):
    """The Gluon backward with its preprocess (as flash_attention_backward times it)."""
    do, q, k, v, o, lse, causal, scale = args
    return HB.hopper_backward(do, q, k, v, o, lse, causal, scale, config, schedule)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=200)


def timings(seqs=(2048, 4096, 8192, 16384)):
    for head_dim, heads in ((64, 32), (128, 16)):
        for seq in seqs:
            batch = 32768 // seq
            for dtype in (torch.bfloat16, torch.float16):
                q, k, v, do = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=dtype) for _ in range(4))
                scale = head_dim ** -0.5
                flops = 4 * batch * heads * seq * seq * head_dim / 2
                shape = {"D": head_dim, "N": seq, "B": batch, "H": heads, "dtype": str(dtype)[6:], "causal": True}
                runs = {
                    "fwd portable": partial(flash_attention_forward, q, k, v, causal=True, sm_scale=scale, gluon=False),
                    "fwd gluon per-tile, head by head": partial(HF.hopper_forward, q, k, v, True, scale,
                                                                fwd_config(head_dim, False)),
                    "fwd gluon persistent, plan": partial(HF.hopper_forward, q, k, v, True, scale,
                                                          fwd_config(head_dim, True)),
                }
                for name, fn in runs.items():
                    emit({**shape, "impl": name, "tflops": flops / bench(fn) / 1e9})
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    ms = bench(partial(F.scaled_dot_product_attention, q, k, v, is_causal=True))
                emit({**shape, "impl": "fwd cudnn", "tflops": flops / ms / 1e9})
                if dtype != torch.bfloat16:
                    continue
                o, lse = flash_attention_forward(q, k, v, causal=True, sm_scale=scale)
                args = (do, q, k, v, o, lse, True, scale)
                runs = {
                    "bwd portable": partial(flash_attention_backward, *args, gluon=False),
                    "bwd gluon persistent, plan": partial(gluon_bwd, args, bwd_config(head_dim, True)),
                    "bwd gluon per-block, head by head": partial(gluon_bwd, args, bwd_config(head_dim, False)),
                }
                for name, fn in runs.items():
                    emit({**shape, "impl": name, "tflops": 2.5 * flops / bench(fn) / 1e9})
                qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    res = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
                    ms = bench(partial(torch.autograd.grad, res, (qs, ks, vs), do, retain_graph=True))
                emit({**shape, "impl": "bwd cudnn", "tflops": 2.5 * flops / ms / 1e9})


def section_sizes():
    """Persistent programs with sections of 1 to 16 heads, straight and snaked, against one program
    per tile head by head (bf16, causal, the short shapes)."""
    for head_dim, heads, seq in ((64, 32, 2048), (64, 32, 4096), (128, 16, 2048), (128, 16, 4096)):
        batch = 32768 // seq
        q, k, v, do = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
                       for _ in range(4))
        scale = head_dim ** -0.5
        flops = 4 * batch * heads * seq * seq * head_dim / 2
        shape = {"D": head_dim, "N": seq, "B": batch, "H": heads, "dtype": "bfloat16", "causal": True}
        o, lse = flash_attention_forward(q, k, v, causal=True, sm_scale=scale)
        args = (do, q, k, v, o, lse, True, scale)
        runs = {"fwd gluon per-tile, head by head": partial(HF.hopper_forward, q, k, v, True, scale,
                                                            fwd_config(head_dim, False), Schedule(1, False)),
                "bwd gluon per-block, head by head": partial(gluon_bwd, args, bwd_config(head_dim, False),
                                                             Schedule(1, False))}
        for section in (1, 2, 4, 8, 16):
            for snake in (False, True):
                schedule = Schedule(section, snake)
                runs[f"fwd gluon persistent, {tuple(schedule)}"] = partial(
                    HF.hopper_forward, q, k, v, True, scale, fwd_config(head_dim, True), schedule)
                runs[f"bwd gluon persistent, {tuple(schedule)}"] = partial(
                    gluon_bwd, args, bwd_config(head_dim, True), schedule)
        for name, fn in runs.items():
            emit({**shape, "impl": name, "tflops": (2.5 if name.startswith("bwd") else 1) * flops / bench(fn) / 1e9})


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    failed = check() if which in ("all", "check") else 0
    if which in ("all", "bench"):
        timings()
    if which == "sections":
        section_sizes()
    sys.exit(1 if failed else 0)
