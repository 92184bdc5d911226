"""The program Nsight Compute profiles for ``python -m profiler validate``.

Runs each implementation (and each naive step on its own) once for warm-up, outside the profiled
window, so compilation and autotuning stay out; then once more between cudaProfilerStart and
cudaProfilerStop (ncu runs with ``--profile-from-start off``) inside an NVTX range
``validate/<impl>/<step>`` in domain "attn", so every profiled kernel is attributable. With
``--mode bwd`` the profiled call is the backward alone (the gradients of q, k and v for a given dO),
of a forward run outside the window; the naive steps are then not profiled one by one (their
backward is autograd's, one range ``total``).

    ncu --profile-from-start off --nvtx ... python -m profiler.nsight.ncu_driver --seq 4096 --impl naive,triton_flash
"""

from __future__ import annotations

import argparse

import nvtx
import torch

from attention_core.shape import Shape
from kernels.reference import NVTX_DOMAIN
from profiler.measure.ceilings import TORCH_DTYPES
from profiler.measure.naive_steps import naive_step_calls
from profiler.measure.ranges import validate_range
from profiler.measure.runner import make_inputs
from profiler.registry import VALIDATE, default_impls, get_impl


def backward_call(impl, shape: Shape, device: str):
    """The backward of one forward call, as a callable that may run again (the graph is kept): the
    gradients of q, k and v for a random dO. The forward runs here, outside any profiled window."""
    q, k, v, do = make_inputs(shape, device, requires_grad=True)
    with torch.enable_grad():
        o = impl.fn(q, k, v, causal=shape.causal)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def measured_calls(shape: Shape, impl_names: list[str], device: str = "cuda"):
    """Yield (impl, step, callable) in the order they are profiled: the naive steps one by one
    (the same calls the capture times, profiler.measure.naive_steps), other implementations whole;
    for a bwd shape, every implementation's backward whole (:func:`backward_call`). Names may be a
    user's ``module:function`` (profiler.registry.get_impl)."""
    for name in impl_names:
        impl = get_impl(name)
        reason = impl.unsupported_reason(device, TORCH_DTYPES[shape.dtype], shape.head_dim,
                                         backward=shape.mode == "bwd", grouped=shape.group > 1)
        if reason is not None:  # an unsupported peer: say so, profile the others
            print(f"skip {impl.name}: {reason}", flush=True)
            continue
        if shape.mode == "bwd":
            yield impl.name, "total", backward_call(impl, shape, device)
        elif impl.costing.kind == "stepwise":
            q, k, v, _ = make_inputs(shape, device)
            yield from ((impl.name, step, call) for step, call in naive_step_calls(shape, q, k, v))
        else:
            q, k, v, _ = make_inputs(shape, device)
            yield impl.name, "total", lambda impl=impl, q=q, k=k, v=v: impl.fn(q, k, v, causal=shape.causal)
        q = k = v = None
        if device == "cuda":
            torch.cuda.empty_cache()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m profiler.nsight.ncu_driver")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=4096, help="query and key length (square)")
    parser.add_argument("--seq-q", dest="seq_q", type=int, default=None, help="query length (default --seq)")
    parser.add_argument("--seq-kv", dest="seq_kv", type=int, default=None, help="key/value length (default --seq)")
    parser.add_argument("--kv-heads", dest="kv_heads", type=int, default=None, help="K/V heads (default --heads)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--mode", choices=("fwd", "bwd"), default="fwd", help="profile the forward or the backward")
    parser.add_argument("--impl", default=",".join(default_impls(VALIDATE)))  # validate's list
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    shape = Shape(args.batch, args.heads, args.seq_q or args.seq, args.seq_kv or args.seq, args.dim, args.dtype,
                  args.causal, kv_heads=args.kv_heads, mode=args.mode)
    with torch.no_grad() if shape.mode == "fwd" else torch.enable_grad():
        for impl, step, call in measured_calls(shape, args.impl.split(",")):
            try:
                call()  # warm-up: compile, autotune, allocate
            except (RuntimeError, ValueError, NotImplementedError) as err:  # a peer refusing the shape
                print(f"skip {impl}/{step}: {str(err).splitlines()[0]}", flush=True)
                continue
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            # a push/pop range for this thread's kernels, and a process-wide one for those autograd's
            # own thread launches in a backward (profiler.nsight.ncu.read_raw_csv reads either)
            process_wide = nvtx.start_range(validate_range(impl, step), domain=NVTX_DOMAIN)
            with nvtx.annotate(validate_range(impl, step), domain=NVTX_DOMAIN):
                call()
                torch.cuda.synchronize()
            nvtx.end_range(process_wide)
            torch.cuda.profiler.stop()
            print(f"profiled {impl}/{step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
