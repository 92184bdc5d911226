"""The README's numbers against their captures, and every relative link in README.md and docs/*.md.

Each row of the README's results table is computed here from the shipped capture the row names, as the
peer's time over ours (above 1.00x ours is faster), and the row must hold exactly those ranges. The
longer readings in docs/results.md are checked by the tests of their own captures (test_fa4.py,
test_gluon_dispatch.py, test_decode_views.py, test_hf_vs_sdpa.py)."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.store import SCHEMA, load_capture

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"  # its section "The H100 grids, rounds 21 to 25" reads the README's H100 rows
REPORTS = ROOT / "reports"


def unwrapped(path: Path) -> str:
    """A Markdown file's text with its line wrapping undone: a quoted phrase may span two lines."""
    return " ".join(path.read_text().split())


def span(ratio):
    return f"{ratio.min():.2f}x to {ratio.max():.2f}x"


def results_row(regime, gpu):
    """The README's results-table line for a regime on a GPU, as its cells."""
    for line in README.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] == regime and cells[1].startswith(gpu + ";"):
            return cells
    raise AssertionError(f"no results row {regime!r} on {gpu}")


# A grid's shape: the index of peer_times' tables
SHAPE = ["dtype", "head_dim", "causal", "batch", "seq_q", "seq_kv"]


def peer_times(folder, mode="fwd"):
    """Median times of a capture's total rows, one column per implementation; every row ok."""
    meta, frame = load_capture(REPORTS / folder)
    totals = frame[(frame.step == "total") & (frame["mode"] == mode)]
    assert len(totals) and (totals.status == "ok").all(), folder
    return meta, totals.pivot_table(index=SHAPE, columns="impl", values="time_ms")


@pytest.mark.parametrize("regime, folder, mode, gpu, device", [
    ("forward", "fa4-peers-h200-fwd", "fwd", "H200", "NVIDIA H200"),
    ("backward", "fa4-peers-h200-bwd", "bwd", "H200", "NVIDIA H200"),
    ("forward", "fa4-peers-h100-fwd", "fwd", "H100", "NVIDIA H100 80GB HBM3"),
    ("backward", "fa4-peers-h100-bwd", "bwd", "H100", "NVIDIA H100 80GB HBM3"),
])
def test_prefill_rows_are_their_captures(regime, folder, mode, gpu, device):
    meta, times = peer_times(folder, mode)
    assert meta["device"] == device and len(times) == 40
    assert set(times.index.get_level_values("seq_q")) == {2048, 4096, 8192, 16384}
    assert set(times.index.get_level_values("head_dim")) == {64, 128}
    cells = results_row(regime, gpu)
    assert cells[2:] == [span(times.sdpa_cudnn / times.triton_flash), span(times.fa4 / times.triton_flash),
                         f"[{folder}](reports/{folder})"]


# The H200 grids run after round 26's peers captures (docs/perf-notes.md, "Peers grids on an H200, round 27" and
# "... round 28"), on the same compiled kernels: round 27's forward whole and its backward's head_dim 128 and
# grouped-query shapes, round 28's both whole
LATER_H200 = {"fwd": ("perf-h200/peers_round27/fwd_grid2", "perf-h200/peers_round28/fwd_grid3"),
              "bwd": ("perf-h200/peers_round27/bwd_grid2", "perf-h200/peers_round28/bwd_grid3")}


