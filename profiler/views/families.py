"""The report's grouping: a capture's rows as shape families, the families a ``--family`` selection picks,
and the rows of a kernel or validation table that belong to one family.

A family is the rows that share batch, heads, K/V heads, head_dim, dtype, causal and mode
(:data:`profiler.views.style.FAMILY_COLUMNS`); its sequence lengths vary. A fixed-token sweep (``bench
--tokens``: the batch shrinks as N grows) is one family across its batches, as the scaling charts draw it
(:func:`profiler.views.plots.scaling_lines`). In a capture measured on more than one device (a sweep over
ranks on different GPUs, --allow-mixed) a family is also one device's, and its label ends in " · DEVICE".
profiler/views/report.py draws each family; tests/test_report.py checks these on the shipped captures.
"""

from __future__ import annotations

import pandas as pd

from profiler.store import CaptureError
from profiler.views.plots import scaling_lines
from profiler.views.style import FAMILY_COLUMNS, LENGTHS, family_label

DTYPE_ORDER = {"fp16": 0, "bf16": 1, "fp32": 2, "fp8": 3}
MODE_ORDER = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
MAX_LISTED = 8  # an error message lists at most this many family labels, then the tokens they are made of


class FamilyNotFound(CaptureError):
    """A ``family`` selection that matches no family of the capture. A CaptureError (so a ValueError),
    so that the CLI reports it as it reports any other bad capture argument: one line, exit status 2."""


def families_of(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """label -> rows of each family in ``frame``, in reading order: batch, heads, K/V heads, head_dim,
    then fp16, bf16, fp32, full before causal, fwd, bwd, fwd+bwd; where the rows name more than one
    device (profiler.store SCHEMA "device"), one family per device, labelled 'B4 H32 D64 fp16 full fwd ·
    DEVICE', the devices of a shape side by side. A fixed-token sweep (``bench --tokens``: the batch
    shrinks as N grows) is one family across its batches, '32768 tokens H32 D64 fp16 full fwd', as the
    scaling charts draw it (plots.scaling_lines), not a family of one length per batch."""
    if frame.empty:
        return {}
    mixed = "device" in frame and frame.device.nunique() > 1
    others = [c for c in FAMILY_COLUMNS if c != "batch"] + ["device"] * mixed
    lines = scaling_lines(frame).reindex(frame.index)
    keys = [lines.lead, lines.line_batch, *(frame[c] for c in others)]
    groups = {tuple(key): rows for key, rows in frame.groupby(keys, sort=False, dropna=False)}

    def order(key):
        values = dict(zip(["lead", "line_batch", *others], key))
        tokens = int(values["lead"].split()[0]) if values["lead"] else 0
        return (tokens, values["line_batch"], values["heads"], -values["kv_heads"], values["head_dim"],
                DTYPE_ORDER.get(values["dtype"], 9), str(values["dtype"]), bool(values["causal"]),
                MODE_ORDER.get(values["mode"], 9), str(values["mode"]), str(values.get("device", "")))

    def label(key):
        text = family_label(groups[key].iloc[0])
        if key[0]:
            text = f"{key[0]} {text.split(' ', 1)[1]}"
        return text + (f" · {key[-1]}" if mixed else "")

    return {label(key): groups[key] for key in sorted(groups, key=order)}


def _available(labels: list[str]) -> str:
    """The families a user may choose from, in one line: every label, or when there are many the first
    few and the tokens the labels are made of."""
    if not labels:
        return "the capture has no rows"
    if len(labels) <= MAX_LISTED:
        return "available: " + ", ".join(labels)
    columns = zip(*(label.split() for label in labels)) if len({len(x.split()) for x in labels}) == 1 else []
    tokens = " · ".join(" ".join(dict.fromkeys(column)) for column in columns)
    return (f"available ({len(labels)}): {', '.join(labels[:MAX_LISTED - 2])}, ... and {len(labels) - MAX_LISTED + 2} "
            f"more" + (f"; tokens: {tokens}" if tokens else ""))


def select_families(labels: list[str], family: list[str] | str | None, capture: str = "the capture") -> list[str]:
    """The labels chosen by ``family``: every label when it is None or empty, else those that hold all
    space-separated tokens of at least one item ("fp16 causal" picks every fp16 causal family), case
    aside, in the order of ``labels``. An item that matches nothing raises :class:`FamilyNotFound`
    naming it and the available families: a typo must not quietly shrink a report."""
    if family is None:
        return list(labels)
    items = [family] if isinstance(family, str) else list(family)
    chosen: set[str] = set()
    for item in items:
        tokens = set(str(item).lower().split())
        if not tokens:
            raise FamilyNotFound(f"family {item!r} names no token; {_available(labels)}")
        hits = [label for label in labels if tokens <= set(label.lower().split())]
        if not hits:
            raise FamilyNotFound(f"family {item!r} matches none of the {len(labels)} families of {capture}; "
                                 f"{_available(labels)}")
        chosen.update(hits)
    return [label for label in labels if label in chosen]


def family_mask(table: pd.DataFrame, family: pd.DataFrame) -> pd.Series:
    """Rows of ``table`` (kernels, validation) in the family whose rows are ``family``: the family's
    values of each family column, and its own (batch, lengths) pairs, so a token sweep's B2 at N16384
    does not take in a fixed-batch run's B4 at N16384 of the same family."""
    mask = pd.Series(True, index=table.index)
    for column in FAMILY_COLUMNS:
        if column in table and column != "batch":
            mask &= table[column].isin(family[column].unique())
    pair = [c for c in ("batch", *LENGTHS) if c in table]
    if pair:
        shapes = pd.MultiIndex.from_frame(family[pair].drop_duplicates())
        mask &= pd.MultiIndex.from_frame(table[pair]).isin(shapes)
    return mask


def family_trace(kernels: pd.DataFrame, family: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The kernels of one family (its rows: ``family``) at one shape (the one most implementations were
    traced at, the longest on a tie), each trace shifted to start at 0 so the implementations line up;
    and a caption."""
    mask = family_mask(kernels, family)
    rows = kernels[mask]
    if rows.empty or not {*LENGTHS, "impl"} <= set(rows.columns):  # not one trace per case: an observed run's
        return rows.iloc[:0], ""
    counts = rows.groupby(LENGTHS).impl.nunique().reset_index()
    seq_q, seq_kv = counts.sort_values(["impl", "seq_kv", "seq_q"]).iloc[-1][["seq_q", "seq_kv"]]
    rows = rows[(rows.seq_q == seq_q) & (rows.seq_kv == seq_kv)].copy()
    run = "trace" if "trace" in rows else "impl"
    start = "start_ns" if "start_ns" in rows else "start_us"
    rows[start] = rows[start] - rows.groupby(run)[start].transform("min")
    shape = f"N={seq_q:,}" if seq_q == seq_kv else f"Nq={seq_q:,}, Nkv={seq_kv:,}"
    return rows, (f"One profiled iteration of each implementation at {shape} ({len(rows):,} kernels, torch "
                  "profiler), each aligned at its own first kernel; traces/ holds the Chrome traces (Perfetto).")


def family_validation(validation: pd.DataFrame | None, family: pd.DataFrame) -> pd.DataFrame | None:
    """Validation rows of one family (its rows: ``family``); a table without a mode column holds forward
    runs (profiler.nsight)."""
    if validation is None:
        return None
    if "mode" not in validation and (family["mode"] != "fwd").any():
        return None
    return validation[family_mask(validation, family)]
