"""One Gluon backward launch to profile with Nsight Compute: where a variant's time goes.

    ncu --set full --import-source yes --kernel-name _attn_bwd_hopper --launch-skip 1 --launch-count 1 \\
        -o /tmp/bwd_d64 python3 scripts/perf_experiments/gluon_bwd_ncu.py 64 0 4096 [field=value ...]
    ncu -i /tmp/bwd_d64.ncu-rep --page details --csv            # tensor pipe, stalls by reason, registers
    ncu -i /tmp/bwd_d64.ncu-rep --page source --csv --print-source sass   # stall samples per instruction

Arguments: head_dim, causal (0/1), N, then BackwardConfig fields that change the shape's default config
(kernels.flash_bwd_hopper.default_config), as gluon_bwd_probe.py's ``VARIANTS`` do. bf16, 32768 tokens (H32 at
D64, H16 at D128, as the probe's grid). The backward runs twice, so ``--launch-skip 1`` profiles a launch
whose kernel is compiled and whose inputs are warm in no cache but their own.
"""
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from kernels import flash_bwd_hopper as HB
from kernels.flash_fwd import flash_attention_forward

head_dim, causal, seq = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
changes = {key: int(value) for key, value in (arg.split("=") for arg in sys.argv[4:])}
config = HB.default_config(head_dim, causal, seq, 1)._replace(**changes)
heads = 32 if head_dim == 64 else 16
q = torch.randn(32768 // seq, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
scale = head_dim ** -0.5
o, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=scale)
for _ in range(2):
    HB.hopper_backward(do, q, k, v, o, lse, causal, scale, config)
torch.cuda.synchronize()
print(torch.cuda.get_device_name(), "D", head_dim, "causal" if causal else "full", "N", seq, config, flush=True)
