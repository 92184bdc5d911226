"""How the dashboard reads captures: Streamlit-cached loaders around profiler.store.Capture, each keyed on
the stamps of the files it reads (Capture.stamp, stamp_of), so a capture made or resumed while the
dashboard runs shows on the next reload."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from profiler.observer.summary import rank_sites
from profiler.store import Capture, discover_captures
from profiler.views.selection import LoadedCapture


def folder_stamps(root: Path) -> dict[str, tuple[int, int]]:
    """Each folder's Capture.stamp (when its meta.json and results were last written), taken once per run
    and part of every cache key below, so a capture made or resumed while the dashboard runs shows on the
    next reload."""
    return {p.name: Capture(p).stamp for p in sorted(root.iterdir()) if p.is_dir()} if root.is_dir() else {}


@st.cache_data(show_spinner="Loading captures ...", max_entries=4)
def load_all(root: str, written: tuple) -> tuple[dict[str, LoadedCapture], list[str]]:
    captures, warnings = discover_captures(root)
    return {name: LoadedCapture(meta, rank_sites(frame)) for name, (meta, frame) in captures.items()}, warnings


@st.cache_data(max_entries=64)
def load_one(path: str, written: tuple = ()) -> LoadedCapture:
    meta, frame = Capture(path).load()
    return LoadedCapture(meta, rank_sites(frame))  # the ranks of a torchrun observation apart in every view


@st.cache_data(max_entries=64)
def load_validation(path: str, written: tuple) -> pd.DataFrame | None:
    """Capture.validation; ``written`` is the file's stamp (a rebuilt table shows on the next reload)."""
    return Capture(path).validation()


@st.cache_data(max_entries=64)
def load_kernels(path: str, written: tuple) -> tuple[str, pd.DataFrame] | None:
    """(where the kernels come from, the kernel table) of a capture folder: Capture.gpu_kernels;
    ``written`` is the stamp of its files."""
    return Capture(path).gpu_kernels()