def test_the_h200_rows_say_they_meet_issue_42s_targets_in_three_grids():
    """The paragraphs under the table: the H200 grids' counts at issue 42's targets with their lowest shapes; rounds 27
    and 28's grids beside them, the one shape each of two grids alone put under its target, the largest move between
    grids, and each shape's median over the grids that hold it (three, or two for the backward at head_dim 64, which
    round 27 did not run); and, on the results page, the H200 grid from before the Gluon backward, on the shapes both
    hold, with FA4's own speed over cuDNN then and now."""
    text = unwrapped(README)
    for mode, target, name in (("fwd", 0.97, "forward is"), ("bwd", 0.90, "backward")):
        _, times = peer_times(f"fa4-peers-h200-{mode}", mode)
        fa4, cudnn = times.fa4 / times.triton_flash, times.sdpa_cudnn / times.triton_flash
        met = ((fa4 >= target) & (cudnn >= 1)).sum()
        assert (f"the {name} at or above {target:.2f}x FA4 and 1.00x cuDNN on {met} of {len(fa4)}"
                f"{' shapes' if mode == 'fwd' else ''} (the lowest {fa4.min():.3f}x FA4, "
                f"{shape_phrase(fa4.idxmin())})") in text
    grids = {}
    for mode in ("fwd", "bwd"):
        runs = [peer_times(folder, mode) for folder in (f"fa4-peers-h200-{mode}", *LATER_H200[mode])]
        assert [meta["device"] for meta, _ in runs] == ["NVIDIA H200"] * 3
        fa4 = pd.DataFrame({i: t.fa4 / t.triton_flash for i, (_, t) in enumerate(runs)})
        cudnn = pd.DataFrame({i: t.sdpa_cudnn / t.triton_flash for i, (_, t) in enumerate(runs)})
        grids[mode] = fa4, cudnn, fa4.median(axis=1), cudnn.median(axis=1)  # over the grids that hold the shape
    fa4, cudnn, median_fa4, median_cudnn = grids["fwd"]
    assert len(fa4.dropna()) == 40 and (median_fa4 >= 0.97).all() and (median_cudnn >= 1).all()
    b_fa4, b_cudnn, b_median_fa4, b_median_cudnn = grids["bwd"]
    held = b_fa4.notna().sum(axis=1)
    assert len(b_fa4) == 40 and (held >= 2).all() and set(held[held == 2].index.get_level_values("head_dim")) == {64}
    assert (held == 2).sum() == 16 and b_fa4[1].isna().sum() == 16 and b_fa4[[0, 2]].notna().all().all()
    assert (b_median_fa4 >= 0.90).all() and (b_median_cudnn >= 1).all()
    ran = b_fa4[1].dropna().index  # the grid's grouped-query rows: 16,384 tokens (shape_phrase)
    grouped = ran.get_level_values("batch") * ran.get_level_values("seq_q") == 16384
    assert len(ran) == 24 and grouped.sum() == 8
    assert (set(b_fa4[1].dropna().index.get_level_values("head_dim")) == {128} and "round 27 the forward whole and the "
            "backward's 24 head_dim-128 shapes (8 of them grouped), round 28 both whole" in text)
    assert (f"forward, over three grids, at or above 0.97x FA4 on 40 of 40 (the lowest {median_fa4.min():.4f}x, "
            f"{median_fa4.min() / 0.97 - 1:.1%} above the target) and 1.00x cuDNN (the lowest "
            f"{median_cudnn.min():.3f}x); "
            f"backward, over three grids (two at head_dim 64), at or above 0.90x FA4 on 40 of 40 (the lowest "
            f"{b_median_fa4.min():.4f}x, {b_median_fa4.min() / 0.9 - 1:.1%} above) and 1.00x cuDNN (the lowest "
            f"{b_median_cudnn.min():.3f}x)") in text
    alone = {}
    for mode, target, grid, ratios in (("fwd", 0.97, 1, fa4), ("bwd", 0.90, 2, b_fa4)):
        under = ratios[(ratios < target).any(axis=1)]  # a shape some grid alone put under the target
        assert len(under) == 1 and under[grid].notna().all() and (under.drop(columns=grid) >= target).all().all()
        alone[mode] = under.index[0], under.loc[under.index[0], grid], under.loc[under.index[0], 0]
    (fwd_shape, fwd_low, fwd_26), (bwd_shape, bwd_low, bwd_26) = alone["fwd"], alone["bwd"]
    moved = max((r.max(axis=1) / r.min(axis=1)).max() - 1 for r in (fa4, b_fa4))
    assert (f"One grid alone can miss a target: round 27's forward had {shape_phrase(fwd_shape)}, at {fwd_low:.3f}x "
            f"({fwd_26:.3f}x in round 26), round 28's backward {shape_phrase(bwd_shape)}, at {bwd_low:.3f}x "
            f"({bwd_26:.3f}x in round 26); between grids a shape's ours/FA4 moved by up to {moved:.1%}") in text
    calls = (REPORTS / "perf-h200" / "peers_round28" / "calls.txt").read_text()  # nvidia-smi's line: the power limit
    assert "NVIDIA H200, 580.159.04, 700.00 W, 1980 MHz" in calls
    assert "each grid at the clocks the 700 W power limit gave each kernel in that run" in text
    assert ("So issue 42's \"every shape\" is read from each shape's median over the grids that hold it, the criterion "
            "docs/perf-notes.md wrote in round 27's \"Next round\" before round 28 ran, and the issue is closed on it"
            ) in text
    notes = unwrapped(ROOT / "docs" / "perf-notes.md")
    round27 = notes[notes.index("## Peers grids on an H200, round 27"):
                    notes.index("## Peers grids on an H200, round 28")]
    assert ("Criterion, written now: every shape in at least two grids of its direction, and each shape's median meets "
            "0.97x FA4 forward, 0.90x backward, and 1.00x cuDNN both") in round27[round27.index("**Next round:**"):]
    page = unwrapped(RESULTS)  # the H200 grid from before the Gluon backward, against round 26's
    _, old = load_capture(REPORTS / "fa4-peers-h200")
    old = old[old.step == "total"]
    assert pd.Timestamp(json.loads((REPORTS / "fa4-peers-h200" / "meta.json").read_text())["time"]).date() == \
        pd.Timestamp("2026-11-23").date()
    then, now = {}, {}
    for mode in ("fwd", "bwd"):
        then[mode] = old[old["mode"] == mode].pivot_table(index=SHAPE, columns="impl", values="time_ms")
        now[mode] = peer_times(f"fa4-peers-h200-{mode}", mode)[1]
    both = {mode: then[mode].index.intersection(now[mode].index) for mode in then}
    assert all(len(shapes) == 32 for shapes in both.values())
    old_fa4 = {mode: then[mode].fa4 / then[mode].triton_flash for mode in then}
    assert (f"our forward ran at {span(old_fa4['fwd'])} FA4 and the backward at {span(old_fa4['bwd'])}, while FA4's "
            "own speed over cuDNN barely moved (on the 32 shapes both grids hold, its median shape "
            ) in page
    peer = {mode: [(t.sdpa_cudnn / t.fa4).loc[both[mode]].median() for t in (then[mode], now[mode])] for mode in then}
    assert (f"its median shape {peer['fwd'][0]:.3f}x then and {peer['fwd'][1]:.3f}x now forward, "
            f"{peer['bwd'][0]:.3f}x and {peer['bwd'][1]:.3f}x backward; \"now\" is round 26's grids)") in page


