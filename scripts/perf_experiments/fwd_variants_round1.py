"""Throwaway: time forward variants side by side on the GPU. Writes JSON lines to $OUT/fwd_variants_round1.jsonl."""
import json, os, sys, time, traceback
sys.path.insert(0, os.getcwd())
import torch, triton
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
from kernels import flash_fwd
sys.path.insert(0, "scripts/perf_experiments")
import flash_fwd_before as flash_fwd_old

OUT = os.environ.get("OUT", "/tmp")
log = open(os.path.join(OUT, "fwd_variants_round1.jsonl"), "a")

def emit(**row):
    log.write(json.dumps(row) + "\n"); log.flush()
    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100)

SHAPES = [(4, 32, 8192, 64), (2, 16, 8192, 128)]
CFG = {
    64: [(128, 64, 4, 3), (128, 64, 4, 4), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 4, 3), (128, 128, 8, 4), (64, 64, 4, 3)],
    128: [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 4, 4), (128, 128, 4, 3), (64, 64, 4, 3)],
}
WS = [(128, 128, 4, 3), (128, 128, 8, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 4, 2)]
only = sys.argv[1] if len(sys.argv) > 1 else "all"
for causal in (False, True):
    for b, h, n, d in SHAPES:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        flops = 4 * b * h * n * n * d * (0.5 if causal else 1.0)
        tf = lambda ms: round(flops / ms / 1e9, 1)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            ms = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        emit(shape=f"D{d} causal={causal}", variant="cudnn", tflops=tf(ms))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ms = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        emit(shape=f"D{d} causal={causal}", variant="fa2", tflops=tf(ms))
        ms = bench(lambda: flash_fwd_old.flash_attention_forward(q, k, v, causal))
        emit(shape=f"D{d} causal={causal}", variant="old-autotuned", tflops=tf(ms))
        variants = [("ptr", c, False) for c in CFG[d]] + [("tma", c, False) for c in CFG[d]] + [("tma", c, True) for c in WS]
        for path, (bm, bn, w, s), ws in variants:
            name = f"{path}{'-ws' if ws else ''} {bm}x{bn} w{w} s{s}"
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, WARP_SPECIALIZE=ws, num_warps=w, num_stages=s, USE_TMA=path == "tma")
            try:
                t0 = time.time()
                o, _ = flash_fwd.flash_attention_forward(q, k, v, causal, config=dict(cfg))
                torch.cuda.synchronize()
                err = (o.float() - ref.float()).abs().max().item()
                ms = bench(lambda: flash_fwd.flash_attention_forward(q, k, v, causal, config=dict(cfg)))
                emit(shape=f"D{d} causal={causal}", variant=name, tflops=tf(ms), err=err, compile_s=round(time.time() - t0, 1))
            except Exception as e:
                emit(shape=f"D{d} causal={causal}", variant=name, error=(str(e).splitlines() or [repr(e)])[-1][:200])
        del q, k, v
