"""What every tab of the dashboard reads: :class:`Context`, built once per run by
profiler/views/dashboard_app.py from the loaded captures and the sidebar; and :func:`chart`, how a tab
draws a figure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from profiler.views.rooflines import Roof
from profiler.views.selection import LoadedCapture
from profiler.views.style import memory_name, timer_name


@dataclass(frozen=True)
class Context:
    """The loaded captures, the selection and the hardware it is drawn against."""

    # The captures: every one in the folder of captures (and one added by path), by folder name.
    captures: dict[str, LoadedCapture]
    folders: dict[str, Path]
    stamps: dict[str, tuple]  # profiler.store.Capture.stamp, part of the loaders' cache keys
    reports: str  # the folder of captures as the hints name it (relative under the current directory)
    launch: str  # the command that opens this app, for hints that open it on another capture
    # The selection.
    chosen: list[str]  # the selected captures, in the sidebar's order
    filters: dict[str, list]  # column -> the values the sidebar keeps
    data: pd.DataFrame  # the selected captures' rows (selection.with_capture)
    view: pd.DataFrame  # those every filter (and the Bound filter) keeps
    drawn: pd.DataFrame  # those the charts are given (selection.chart_rows)
    points: pd.DataFrame  # the roofline points of ``view`` (rooflines.roofline_points)
    # The hardware: the device drawn first, as its capture's meta.json holds it (selection.drawn_meta).
    meta: dict
    dtype: str  # the dtype whose roofs are drawn: the first row's of ``view``
    bytes_kind: str  # "compulsory" or "tile": the bytes an intensity counts
    roofs: list[Roof]
    exp2_per_s: float | None  # the exp ceiling's rate (rooflines.exp_rate)

    @property
    def names(self) -> list[str]:
        """Every capture's name, in folder order (and one added by path last)."""
        return list(self.captures)

    @property
    def device_type(self) -> str | None:
        return self.meta.get("device_type")

    @property
    def memory(self) -> str:
        """HBM on a GPU, DRAM on a CPU (style.memory_name)."""
        return memory_name(self.device_type)

    @property
    def timer(self) -> str:
        """What timed the rows: meta.json's "timer", else style.timer_name."""
        return self.meta.get("timer") or timer_name(self.device_type)


def chart(where, fig: go.Figure, key: str | None = None) -> None:
    """A figure as the HTML report draws it: its own colours and template (profiler.views.style), not
    Streamlit's theme, which would recolour the traces. ``key`` tells apart charts that may come out
    alike (one per capture: two copies of a run draw the same figure)."""
    where.plotly_chart(fig, width="stretch", theme=None, key=key)
