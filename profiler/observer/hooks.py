"""Intercepting attention calls: every name bound to an attention function is re-bound to a wrapper
while an observation runs, and bound back after.

Intercepted (:func:`default_targets`): ``torch.nn.functional.scaled_dot_product_attention``, FlexAttention's
``flex_attention``, flash-attn's ``flash_attn_func`` and ``flash_attn_varlen_func`` where installed,
and the function each registry entry names in ``observes``: FlashAttention-4's
``flash_attn.cute.flash_attn_func`` where installed, and our own ``kernels.flash_attention.flash_attention``
(what ``attn_implementation="triton_fa"`` runs, kernels.hf_attention).
Besides the attribute of the defining module, every module that imported the function by name
before the observation (``from torch.nn.functional import scaled_dot_product_attention``) is
re-bound too; torch's own modules are left alone, but for the defining ones.

The wrapper records the call's shape (profiler.observer.calls), site (profiler.observer.sites) and
time (profiler.observer.recorder), inside an NVTX range ``observe/<api>/<mode>/<site>``
(profiler.measure.ranges.observe_range) so Nsight Systems sees each call. When the output needs a
gradient, the backward is timed too and charged to the same row in mode ``bwd``: it starts when
autograd reaches the output's node (a pre-hook) and ends when the gradients of q, k and v that
need one are all computed: the node's post-hook where one fused SDPA node computes them all
(:data:`FUSED_BACKWARD_NODES`), else a hook on each input, which covers the several nodes of an
unfused (math) backward.

Inside a ``torch.compile``d region the wrapper steps aside (``torch.compiler.is_compiling()``): the
compiled graph runs without Python, so those calls are not seen; the run reports compiled frames.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import nvtx
import torch

from attention_core.implementations import OBSERVED_WRAPPER
from profiler.measure.ranges import DOMAIN, observe_range
from profiler.observer import calls as describe
from profiler.observer.recorder import Recorder
from profiler.observer.sites import call_site
from profiler.registry import REGISTRY

INPUT_NAMES = ("query", "key", "value", "q", "k", "v")  # q, k and v passed by keyword, as the APIs name them
# A profiler range: torch's lightweight one where it has it (a cpu_op event in the trace, which
# profiler.measure.torch_trace reads as a range by its observe/ name), else record_function.
RECORD_RANGE = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", torch.profiler.record_function)


@dataclass(frozen=True)
class Target:
    """One attention function to intercept: where it is defined and how to read its arguments."""

    api: str
    module: str
    attr: str
    describe: Callable  # (*args, **kwargs) -> calls.Call


def _flash_attn(api):
    return lambda *args, **kwargs: describe.flash_attn_call(api, *args, **kwargs)


def _bhsd(api):
    """A registry signature (q, k, v, causal, sm_scale) reads its arguments as SDPA does (BHSD, top-left causal)."""
    def read(q, k, v, causal=False, sm_scale=None):
        return describe.sdpa_call(q, k, v, is_causal=causal)._replace(api=api)
    return read


def _fp8(api):
    """kernels.flash_fwd_fp8.flash_attention_fp8's signature: e4m3 q, k, v (BHSD), their descales, then causal
    (top-left, as SDPA's); the descales change no cost the model charges but their bytes, which it counts."""
    def read(q8, k8, v8, q_descale=None, k_descale=None, v_descale=None, causal=False, *args, **kwargs):
        return describe.sdpa_call(q8, k8, v8, is_causal=causal)._replace(api=api)
    return read


# The APIs that are not a registry implementation: each call is recorded under its API's name.
API_TARGETS = (
    Target("sdpa", "torch.nn.functional", "scaled_dot_product_attention", describe.sdpa_call),
    Target("flex_attention", "torch.nn.attention.flex_attention", "flex_attention", describe.flex_call),
    Target("flash_attn", "flash_attn", "flash_attn_func", _flash_attn("flash_attn")),
    Target("flash_attn_varlen", "flash_attn", "flash_attn_varlen_func", describe.flash_attn_varlen_call),
)
READERS = {"bhsd": _bhsd, "flash_attn": _flash_attn, "fp8": _fp8}  # attention_core.implementations.SIGNATURES


def default_targets() -> tuple[Target, ...]:
    """Every function an observation intercepts: the APIs, then each registry entry's ``observes``
    (recorded under the entry's name, read as its ``observes_signature`` says)."""
    entries = []
    for impl in REGISTRY.values():
        if impl.observes:
            module, _, attr = impl.observes.partition(":")
            entries.append(Target(impl.name, module, attr, READERS[impl.observes_signature](impl.name)))
    return (*API_TARGETS, *entries)


# Autograd nodes of SDPA's fused backends (torch's derivatives.yaml): one node computes dq, dk and dv.
FUSED_BACKWARD_NODES = frozenset({
    "ScaledDotProductFlashAttentionBackward0", "ScaledDotProductEfficientAttentionBackward0",
    "ScaledDotProductCudnnAttentionBackward0", "ScaledDotProductFlashAttentionForCpuBackward0",
    "ScaledDotProductFusedAttentionOverrideableBackward0"})


def compiled_graphs() -> int:
    """Graphs torch.compile has made so far in this process (eager FlexAttention compiles its own,
    inside the call); 0 on a torch without dynamo."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"].get("unique_graphs", 0)) if "stats" in counters else 0


_local = threading.local()  # .inside: an intercepted call is running on this thread


def inside_observed_call() -> bool:
    """True while an intercepted call runs on this thread (profiler.observer.graphs reads it: eager
    FlexAttention compiles and runs a graph of its own, which the interceptor has counted already)."""
    return getattr(_local, "inside", False)


def _first_tensor(args, kwargs) -> torch.Tensor:
    """The query: the first positional argument, or ``query``/``q`` by keyword."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    return kwargs.get("query", kwargs.get("q"))


class Interceptor:
    """Installs the wrappers (:meth:`install`) and removes them (:meth:`remove`)."""

    def __init__(self, recorder: Recorder, targets: tuple[Target, ...] | None = None):
        self.recorder = recorder
        self.targets = default_targets() if targets is None else targets
        self._bound: list[tuple[object, str, object]] = []  # (namespace, name, original)
        self._ids = itertools.count()
        self._attrs: dict[str, object] = {}  # NVTX event attributes by range name
        self._domain = nvtx.get_domain(DOMAIN)
        self.installed: list[str] = []

    # ---------------------------------------------------------------- install / remove

    def install(self) -> None:
        originals = {}
        for target in self.targets:
            try:
                module = importlib.import_module(target.module)
                original = getattr(module, target.attr)
            except Exception:  # not installed (flash-attn, FA4), or a build without it
                continue
            if getattr(original, OBSERVED_WRAPPER, False):
                continue  # an observation is already running
            wrapper = self._wrap(target, original)
            originals[id(original)] = (original, wrapper, target.module)
            self._bind(module, target.attr, original, wrapper)
            self.installed.append(target.api)
        # Names bound by `from module import fn` before now, outside torch.
        for name, module in list(sys.modules.items()):
            if module is None or name.startswith("torch") or name.startswith("profiler.observer"):
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for attr, value in list(namespace.items()):
                found = originals.get(id(value))
                if found is not None and found[0] is value and name != found[2]:
                    self._bind(module, attr, value, found[1])

    def _bind(self, namespace, attr: str, original, wrapper) -> None:
        setattr(namespace, attr, wrapper)
        self._bound.append((namespace, attr, original))

    def remove(self) -> None:
        for namespace, attr, original in reversed(self._bound):
            setattr(namespace, attr, original)
        self._bound.clear()

    # ---------------------------------------------------------------- the wrapper

    def _wrap(self, target: Target, original):
        recorder, local = self.recorder, _local
        # Eager FlexAttention compiles its own graphs inside the call: counted apart from the user's (the
        # others never do, and the counter costs a lookup)
        compiles = target.api == "flex_attention"

        def observed(*args, **kwargs):
            if torch.compiler.is_compiling() or getattr(local, "inside", False):
                return original(*args, **kwargs)
            local.inside = True
            try:
                try:
                    call = target.describe(*args, **kwargs)
                except Exception as err:  # arguments we do not read: the call runs, unrecorded, and is counted
                    recorder.not_understood(f"{target.api} ({type(err).__name__}: {err})")
                    return original(*args, **kwargs)
                stats = recorder.row_for(call, call_site(2), "fwd")
                if stats is None:
                    return original(*args, **kwargs)
                name = observe_range(call.api, "fwd", stats.site)
                device = _first_tensor(args, kwargs).get_device()  # -1 on the CPU
                pending = self._open(name, stats, device)
                graphs = compiled_graphs() if compiles else 0
                try:
                    out = original(*args, **kwargs)
                finally:
                    self._close(pending)
                    if compiles:
                        recorder.compiled_inside += compiled_graphs() - graphs
                self._time_backward(call, stats.site, device, out, args, kwargs)
                return out
            finally:
                local.inside = False

        setattr(observed, OBSERVED_WRAPPER, True)
        observed.__wrapped__ = original
        observed.__name__ = getattr(original, "__name__", target.attr)
        observed.__doc__ = getattr(original, "__doc__", None)
        return observed

    def _open(self, name: str, stats, device: int):
        """Open a call's NVTX range and start its clock; ``device``: the CUDA device of its tensors, -1 on
        the CPU. With the trace clock, a record_function range named uniquely (the cheap kind where torch
        has it: 0.4 us against 7 us on a CPU)."""
        on_gpu = device >= 0
        if self.recorder.clock == "nsys" and on_gpu:  # the call's number as the range's payload: its time's key
            pending = self.recorder.start(stats, on_gpu=True)
            self._domain.push_range(self._domain.get_event_attributes(message=name, payload=pending.start))
            return pending, None
        attrs = self._attrs.get(name)
        if attrs is None:
            attrs = self._attrs[name] = self._domain.get_event_attributes(message=name)
        self._domain.push_range(attrs)
        if self.recorder.clock != "trace" or not on_gpu:
            return self.recorder.start(stats, on_gpu=on_gpu, device=device), None
        unique = f"{name}#{next(self._ids)}"
        record = RECORD_RANGE(unique)
        record.__enter__()
        return self.recorder.start(stats, unique), record

    def _close(self, opened) -> None:
        pending, record = opened
        if record is not None:
            record.__exit__(None, None, None)
        self.recorder.stop(pending)
        self._domain.pop_range()

    def _time_backward(self, call, site: str, device: int, out, args, kwargs) -> None:
        output = out[0] if isinstance(out, tuple) else out
        node = getattr(output, "grad_fn", None)
        if node is None:
            return
        given = (*args[:3], *(kwargs.get(k) for k in INPUT_NAMES)) if kwargs else args[:3]
        inputs = [t for t in given if isinstance(t, torch.Tensor) and t.requires_grad]
        if not inputs:
            return
        name = observe_range(call.api, "bwd", site)
        fused = type(node).__name__ in FUSED_BACKWARD_NODES
        state = {"open": None, "left": 0}

        def start(grad_outputs):
            if state["open"] is None:
                stats = self.recorder.row_for(call, site, "bwd")
                state["open"], state["left"] = self._open(name, stats, device), 1 if fused else len(inputs)

        def done(grad):
            if state["open"] is not None:
                state["left"] -= 1
                if state["left"] == 0:
                    self._close(state["open"])
                    state["open"] = None

        node.register_prehook(start)
        if fused:  # one node computes every gradient: its post-hook ends the backward
            node.register_hook(lambda grad_inputs, grad_outputs: done(None))
            return
        for t in inputs:
            t.register_hook(done)
