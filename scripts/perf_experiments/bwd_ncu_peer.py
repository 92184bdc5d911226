"""One attention backward (with ``fwd``, forward), ours or FlashAttention-4's, inside an NVTX range for Nsight Compute.

    ncu --set full --nvtx --nvtx-include "profiled" -o /tmp/fa4_d128 \\
        python3 scripts/perf_experiments/bwd_ncu_peer.py fa4 128 0 8192
    ncu -i /tmp/fa4_d128.ncu-rep --page details --csv       # every kernel of that backward, one block each

Arguments: ``fa4`` or ``ours``, head_dim, causal (0/1), N, and ``fwd`` to profile the second forward instead (round 18
of the forward: ``ncu --set full --import-source yes --nvtx --nvtx-include "profiled" ... ours 64 0 8192 fwd``, the
report holding that forward's one kernel; ``ours ... fwd field=value ...`` runs the Gluon forward with those fields of
kernels.flash_fwd_hopper.default_config changed, as gluon_fwd_clock.py's ``VARIANTS`` do). bf16, 32768 tokens (H32 at
D64, H16 at D128), as gluon_bwd_ncu.py and gluon_bwd_probe.py's grid, or the batch ``BATCH`` sets (round 25: 3 at
head_dim 128 and N 8192 leaves a last wave of 36 tiles on 132 SMs, where the grid's shapes leave 4). The forward and
one backward run first (compiling and warming); the second backward runs inside the range ``profiled``, a start/end
range (autograd launches the backward from its own thread, where this thread's push/pop range does not reach), so the
report holds that backward's kernels: for FA4 its preprocess, main kernel and dQ conversion, for ours the dQ buffer's
zero fill, the stats kernel, the Gluon kernel and the dQ conversion; and for both, three adds by autograd of the
gradients into the .grad the first backward filled (docs/perf-notes.md, "Gluon backward", round 12).
"""
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from kernels.fa4 import fa4_attention
from kernels.flash_attention import flash_attention

impl, head_dim, causal, seq = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
mode = sys.argv[5] if len(sys.argv) > 5 else "bwd"
if mode not in ("fwd", "bwd"):
    raise SystemExit(f"mode {mode!r}: fwd, or nothing for the backward")
changes = {key: int(value) for key, value in (arg.split("=") for arg in sys.argv[6:])}
attention = {"fa4": fa4_attention, "ours": flash_attention}[impl]
if changes:
    if (impl, mode) != ("ours", "fwd"):
        raise SystemExit("config fields apply to the Gluon forward only: ours D causal N fwd field=value ...")
    from kernels import flash_fwd_hopper as HF

    config = HF.default_config(head_dim, causal, seq)._replace(**changes)

    def attention(q, k, v, causal):
        return HF.hopper_forward(q, k, v, causal, q.shape[-1] ** -0.5, config)[0]
heads = 32 if head_dim == 64 else 16
batch = int(os.environ.get("BATCH", 32768 // seq))
q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                       requires_grad=mode == "bwd") for _ in range(3))
do = torch.randn_like(q)
for profiled in (False, True):
    marker = torch.cuda.nvtx.range_start("profiled") if profiled and mode == "fwd" else None
    out = attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    if mode == "bwd":
        if profiled:
            marker = torch.cuda.nvtx.range_start("profiled")
        out.backward(do)
        torch.cuda.synchronize()
    if marker is not None:
        torch.cuda.nvtx.range_end(marker)
print(torch.cuda.get_device_name(), impl, mode, "D", head_dim, "causal" if causal else "full", "N", seq, "B", batch,
      changes, flush=True)
