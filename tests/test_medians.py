"""``python -m profiler medians``: several captures of one grid read together, on round 21's three forward grids
(tests/test_readme.py reads the same three for the README), and its one-line refusals of bad input."""

from pathlib import Path

import pytest
from test_cli import run_cli
from test_readme import FORWARD_GRIDS, forward_grids, grid_medians, peer_times

ROOT = Path(__file__).resolve().parents[1]
GRIDS = [str(ROOT / "reports" / folder) for folder in FORWARD_GRIDS]


def test_the_three_forward_grids_give_the_readmes_medians():
    """Each peer's line: the lowest and highest median, the shapes at or above the target, how far the captures differ,
    and each shape below the target with its three ratios; the figures the README quotes from the same captures."""
    out = run_cli("medians", *GRIDS, "--target", "fa4=0.97")
    assert out.returncode == 0, out.stderr
    fa4, cudnn = forward_grids()
    moved, median_fa4, median_cudnn = grid_medians(fa4, cudnn)
    text = " ".join(out.stdout.split())
    def words(shape):  # both lines name a shape alike, its heads included: H32/8 and H16/16 share N 4096, D128
        dtype, head_dim, causal, batch, seq, _ = shape
        heads = "32/8" if batch * seq == 16384 else f"{32 if head_dim == 64 else 16}/{32 if head_dim == 64 else 16}"
        return f"fwd {dtype} D{head_dim} Nq{seq} Nkv{seq} B{batch} H{heads}{' causal' if causal else ''}"

    lowest = words(median_fa4.idxmin())
    assert (f"triton_flash/fa4, each shape's median of 3 captures: lowest {median_fa4.min():.3f} ({lowest}), highest "
            f"{median_fa4.max():.3f}, {(median_fa4 >= 0.97).sum()} of 40 at or above 0.97; the captures differ on a "
            f"shape by up to {moved.max():.1%} (the median shape by {moved.median():.1%})") in text
    below = median_fa4[median_fa4 < 0.97].sort_values()
    assert text.count("below 0.97:") == len(below) == 2
    for shape, value in below.items():
        each = ", ".join(f"{v:.3f}" for v in fa4.loc[shape])
        assert f"below 0.97: {words(shape)}: {value:.3f} (captures: {each})" in text
    assert (f"triton_flash/sdpa_cudnn, each shape's median of 3 captures: lowest {median_cudnn.min():.3f}" in text
            and f"{(median_cudnn >= 1).sum()} of 40 at or above 1;" in text)


def test_shapes_not_in_every_capture_are_counted_as_left_out():
    """Round 24's grid ran head_dim 128 and the GQA rows only (24 shapes); beside round 23's whole grid (40) the medians
    cover the 24 both have and say that the other 16 were left out, for each peer; three whole grids leave none out."""
    r24, r23 = (str(ROOT / "reports" / "perf-h100" / folder) for folder in (
        "gluon_fwd_round24/peers_r3_split", "gluon_fwd_round23/peers_r3_warm1000"))
    out = run_cli("medians", r24, r23)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert text.count("of 24 at or above") == 2
    assert text.count("left out: 16 shapes without an ok row of both in every capture") == 2
    assert "left out" not in run_cli("medians", *GRIDS).stdout


def test_captures_of_other_kernels_or_switches_are_named():
    """A median across captures that ran different kernels (round 24's and 23's grids: kernels_sha256 of each tree) or
    different ATTN_* switches (round 25's runs with and without split_tail) says so, naming each capture's; three grids
    of one tree say nothing."""
    import json

    r24, r23 = (ROOT / "reports" / "perf-h100" / folder for folder in (
        "gluon_fwd_round24/peers_r3_split", "gluon_fwd_round23/peers_r3_warm1000"))
    out = run_cli("medians", str(r24), str(r23))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    sha = [json.loads((folder / "meta.json").read_text())["kernels_sha256"][:12] for folder in (r24, r23)]
    assert sha[0] != sha[1]
    assert (f"note: the captures differ in their kernels (peers_r3_split: {sha[0]}; peers_r3_warm1000: {sha[1]}): "
            "each shape's median mixes them") in text
    runs = ROOT / "reports" / "perf-h100" / "gluon_fwd_round25" / "f_ab"
    text = " ".join(run_cli("medians", str(runs / "1_default"), str(runs / "1_0")).stdout.split())
    assert ("note: the captures differ in their ATTN_* switches (1_default: none; 1_0: ATTN_SPLIT_TAIL=0)" in text
            and "differ in their kernels" not in text)
    assert "note:" not in run_cli("medians", *GRIDS).stdout


