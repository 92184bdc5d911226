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

_SKIP = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
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
    """The module's path under the outermost module found further out on the stack."""
    root = module
    outer = frame.f_back
    while outer is not None:
        found = _self_of(outer)
        if found is not None:
            root = found
        outer = outer.f_back
    for name, sub in root.named_modules():
        _names.setdefault(sub, name or type(root).__name__)
    return _names.get(module, type(module).__name__)


def call_site(depth: int = 2) -> str:
    """The site of the attention call ``depth`` frames above this function's caller's caller."""
    frame = sys._getframe(depth)
    user_line = None
    while frame is not None:
        module = _self_of(frame)
        if module is not None:
            try:
                return _names[module]
            except (KeyError, TypeError):
                return _name_under_root(module, frame)
        if user_line is None and not frame.f_code.co_filename.startswith(_SKIP):
            user_line = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return user_line or "<unknown>"
