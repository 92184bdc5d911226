"""The Gluon backward under compute-sanitizer (16 small cases: ragged, GQA, Nq != Nkv, N=1), then the
same cases with S and dP the right way up (``BackwardConfig.query_rows``, 16 more) and with the masked
tiles first in persistent programs (``masked_first``, 16 more):

    compute-sanitizer --tool memcheck python3 scripts/perf_experiments/gluon_bwd_memcheck.py
"""
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from kernels.flash_bwd import flash_attention_backward
from kernels.flash_bwd_hopper import CONFIGS, hopper_backward
from kernels.flash_fwd import flash_attention_forward

n = 0
for D in (64, 128):
    for causal in (False, True):
        for (B, H, Hkv, Nq, Nkv) in [(1, 2, 2, 300, 300), (1, 4, 2, 200, 333), (1, 4, 1, 333, 130), (2, 2, 2, 1, 1)]:
            q = torch.randn(B, H, Nq, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(B, Hkv, Nkv, D, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            do = torch.randn_like(q)
            o, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=D ** -0.5)
            dq, dk, dv = flash_attention_backward(do, q, k, v, o, lse, causal, D ** -0.5, gluon=True)
            torch.cuda.synchronize()
            config = CONFIGS[D, causal]._replace(query_rows=True)
            hopper_backward(do, q, k, v, o, lse, causal, D ** -0.5, config)
            torch.cuda.synchronize()
            config = CONFIGS[D, causal]._replace(masked_first=True, persistent=True)
            hopper_backward(do, q, k, v, o, lse, causal, D ** -0.5, config)
            torch.cuda.synchronize()
            n += 3
print("memcheck cases run:", n)