def test_the_backward_row_says_where_its_rounded_minimum_stands():
    """The backward row's FA4 range starts at 0.90x, the issue's target, by rounding; the line under the table gives
    the true lowest and how many shapes are at or above FA4, from the same capture (docs/results.md says so)."""
    _, times = peer_times("fa4-peers-h100-bwd", "bwd")
    fa4 = times.fa4 / times.triton_flash
    assert f"{fa4.min():.2f}" == "0.90" and len(fa4) == 40
    text = unwrapped(RESULTS)
    assert (f"its H100 backward row's lowest shape against FA4 measured {fa4.min():.4f}x, shown as 0.90x (the target "
            f"is 0.90x); our backward is at or above FA4 on {(fa4 >= 1).sum()} of the {len(fa4)} shapes") in text


# Round 21's three forward grids, the same three commands run one after another on one H100; the first is the peers
# capture the results table links (docs/perf-notes.md, "Gluon forward, round 21"). A fourth, run after them on the same
# kernels to record NVML's instant power, is quoted beside them, not in their medians.
FORWARD_GRIDS = ("fa4-peers-h100-fwd", "perf-h100/gluon_fwd_round21/peers_grid2",
                 "perf-h100/gluon_fwd_round21/peers_grid3")
FOURTH_GRID = "perf-h100/gluon_fwd_round21/peers_grid4"
# Round 21's three backward grids, on the backward kernels of reports/fa4-peers-h100-bwd (their notes say why)
BACKWARD_GRIDS = tuple(f"perf-h100/gluon_fwd_round21/bwd_grid{i}" for i in (1, 2, 3))


