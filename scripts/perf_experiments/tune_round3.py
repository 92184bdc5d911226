"""Time wider candidate lists than the shipped ones through Triton's autotuner, for the forward, the
dK/dV and the dQ kernels, and write each config's median time per autotune key as JSON lines.

    python scripts/perf_experiments/tune_round3.py [OUT_DIR]     # on a GPU; default $OUT or /tmp

It produced reports/perf-h200/tune_round3.jsonl, from which the candidate lists in
kernels/flash_fwd.py and kernels/flash_bwd.py were cut (docs/perf-notes.md).
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402

from kernels import flash_bwd, flash_fwd  # noqa: E402
from kernels.flash_attention import flash_attention  # noqa: E402

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
KERNELS = {"fwd": flash_fwd._attn_fwd_tuned, "dkdv": flash_bwd._attn_bwd_dkdv, "dq": flash_bwd._attn_bwd_dq}


def name(config: triton.Config) -> str:
    return f"{config.kwargs['BLOCK_M']}x{config.kwargs['BLOCK_N']} w{config.num_warps} s{config.num_stages}"


def widen() -> None:
    """Put the wider lists into the kernels' candidate tables and autotuner config lists."""
    for kernel, table, candidates in ((KERNELS["fwd"], FWD, flash_fwd.FWD_CANDIDATES),
                                      (KERNELS["dkdv"], DKDV, flash_bwd.DKDV_CANDIDATES),
                                      (KERNELS["dq"], DQ, flash_bwd.DQ_CANDIDATES)):
        for cls, tuples in table.items():
            candidates[cls][:] = tuples
            have = {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in kernel.configs}
            for bm, bn, warps, stages in tuples:
                if (bm, bn, warps, stages) not in have:
                    kernel.configs.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps,
                                                        num_stages=stages))
                    have.add((bm, bn, warps, stages))


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")) / "tune_round3.jsonl"
    widen()
    with out.open("a") as log:
        for dtype in (torch.float16, torch.bfloat16):
            for n in (2048, 8192):
                for d, tokens, h in ((64, 32768, 32), (128, 16384, 16)):
                    for causal in (False, True):
                        b = tokens // n
                        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True)
                                   for _ in range(3))
                        o = flash_attention(q, k, v, causal=causal)  # autotunes the forward
                        o.backward(torch.randn_like(o))  # and both backward kernels
                        torch.cuda.synchronize()
                        for kernel_name, kernel in KERNELS.items():
                            timings = {name(c): float(t[0] if isinstance(t, (list, tuple)) else t)
                                       for c, t in getattr(kernel, "configs_timings", {}).items()}
                            row = {"kernel": kernel_name, "dtype": str(dtype).removeprefix("torch."), "n": n, "d": d,
                                   "causal": causal, "b": b, "h": h, "best": name(kernel.best_config),
                                   "timings_ms": {c: round(t, 4) for c, t in sorted(timings.items(),
                                                                                    key=lambda kv: kv[1])}}
                            log.write(json.dumps(row) + "\n")
                            log.flush()
                            print(kernel_name, row["dtype"], n, d, causal, "best", row["best"], flush=True)


if __name__ == "__main__":
    main()
