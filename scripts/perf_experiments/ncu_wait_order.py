"""Where a kernel's waits sit in its hottest loop, from Nsight Compute's SASS source page (docs/perf-notes.md,
"Gluon forward, round 23"): does a wgmma wait come before or after the softmax's exponentials?

    ncu -i report.ncu-rep --page source --csv --print-source sass > page.sass.csv
    python3 scripts/perf_experiments/ncu_wait_order.py page.sass.csv [more.sass.csv.gz ...]

The hottest loop is the instructions executed most often, weighted by how many there are (a loop body; a kernel
with the body compiled once per warpgroup has one run per copy). For each run of 100 or more consecutive such
instructions (shorter runs, pieces of code the loop branches to, are counted in the first line only):
its length, the positions of its first and last HGMMA, MUFU (the exponentials) and F2FP (the rounding of P to 16
bits), then in order each WARPGROUP.DEPBAR (``DEPBAR1`` waits until one wgmma group is left in flight, ``DEPBAR0``
until none: in an attention loop that issues S then PV, the wait for S and the wait for PV), named barrier
(BAR.SYNC, BAR.ARV), mbarrier wait (``WAIT``) and arrive (``ARRIVE``), with the warp samples each drew (all warps'
samples of a kernel are in ncu_sass_stalls.py's first line). A kernel whose warpgroups each have their own copy of
the loop has a run a copy: add their samples.
"""
import collections
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from profiler.nsight.stalls import read_source_page  # noqa: E402


def event(opcode: str, sass: str) -> str | None:
    """The name a waiting or signalling instruction goes by in the printout, or None."""
    if opcode.startswith("WARPGROUP.DEPBAR"):
        return "DEPBAR" + sass.rstrip(";").strip()[-1]  # ... gsb0, 0x1: the groups left in flight
    if opcode.startswith("SYNCS.PHASECHK"):
        return "WAIT"
    if opcode.startswith("SYNCS.ARRIVE"):
        return "ARRIVE"
    if opcode.startswith("BAR."):
        return ".".join(opcode.split(".")[:2])  # BAR.SYNC, BAR.ARV
    return None


def span(body, text: str) -> str:
    """First and last position in ``body`` of the instructions whose SASS holds ``text``."""
    at = list(body.index[body.sass.str.contains(text, regex=False)])
    return f"{at[0]}-{at[-1]}" if at else "-"


def read_page(path: str):
    """:func:`read_source_page` of a page, gzipped (``.gz``) or not."""
    if not path.endswith(".gz"):
        return read_source_page(path)[1]
    with gzip.open(path, "rb") as src, tempfile.NamedTemporaryFile(suffix=".csv", delete=False) as dst:
        shutil.copyfileobj(src, dst)
    try:
        return read_source_page(dst.name)[1]
    finally:
        os.unlink(dst.name)


def loop_order(path: str) -> list[str]:
    """The printout's lines for one page: a line on the hottest instructions, then two a run (see above)."""
    page = read_page(path)
    weight = collections.Counter()
    for executions in page.executions:
        weight[executions] += executions
    hot = max((e for e in weight if e > 0), key=weight.__getitem__)
    rows = page.reset_index(drop=True)
    index = list(rows.index[rows.executions == hot])
    runs, start = [], index[0]
    for before, after in zip(index, index[1:] + [None]):
        if after != before + 1:
            runs.append((start, before))
            start = after
    lines = [f"{len(index)} instructions executed {hot} times"]
    for first, last in runs:
        body = rows.iloc[first:last + 1].reset_index(drop=True)
        if len(body) < 100:
            continue
        marks = [f"{i}:{name}({int(samples)})" for i, (opcode, sass, samples)
                 in enumerate(zip(body.opcode, body.sass, body.samples)) if (name := event(opcode, sass))]
        lines.append(f"  a run of {len(body)} (from {body.address[0]}): HGMMA {span(body, 'HGMMA')}, "
                     f"MUFU {span(body, 'MUFU')}, F2FP {span(body, 'F2FP')}")
        lines.append("    " + " ".join(marks))
    return lines


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    for arg in sys.argv[1:]:
        print(arg)
        print("\n".join(loop_order(arg)))
