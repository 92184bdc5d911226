"""Where a kernel's warps wait, from Nsight Compute's source page (SASS): the warp-state samples of one kernel
by stall reason, by code section and by instruction.

The input is the CSV that ``ncu -i REPORT.ncu-rep --page source --csv --print-source sass`` prints for a report
of one kernel profiled with the ``SourceCounters`` and ``WarpStateStats`` sections (``--set full`` has them;
``--import-source yes`` adds source lines but is not needed): a ``"Kernel Name"`` line, a header, then one row
per SASS instruction with its warp-state samples in total and per reason (``stall_*``), and how many times a
warp executed it.

A *code section* here is every instruction executed the same number of times. In a warp-specialized attention
kernel that separates the parts by how often they run: the consumers' step (once per query tile per warp), the
per-key-block prologue and epilogue, the loader's loop, the idle warps' exit. Shares are of all samples, idle
warps included (a warp waiting to exit is sampled too), so compare the sections of one warp role with each
other. The reasons are Nsight Compute's warp stall reasons (Kernel Profiling Guide, "Warp Scheduler States"):
``barrier`` a CTA or named barrier, ``long_sb`` a long-scoreboard dependency (global or local memory, an
mbarrier's try-wait), ``short_sb`` a short-scoreboard one (shared memory, MUFU), ``wait`` a fixed-latency one,
``mio`` the memory-input/output queue, ``math`` a busy pipe, ``selected`` issuing.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
HOW = "ncu -i REPORT.ncu-rep --page source --csv --print-source sass"


class SourcePageError(ValueError):
    """The file is not one kernel's Nsight Compute source page with warp-state samples."""


def read_source_page(path: Path | str) -> tuple[str, pd.DataFrame]:
    """(kernel name, one row per SASS instruction): ``address``, ``sass``, ``opcode`` (the mnemonic without its
    predicate), ``samples``, ``executions`` and one column per stall reason (``barrier``, ``long_sb``, ...)."""
    path = Path(path)
    if not path.exists():
        raise SourcePageError(f"{path}: no such file")
    try:
        with path.open(newline="") as f:
            lines = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise SourcePageError(f"{path}: cannot read it as a CSV ({err})") from None
    if not lines or len(lines[0]) < 2 or lines[0][0] != "Kernel Name":
        raise SourcePageError(f"{path} is not an Nsight Compute source page (its first line is not \"Kernel Name\", "
                              f"name); make one with: {HOW}")
    if len(lines) < 2:
        raise SourcePageError(f"{path} names a kernel but has no header nor instruction rows; make it with: {HOW}")
    kernel, header = lines[0][1], lines[1]
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise SourcePageError(f"{path} repeats the column(s) {', '.join(repr(c) for c in twice)}: not a source page "
                              f"as ncu writes it ({HOW})")
    missing = [c for c in ("Address", "Source", SAMPLES, EXECUTED) if c not in header]
    reasons = [c for c in header if c.startswith("stall_") and not c.endswith("(Not Issued)")]
    if missing or not reasons:
        raise SourcePageError(f"{path} has no {', '.join(repr(c) for c in missing) or 'stall_* columns'}: profile "
                              f"with --set full (its SourceCounters and WarpStateStats), then {HOW}")
    rows = lines[2:]
    if any(row and row[0] == "Kernel Name" for row in rows):
        raise SourcePageError(f"{path} holds more than one kernel; profile one (--kernel-name, --launch-count 1)")
    frame = pd.DataFrame([row for row in rows if len(row) == len(header)], columns=header)
    if frame.empty:
        raise SourcePageError(f"{path} has a header but no instruction rows")
    numbers = {c: pd.to_numeric(frame[c].str.replace(",", ""), errors="coerce") for c in [SAMPLES, EXECUTED, *reasons]}
    for column, values in numbers.items():
        if values.isna().any():
            row = values.isna().idxmax()
            raise SourcePageError(f"{path}: {column!r} holds {frame.at[row, column]!r} at {frame.at[row, 'Address']}, "
                                  f"not a number")
    if numbers[SAMPLES].sum() <= 0:
        raise SourcePageError(f"{path} has no warp-state samples: profile with --set full (its WarpStateStats)")
    sass = frame["Source"].str.strip()
    page = pd.DataFrame({
        "address": frame["Address"], "sass": sass, "opcode": sass.map(_opcode),
        "samples": numbers[SAMPLES].astype("int64"), "executions": numbers[EXECUTED].astype("int64"),
        **{c.removeprefix("stall_"): numbers[c].astype("int64") for c in reasons}})
    return kernel, page


