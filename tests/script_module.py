"""Import a script of the repository (examples/, scripts/) as a module, for tests of its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def script_module(path: str | Path):
    """The module of ``path`` (relative to the repository's root, or absolute), named by its file's stem and
    registered in sys.modules (a dataclass defined in it looks its module up there)."""
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
