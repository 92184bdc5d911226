"""``medians``: the same grid measured more than once (several capture folders of one ``bench`` command), read
together: each shape's median ratio of our implementation over each peer across the captures, how far the captures
differ on it, and how many shapes reach a target. One grid on an H100 moves a shape by several percent from run to
run (docs/perf-notes.md, "Gluon forward, round 20"), so a ratio near a target is read from the median of several."""

from __future__ import annotations

import argparse
from pathlib import Path

from profiler.cli import UsageError
from profiler.cli.console import console, fmt, shape_words
from profiler.cli.options import positive_int

HELP = "each shape's median ratio over several captures of one grid (no GPU)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("captures", nargs="+", help="two or more capture folders of one grid; a shape missing from one is "
                                              "left out (see --min-captures), and the output says how many")
    p.add_argument("--baseline", default="triton_flash", help="the implementation the ratios are of "
                                                               "(default: triton_flash)")
    p.add_argument("--target", action="append", default=[], metavar="PEER=RATIO",
                   help="count the shapes whose median speed over PEER (PEER's time / the baseline's) is at or "
                        "above RATIO (default 1.0 for every peer); repeat for several peers, e.g. --target fa4=0.97")
    p.add_argument("--min-captures", type=positive_int, default=None, metavar="K",
                   help="take each shape's median over the captures that have an ok ratio of it, if at least K do: "
                        "K from 2 to the number of captures (default: all of them), for grids run in parts, e.g. one "
                        "grid whole and one without some shapes; how far the captures differ on a shape is then over "
                        "those it is in")


def parse_targets(values: list[str]) -> dict[str, float]:
    """``--target`` values as {peer: ratio}; a one-line UsageError for a malformed one."""
    targets = {}
    for value in values:
        peer, _, ratio = value.partition("=")
        try:
            number = float(ratio)
        except ValueError:
            number = 0.0
        if not peer or not number > 0:
            raise UsageError(f"--target {value!r}: give PEER=RATIO with a positive ratio, e.g. fa4=0.97")
        targets[peer] = number
    return targets


def ratios_by_capture(folders: list[Path], baseline: str):
    """({peer: DataFrame of baseline/peer ratios, one row a shape any capture has (empty where a capture has no ok
    ratio for it), one column a capture}, {folder: its meta.json}), the peers being the implementations every capture
    measured besides ``baseline`` (profiler.views.tables.bench_table: the baseline's TFLOP/s over the peer's, rows with
    status ok only)."""
    import pandas as pd

    from attention_core.shape import Shape
    from profiler.store import CaptureError, load_capture
    from profiler.views.tables import bench_table

    frames, metas = {}, {}
    for folder in folders:
        try:
            metas[str(folder)], frames[folder] = load_capture(folder)
        except (CaptureError, OSError) as err:
            raise UsageError(str(err)) from None
        if baseline not in set(frames[folder].impl):
            raise UsageError(f"{folder} has no {baseline!r} rows; its implementations: "
                             f"{', '.join(sorted(set(frames[folder].impl)))}")
    peers = sorted(set.intersection(*(set(frame.impl) for frame in frames.values())) - {baseline})
    if not peers:
        raise UsageError(f"the captures share no implementation besides {baseline!r} to compare it with")
    ratios = {peer: {} for peer in peers}
    for folder, frame in frames.items():
        table = bench_table(frame, [baseline, *peers], baseline).set_index(list(Shape.KEY))
        for peer in peers:
            ratios[peer][str(folder)] = table[f"{baseline}/{peer}"].astype(float)
    return {peer: pd.DataFrame(columns) for peer, columns in ratios.items()}, metas