def _opcode(sass: str) -> str:
    """``@!P0 BRA 0x..`` -> ``BRA``; ``HGMMA.64x64x16.F32.BF16 R24, ...`` -> ``HGMMA.64x64x16.F32.BF16``."""
    words = [w for w in sass.split() if not w.startswith("@")]
    return words[0].rstrip(",;") if words else "?"


# What each warp state of the source page's stall_* columns means, in a line each (Nsight Compute's Kernel Profiling
# Guide, "Warp Stall Reasons" and its metrics reference, smsp__pcsamp_warps_issue_stalled_*)
REASONS = {
    "barrier": "waiting at a CTA barrier for the block's other warps",
    "branch_resolving": "waiting for a branch's target or its predicate",
    "dispatch": "picked, but the dispatcher held the instruction back",
    "drain": "at EXIT, waiting for the warp's memory stores to drain",
    "imc": "waiting on the immediate-constant cache (a miss)",
    "lg": "the L1TEX queue for local and global memory is full",
    "long_sb": "waiting on a long-scoreboard result: an L1TEX (global, local, texture) load",
    "math": "the math pipe the instruction needs is busy",
    "membar": "waiting on a memory barrier",
    "mio": "the MIO queue (shared memory, special math, special registers) is full",
    "misc": "other reasons",
    "no_inst": "no instruction fetched (an instruction-cache miss, or just after a branch)",
    "not_selected": "eligible, but the scheduler issued another warp",
    "selected": "issuing: the sample caught the warp issuing an instruction, not stalled",
    "short_sb": "waiting on a short-scoreboard result: an MIO operation (shared memory, MUFU)",
    "sleep": "sleeping (nanosleep) or all threads blocked",
    "tex": "the texture pipe's queue is full",
    "wait": "a fixed-latency dependency: a few cycles between dependent instructions",
}


def reason_columns(page: pd.DataFrame) -> list[str]:
    """The stall reasons of a :func:`read_source_page` frame."""
    return [c for c in page.columns if c not in ("address", "sass", "opcode", "samples", "executions")]


def reason_shares(page: pd.DataFrame) -> pd.Series:
    """Each stall reason's share of the kernel's samples, largest first (sums to 1 where samples were taken)."""
    totals = page[reason_columns(page)].sum()
    return (totals / max(totals.sum(), 1.0)).sort_values(ascending=False)


def _main_reason(row: pd.Series, reasons: list[str]) -> str:
    return row[reasons].astype(float).idxmax() if row["samples"] > 0 else ""


def sections(page: pd.DataFrame, top_reasons: int = 3) -> pd.DataFrame:
    """Samples by code section (instructions executed equally often), largest first: ``executions``,
    ``instructions``, ``samples``, their ``share`` of all samples, the section's main ``reasons`` ("barrier 62%,
    long_sb 20%, ...", of its own samples) and its ``hottest`` instruction."""
    reasons = reason_columns(page)
    total = max(page["samples"].sum(), 1.0)
    out = []
    for executions, group in page.groupby("executions"):
        own = group[reasons].sum()
        own_total = own.sum()
        named = ", ".join(f"{r} {v / own_total:.0%}" for r, v in own.sort_values(ascending=False)[:top_reasons].items()
                          if v >= 0.005 * own_total) if own_total else ""  # what rounds to 0% is left out
        top = group.loc[group["samples"].idxmax()]
        out.append({"executions": int(executions), "instructions": len(group), "samples": int(group["samples"].sum()),
                    "share": group["samples"].sum() / total, "reasons": named, "hottest": top["sass"]})
    return pd.DataFrame(out).sort_values("samples", ascending=False, ignore_index=True)


def hottest(page: pd.DataFrame, n: int = 15) -> pd.DataFrame:
    """The ``n`` instructions with the most samples: ``address``, ``share`` of all samples, main ``reason``,
    ``executions`` and ``sass``."""
    reasons = reason_columns(page)
    total = max(page["samples"].sum(), 1.0)
    top = page.nlargest(n, "samples")
    return pd.DataFrame({"address": top["address"], "share": top["samples"] / total,
                         "reason": [_main_reason(row, reasons) for _, row in top.iterrows()],
                         "executions": top["executions"], "sass": top["sass"]}).reset_index(drop=True)


def opcode_shares(page: pd.DataFrame) -> pd.Series:
    """Samples by opcode, as shares of all samples, largest first."""
    return (page.groupby("opcode")["samples"].sum() / max(page["samples"].sum(), 1.0)).sort_values(ascending=False)
