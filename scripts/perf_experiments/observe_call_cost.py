"""Where observing's per-call cost goes, and what the torch profiler alone costs (issue 40 item 7).

Part 1, a host-bound step (6 attention modules on tiny bf16 tensors, forward and backward): the step timed
with the interceptor removed (plain), whole, and with one part of it switched off at a time, interleaved
round by round in one observation; per-call microseconds = (variant - plain) / calls per step.
Part 2 (with --profiler), nanoGPT's training step (examples/nanogpt.py, B8 N1024): plain, under the torch profiler alone
(CPU and CUDA activities, as observe --trace torch starts it; CUDA only; CPU and CUDA with only user
scopes recorded, i.e. record_function ranges and no ATen ops), and under observe --trace torch with that
user-scope profiler, to see whether calls are still timed. Medians of interleaved rounds, CUDA events.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import profiler  # noqa: E402
from profiler.observer import hooks  # noqa: E402


class Attn(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Attn() for _ in range(6))

    def forward(self, q, k, v):
        out = q
        for block in self.blocks:
            out = block(out, k, v)
        return out


def part1(scratch: Path, rounds: int = 15, steps: int = 100, trace: str = "none") -> None:
    model = Stack()
    q, k, v = (torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def step():
        model(q, k, v).float().sum().backward()

    def per_step_us() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / steps * 1e6

    originals = {"backward": hooks.Interceptor._time_backward, "site": hooks.call_site,
                 "open": hooks.Interceptor._open, "close": hooks.Interceptor._close}

    def switch(off: str | None) -> None:
        hooks.Interceptor._time_backward = (lambda *a, **k: None) if off == "backward" else originals["backward"]
        hooks.call_site = (lambda depth=2: "site") if off == "site" else originals["site"]
        if off == "clock":  # no CUDA events, no NVTX range: the pending object only
            from profiler.observer.recorder import Pending

            hooks.Interceptor._open = lambda self, name, stats, on_gpu: (Pending(stats, None, kind="none"), None)
            hooks.Interceptor._close = lambda self, opened: None
        else:
            hooks.Interceptor._open, hooks.Interceptor._close = originals["open"], originals["close"]

    variants = ("plain", "whole", "no backward hooks", "no site", "no clock")
    times = {v: [] for v in variants}
    with profiler.observe(out=scratch / f"part1-{trace}", trace=trace) as run:
        for _ in range(20):
            step()
        for _ in range(rounds):
            for variant in variants:
                if variant == "plain":
                    run.interceptor.remove()
                    times[variant].append(per_step_us())
                    run.interceptor.install()
                    continue
                switch({"whole": None, "no backward hooks": "backward", "no site": "site",
                        "no clock": "clock"}[variant])
                times[variant].append(per_step_us())
        switch(None)
    plain = statistics.median(times["plain"])
    print(f"part 1 (--trace {trace}): host-bound step, 6 calls forward + 6 backward; plain {plain:.1f} us/step")
    for variant in variants[1:]:
        t = statistics.median(times[variant])
        print(f"  {variant:18s} {t:8.1f} us/step  {(t - plain) / 12:6.1f} us per call")


def part0(n: int = 20000) -> None:
    """Microseconds of each operation the wrapper does per call, alone, in a loop."""
    import nvtx

    from profiler.measure.ranges import DOMAIN
    from profiler.observer.calls import sdpa_call
    from profiler.observer.recorder import Recorder
    from profiler.observer.sites import call_site

    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for e in events:
        e.record()
    stream = torch.cuda.current_stream()
    domain = nvtx.get_domain(DOMAIN)
    attrs = domain.get_event_attributes(message="observe/x")
    recorder = Recorder("events")
    call = sdpa_call(q, q, q, is_causal=True)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)

    def nvtx_pair():
        domain.push_range(attrs)
        domain.pop_range()

    def record_function():
        with torch.profiler.record_function("observe/x#1"):
            pass

    cases = {"torch.cuda.current_stream()": torch.cuda.current_stream,
             "event.record()": events[0].record,
             "event.record(stream)": lambda: events[0].record(stream),
             "event.query()": events[0].query,
             "start.elapsed_time(end)": lambda: events[0].elapsed_time(events[1]),
             "nvtx push+pop": nvtx_pair,
             "record_function enter+exit": record_function,
             "sdpa_call (describe)": lambda: sdpa_call(q, q, q, is_causal=True),
             "call_site": lambda: call_site(1),
             "recorder.row_for": lambda: recorder.row_for(call, "site", "fwd"),
             "grad_fn.register_prehook": lambda: out.grad_fn.register_prehook(lambda g: None).remove(),
             "torch.compiler.is_compiling()": torch.compiler.is_compiling,
             "hooks.compiled_graphs()": hooks.compiled_graphs}
    print("part 0: microseconds per operation")
    for name, fn in cases.items():
        for _ in range(100):
            fn()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        print(f"  {name:32s} {(time.perf_counter() - start) / n * 1e6:7.2f}")


def user_scopes_only():
    """Make the torch profiler record only user scopes (record_function ranges), not every ATen op."""
    import torch.autograd.profiler as autograd_profiler
    from torch._C._profiler import RecordScope

    enable = autograd_profiler._enable_profiler

    def enable_user(config, activities, scopes=frozenset()):
        return enable(config, activities, {RecordScope.USER_SCOPE})

    autograd_profiler._enable_profiler = enable_user
    return lambda: setattr(autograd_profiler, "_enable_profiler", enable)


def part2(scratch: Path, rounds: int = 7) -> None:
    from observe_overhead import build, timed
    from torch.profiler import ProfilerActivity, profile

    step, what = build("nanogpt", False, False)
    for _ in range(3):
        step()

    def under(activities, user_only=False):
        restore = user_scopes_only() if user_only else (lambda: None)
        try:
            with profile(activities=activities):
                step()
                return timed(step, True)
        finally:
            restore()

    both = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    variants = {"plain": lambda: (step(), timed(step, True))[1],
                "profiler cpu+cuda": lambda: under(both),
                "profiler cuda only": lambda: under([ProfilerActivity.CUDA]),
                "profiler user scopes": lambda: under(both, user_only=True)}
    times = {v: [] for v in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            times[name].append(run())
    plain = statistics.median(times["plain"])
    print(f"part 2: {what}; plain {plain:.2f} ms/step")
    for name in list(variants)[1:]:
        t = statistics.median(times[name])
        print(f"  {name:22s} {t:7.2f} ms/step  {t / plain:.3f}x")
    restore = user_scopes_only()
    try:
        with profiler.observe(out=scratch / "user-scopes", trace="torch") as run:
            step()
            step()
    finally:
        restore()
    rows = run.results()
    print(f"  observe --trace torch with user scopes only: {run.calls} calls, "
          f"{int((rows['status'] == 'ok').sum())} of {len(rows)} rows timed, "
          f"calls without kernels {run.summary.get('calls_without_kernels')}, "
          f"median fwd {rows[rows['mode'] == 'fwd']['median_ms'].median():.4f} ms, "
          f"bwd {rows[rows['mode'] == 'bwd']['median_ms'].median():.4f} ms")


if __name__ == "__main__":
    scratch = Path(tempfile.mkdtemp())
    try:
        part0()
        part1(scratch)
        part1(scratch, rounds=5, steps=30, trace="torch")
        if "--profiler" in sys.argv:
            part2(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
