"""Time every forward, dK/dV and dQ candidate through Triton's autotuner (wider lists than the
shipped ones) and write each config's median time per key to $OUT/tune_round3.jsonl."""
import json, os, sys
sys.path.insert(0, os.getcwd())
import torch, triton
from kernels import flash_bwd, flash_fwd
from kernels.flash_attention import flash_attention

OUT = os.environ.get("OUT", "/tmp")
log = open(os.path.join(OUT, "tune_round3.jsonl"), "a")
FWD = {
    "d64": [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 4, 3), (64, 64, 4, 3), (128, 32, 4, 3), (64, 32, 4, 3)],
    "d128": [(128, 128, 8, 3), (128, 64, 8, 3), (256, 64, 16, 3), (64, 64, 4, 3), (128, 64, 8, 4), (128, 32, 4, 3)],
}
DKDV = {
    "d64": [(32, 128, 4, 3), (64, 128, 8, 3), (32, 64, 4, 3), (32, 128, 8, 2), (64, 128, 4, 3), (64, 64, 4, 3),
            (32, 128, 4, 4), (64, 128, 8, 2), (16, 128, 4, 3), (128, 128, 8, 2)],
    "d128": [(32, 128, 8, 3), (32, 64, 4, 3), (64, 64, 4, 2), (32, 128, 4, 2), (64, 128, 8, 2), (32, 128, 8, 2),
             (64, 64, 4, 3), (64, 128, 8, 3), (32, 64, 4, 2), (16, 128, 4, 3)],
}
DQ = {
    "d64": [(128, 32, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3), (128, 32, 8, 2), (128, 64, 4, 3), (64, 64, 4, 3),
            (128, 128, 8, 2), (128, 32, 4, 4), (128, 16, 4, 3)],
    "d128": [(128, 32, 8, 3), (64, 32, 4, 3), (64, 64, 4, 2), (128, 32, 4, 2), (128, 64, 8, 2), (128, 64, 8, 3),
             (64, 64, 4, 3), (128, 32, 8, 2), (64, 16, 4, 3)],
}
for kernel, table, mine in ((flash_fwd._attn_fwd_tuned, FWD, flash_fwd.FWD_CANDIDATES),
                            (flash_bwd._attn_bwd_dkdv, DKDV, flash_bwd.DKDV_CANDIDATES),
                            (flash_bwd._attn_bwd_dq, DQ, flash_bwd.DQ_CANDIDATES)):
    for cls, tuples in table.items():
        mine[cls][:] = tuples
        have = {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in kernel.configs}
        for bm, bn, w, s in tuples:
            if (bm, bn, w, s) not in have:
                kernel.configs.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s))
                have.add((bm, bn, w, s))

for dtype in (torch.float16, torch.bfloat16):
    for n in (2048, 8192):
        for d, tokens, h in ((64, 32768, 32), (128, 16384, 16)):
            for causal in (False, True):
                b = tokens // n
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
                o = flash_attention(q, k, v, causal=causal)
                o.backward(torch.randn_like(o))
                torch.cuda.synchronize()
                for name, kernel in (("fwd", flash_fwd._attn_fwd_tuned), ("dkdv", flash_bwd._attn_bwd_dkdv), ("dq", flash_bwd._attn_bwd_dq)):
                    timings = {f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']} w{c.num_warps} s{c.num_stages}": (t[0] if isinstance(t, (list, tuple)) else t)
                               for c, t in getattr(kernel, "configs_timings", {}).items()}
                    best = kernel.best_config
                    row = dict(kernel=name, dtype=str(dtype)[6:], n=n, d=d, causal=causal, b=b, h=h,
                               best=f"{best.kwargs['BLOCK_M']}x{best.kwargs['BLOCK_N']} w{best.num_warps} s{best.num_stages}",
                               timings_ms={k: round(float(v), 4) for k, v in sorted(timings.items(), key=lambda kv: kv[1])})
                    log.write(json.dumps(row) + "\n"); log.flush()
                    print(name, row["dtype"], n, d, causal, "best", row["best"], list(row["timings_ms"].items())[:4], flush=True)
                del q, k, v, o
