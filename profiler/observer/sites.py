"""Where an attention call was made: the ``nn.Module`` path (``model.layers.3.self_attn``) or file:line.

The call stack is walked from the intercepted call outwards to the first frame whose ``self`` is an
``nn.Module``; its name is its path under the outermost module on the stack (the model: in
``model.generate(...)`` and ``model(...)`` that is the model itself), read from ``named_modules()``
once per model. Without a module on the stack, the site is the first frame outside torch and this
package, as ``file:line``. Both lookups are cached, so a call costs a short walk of a few frames.
"""

from __future__ import annotations

import os
import sys
import weakref

import torch

SKIP = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
_names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> its path under its model
_module_classes: dict[type, bool] = {}


def _is_module(obj) -> bool:
    cls = type(obj)
    known = _module_classes.get(cls)
    if known is None:
        known = _module_classes[cls] = isinstance(obj, torch.nn.Module)
    return known


def _self_of(frame):
    code = frame.f_code
    if code.co_argcount and code.co_varnames[0] == "self":
        obj = frame.f_locals.get("self")
        if obj is not None and _is_module(obj):
            return obj
    return None


def _name_under_root(module, frame) -> str:
    """The module's path under the outermost module found further out on the stack (a module that
    ``torch.compile`` wrapped is named as the module it wraps: its ``_orig_mod``)."""
    root = module
    outer = frame.f_back
    while outer is not None:
        found = _self_of(outer)
        if found is not None:
            root = found
        outer = outer.f_back
    while isinstance(getattr(root, "_orig_mod", None), torch.nn.Module):
        _roots.add(root)
        root = root._orig_mod
    _roots.add(root)
    for name, sub in root.named_modules():
        _names.setdefault(sub, name or type(root).__name__)
    return _names.get(module, type(module).__name__)


_roots: weakref.WeakSet = weakref.WeakSet()  # the outermost modules (models) named so far


def _module_name(module, frame) -> str:
    try:
        return _names[module]
    except (KeyError, TypeError):
        return _name_under_root(module, frame)


def call_site(depth: int = 2) -> str:
    """The site of the attention call ``depth`` frames above this function's caller's caller."""
    frame = sys._getframe(depth)
    user_line = None
    while frame is not None:
        module = _self_of(frame)
        if module is not None:
            return _module_name(module, frame)
        if user_line is None and not frame.f_code.co_filename.startswith(SKIP):
            user_line = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return user_line or "<unknown>"


def graph_sites(depth: int = 2) -> tuple[str, bool] | None:
    """For a compiled graph running ``depth`` frames above the caller: (the name of the innermost module
    on the stack, whether it is the model itself), or None without a module on the stack."""
    frame = sys._getframe(depth)
    while frame is not None:
        module = _self_of(frame)
        if module is not None:
            name = _module_name(module, frame)
            return name, module in _roots
        frame = frame.f_back
    return None


def join(found: tuple[str, bool] | None, module_path: str, code_line: str) -> str:
    """The site of an attention node of a compiled graph, named as call_site names the same call run
    eagerly: the graph's module (``found``, graph_sites) and the node's path under it (its
    ``nn_module_stack``), or the line of the call without a module."""
    if found is None:
        return module_path or code_line
    name, is_root = found
    if not module_path:
        return name
    return module_path if is_root else f"{name}.{module_path}"
