"""The Gluon forward at odd lengths, for compute-sanitizer (issue 16):

    compute-sanitizer --tool memcheck  python scripts/perf_experiments/gluon_sanitize.py
    compute-sanitizer --tool racecheck python scripts/perf_experiments/gluon_sanitize.py

Runs every default configuration (head_dim 64 and 128, causal and not, grouped heads: CONFIGS, and at these lengths
SHORT_CAUSAL's for causal head_dim 64) at Nq, Nkv in {77, 1000}, a persistent 3-consumer and a persistent ping-pong
variant, the head_dim-64 default without row_partials (the row sums summed over the quad every key tile, as
before round 19), and causal head_dim 64's three-consumer config with causal_trim (round 20; the defaults run it from Nq
1537), one program per tile and persistent, then synchronises. Every 16-bit default carries P packed (split_mask,
round 18) and defers the row sums (row_partials, round 19).
"""

import torch

from kernels.flash_fwd_hopper import CONFIGS, HopperConfig, default_config, hopper_forward

VARIANTS = [
    (64, HopperConfig(block_n=64, stages=2, overlap=True, pingpong=True, consumers=3, persistent=True)),
    (128, HopperConfig(block_n=128, stages=3, overlap=True, pingpong=True, consumers=2, persistent=True)),
    (64, HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=3, persistent=True, o_tma=True,
                      split_mask=True, row_partials=False)),
    (64, CONFIGS[64, True]),
    (64, CONFIGS[64, True]._replace(persistent=True)),
]
for head_dim, config in [(64, None), (128, None), *VARIANTS]:
    for causal in (False, True):
        for seq_q, seq_kv in ((77, 77), (1000, 1000), (77, 1000)):
            q = torch.randn(1, 4, seq_q, head_dim, device="cuda", dtype=torch.float16)
            k = torch.randn(1, 2, seq_kv, head_dim, device="cuda", dtype=torch.float16)
            v = torch.randn_like(k)
            o, lse = hopper_forward(q, k, v, causal, head_dim ** -0.5, config)
            torch.cuda.synchronize()
            assert torch.isfinite(o).all() and torch.isfinite(lse).all()
defaults = {(d, default_config(d, c, n)) for d in (64, 128) for c in (False, True) for n in (77, 1000)}
print(f"ran {len(defaults)} default configurations and {len(VARIANTS)} variants at odd lengths")


# A control for racecheck: a Gluon kernel whose partitions touch no shared memory at all. Any hazard
# racecheck reports here belongs to Triton's warp-specialization prologue, not to our kernel.
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402


@gluon.jit
def _write_ids(out, WG: gl.constexpr):
    offs = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
    gl.store(out + WG * 128 + offs, offs)


@gluon.jit
def _control(out):
    gl.warp_specialize([(_write_ids, (out, 0)), (_write_ids, (out, 1))], [4], [24])


ids = torch.zeros(256, device="cuda", dtype=torch.int32)
_control[(1,)](ids, num_warps=4)
torch.cuda.synchronize()
assert ids.tolist() == list(range(128)) * 2
print("control kernel (warp_specialize, no shared memory) ran")