def what_differs(metas: dict[str, dict]) -> list[str]:
    """What the captures (``metas``: folder -> meta.json) did not share that a median across them would mix: the
    kernels' sources (``kernels_sha256``), the ``ATTN_*`` switches set (meta.json ``env``) and the device; one line
    each, naming every capture's value."""
    checks = (("kernels", lambda m: (m.get("kernels_sha256") or "unrecorded")[:12]),
              ("ATTN_* switches", lambda m: ", ".join(f"{k}={v}" for k, v in sorted((m.get("env") or {}).items()))
               or "none"),
              ("device", lambda m: m.get("device") or "unrecorded"))
    lines = []
    for what, value in checks:
        values = {folder: value(meta) for folder, meta in metas.items()}
        if len(set(values.values())) > 1:
            lines.append(f"note: the captures differ in their {what} ("
                         + "; ".join(f"{Path(folder).name}: {v}" for folder, v in values.items())
                         + "): each shape's median mixes them")
    return lines


def run(args) -> int:
    folders = [Path(folder) for folder in args.captures]
    if len(folders) < 2:
        raise UsageError(f"medians takes two or more capture folders of one grid; got {len(folders)} (one capture's "
                         "ratios: python -m profiler report FOLDER, or bench's own table)")
    if len(set(folders)) < len(folders):
        raise UsageError("a capture folder is named twice: give each run of the grid once")
    targets = parse_targets(args.target)
    least = len(folders) if args.min_captures is None else args.min_captures
    if not 2 <= least <= len(folders):
        raise UsageError(f"--min-captures {args.min_captures}: give a number from 2 to {len(folders)}, the number of "
                         "captures named")
    every, metas = ratios_by_capture(folders, args.baseline)
    for line in what_differs(metas):
        console.print(line, soft_wrap=True)
    # the shapes at least `least` captures have an ok ratio of (every capture's, by default)
    ratios = {peer: table[table.notna().sum(axis=1) >= least] for peer, table in every.items()}
    unknown = sorted(set(targets) - set(ratios))
    if unknown:
        raise UsageError(f"--target names {', '.join(unknown)}, which the captures do not all have; their peers: "
                         f"{', '.join(ratios)}")
    if all(table.empty for table in ratios.values()):
        raise UsageError(f"the captures share no shape with ok rows of {args.baseline} and a peer in "
                         f"{_captures(least, len(folders))}: give runs of one grid (the same bench command)")
    for peer, table in ratios.items():
        if table.empty:
            console.print(f"{args.baseline}/{peer}: no shape with an ok row in {_captures(least, len(folders))}")
            continue
        median = table.median(axis=1)  # over each shape's ok ratios: NaN where a capture has none are skipped
        moved = table.max(axis=1) / table.min(axis=1) - 1
        counts = sorted(set(table.notna().sum(axis=1)))
        of = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
        target = targets.get(peer, 1.0)
        worst = median.idxmin()
        shape = dict(zip(median.index.names, worst))
        console.print(
            f"{args.baseline}/{peer}, each shape's median of {of} captures: lowest {median.min():.3f} "
            f"({shape_words(shape, heads=True)}), highest {median.max():.3f}, "
            f"{int((median >= target).sum())} of {len(median)} at or above {fmt(target, 'g')}; the captures differ on "
            f"a shape by up to {moved.max():.1%} (the median shape by {moved.median():.1%})", soft_wrap=True)
        left_out = len(every[peer]) - len(table)
        if left_out:
            console.print(f"  left out: {left_out} shape{'s' if left_out > 1 else ''} without an ok row of both in "
                          f"{_captures(least, len(folders))}", soft_wrap=True)
        for key, value in median[median < target].sort_values().items():
            shape = dict(zip(median.index.names, key))
            each = ", ".join("none" if v != v else f"{v:.3f}" for v in table.loc[key])
            console.print(f"  below {fmt(target, 'g')}: {shape_words(shape, heads=True)}: {value:.3f} "
                          f"(captures: {each})", soft_wrap=True)
    return 0


def _captures(least: int, of: int) -> str:
    """'every capture', or 'at least K captures' where --min-captures asks fewer than all."""
    return "every capture" if least == of else f"at least {least} captures"
