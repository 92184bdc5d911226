"""The Gluon kernels of an earlier commit against today's, interleaved on one GPU: same speed, same answers?

    python3 scripts/perf_experiments/gluon_same_speed.py 59983fd        # writes $OUT/same_speed.json

For a refactor that should change nothing (kernels/hopper_common.py and the backward's named tuples and
segment loop, checked against 59983fd: reports/perf-h100/gluon_refactor_same_speed.json). The earlier
kernels/flash_fwd_hopper.py and flash_bwd_hopper.py are read from git into a temporary folder as modules
``old_fwd`` and ``old_bwd`` (the backward importing the earlier forward), so both versions load in one
process. Per shape (bf16, 32768 tokens, D64 H32 and D128 H16, N 2048-16384, causal and not): forward and
backward TFLOP/s, medians of 3 interleaved rounds of do_bench, and whether the outputs agree (o, lse, dk, dv
bit for bit; dq, summed by atomics in no fixed order, by its largest difference).
"""
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402
import triton  # noqa: E402

from kernels import flash_bwd_hopper as new_bwd  # noqa: E402
from kernels import flash_fwd_hopper as new_fwd  # noqa: E402
from kernels.flash_bwd import backward_delta  # noqa: E402


def load_old(revision: str):
    folder = Path(tempfile.mkdtemp())
    for name, path in (("old_fwd", "kernels/flash_fwd_hopper.py"), ("old_bwd", "kernels/flash_bwd_hopper.py")):
        source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout
        source = source.replace("from kernels.flash_fwd_hopper import", "from old_fwd import")
        (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    import old_bwd
    import old_fwd
    return old_fwd, old_bwd


def main(revision: str) -> None:
    old_fwd, old_bwd = load_old(revision)
    print(torch.cuda.get_device_name(), "kernels of", revision, "against the checkout's", flush=True)
    rows = []
    for head_dim, heads in ((64, 32), (128, 16)):
        for seq in (2048, 4096, 8192, 16384):
            for causal in (False, True):
                batch = 32768 // seq
                q = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
                k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
                scale = head_dim ** -0.5
                o, lse = new_fwd.hopper_forward(q, k, v, causal, scale)
                flops = 4 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)  # the forward's
                forward, backward = (q, k, v, causal, scale), (do, q, k, v, o, lse, causal, scale)
                # Before round 10 hopper_backward needed delta from the preprocess; from round 12 it takes none.
                old_delta = inspect.signature(old_bwd.hopper_backward).parameters.get("delta")
                old_backward = backward
                if old_delta is not None and old_delta.default is inspect.Parameter.empty:
                    old_backward = (*backward, backward_delta(o, do))
                calls = {"fwd_old": partial(old_fwd.hopper_forward, *forward),
                         "fwd_new": partial(new_fwd.hopper_forward, *forward),
                         "bwd_old": partial(old_bwd.hopper_backward, *old_backward),
                         "bwd_new": partial(new_bwd.hopper_backward, *backward)}
                rates = {name: [] for name in calls}
                for _ in range(3):
                    for name, call in calls.items():
                        ms = triton.testing.do_bench(call, warmup=25, rep=100)
                        rates[name].append((2.5 if name.startswith("bwd") else 1.0) * flops / ms / 1e9)
                row = {"D": head_dim, "N": seq, "causal": causal,
                       **{name: round(statistics.median(got), 1) for name, got in rates.items()}}
                row["fwd_new/old"] = round(row["fwd_new"] / row["fwd_old"], 3)
                row["bwd_new/old"] = round(row["bwd_new"] / row["bwd_old"], 3)
                old, new = calls["bwd_old"](), calls["bwd_new"]()
                row["dk_dv_equal"] = all(torch.equal(a, b) for a, b in zip(old[1:], new[1:]))
                row["dq_maxdiff"] = (old[0].float() - new[0].float()).abs().max().item()
                row["fwd_equal"] = all(torch.equal(a, b) for a, b in zip(calls["fwd_old"](), calls["fwd_new"]()))
                print(row, flush=True)
                rows.append(row)
    Path(os.environ.get("OUT", "/tmp"), "same_speed.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "HEAD")
