"""The Gluon backward (kernels/flash_bwd_hopper.py) on an H100/H200: fp64-oracle checks, then timings.

    python3 scripts/perf_experiments/gluon_bwd_probe.py [all|check|bench]

``check``: the default config of each shape (kernels.flash_bwd_hopper.default_config; with ``QUERY_ROWS=1`` or
``MASKED_FIRST=1`` in the environment, that default with ``query_rows`` or ``masked_first``; with
``CHANGES="field=value,..."``, with those BackwardConfig fields changed) against the fp64 oracle
(kernels.reference) on 80 cases (per head dim, 2 dtypes x causal or not x 10 shapes), dq, dk and dv of each
within twice naive attention's error plus a floor, as tests/gpu does.

``bench``: bf16, 32768 tokens per shape (D64 H32, D128 H16), N 2048-16384, causal both: the whole
backward of the portable kernels, the Gluon kernel with its defaults and each variant of
``VARIANTS="name,D,BLOCK_M,consumers,stages,persistent,dq_cols[,query_rows[,masked_first]];..."``
(0/1 flags) or ``VARIANTS="name,D,field=value,..."`` (each shape's default config, default_config, with those
BackwardConfig fields changed, e.g. ``nodq,64,dq_mode=0``; before round 15 it was CONFIGS, as ``dkv_tma=0``
gives now), and cuDNN through SDPA, in TFLOP/s (2.5x the forward's 4·B·H·N²·D, halved causal).
``ROUNDS=n`` times the Gluon kernels and cuDNN n times per shape, interleaved, and keeps the median
(each round's figure under ``<name>_rounds``); ``DIMS=128`` limits the head dims (of ``check`` too: 40 cases
per head dim).
Each do_bench flushes the L2 between repetitions by a read, as the captures do (profiler.measure.timing.clean_l2_flush;
runs before 2026-11-27's round 17 of the forward let do_bench zero its buffer, whose dirty lines are written back
inside the next timed call). Writes ``$OUT/bwd_probe.json``; reports/perf-h100/gluon_bwd_round*.json are its runs
(docs/perf-notes.md).
"""
import json
import os
import statistics
import sys
import traceback
from functools import partial

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import flash_bwd_hopper as HB
from kernels.flash_bwd import flash_attention_backward
from kernels.flash_fwd import flash_attention_forward
from kernels.reference import naive_attention, oracle_with_grads, relative_error
from profiler.measure.timing import clean_l2_flush

OUT = os.environ.get("OUT", "/tmp")
dev = torch.cuda.get_device_name()
print(dev, torch.__version__, triton.__version__, flush=True)
FLOOR = {torch.float16: 1e-3, torch.bfloat16: 8e-3}

def field_changes(fields):
    """BackwardConfig fields from "field=value" strings (0/1 for flags), for ``_replace``."""
    return {key: int(value) for key, value in (f.split("=") for f in fields)}

def grads(q, k, v, do, causal, gluon, config=None):
    scale = q.shape[-1] ** -0.5
    o, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=scale)
    if config is not None:
        return (o, *HB.hopper_backward(do, q, k, v, o, lse, causal, scale, config))
    return (o, *flash_attention_backward(do, q, k, v, o, lse, causal, scale, gluon=gluon))

def check(B, H, Hkv, Nq, Nkv, D, causal, dtype, config=None, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, Nkv, D, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, Nkv, D, device="cuda", dtype=dtype, generator=g)
    do = torch.randn(B, H, Nq, D, device="cuda", dtype=dtype, generator=g)
    ref = oracle_with_grads(q, k, v, do, causal=causal)
    qn, kn, vn = (t.clone().requires_grad_(True) for t in (q, k, v))
    on = naive_attention(qn, kn, vn, causal=causal)
    on.backward(do)
    naive = [relative_error(a, b) for a, b in zip((on, qn.grad, kn.grad, vn.grad), ref)]
    got = grads(q, k, v, do, causal, True, config)
    errs = [relative_error(a, b) for a, b in zip(got, ref)]
    ok = all(e <= 2 * n + FLOOR[dtype] for e, n in zip(errs[1:], naive[1:]))
    return ok, errs, naive

