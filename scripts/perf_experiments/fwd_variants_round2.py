"""Throwaway: second round of forward variants. JSON lines to $OUT/fwd_variants_round2.jsonl."""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import torch, triton
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
from kernels import flash_fwd

OUT = os.environ.get("OUT", "/tmp")
log = open(os.path.join(OUT, "fwd_variants_round2.jsonl"), "a")

def emit(**row):
    log.write(json.dumps(row) + "\n"); log.flush()
    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100)

SHAPES = [(4, 32, 8192, 64), (2, 16, 8192, 128)]
V = {
    64: [("plain", (128, 64, 8, 3)), ("plain", (128, 128, 4, 3)),
         ("rotated", (128, 64, 8, 3)), ("rotated", (128, 64, 4, 3)), ("rotated", (128, 128, 8, 3)), ("rotated", (128, 128, 4, 3)),
         ("split", (128, 128, 8, 3)), ("split", (128, 128, 4, 3)), ("split", (128, 64, 8, 3)),
         ("plain", (256, 64, 8, 3)), ("plain", (256, 64, 16, 3)), ("plain", (256, 128, 16, 2)), ("plain", (256, 128, 8, 2)),
         ("split", (256, 128, 16, 2)), ("rotated", (256, 64, 16, 3))],
    128: [("plain", (128, 128, 8, 3)), ("plain", (128, 64, 8, 3)),
          ("rotated", (128, 64, 8, 3)), ("rotated", (128, 128, 8, 3)), ("rotated", (128, 64, 8, 2)),
          ("split", (128, 128, 8, 3)), ("split", (128, 128, 8, 2)), ("split", (128, 64, 8, 3)),
          ("plain", (256, 64, 16, 2)), ("plain", (256, 128, 16, 2)), ("plain", (256, 64, 8, 2)), ("plain", (256, 64, 16, 3)),
          ("split", (256, 128, 16, 2)), ("rotated", (256, 64, 16, 2))],
}
for dtype in (torch.float16, torch.bfloat16):
    for causal in (False, True):
        for b, h, n, d in SHAPES:
            if dtype == torch.bfloat16 and causal:
                continue
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
            flops = 4 * b * h * n * n * d * (0.5 if causal else 1.0)
            tf = lambda ms: round(flops / ms / 1e9, 1)
            tag = f"D{d} causal={causal} {str(dtype)[6:]}"
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                ms = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            emit(shape=tag, variant="cudnn", tflops=tf(ms))
            ref32 = None
            for inner, (bm, bn, w, s) in V[d]:
                if dtype == torch.bfloat16 and bm == 256:
                    continue
                name = f"{inner} {bm}x{bn} w{w} s{s}"
                cfg = dict(BLOCK_M=bm, BLOCK_N=bn, WARP_SPECIALIZE=False, num_warps=w, num_stages=s, USE_TMA=False, INNER=inner)
                try:
                    t0 = time.time()
                    o, _ = flash_fwd.flash_attention_forward(q, k, v, causal, config=dict(cfg))
                    torch.cuda.synchronize()
                    err = (o.float() - ref.float()).abs().max().item()
                    ms = bench(lambda: flash_fwd.flash_attention_forward(q, k, v, causal, config=dict(cfg)))
                    emit(shape=tag, variant=name, tflops=tf(ms), err=err, compile_s=round(time.time() - t0, 1))
                except Exception as e:
                    emit(shape=tag, variant=name, error=(str(e).splitlines() or [repr(e)])[-1][:200])
            del q, k, v