def forward_grids(folders=FORWARD_GRIDS, mode="fwd"):
    """Ours against FA4 and against cuDNN (the peer's time over ours) by shape in each of ``folders`` (``mode``'s
    rows), one column a grid; every grid on one kind of device and one set of kernels, and the runs (three a grid) one
    after another. Where ``folders`` are three grids, within a quarter of an hour: one machine, as its notes say (the
    host name is 'vm' on every machine, so the names cannot say it). Round 21's fourth forward grid ran on a second
    machine after the three."""
    fa4, cudnn, runs, times_run = {}, {}, set(), []
    for folder in folders:
        meta, times = peer_times(folder, mode)
        runs.add((meta["device"], meta["kernels_sha256"]))
        times_run += [pd.Timestamp(run["time"]) for run in (*meta["earlier_runs"], meta)]
        fa4[folder], cudnn[folder] = times.fa4 / times.triton_flash, times.sdpa_cudnn / times.triton_flash
    assert len(runs) == 1 and len(times_run) == 3 * len(folders)
    assert times_run == sorted(times_run)
    if len(folders) == 3:
        assert times_run[-1] - times_run[0] < pd.Timedelta(minutes=15)
    return pd.DataFrame(fa4), pd.DataFrame(cudnn)


def grid_medians(fa4, cudnn):
    """From :func:`forward_grids`: how far each shape's ours/FA4 moved between the grids (its largest over its smallest,
    less 1), and each shape's median ours/FA4 and ours/cuDNN."""
    return fa4.max(axis=1) / fa4.min(axis=1) - 1, fa4.median(axis=1), cudnn.median(axis=1)


def shape_phrase(shape) -> str:
    """A grid's shape as the README names it: 'bf16 head_dim 128 at N 4k with batch 4 and grouped heads, not
    causal'."""
    dtype, head_dim, causal, batch, seq, _ = shape
    grouped = " and grouped heads" if batch * seq == 16384 else ""  # the grid's grouped-query rows: 16,384 tokens
    return (f"{dtype} head_dim {head_dim} at N {seq // 1024}k with batch {batch}{grouped}, "
            f"{'causal' if causal else 'not causal'}")


def test_the_backward_line_quotes_its_three_later_grids_medians():
    """docs/results.md, after the README's H100 rows: each shape's median over round 21's three backward grids, against
    0.90x FA4 and 1.00x cuDNN (issue 42's backward targets), and the shape below cuDNN."""
    fa4, cudnn = forward_grids(BACKWARD_GRIDS, "bwd")
    assert len(fa4) == 40
    moved, median_fa4, median_cudnn = grid_medians(fa4, cudnn)
    below = median_cudnn[median_cudnn < 1]
    assert len(below) == 1
    text = unwrapped(RESULTS)
    assert (f"put every shape's median at or above 0.90x FA4, the lowest {median_fa4.min():.3f}x, and "
            f"{(median_cudnn >= 1).sum()} of 40 at or above cuDNN, the one below {shape_phrase(below.index[0])}, "
            f"{below.iloc[0]:.3f}x") in text
    assert (median_fa4 >= 0.9).all()
    page = unwrapped(ROOT / "docs" / "results.md")
    assert (f"they had {', '.join(str((fa4[g] >= 0.9).sum()) for g in BACKWARD_GRIDS[:2])} and "
            f"{(fa4[BACKWARD_GRIDS[2]] >= 0.9).sum()} shapes at or above 0.90x FA4 and "
            f"{', '.join(str((cudnn[g] >= 1).sum()) for g in BACKWARD_GRIDS[:2])} and "
            f"{(cudnn[BACKWARD_GRIDS[2]] >= 1).sum()} at or above cuDNN, a shape's ours/FA4 moved by up to "
            f"{moved.max():.1%} between them, and by each shape's median over the three, "
            f"{(median_fa4 >= 0.9).sum()} of 40 are at or above 0.90x FA4 (the lowest {median_fa4.min():.3f}x) and "
            f"{(median_cudnn >= 1).sum()} at or above cuDNN (the lowest {median_cudnn.min():.3f}x)") in page