# Issue 42's H200 backward grids: round 26's whole, round 27's without head_dim 64 (24 of 40 shapes), round 28's whole
H200_BACKWARD = [str(ROOT / "reports" / folder) for folder in (
    "fa4-peers-h200-bwd", "perf-h200/peers_round27/bwd_grid2", "perf-h200/peers_round28/bwd_grid3")]


def test_min_captures_takes_each_shapes_median_over_the_captures_that_hold_it():
    """With --min-captures 2, the 16 head_dim-64 shapes round 27 did not run get their median over rounds 26 and 28
    (with two, the mean) and the other 24 over all three: one line covers the 40, says '2 to 3 captures', and each
    shape below the target lists its captures with 'none' where one has no row. Without it those 16 are left out."""
    import pandas as pd

    # 0.93: a target that the lowest head_dim-64 median (0.924, over two grids) is under, so a 'none' is printed
    out = run_cli("medians", *H200_BACKWARD, "--target", "fa4=0.93", "--min-captures", "2")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    times = [peer_times(folder, "bwd")[1] for folder in H200_BACKWARD]  # the peer's time over ours, by shape
    fa4 = pd.DataFrame({i: t.fa4 / t.triton_flash for i, t in enumerate(times)})
    cudnn = pd.DataFrame({i: t.sdpa_cudnn / t.triton_flash for i, t in enumerate(times)})
    held = fa4.notna().sum(axis=1)
    assert len(fa4) == 40 and (held[held == 2].index.get_level_values("head_dim") == 64).all()
    assert (held == 2).sum() == 16 and (held == 3).sum() == 24 and fa4[1].isna().sum() == 16
    median, cudnn_median = fa4.median(axis=1), cudnn.median(axis=1)
    assert abs(median[held == 2] - fa4[held == 2][[0, 2]].mean(axis=1)).max() < 1e-12
    moved = fa4.max(axis=1) / fa4.min(axis=1) - 1
    assert (f"triton_flash/fa4, each shape's median of 2 to 3 captures: lowest {median.min():.3f}" in text
            and f"highest {median.max():.3f}, {(median >= 0.93).sum()} of 40 at or above 0.93; the captures differ on "
                f"a shape by up to {moved.max():.1%} (the median shape by {moved.median():.1%})" in text)
    assert (f"triton_flash/sdpa_cudnn, each shape's median of 2 to 3 captures: lowest {cudnn_median.min():.3f}" in text
            and f"{(cudnn_median >= 1).sum()} of 40 at or above 1;" in text and "left out" not in text)
    below = median[median < 0.93]
    assert text.count("below 0.93:") == len(below) and (below.index.get_level_values("head_dim") == 64).any()
    assert fa4.loc[below.index].isna().any(axis=1).any()  # one of them lists a capture without it as 'none'
    for shape, value in below.items():
        each = ", ".join("none" if v != v else f"{v:.3f}" for v in fa4.loc[shape])
        assert f": {value:.3f} (captures: {each})" in text
    every = " ".join(run_cli("medians", *H200_BACKWARD).stdout.split())
    assert "median of 3 captures" in every and every.count("left out: 16 shapes without an ok row of both in every "
                                                           "capture") == 2


@pytest.mark.parametrize("args, message", [
    ([*H200_BACKWARD, "--min-captures", "1"], "--min-captures 1: give a number from 2 to 3, the number of captures "
                                              "named"),
    ([*H200_BACKWARD, "--min-captures", "4"], "--min-captures 4: give a number from 2 to 3, the number of captures "
                                              "named"),
    ([*H200_BACKWARD, "--min-captures", "two"], "argument --min-captures: 'two' is not an integer"),
    ([GRIDS[0]], "medians takes two or more capture folders of one grid; got 1"),
    ([GRIDS[0], GRIDS[0]], "a capture folder is named twice"),
    ([GRIDS[0], "no-such-folder"], "'no-such-folder' is not a capture folder"),
    ([*GRIDS[:2], "--target", "fa4=x"], "--target 'fa4=x': give PEER=RATIO with a positive ratio, e.g. fa4=0.97"),
    ([*GRIDS[:2], "--target", "fa4=0"], "--target 'fa4=0': give PEER=RATIO with a positive ratio"),
    ([*GRIDS[:2], "--target", "flash=1"], "--target names flash, which the captures do not all have; their peers: "
                                          "fa4, sdpa_cudnn"),
    ([*GRIDS[:2], "--baseline", "naive"], "has no 'naive' rows; its implementations: fa4, sdpa_cudnn, triton_flash"),
    ([GRIDS[0], str(ROOT / "reports" / "fa4-peers-h100-bwd")], "the captures share no shape with ok rows of "
                                                                 "triton_flash and a peer in every capture"),
])
def test_bad_input_is_one_line_and_exit_status_2(args, message):
    out = run_cli("medians", *args)
    assert out.returncode == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
