"""The registry of attention implementations, ours, PyTorch's and the user's: the entries of
attention_core.implementations (``REGISTRY``: each implementation's costing, limits, colour, tiles,
baseline flag, default lists and observed function, torch-free) and what adds to them from outside:

    @register(name="my_attention", layout="bshd")       # or register(fn, name=...) without the @
    def my_attention(q, k, v, causal=False, sm_scale=None): ...

The CLI's ``--impl`` choices and default lists, the sweeps and the cost model (through each entry's
``costing``) come from ``REGISTRY``. Every ``fn`` in the registry takes BHSD tensors ``(q, k, v,
causal=False, sm_scale=None)`` and returns o: (batch, heads, seq_q, head_dim); a BSHD function is
adapted through strides (no copy). On the command line ``--impl mypkg.attn:my_attention`` (or
``path/to/file.py:my_attention``) imports the module and takes that function, or the implementation
it registered. Importing this module imports neither torch nor a kernel.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from attention_core.costing import Costing
from attention_core.implementations import (  # noqa: F401  (the registry's names, here for its users)
    BENCH,
    BENCH_CPU,
    BUILTIN,
    FLOAT_DTYPES,
    NAME,
    REGISTRY,
    VALIDATE,
    Impl,
    baseline_impl,
    default_impls,
    dtype_label,
    registered_costing,
)
from attention_core.shape import LAYOUTS

if TYPE_CHECKING:
    import torch


def _bshd_adapter(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A BHSD function from a BSHD one: inputs and output are transposed views, nothing is copied."""

    def bhsd(q, k, v, causal=False, sm_scale=None):
        o = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, sm_scale=sm_scale)
        return o.transpose(1, 2)

    bhsd.__wrapped__ = fn
    return bhsd


def _origin(target) -> tuple[str, str | None, int]:
    """Where a function (or a callable object's class) is defined: the same definition imported
    twice (by module name and by file path, or reloaded) registers again without a clash."""
    if isinstance(target, Impl):
        target = getattr(target.fn, "__wrapped__", target.fn)
    defined = target if inspect.isfunction(target) or inspect.isclass(target) else type(target)
    try:
        source = inspect.getsourcefile(defined)
    except TypeError:
        source = None
    line = defined.__code__.co_firstlineno if inspect.isfunction(defined) else 0
    return defined.__qualname__, source and os.path.realpath(source), line


def register(fn: Callable[..., torch.Tensor] | None = None, *, name: str | None = None, layout: str = "bhsd",
             description: str = "", costing: Costing | None = None, supports_backward: bool = True,
             needs_cuda: bool = False, is_triton: bool = False, dtypes: tuple[torch.dtype | str, ...] = FLOAT_DTYPES,
             head_dims: tuple[int, ...] | None = None, gqa: bool = False, spec: str = "", replace: bool = False,
             tolerance: float | None = None):
    """Add an attention function to REGISTRY; usable as ``register(fn, ...)`` or as a decorator
    ``@register(...)`` (the function is returned unchanged, with ``__attn_impl__`` set).

    ``fn(q, k, v, causal=False, sm_scale=None)`` returns o; ``layout`` says whether its tensors are
    BHSD (batch, heads, seq, head_dim) or BSHD (batch, seq, heads, head_dim). ``costing`` defaults
    to a fused kernel of unknown tiles: FLOPs and compulsory bytes as for FlashAttention, no tile
    bytes. ``gqa`` says the function takes k and v with fewer heads than q (query head h reading
    K/V head h // (heads // kv_heads)); without it, grouped-query cases are recorded as unsupported.
    ``tolerance`` is the largest relative error against fp32 naive attention that a correct run
    may have (default: the dtype's, kernels.reference.TOLERANCE); state one for an approximate
    kernel (e.g. fp8 or sparse), or its cases are recorded as 'wrong' and left off every chart.
    Names are letters, digits and underscores; a built-in name is refused, and a name taken
    by another user implementation needs ``replace=True``.
    """
    if fn is None:
        return lambda f: register(f, name=name, layout=layout, description=description, costing=costing,
                                  supports_backward=supports_backward, needs_cuda=needs_cuda, is_triton=is_triton,
                                  dtypes=dtypes, head_dims=head_dims, gqa=gqa, spec=spec, replace=replace,
                                  tolerance=tolerance)
    if not callable(fn):
        raise TypeError(f"register needs a callable, got {type(fn).__name__}")
    name = name or getattr(fn, "__name__", "")
    if not NAME.match(name):
        raise ValueError(f"implementation name '{name}' must be letters, digits and underscores, not starting "
                         "with a digit (it names NVTX ranges and trace files)")
    if name in BUILTIN or (name in REGISTRY and not replace and _origin(REGISTRY[name]) != _origin(fn)):
        raise ValueError(f"implementation name '{name}' is taken; choose another"
                         + ("" if name in BUILTIN else " or pass replace=True"))
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and 0 < tolerance < float("inf")):
        raise ValueError(f"tolerance {tolerance!r} must be a positive finite number (a relative error) or None")
    if layout not in LAYOUTS:
        raise ValueError(f"layout '{layout}' is not one of {', '.join(LAYOUTS)}")
    impl = Impl(name, _bshd_adapter(fn) if layout == "bshd" else fn,
                description or (fn.__doc__ or "").strip().split("\n")[0] or f"user implementation {name}",
                costing or Costing("fused", source="user implementation: tiles not declared"),
                supports_backward=supports_backward, needs_cuda=needs_cuda, is_triton=is_triton, dtypes=dtypes,
                head_dims=head_dims, gqa=gqa, spec=spec, extra={"layout": layout}, tolerance=tolerance)
    REGISTRY[name] = impl
    try:
        fn.__attn_impl__ = impl
    except (AttributeError, TypeError):  # a builtin or a bound method: the registry still has it
        pass
    return fn