def test_the_forward_line_counts_the_shapes_at_its_targets():
    """docs/results.md on the README's H100 forward row: how many forward shapes reach 0.97x FA4 and 1.00x cuDNN (issue
    42's targets, not met while a shape misses either) in the capture and in the other two grids, how far a shape moved
    between round 21's three grids, the same counts over each shape's median of the three, which medians miss 0.97x FA4,
    and the medians over four grids with the fourth (tests/test_fa4.py checks that the Gluon forward ran every
    shape)."""
    fa4, cudnn = forward_grids()
    assert len(fa4) == len(cudnn) == 40
    first_fa4, first_cudnn = fa4[FORWARD_GRIDS[0]], cudnn[FORWARD_GRIDS[0]]
    moved, median_fa4, median_cudnn = grid_medians(fa4, cudnn)
    text = unwrapped(RESULTS)
    assert (f"Our forward is at or above 0.97x FA4 on {(first_fa4 >= 0.97).sum()} of the 40 shapes and at or above "
            f"cuDNN on {(first_cudnn >= 1).sum()} in this capture") in text
    others = [(fa4[folder] >= 0.97).sum() for folder in FORWARD_GRIDS[1:]]
    assert all((cudnn[folder] >= 1).all() for folder in FORWARD_GRIDS)
    assert (f"the other two grids had {others[0]} and {others[1]} shapes at or above 0.97x FA4 and 40 at or above "
            "cuDNN") in text
    assert f"From grid to grid a shape's ours/FA4 moved by up to {moved.max():.1%} on the same kernels" in text
    below = median_fa4[median_fa4 < 0.97].sort_values()
    named = ", and ".join(f"{shape_phrase(shape)}, {ratio:.3f}x" for shape, ratio in below.items())
    assert ("Each shape's median over the three (`python -m profiler medians`, in the README's Usage) has "
            f"{(median_fa4 >= 0.97).sum()} of 40 at or above 0.97x FA4 and "
            f"{(median_cudnn >= 1).sum()} at or above cuDNN. Issue 42's forward target (at least 0.97x FA4 and 1.00x "
            f"cuDNN on every shape) therefore holds against cuDNN and is not met against FA4: the {len(below)} medians "
            f"below 0.97x FA4 are {named}.") in text
    four_fa4, four_cudnn = forward_grids((*FORWARD_GRIDS, FOURTH_GRID))
    moved4, median4, _ = grid_medians(four_fa4, four_cudnn)
    below4 = median4[median4 < 0.97]
    assert len(below4) == 1
    assert (f"moves the medians over four to {(median4 >= 0.97).sum()} of 40 at or above 0.97x FA4, the one below "
            f"{shape_phrase(below4.index[0])}, {below4.iloc[0]:.3f}x, but widens a shape's spread to "
            f"{moved4.max():.1%} (grid 4's lowest ratio {four_fa4[FOURTH_GRID].min():.3f}x)") in text


def test_the_forward_grids_ran_at_the_boost_clock_which_explains_little_of_their_spread():
    """The clock sentence on the README's H100 forward row (docs/results.md): each implementation's median row over the
    four grids (NVML's SM clock, per row) within 1% of the boost clock nvidia-smi reported on the machine (round 21's
    a_gpu.txt), the lowest single row, and that a shape's ours/FA4 in one grid, against its median over the four, does
    not follow the ratio of the two kernels' clocks: a correlation under 0.2 in size over all shape-grid pairs; perf-
    notes quotes it and the one over the pairs whose clocks are more than 2% apart."""
    boost = float(re.search(r"(\d+) MHz", (REPORTS / "perf-h100/gluon_fwd_round21/a_gpu.txt").read_text()).group(1))
    rows, moves, clock_ratios = [], [], []
    for folder in (*FORWARD_GRIDS, FOURTH_GRID):
        _, frame = load_capture(REPORTS / folder)
        frame = frame[frame["step"] == "total"]
        rows.append(frame)
        times = frame.pivot_table(index=SHAPE, columns="impl", values="time_ms")
        clock = frame.pivot_table(index=SHAPE, columns="impl", values="sm_clock_mhz")
        moves.append(times.fa4 / times.triton_flash)
        clock_ratios.append(clock.fa4 / clock.triton_flash)
    rows = pd.concat(rows)
    medians = rows.groupby("impl").sm_clock_mhz.median()
    assert set(medians.index) == {"fa4", "sdpa_cudnn", "triton_flash"} and (medians >= 0.99 * boost).all()
    text = unwrapped(RESULTS)
    assert (f"the median clock of each implementation's rows was {medians.min():.0f} to {medians.max():.0f} MHz, "
            f"about the H100's {boost:.0f} MHz boost clock (single rows down to {rows.sm_clock_mhz.min():.0f} MHz)"
            ) in text
    ratios = pd.concat(moves, axis=1)
    deviation = np.log(ratios).sub(np.log(ratios.median(axis=1)), axis=0).stack()
    clock_log = np.log(pd.concat(clock_ratios, axis=1)).stack().loc[deviation.index]
    apart = clock_log.abs() > np.log(1.02)
    every, far = np.corrcoef(deviation, clock_log)[0, 1], np.corrcoef(deviation[apart], clock_log[apart])[0, 1]
    assert abs(every) < 0.2
    assert "the clock explains little of a shape's move from grid to grid" in text
    notes = unwrapped(ROOT / "docs" / "perf-notes.md")
    assert (f"In {apart.sum()} of the {len(apart)} shape-grid pairs ours and FA4 ran more than 2% apart in clock, in "
            f"either direction; a shape's ours/FA4 in one grid against its median over four follows the ratio of the "
            f"two clocks with a correlation of {every:.2f} over all pairs and {far:.2f} over those {apart.sum()}"
            ) in notes


