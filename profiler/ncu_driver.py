"""The program Nsight Compute profiles for ``python -m profiler validate``.

Runs each implementation (and each naive step on its own) once for warm-up, outside the profiled
window, so compilation and autotuning stay out; then once more between cudaProfilerStart and
cudaProfilerStop (ncu runs with ``--profile-from-start off``) inside an NVTX range
``validate/<impl>/<step>`` in domain "attn", so every profiled kernel is attributable.

    ncu --profile-from-start off --nvtx ... python -m profiler.ncu_driver --seq 4096 --impl naive,triton_flash
"""

from __future__ import annotations

import argparse
import math

import nvtx
import torch

from kernels import reference
from kernels.registry import REGISTRY
from profiler.cost_model import Shape
from profiler.runner import make_inputs


def measured_calls(shape: Shape, impl_names: list[str]):
    """Yield (impl, step, callable) in the order they are profiled."""
    for name in impl_names:
        impl = REGISTRY[name]
        q, k, v, _ = make_inputs(shape, "cuda")
        if name == "naive":
            scale = 1.0 / math.sqrt(shape.head_dim)
            s = reference.qk_matmul(q, k)
            s_scaled = reference.scale_mask(s, scale, shape.causal)
            p = reference.softmax(s_scaled)
            yield name, "qk_matmul", lambda q=q, k=k: reference.qk_matmul(q, k)
            yield name, "scale_mask", lambda s=s, scale=scale: reference.scale_mask(s, scale, shape.causal)
            yield name, "softmax", lambda s_scaled=s_scaled: reference.softmax(s_scaled)
            yield name, "pv_matmul", lambda p=p, v=v: reference.pv_matmul(p, v)
            s = s_scaled = p = None
        else:
            yield name, "total", lambda impl=impl, q=q, k=k, v=v: impl.fn(q, k, v, causal=shape.causal)
        q = k = v = None
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiler.ncu_driver")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--impl", default="naive,triton_flash,sdpa_flash,sdpa_cudnn")
    args = parser.parse_args(argv)
    shape = Shape(args.batch, args.heads, args.seq, args.seq, args.dim, args.dtype, args.causal)
    with torch.no_grad():
        for impl, step, call in measured_calls(shape, args.impl.split(",")):
            try:
                call()  # warm-up: compile, autotune, allocate
            except RuntimeError as err:  # an unsupported peer: say so, profile the others
                print(f"skip {impl}/{step}: {str(err).splitlines()[0]}", flush=True)
                continue
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            with nvtx.annotate(f"validate/{impl}/{step}", domain="attn"):
                call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            print(f"profiled {impl}/{step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
