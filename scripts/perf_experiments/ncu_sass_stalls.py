"""Where a kernel's warps wait, per SASS instruction, from Nsight Compute's source page: the plain-text form
the reports/perf-*/ ``*.stalls.txt`` files keep (``python -m profiler stalls`` prints the same as tables).

    ncu -i report.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/perf_experiments/ncu_sass_stalls.py sass.csv [top]

Prints the share of each stall reason over all warp-state samples, the ``top`` instructions by samples (default
25) with their main reason, the samples by opcode and by execution count (profiler.nsight.stalls says how to
read them: a kernel's idle warps count among the samples).
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from profiler.nsight.stalls import hottest, opcode_shares, read_source_page, reason_shares, sections


def main(path: str, top: int) -> None:
    _, page = read_source_page(path)
    print(f"{Path(path).name}: {page['samples'].sum():.0f} samples")
    for reason, share in reason_shares(page).head(12).items():
        print(f"  stall_{reason:18} {share:6.1%}")
    print("top instructions (address, share of samples, main reason, executions, SASS):")
    for row in hottest(page, top).itertuples():
        print(f"{row.address:>16} {row.share:6.1%} {row.reason:14} {row.executions:>10} {row.sass[:90]}")
    print("by opcode:", ", ".join(f"{k} {v:.1%}" for k, v in opcode_shares(page).head(15).items()))
    print("by execution count (executions: share of samples, instructions):")
    for row in sections(page).head(10).itertuples():
        print(f"  {row.executions:>10}: {row.share:6.1%} {row.instructions:5}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