# Round 22's grids with `bench --rounds 3` (each shape's implementations in turn three times, each row its median
# round), on the kernels of round 21's grids: two forward grids and a backward one, one after another on one H100.
ROUNDS_GRIDS = tuple(f"perf-h100/gluon_fwd_round22/peers_r3_grid{i}" for i in (1, 2))
ROUNDS_BACKWARD = "perf-h100/gluon_fwd_round22/bwd_r3_grid1"


def test_round_22s_rounds_grids_are_quoted_as_measured():
    """docs/results.md's two round-22 sentences (one on the README's H100 rows): each grid's counts at issue 42's
    targets, where the forward's misses are (head_dim 128 at N 8k or 16k in both), round 21's four grids' medians there
    and elsewhere, and the backward grid's counts; every row of those grids a median of three rounds."""
    fa4, cudnn = forward_grids(ROUNDS_GRIDS)
    for folder in (*ROUNDS_GRIDS, ROUNDS_BACKWARD):
        meta, frame = load_capture(REPORTS / folder)
        assert meta["rounds"] == 3 and (frame.rounds == 3).all() and (frame.round_spread >= 0).all(), folder
    misses = [shape for folder in ROUNDS_GRIDS for shape in fa4.index[fa4[folder] < 0.97]]
    assert misses and all(shape[1] == 128 and shape[4] >= 8192 for shape in misses)
    moved, _, _ = grid_medians(fa4, cudnn)  # each shape's larger ratio over its smaller, less one: as medians prints
    moved = moved.max()
    # the shapes round 22 missed at, in round 21's four grids, which did not choose them
    four = pd.concat([peer_times(folder)[1].pipe(lambda t: t.fa4 / t.triton_flash)
                      for folder in (*FORWARD_GRIDS, FOURTH_GRID)], axis=1)
    long128 = (four.index.get_level_values("head_dim") == 128) & (four.index.get_level_values("seq_q") >= 8192)
    assert long128.sum() == 12
    there, elsewhere = four[long128].values.ravel(), four[~long128].values.ravel()
    bwd_fa4, bwd_cudnn = forward_grids((ROUNDS_BACKWARD,), "bwd")
    bwd_fa4, bwd_cudnn = bwd_fa4[ROUNDS_BACKWARD], bwd_cudnn[ROUNDS_BACKWARD]
    below = bwd_fa4[bwd_fa4 < 0.9]
    assert len(below) == 1
    counts = [(fa4[g] >= 0.97).sum() for g in ROUNDS_GRIDS], [(cudnn[g] >= 1).sum() for g in ROUNDS_GRIDS]
    readme = unwrapped(RESULTS)
    assert (f"the forward twice, {counts[0][0]} and {counts[0][1]} of 40 shapes at or above 0.97x FA4 and "
            f"{counts[1][0]} and {counts[1][1]} at or above cuDNN, every miss at head_dim 128 with N 8k or 16k; the "
            f"backward once, {(bwd_fa4 >= 0.9).sum()} of 40 at or above 0.90x FA4 (the one below "
            f"{shape_phrase(below.index[0])}, {below.iloc[0]:.3f}x) and {(bwd_cudnn >= 1).sum()} at or above cuDNN"
            ) in readme
    page = unwrapped(ROOT / "docs" / "results.md")
    assert (f"two forward grids had {counts[0][0]} and {counts[0][1]} of 40 shapes at or above 0.97x FA4 and "
            f"{counts[1][0]} and {counts[1][1]} at or above cuDNN, and differed on a shape's ours/FA4 by up to "
            f"{moved:.1%}; every shape below 0.97x in them is head_dim 128 at N 8192 or 16384, where round 21's four "
            f"grids, which did not choose them, have a median ours/FA4 of {np.median(there):.3f}x "
            f"({(there < 0.97).sum()} of {len(there)} values below 0.97x), against {np.median(elsewhere):.3f}x "
            f"({(elsewhere < 0.97).sum()} of {len(elsewhere)}) on the other 28 shapes. Its backward grid had "
            f"{(bwd_fa4 >= 0.9).sum()} of 40 at or above 0.90x FA4 (the lowest {bwd_fa4.min():.3f}x) and "
            f"{(bwd_cudnn >= 1).sum()} at or above cuDNN (the lowest {bwd_cudnn.min():.3f}x)") in page


