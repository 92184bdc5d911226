"""Less host time per launch for every kernel of ours (portable Triton and Gluon): :func:`layout_key`, what
a call's checks, route and Triton specialization read of its tensors, and :class:`LaunchCache`, which
replays a kernel's launch from what its first launch at a key compiled (docs/perf-notes.md, "Host time,
round 9")."""

from __future__ import annotations

import os

import torch
import triton

from kernels._autotune import INTERPRET

# Triton versions whose CompiledKernel launcher takes every parameter in order, constexprs included (checked
# in triton 3.6's backends/nvidia/driver.py make_launcher); on others, and under the interpreter, every launch
# goes through JITFunction.run.
SUPPORTED = ".".join(triton.__version__.split(".")[:2]) in ("3.6",) and not INTERPRET
# False: every call checks, routes and launches afresh (the A/B of scripts/perf_experiments/host_time_probe.py).
ENABLED = True
KEPT = 512  # keys a memo keeps (a decode loop makes a new layout per length), then it starts again


class Memo(dict):
    """A dict of at most ``size`` entries, emptied when full: what each memo of a layout keeps (routes,
    launch plans, schedules, compiled kernels)."""

    def __init__(self, size: int = KEPT):
        super().__init__()
        self.size = size

    def keep(self, key, value):
        if len(self) >= self.size:
            self.clear()
        self[key] = value
        return value


def layout_key(*tensors: torch.Tensor) -> tuple | None:
    """What a launch's checks, route and Triton specialization read of its tensors besides their data:
    each one's shape, strides, dtype, device and address modulo 16 (Triton specializes a pointer on its
    16-byte alignment; an int argument, on being 1 or a multiple of 16, which shapes and strides fix),
    and ``ATTN_SPLIT_TAIL`` and ``ATTN_GLUON``, which the default configs and the routes read
    (kernels.flash_fwd_hopper.default_config, kernels.hopper_common.sm90_reason). None where a tensor has
    no address (a fake tensor while torch.compile traces): no memo applies."""
    try:
        return (*((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16) for t in tensors),
                os.environ.get("ATTN_SPLIT_TAIL"), os.environ.get("ATTN_GLUON"))
    except (AttributeError, RuntimeError, NotImplementedError):
        return None


class LaunchCache:
    """Launches of one kernel replayed from what its first launch at a key compiled.

    ``kernel[grid](...)`` goes through Triton's ``JITFunction.run`` on every call: it binds the
    arguments, specializes each one, hashes a key and looks the compiled kernel up, about a third of
    our prefill call's host time (docs/perf-notes.md, "Our kernels inside a transformers model"). A
    caller whose key fixes everything that specialization reads (:func:`layout_key`, and the int
    arguments and constexprs that follow from it) launches the CompiledKernel that the first call with
    that key returned, through its own launcher, as Triton's ``CompiledKernel.__getitem__`` does. Only
    where :data:`SUPPORTED` and :data:`ENABLED`; under the interpreter a launch returns no compiled
    kernel anyway. At most ``size`` keys are kept (:class:`Memo`)."""

    def __init__(self, kernel, size: int = KEPT):
        self.kernel, self.entries = kernel, Memo(size)

    @property
    def enabled(self) -> bool:
        return SUPPORTED and ENABLED

    def __call__(self, key, grid: tuple, args: tuple, constexprs: dict, **options) -> None:
        key = key if self.enabled else None
        entry = self.entries.get(key) if key is not None else None
        if entry is not None:
            compiled, names = entry
            full = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)  # as run() pads it
            compiled[full](*args, *[constexprs[n] for n in names])
            return
        compiled = self.kernel[grid](*args, **constexprs, **options)
        names = self.kernel.arg_names[len(args):]
        # Only a real compiled kernel whose every parameter this call named (no default left to Triton).
        if key is not None and hasattr(compiled, "packed_metadata") and set(names) == set(constexprs):
            self.entries.keep(key, (compiled, names))
