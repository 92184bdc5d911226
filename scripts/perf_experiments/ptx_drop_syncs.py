"""A diagnostic, not a kernel change: the Gluon forward's PTX without the warpgroup barriers Triton 3.6 puts before each
mbarrier wait and arrive in a partition of several warps (docs/perf-notes.md, "Gluon forward, round 18").

    TRITON_KERNEL_DUMP=1 TRITON_DUMP_DIR=/tmp/dump python3 scripts/perf_experiments/gluon_fwd_clock.py check clock
    python3 scripts/perf_experiments/ptx_drop_syncs.py /tmp/dump /tmp/override
    TRITON_KERNEL_OVERRIDE=1 TRITON_OVERRIDE_DIR=/tmp/override TRITON_CACHE_DIR=/tmp/fresh \\
        python3 scripts/perf_experiments/gluon_fwd_clock.py check clock

Triton lowers ``mbarrier.arrive`` to one thread's arrive and puts a ``bar.sync id, 128`` (the partition's warps) before
it, and one before each ``mbarrier.wait``. Each consumer's wgmma waits already order its warps' reads of shared memory
before an arrive (wgmma.wait_group completes the warpgroup's operation), so the barriers only make the four warps
meet. This writes a copy of each dumped ``_attn_fwd_hopper.ptx`` (TRITON_DUMP_DIR/<hash>/) under the override
folder without the ``bar.sync`` lines whose next synchronizing or memory instruction is an mbarrier arrive or wait;
the epilogue's barriers (before and after the O tile's shared-memory store) stay. Run under TRITON_KERNEL_OVERRIDE, the
kernels are those copies: the oracle check says whether they still compute attention, the clock what the barriers
cost. Correct output is not a proof: the turns' arrive (ping-pong) may now precede a sibling warp's wgmma issue.
"""
import re
import sys
from pathlib import Path

BAR = re.compile(r"^\s*bar\.sync\s+\d+,\s*128;")
# What ends the look-ahead: another barrier, a shared-memory or tensor-core instruction, a fence, a branch target
STOP = re.compile(r"^\s*(bar\.|barrier\.|ld\.shared|st\.shared|wgmma|fence|cp\.|tcgen|\$L__BB|ret;|@%p\d+ bra)")
MBAR = re.compile(r"mbarrier\.(arrive|try_wait)")


def drop_syncs(ptx: str) -> tuple[str, int, int]:
    """(the PTX without the barriers that guard only an mbarrier arrive or wait, how many dropped, how many kept)."""
    lines = ptx.splitlines(keepends=True)
    keep = []
    dropped = kept = 0
    for i, line in enumerate(lines):
        if BAR.match(line):
            guards_mbarrier = False
            for later in lines[i + 1:i + 40]:
                if MBAR.search(later):
                    guards_mbarrier = True
                    break
                if STOP.match(later):
                    break
            if guards_mbarrier:
                dropped += 1
                continue
            kept += 1
        keep.append(line)
    return "".join(keep), dropped, kept


def main(dump: Path, override: Path) -> None:
    found = sorted(dump.glob("*/_attn_fwd_hopper.ptx"))
    if not found:
        raise SystemExit(f"no _attn_fwd_hopper.ptx under {dump}: run the probe with TRITON_KERNEL_DUMP=1 first")
    for ptx in found:
        text, dropped, kept = drop_syncs(ptx.read_text())
        out = override / ptx.parent.name / ptx.name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"{ptx.parent.name}: dropped {dropped} bar.sync, kept {kept}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