@pytest.mark.parametrize("regime, folder, gpu, seq_q", [
    ("decode, 1 query token", "decode-b1-h100", "H100", 1),
    ("decode, 4 query tokens", "decode-b1-h100", "H100", 4),
    ("decode, 1 query token", "decode-b1-h200", "H200", 1),
])
def test_decode_rows_are_their_captures(regime, folder, gpu, seq_q):
    meta, times = peer_times(folder)
    assert gpu in meta["device"]
    times = times.xs(seq_q, level="seq_q")
    assert set(times.index.get_level_values("batch")) == {1}
    assert times.index.get_level_values("seq_kv").min() == 8192
    assert times.index.get_level_values("seq_kv").max() == 131072
    _, frame = load_capture(REPORTS / folder)
    assert {(r.heads, r.kv_heads, r.head_dim, r.dtype) for r in frame.itertuples()} == {(64, 8, 128, "bf16")}
    cells = results_row(regime, gpu)
    fa4 = span(times.fa4 / times.triton_flash) if "fa4" in times else "not measured"
    assert cells[2:] == [span(times.sdpa_cudnn / times.triton_flash), fa4, f"[{folder}](reports/{folder})"]


@pytest.mark.parametrize("regime, folder, phase", [
    ("transformers prefill", "perf-h100/hf_round11_final", "prefill"),
    ("transformers training step", "perf-h100/hf_round11_final", "train"),
    ("transformers decode step", "perf-h100/hf_round11_final", "decode"),
])
def test_transformers_rows_are_their_runs(regime, folder, phase):
    meta = json.loads((REPORTS / folder / "meta.json").read_text())
    assert meta["device"] == "NVIDIA H100 80GB HBM3" and meta["layers"] == 2 and meta["batch"] == 1
    rows = pd.DataFrame(map(json.loads, (REPORTS / folder / "rows.jsonl").read_text().splitlines()))
    rows = rows[rows.phase == phase]
    assert sorted(rows.context) == [4096, 16384, 32768]
    cells = results_row(regime, "H100")
    assert cells[2:] == [span(rows.sdpa_ms / rows.ours_ms), "", f"[{Path(folder).name}](reports/{folder})"]


def test_the_readme_has_a_front_door():
    """What it is, the picture, the two commands, the results, usage, the schema, Nsight Systems: in that order."""
    text = README.read_text()
    order = ["![", "make demo", "make test", "## Results\n", "## Usage", "## Results schema",
             "## Profiling with Nsight Systems", "## Documentation"]
    assert [text.index(mark) for mark in order] == sorted(text.index(mark) for mark in order)
    assert len(text.splitlines()) < 200


def test_the_schema_brief_names_stored_columns():
    text = README.read_text()
    brief = text[text.index("## Results schema"):text.index("## Profiling with Nsight Systems")]
    columns = set(re.findall(r"`([a-z_]+)`", brief)) - {"ok", "wrong", "oom", "unsupported", "traces"}
    assert columns and columns <= set(SCHEMA), columns - set(SCHEMA)


# ------------------------------------------------------------------------------------------- links

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.+)", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path):
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced:
            yield from LINK.findall(line)


PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    """A link to a file that exists; a #anchor to a heading of that markdown file."""
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor}")
    assert not bad, bad


def test_slug_follows_github():
    assert slug("Checking the cost model against hardware counters (Nsight Compute)") == \
        "checking-the-cost-model-against-hardware-counters-nsight-compute"
    assert slug("Every GPU of a host, or of several hosts: torchrun") == \
        "every-gpu-of-a-host-or-of-several-hosts-torchrun"
    assert slug("The shipped reference: `reports/reference-h200/`") == "the-shipped-reference-reportsreference-h200"
