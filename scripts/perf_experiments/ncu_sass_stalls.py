"""Where a kernel's warps wait, per SASS instruction, from Nsight Compute's source page.

    ncu -i report.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/perf_experiments/ncu_sass_stalls.py sass.csv [top]

Prints the share of each stall reason over all warp-state samples (``stall_*`` columns), the ``top``
instructions by samples (default 25) with their main reason, and the samples by opcode. A kernel's
idle warps (a warp-specialized kernel's spare warps waiting to exit) count among the samples, so read
the shares of one partition's code against each other, not against 100%. Last, the samples by execution
count: instructions run equally often (a step's, a key block's prologue and epilogue) group together.
"""
import collections
import csv
import sys
from pathlib import Path


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main(path: str, top: int) -> None:
    reader = csv.reader(open(path))
    next(reader)  # "Kernel Name", name
    header = next(reader)
    rows = [dict(zip(header, row)) for row in reader if len(row) == len(header)]
    stalls = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    samples = "Warp Stall Sampling (All Samples)"
    total = sum(number(r[samples]) for r in rows)
    by_reason = collections.Counter()
    for row in rows:
        for column in stalls:
            by_reason[column] += number(row[column])
    reasons = sum(by_reason.values())
    print(f"{Path(path).name}: {total:.0f} samples")
    for column, value in by_reason.most_common(12):
        print(f"  {column:24} {value / reasons:6.1%}")
    print("top instructions (address, share of samples, main reason, executions, SASS):")
    for row in sorted(rows, key=lambda r: -number(r[samples]))[:top]:
        reason = max(stalls, key=lambda c: number(row[c]))[len("stall_"):]
        print(f"{row['Address']:>16} {number(row[samples]) / total:6.1%} {reason:14} "
              f"{row['Instructions Executed']:>10} {row['Source'].strip()[:90]}")
    by_opcode = collections.Counter()
    for row in rows:
        words = row["Source"].split()
        opcode = next((w for w in words if not w.startswith("@")), "?") if words else "?"
        by_opcode[opcode] += number(row[samples])
    print("by opcode:", ", ".join(f"{k} {v / total:.1%}" for k, v in by_opcode.most_common(15)))
    # Code run equally often shares an execution count: a warp-specialized kernel's step (once per query tile
    # per consumer warp), its per-key-block prologue and epilogue, the loader's loop, the idle warps' exit.
    by_count = collections.defaultdict(lambda: [0.0, 0])
    for row in rows:
        group = by_count[int(number(row["Instructions Executed"]))]
        group[0] += number(row[samples])
        group[1] += 1
    print("by execution count (executions: share of samples, instructions):")
    for count, (value, n) in sorted(by_count.items(), key=lambda kv: -kv[1][0])[:10]:
        print(f"  {count:>10}: {value / total:6.1%} {n:5}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