def _import(module: str):
    """A module by dotted name (the current directory first, as ``python -m`` does) or by file path."""
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise ValueError(f"no file '{module}'")
        mod_name = f"attn_user_{re.sub(r'[^0-9A-Za-z_]', '_', str(path.resolve()))}"
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        loader = importlib.util.spec_from_file_location(mod_name, path)
        mod = importlib.util.module_from_spec(loader)
        sys.modules[mod_name] = mod
        loader.loader.exec_module(mod)
        return mod
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(module)


def get_impl(name: str) -> Impl:
    """A registered implementation by name, or a user's by ``module:attr`` / ``file.py:attr``: the
    attribute may be an :class:`Impl`, a function registered with :func:`register`, or any function
    with our BHSD signature (registered under its own name, with the default costing)."""
    if name in REGISTRY:
        return REGISTRY[name]
    if ":" not in name:
        raise ValueError(f"unknown implementation '{name}'; choose from: {', '.join(REGISTRY)}, "
                         "or name your own as module:function")
    module, _, attr = name.rpartition(":")
    try:
        loaded = _import(module)
    except Exception as err:  # whatever the user's module raises on import is reported, not re-raised
        raise ValueError(f"cannot load implementation '{name}': {type(err).__name__}: {err}") from None
    if not hasattr(loaded, attr):
        public = sorted(n for n, v in vars(loaded).items() if callable(v) and not n.startswith("_"))
        raise ValueError(f"cannot load implementation '{name}': '{module}' has no '{attr}'"
                         + (f" (it has: {', '.join(public[:12])})" if public else ""))
    target = getattr(loaded, attr)
    if isinstance(target, Impl):
        impl = target
    elif isinstance(getattr(target, "__attn_impl__", None), Impl):
        impl = target.__attn_impl__
    elif callable(target):
        register(target, name=attr, spec=name, replace=True)
        impl = REGISTRY[attr]
    else:
        raise ValueError(f"'{name}' is a {type(target).__name__}, not an attention function")
    if not impl.spec:  # remember where it came from: ncu's driver runs in another process
        impl = replace(impl, spec=name)
    REGISTRY[impl.name] = impl
    return impl


def costing_for(impl: str, meta: dict | None = None) -> Costing:
    """The costing of a stored row's implementation: what the capture recorded for a user
    implementation (meta.json's ``user_impls``), else the registry's entry."""
    stored = ((meta or {}).get("user_impls") or {}).get(impl)
    if stored is not None:
        return Costing.from_meta(stored["costing"])
    return registered_costing(impl)