results = {"device": dev}
fails = 0
which = sys.argv[1] if len(sys.argv) > 1 else "all"
if which in ("all", "check"):
    # Which kernel this check ran: the printout names the config changes, as a file kept from it must.
    print("check:", {k: os.environ[k] for k in ("DIMS", "CHANGES", "QUERY_ROWS", "MASKED_FIRST") if k in os.environ}
          or "the defaults", flush=True)
    shapes = [(1, 2, 2, 1, 1), (1, 2, 2, 100, 100), (1, 2, 2, 300, 300), (2, 3, 3, 1000, 1000), (1, 4, 4, 128, 128),
              (1, 8, 2, 777, 777), (1, 4, 1, 200, 333), (1, 4, 2, 333, 200), (1, 2, 2, 4096, 4096), (1, 4, 4, 64, 1000)]
    for D in [int(d) for d in os.environ.get("DIMS", "64,128").split(",")]:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                for (B, H, Hkv, Nq, Nkv) in shapes:
                    try:
                        config = None
                        default = HB.default_config(D, causal, Nq, H // Hkv)  # the shape's own
                        if os.environ.get("QUERY_ROWS") == "1":
                            config = default._replace(query_rows=True)
                        if os.environ.get("MASKED_FIRST") == "1":
                            config = (config or default)._replace(masked_first=True)
                        if os.environ.get("CHANGES"):  # e.g. CHANGES="dq_mode=1"
                            config = (config or default)._replace(
                                **field_changes(os.environ["CHANGES"].split(",")))
                        ok, errs, naive = check(B, H, Hkv, Nq, Nkv, D, causal, dtype, config, seed=Nq + D)
                    except Exception as e:
                        ok, errs, naive = False, [str(e)[:300]], []
                        traceback.print_exc()
                    fails += not ok
                    if not ok or (B, H, Nq) == (2, 3, 1000):
                        print(("ok  " if ok else "FAIL"), D, str(dtype)[6:], "causal" if causal else "full",
                              (B, H, Hkv, Nq, Nkv), [f"{e:.1e}" if isinstance(e, float) else e for e in errs],
                              [f"{e:.1e}" for e in naive], flush=True)
    print("oracle checks failed:", fails, flush=True)
    results["check_fails"] = fails

def variant_backward(do, q, k, v, o, lse, causal, scale, config):
    # lse and delta come from backward_stats' one launch, so a variant pays what the default pays. (Until round 11
    # variants took backward_delta and tile_stats, the path before round 10: a preprocess kernel and four small
    # torch ops more than the default, timed against them; round 12 removed that path from hopper_backward.)
    return HB.hopper_backward(do, q, k, v, o, lse, causal, scale, config)


def bench(fn):
    with clean_l2_flush():
        return triton.testing.do_bench(fn, warmup=50, rep=200)

if which in ("all", "bench"):
    rows = []
    variants = {"default": None}
    extra = os.environ.get("VARIANTS")
    if extra:
        for item in extra.split(";"):
            name, d, *fields = item.split(",")
            if all("=" in f for f in fields):  # name,D,field=value,...: the default config of each shape, changed
                variants[name] = (int(d), field_changes(fields))
                continue
            bm, wg, st, pers, cols, *flags = fields
            flags = [f == "1" for f in flags] + [False] * (2 - len(flags))  # query_rows, masked_first
            variants[name] = (int(d), HB.BackwardConfig(int(bm), int(wg), int(st), pers == "1", cols == "1",
                                                        *flags))
    rounds = int(os.environ.get("ROUNDS", "1"))
    dims = [int(d) for d in os.environ.get("DIMS", "64,128").split(",")]
    for D, H in ((64, 32), (128, 16)):
        if D not in dims:
            continue
        for N in (2048, 4096, 8192, 16384):
            B = 32768 // N
            for causal in (False, True):
                dtype = torch.bfloat16
                q = torch.randn(B, H, N, D, device="cuda", dtype=dtype)
                k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
                scale = D ** -0.5
                o, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=scale)
                flops = 2.5 * 4 * B * H * N * N * D * (0.5 if causal else 1.0)
                row = {"D": D, "N": N, "B": B, "H": H, "causal": causal}
                args = (do, q, k, v, o, lse, causal, scale)
                row["portable"] = flops / bench(partial(flash_attention_backward, *args, gluon=False)) / 1e9
                fns = {}
                for name, cfg in variants.items():
                    if cfg is not None:
                        if cfg[0] != D:
                            continue
                        cfg = cfg[1]
                        if isinstance(cfg, dict):
                            cfg = HB.default_config(D, causal, N, 1)._replace(**cfg)
                    if cfg is None:
                        fns["gluon_" + name] = partial(flash_attention_backward, *args, gluon=True)
                    else:  # the preprocess too, as the default's timing has it
                        fns["gluon_" + name] = partial(variant_backward, *args, cfg)
                qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
                fns["cudnn"] = partial(torch.autograd.grad, out, (qs, ks, vs), do, retain_graph=True)
                for _ in range(rounds):
                    for name, fn in fns.items():
                        if isinstance(row.get(name + "_rounds"), str):
                            continue  # it failed in an earlier round
                        try:
                            row.setdefault(name + "_rounds", []).append(flops / bench(fn) / 1e9)
                        except Exception as e:
                            row[name + "_rounds"] = str(e)[:100]
                for name in fns:
                    got = row.pop(name + "_rounds")
                    row[name] = got if isinstance(got, str) else statistics.median(got)
                    if rounds > 1 and not isinstance(got, str):
                        row[name + "_rounds"] = [round(x, 1) for x in got]
                rows.append(row)
                print({k_: (round(v_, 1) if isinstance(v_, float) else v_) for k_, v_ in row.items()
                       if not k_.endswith("_rounds")}, flush=True)
                del q, k, v, do, o, lse, qs, ks, vs, out
    results["bench"] = rows
json.dump(results, open(os.path.join(OUT, "bwd_probe.json"), "w"), indent=1)
